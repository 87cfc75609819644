//! CPU time measurements for the filters' cost tests (cost.rs, lua.rs's
//! `lua_cost`); test builds only.

/// This thread's CPU time: the machine's other load does not count
/// (cost.rs's and lua.rs's measurements).
pub(crate) fn cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

/// The median of `v` (not empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
