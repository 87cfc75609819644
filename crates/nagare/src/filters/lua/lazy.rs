//! Lazy records: the record a script gets is an empty table (a proxy)
//! whose metatable reads a field from the event's msgpack the first time
//! the script reads it, so a script that adds a field or reads one does
//! not pay for turning the whole record into a Lua table and back. The
//! default for a function that only uses its record by field name
//! (escape.rs), where it cannot tell a proxy from a table; always with
//! `lazy_record = true`.
//!
//! - `__index` finds the key among the record's top-level pairs, makes its
//!   value a Lua value (convert.rs), stores it in the proxy (so later reads
//!   and changes of it are plain table accesses) and marks the pair
//!   touched.
//! - `__newindex` (a key the proxy does not hold) marks a pair of the record
//!   with that key touched and stores the value; `nil` deletes it.
//! - `__pairs` and `__len` first bring every field into the proxy, so a
//!   `pairs` loop sees them all.
//! - Written back (`Writer::lazy_map`), pairs never touched are copied as
//!   they came, in their places; touched ones are written from the proxy
//!   (gone when the proxy no longer holds them); new keys follow sorted,
//!   as for an ordinary table.
//!
//! What differs from an ordinary table (reachable only with
//! `lazy_record = true`), and is documented in docs/lua.md:
//! `next(record)`, `rawget`/`rawlen` and `rawequal` see only the fields
//! touched so far; `getmetatable(record)` is a string and `setmetatable`
//! fails; a record kept after its call (in a global) has only the fields
//! touched during the call. Records with a key that is not a string or a
//! key given twice (or that are not maps) go to the script as ordinary
//! tables.

use std::ffi::{c_int, CStr};

use mlua::ffi::{self, lua_State};
use nagare_core::record;

use super::convert;

/// The proxies' metatable, in the registry.
pub const META: &CStr = c"nagare.lazy_record";

/// A top-level pair of the current record.
#[derive(Clone, Copy)]
pub struct Key {
    /// The key's text.
    pub text: (usize, usize),
    /// Where the pair starts, its value starts and the pair ends.
    pub pair: usize,
    pub value: usize,
    pub end: usize,
}

/// The event being filtered, shared with the metamethods (their first
/// upvalue points to it). Only touched under the filter's lock, by the
/// thread running the batch.
pub struct Lazy {
    /// `lua_topointer` of the current event's proxy; 0 between events.
    pub current: usize,
    rec: *const u8,
    len: usize,
    pub keys: Vec<Key>,
    /// Pairs the script read or assigned (a touched pair the proxy no
    /// longer holds was deleted).
    pub touched: Vec<bool>,
    /// Room to sort a wide record's keys (`key_given_twice`).
    sorted: Vec<(usize, usize)>,
}

// SAFETY: `rec` points into the batch being filtered and is only read
// while that batch runs, under the filter's mutex.
unsafe impl Send for Lazy {}

impl Default for Lazy {
    fn default() -> Self {
        Lazy {
            current: 0,
            rec: std::ptr::null(),
            len: 0,
            keys: Vec::new(),
            touched: Vec::new(),
            sorted: Vec::new(),
        }
    }
}

impl Lazy {
    /// Takes the record at the start of `rest` as the current one and
    /// returns its length; `None` (and no current record) when it is not a
    /// map whose keys are all str or bin.
    pub fn begin(&mut self, rest: &[u8]) -> Option<usize> {
        self.current = 0;
        self.keys.clear();
        let (n, mut p) = record::map_at(rest, 0)?;
        for _ in 0..n {
            let pair = record::pair_at(rest, p)?;
            self.keys.push(Key {
                text: pair.key?,
                pair: p,
                value: pair.value,
                end: pair.end,
            });
            p = pair.end;
        }
        // A key given twice: a table keeps its last value, where `find`
        // would read the first. Such a record goes as a table.
        if self.key_given_twice(rest) {
            return None;
        }
        self.touched.clear();
        self.touched.resize(n, false);
        self.rec = rest.as_ptr();
        self.len = p;
        Some(p)
    }

    /// Whether two of `keys` have the same text: pair by pair for a few,
    /// sorted for more (a wide record must not cost n² compares).
    fn key_given_twice(&mut self, rest: &[u8]) -> bool {
        let text = |k: (usize, usize)| &rest[k.0..k.1];
        if self.keys.len() <= 16 {
            return (1..self.keys.len()).any(|j| {
                self.keys[..j]
                    .iter()
                    .any(|o| text(o.text) == text(self.keys[j].text))
            });
        }
        self.sorted.clear();
        self.sorted.extend(self.keys.iter().map(|k| k.text));
        self.sorted.sort_unstable_by(|a, b| text(*a).cmp(text(*b)));
        self.sorted.windows(2).any(|w| text(w[0]) == text(w[1]))
    }

    /// The current record's bytes.
    ///
    /// # Safety
    /// Only between `begin` and the end of that event's batch.
    pub unsafe fn record<'a>(&self) -> &'a [u8] {
        std::slice::from_raw_parts(self.rec, self.len)
    }

    fn find(&self, rec: &[u8], key: &[u8]) -> Option<usize> {
        self.keys
            .iter()
            .position(|k| rec[k.text.0..k.text.1] == *key)
    }
}

/// The `Lazy` behind a metamethod's first upvalue.
unsafe fn state<'a>(l: *mut lua_State) -> &'a mut Lazy {
    &mut *(ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)) as *mut Lazy)
}

/// Whether the table at `idx` is the current event's proxy.
///
/// # Safety
/// `idx` is a valid index.
pub unsafe fn is_current(l: *mut lua_State, idx: c_int, lz: &Lazy) -> bool {
    lz.current != 0 && ffi::lua_topointer(l, idx) as usize == lz.current
}

/// Raises `m` as a Lua error (nothing of this frame needs dropping).
unsafe fn raise(l: *mut lua_State, m: String) -> ! {
    ffi::lua_pushlstring(l, m.as_ptr().cast(), m.len());
    drop(m);
    ffi::lua_error(l)
}

/// Brings every pair not touched yet into the proxy at `idx` (the current one).
///
/// # Safety
/// As convert.rs; `lz` has a current record.
pub unsafe fn materialize(l: *mut lua_State, idx: c_int, lz: &mut Lazy) -> Result<(), String> {
    let rec = lz.record();
    for j in 0..lz.keys.len() {
        if lz.touched[j] {
            continue;
        }
        if ffi::lua_checkstack(l, 4) == 0 {
            return Err("the Lua stack is full".into());
        }
        let k = lz.keys[j];
        ffi::lua_pushlstring(l, rec[k.text.0..].as_ptr().cast(), k.text.1 - k.text.0);
        convert::push(l, &rec[k.value..k.end])?;
        ffi::lua_rawset(l, idx);
        lz.touched[j] = true;
    }
    Ok(())
}

/// Removes every field of the proxy at `idx`, for the next event
/// (`Script::reuse`). Clearing fields during `next`'s walk is allowed.
///
/// # Safety
/// `idx` is a table and the stack has room for 3 more.
pub unsafe fn empty(l: *mut lua_State, idx: c_int) {
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, idx) != 0 {
        ffi::lua_settop(l, -2);
        ffi::lua_pushvalue(l, -1);
        ffi::lua_pushnil(l);
        ffi::lua_rawset(l, idx);
    }
}

/// `__index(proxy, key)`: a field not read before.
unsafe extern "C-unwind" fn index(l: *mut lua_State) -> c_int {
    let lz = state(l);
    if !is_current(l, 1, lz) || ffi::lua_type(l, 2) != ffi::LUA_TSTRING {
        ffi::lua_pushnil(l);
        return 1;
    }
    let rec = lz.record();
    let found = lz.find(rec, convert::str_at(l, 2));
    // A touched pair the proxy does not hold was deleted.
    let Some(j) = found.filter(|&j| !lz.touched[j]) else {
        ffi::lua_pushnil(l);
        return 1;
    };
    let k = lz.keys[j];
    if let Err(m) = convert::push(l, &rec[k.value..k.end]) {
        raise(l, m)
    }
    lz.touched[j] = true;
    ffi::lua_pushvalue(l, 2);
    ffi::lua_pushvalue(l, 3);
    ffi::lua_rawset(l, 1);
    1
}

/// `__newindex(proxy, key, value)`: a key the proxy does not hold.
unsafe extern "C-unwind" fn newindex(l: *mut lua_State) -> c_int {
    let lz = state(l);
    if is_current(l, 1, lz) && ffi::lua_type(l, 2) == ffi::LUA_TSTRING {
        if let Some(j) = lz.find(lz.record(), convert::str_at(l, 2)) {
            lz.touched[j] = true;
        }
    }
    ffi::lua_settop(l, 3);
    ffi::lua_rawset(l, 1);
    0
}

/// `__pairs(proxy)`: every field, through `next`.
unsafe extern "C-unwind" fn pairs(l: *mut lua_State) -> c_int {
    let lz = state(l);
    if is_current(l, 1, lz) {
        if let Err(m) = materialize(l, 1, lz) {
            raise(l, m)
        }
    }
    ffi::lua_pushvalue(l, ffi::lua_upvalueindex(2));
    ffi::lua_pushvalue(l, 1);
    ffi::lua_pushnil(l);
    3
}

/// `__len(proxy)`.
unsafe extern "C-unwind" fn len(l: *mut lua_State) -> c_int {
    let lz = state(l);
    if is_current(l, 1, lz) {
        if let Err(m) = materialize(l, 1, lz) {
            raise(l, m)
        }
    }
    ffi::lua_pushinteger(l, ffi::lua_rawlen(l, 1) as i64);
    1
}

/// Makes the proxies' metatable, before the script's top level runs (so
/// `next` is Lua's own).
///
/// # Safety
/// As convert.rs; `lz` lives as long as the Lua state.
pub unsafe fn install(l: *mut lua_State, lz: *mut Lazy) {
    ffi::luaL_newmetatable(l, META.as_ptr());
    let set = |f: ffi::lua_CFunction, name: &CStr, next: bool| {
        ffi::lua_pushlightuserdata(l, lz.cast());
        if next {
            ffi::lua_getglobal(l, c"next".as_ptr());
        }
        ffi::lua_pushcclosure(l, f, 1 + c_int::from(next));
        ffi::lua_setfield(l, -2, name.as_ptr());
    };
    set(index, c"__index", false);
    set(newindex, c"__newindex", false);
    set(pairs, c"__pairs", true);
    set(len, c"__len", false);
    ffi::lua_pushstring(l, c"a lazy record".as_ptr());
    ffi::lua_setfield(l, -2, c"__metatable".as_ptr());
    ffi::lua_settop(l, -2);
}
