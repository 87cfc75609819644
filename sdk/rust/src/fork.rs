//! Fork detection: a child process must not share the parent's socket or
//! buffer. A `pthread_atfork` child handler bumps a generation counter that
//! every call compares with the one its logger state was made in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::SeqCst);
}

pub(crate) fn register() {
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic integer,
        // which is async-signal-safe.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
}

#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}
