//! The Lua state's allocator: malloc, with a cache of freed small blocks
//! by their exact size in front of it.
//!
//! Every event makes a table, its hash part and its long strings, and
//! frees them at the next collection: about three malloc/free pairs per
//! event through mlua's allocator (which keeps a count of the bytes in use
//! and a limit nagare does not set) and Rust's allocator shim. The perf
//! profile of the lua relay (docs/benchmarks/filters.md, session 9) put
//! about a tenth of nagare's CPU in that. Here a freed block of up to
//! `SMALL` bytes goes on a list for its size, and the next allocation of
//! that size takes it back: a push and a pop.
//!
//! Blocks are malloc's, whichever allocator made them: mlua's (used until
//! `install`, and again from `uninstall` on) allocates with Rust's System
//! allocator, which is malloc, realloc and free for Lua's 16-byte
//! alignment. So a block made by one can be freed by the other; a block is
//! only ever reused for an allocation of exactly its own size.
//!
//! The cache holds at most `CACHED` bytes; above that, freed blocks go back
//! to malloc.

use std::ffi::c_void;

use mlua::ffi::{self, lua_State};

/// The largest block kept for reuse (a record's table is 56 bytes, the
/// hash part of a small record 4 × 24, a 100-byte string 125).
const SMALL: usize = 256;

/// At most this many bytes are kept in the lists.
const CACHED: usize = 1 << 20;

/// The allocator's state: the Lua state's `ud`.
pub struct Pool {
    /// By size: the last block freed, each holding the next in its first
    /// bytes (sizes below a pointer's are not kept).
    free: [*mut c_void; SMALL + 1],
    cached: usize,
    /// mlua's allocator, put back by `uninstall`.
    previous: Option<(ffi::lua_Alloc, *mut c_void)>,
}

// SAFETY: the pool is used by the Lua state only, which is reached under
// the filter's mutex.
unsafe impl Send for Pool {}

impl Pool {
    pub fn new() -> Box<Pool> {
        Box::new(Pool {
            free: [std::ptr::null_mut(); SMALL + 1],
            cached: 0,
            previous: None,
        })
    }
}

/// Makes `pool` the allocator of `l`.
///
/// # Safety
/// `pool` outlives the state's use of it: `uninstall` runs before the pool
/// is dropped and before the state is closed.
pub unsafe fn install(l: *mut lua_State, pool: &mut Pool) {
    let mut ud = std::ptr::null_mut();
    let f = ffi::lua_getallocf(l, &mut ud);
    pool.previous = Some((f, ud));
    ffi::lua_setallocf(l, alloc, (pool as *mut Pool).cast());
}

/// Gives the state its allocator back and frees the cached blocks.
///
/// # Safety
/// As `install`; the state is not running.
pub unsafe fn uninstall(l: *mut lua_State, pool: &mut Pool) {
    if let Some((f, ud)) = pool.previous.take() {
        ffi::lua_setallocf(l, f, ud);
    }
    for head in pool.free.iter_mut() {
        while !head.is_null() {
            let next = *(*head as *mut *mut c_void);
            libc::free(*head);
            *head = next;
        }
    }
    pool.cached = 0;
}

/// Lua's `lua_Alloc` (lauxlib's `l_alloc` with the cache in front).
unsafe extern "C" fn alloc(ud: *mut c_void, ptr: *mut c_void, osize: usize, nsize: usize) -> *mut c_void {
    let pool = &mut *(ud as *mut Pool);
    // With no block, `osize` is the kind of object, not a size.
    let old = if ptr.is_null() { 0 } else { osize };
    if nsize == old && !ptr.is_null() {
        return ptr;
    }
    if nsize == 0 {
        if old >= size_of::<*mut c_void>() && old <= SMALL && pool.cached + old <= CACHED {
            *(ptr as *mut *mut c_void) = pool.free[old];
            pool.free[old] = ptr;
            pool.cached += old;
        } else {
            libc::free(ptr);
        }
        return std::ptr::null_mut();
    }
    if ptr.is_null() {
        if nsize <= SMALL {
            let head = pool.free[nsize];
            if !head.is_null() {
                pool.free[nsize] = *(head as *mut *mut c_void);
                pool.cached -= nsize;
                return head;
            }
        }
        return libc::malloc(nsize);
    }
    libc::realloc(ptr, nsize)
}
