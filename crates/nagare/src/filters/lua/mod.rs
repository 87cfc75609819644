//! `lua`: runs a Lua function on every event, with Fluent Bit's calling
//! convention: `function cb(tag, timestamp, record) return code,
//! timestamp, record end`, code -1 drops the event, 0 keeps it unchanged,
//! 1 replaces its time and record, 2 replaces its record and keeps its
//! time. The returned record may also be an array of records: the event
//! becomes that many events (Fluent Bit's split).
//!
//! Lua 5.4, built into the binary (mlua's `vendored`): its 64-bit integers
//! carry msgpack integers as they are, and its count hook also stops
//! compiled loops (LuaJIT's traces skip hooks, so its time limit could be
//! escaped). Records go straight between msgpack and Lua tables
//! (lua/convert.rs).
//!
//! One Lua state per filter, behind a mutex: a batch is filtered under the
//! lock, so two inputs that feed one `lua` filter take turns; Lua globals
//! (counters, caches) are shared by every event, as in Fluent Bit.
//!
//! A runtime error keeps the event as it came and adds `lua_error` with
//! Lua's message; a batch that runs longer than `timeout` is stopped by a
//! count hook, and its remaining events are kept and marked the same way.

mod convert;
mod escape;
mod lazy;

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mlua::ffi::{self, lua_State};
use mlua::{Function, HookTriggers, Lua, Value, VmState};
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::record;
use nagare_core::units::Dur;
use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LuaConfig {
    /// A Lua script file (relative paths from the daemon's working
    /// directory, like every path in the config). Its top level runs once
    /// when the filter is built; it defines the function `call` names.
    /// Give `script` or `code`, not both.
    #[serde(default)]
    pub script: Option<String>,
    /// The Lua code itself, instead of a `script` file (a TOML multi-line
    /// string: `code = '''…'''`).
    #[serde(default)]
    pub code: Option<String>,
    /// The global function called for each event as `call(tag, timestamp,
    /// record)`. It returns `code, timestamp, record`: code -1 drops the
    /// event, 0 keeps it unchanged, 1 takes the returned timestamp and
    /// record, 2 takes the returned record and keeps the event's time. The
    /// record may be an array of records: one event each, all with that
    /// time. Required.
    pub call: String,
    /// Pass the timestamp as a table `{sec = …, nsec = …}` (and read it
    /// back so) instead of a number of seconds with a fraction, which
    /// keeps only about a microsecond of the nanoseconds.
    #[serde(default)]
    pub time_as_table: bool,
    /// The longest a batch may run in Lua. A batch that takes longer is
    /// stopped; the event being filtered and the rest of the batch are kept
    /// as they came, with `lua_error` saying so. Lua's C functions (a huge
    /// `string.rep`, a pattern match) are not interrupted.
    #[serde_inline_default(Dur::secs(1))]
    pub timeout: Dur,
    /// How the record reaches the script. Unset (the default): as a lazy
    /// record when the function's bytecode shows it only reads and sets
    /// the record's fields and returns it as the third result (it cannot
    /// tell the difference), as a whole table otherwise. `true`: a
    /// lazy record always, whose fields are made Lua values only when read,
    /// with the fields never touched written back as they came; but
    /// `next(record)` and `rawget` see only the fields touched so far,
    /// `setmetatable` on the record fails, and a record kept past its call
    /// (in a global) holds only the fields touched during the call.
    /// `false`: a whole table always. See docs/lua.md.
    #[serde(default)]
    pub lazy_record: Option<bool>,
}

impl FilterPlugin for LuaConfig {
    const TYPE: &'static str = "lua";
    const DOC: &'static str = "Runs a Lua 5.4 function on every event with Fluent Bit's calling convention (`function cb(tag, timestamp, record) return code, timestamp, record end`; code -1 drops, 0 keeps, 1 modifies, 2 modifies and keeps the time; an array of records splits the event). A Lua error keeps the event and adds `lua_error` (counted in the filter's `errors_total`); a batch that runs past `timeout` is stopped. See docs/lua.md.";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        let failures_routed = cx.failures_routed;
        if self.timeout.0.is_zero() {
            return Err(OptionError::new("timeout", "must be longer than 0s"));
        }
        let (key, source, chunk_name) = match (&self.script, &self.code) {
            (Some(path), None) => {
                let text = std::fs::read(path).map_err(|e| {
                    OptionError::new("script", format!("cannot read the script {path:?}: {e}"))
                })?;
                // `@`: Lua names the file in its messages ("x.lua:3: …").
                ("script", text, format!("@{path}"))
            }
            (None, Some(code)) => ("code", code.clone().into_bytes(), "=code".to_string()),
            (Some(_), Some(_)) => {
                return Err(OptionError::new(
                    "code",
                    "give either `script` (a file) or `code` (inline), not both",
                ))
            }
            (None, None) => {
                return Err(OptionError::new(
                    "",
                    "needs `script` (a Lua file) or `code` (inline Lua)",
                ))
            }
        };
        let script = Script::load(
            &source,
            &chunk_name,
            &self.call,
            self.timeout.0,
            self.lazy_record,
        )
        .map_err(|e| match e {
            LoadError::Source(m) => OptionError::new(key, m),
            LoadError::Call(m) => OptionError::new("call", m),
        })?;
        Ok(Box::new(LuaFilter {
            script: Mutex::new(script),
            failures_routed,
            time_as_table: self.time_as_table,
            timeout: self.timeout.0,
        }))
    }
}

enum LoadError {
    /// The script does not compile or its top level fails.
    Source(String),
    /// The function to call is missing.
    Call(String),
}

/// A loaded script and its time limit.
struct Script {
    lua: Lua,
    func: Function,
    clock: Arc<Clock>,
    /// Unless `lazy_record = false`: the event the proxies' metamethods
    /// read (their metatable is made before the script runs).
    lazy: Option<LazyBox>,
    /// Records go to the function as lazy records (proxies).
    proxy: bool,
    /// The function cannot keep its record (escape.rs): one proxy serves
    /// every event of a batch, emptied after each.
    reuse: bool,
}

/// The `Lazy` of a script: the metamethods hold its address, so it is
/// only ever reached through this one pointer.
struct LazyBox(*mut lazy::Lazy);

// SAFETY: reached only under the filter's mutex (see `lazy::Lazy`).
unsafe impl Send for LazyBox {}

impl Drop for LazyBox {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in Script::load; the Lua state that
        // uses it is dropped first (it is the Script's first field).
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// When the running batch must end, shared with the count hook.
struct Clock {
    start: Instant,
    /// The deadline, in nanoseconds since `start`.
    deadline: AtomicU64,
    /// The deadline passed during this batch.
    expired: AtomicBool,
}

impl Clock {
    fn arm(&self, timeout: Duration) {
        let deadline = self.start.elapsed() + timeout;
        self.deadline
            .store(deadline.as_nanos() as u64, Ordering::Relaxed);
        self.expired.store(false, Ordering::Relaxed);
    }

    fn passed(&self) -> bool {
        self.start.elapsed().as_nanos() as u64 > self.deadline.load(Ordering::Relaxed)
    }
}

/// Instructions between two looks at the clock.
const CHECK_EVERY: u32 = 10_000;

fn timed_out() -> mlua::Error {
    mlua::Error::runtime(TIMED_OUT)
}

const TIMED_OUT: &str = "timed out";

/// The hook that stops a batch at its deadline. Once the deadline passed,
/// it raises an error at every instruction, so a script that catches the
/// error with `pcall` and goes on cannot get past it.
fn install_hook(lua: &Lua, clock: &Arc<Clock>) -> mlua::Result<()> {
    let clock = clock.clone();
    lua.set_global_hook(
        HookTriggers::new().every_nth_instruction(CHECK_EVERY),
        move |lua, _| {
            if !clock.passed() {
                return Ok(VmState::Continue);
            }
            clock.expired.store(true, Ordering::Relaxed);
            lua.set_global_hook(HookTriggers::new().every_nth_instruction(1), |_, _| {
                Err(timed_out())
            })?;
            Err(timed_out())
        },
    )
}

/// The first line of a Lua error (mlua adds a traceback after it).
fn message(e: &mlua::Error) -> String {
    let text = match e {
        mlua::Error::CallbackError { cause, .. } => return message(cause),
        mlua::Error::RuntimeError(m) | mlua::Error::SyntaxError { message: m, .. } => m.clone(),
        other => other.to_string(),
    };
    text.lines().next().unwrap_or_default().to_string()
}

impl Script {
    fn load(
        source: &[u8],
        chunk_name: &str,
        call: &str,
        timeout: Duration,
        lazy_record: Option<bool>,
    ) -> Result<Script, LoadError> {
        let lua = Lua::new();
        // Each event makes a few short-lived tables and strings: the
        // generational collector is made for that.
        lua.gc_gen(0, 0);
        let clock = Arc::new(Clock {
            start: Instant::now(),
            deadline: AtomicU64::new(0),
            expired: AtomicBool::new(false),
        });
        // The top level runs under the same limit as a batch.
        clock.arm(timeout);
        install_hook(&lua, &clock).map_err(|e| LoadError::Source(message(&e)))?;
        // Fluent Bit's name for msgpack nil (its `enable_flb_null`).
        lua.globals()
            .raw_set("flb_null", Value::NULL)
            .map_err(|e| LoadError::Source(message(&e)))?;
        // Unset, whether records go lazily is known once the function is.
        let lazy = (lazy_record != Some(false))
            .then(|| LazyBox(Box::into_raw(Box::<lazy::Lazy>::default())));
        let lazy_at = lazy.as_ref().map(|z| z.0);
        // SAFETY: calls that can only fail on memory, inside exec_raw's
        // protected call; the stack is reset. The box outlives the state's
        // use (both are in the Script).
        unsafe {
            lua.exec_raw::<()>((), |l| {
                ffi::luaL_newmetatable(l, convert::EXT.as_ptr());
                ffi::lua_settop(l, 0);
                if let Some(z) = lazy_at {
                    lazy::install(l, z);
                }
            })
        }
        .map_err(|e| LoadError::Source(message(&e)))?;
        lua.load(source).set_name(chunk_name).exec().map_err(|e| {
            let m = message(&e);
            if clock.expired.load(Ordering::Relaxed) {
                LoadError::Source(format!(
                    "the script's top level ran longer than `timeout` ({m})"
                ))
            } else {
                LoadError::Source(m)
            }
        })?;
        let func = match lua.globals().raw_get::<Value>(call) {
            Ok(Value::Function(f)) => f,
            Ok(Value::Nil) | Err(_) => {
                return Err(LoadError::Call(format!(
                    "the script defines no global function `{call}`"
                )))
            }
            Ok(other) => {
                return Err(LoadError::Call(format!(
                    "`{call}` is {} in the script, not a function",
                    convert::a(other.type_name())
                )))
            }
        };
        let proxy = match lazy_record {
            Some(forced) => forced,
            None => match escape::record_stays_in_call(&func.dump(true)) {
                Ok(()) => {
                    tracing::debug!(call, "lua: records go to the function as lazy records: it only uses their fields");
                    true
                }
                Err(why) => {
                    tracing::debug!(
                        call,
                        "lua: records go to the function as whole tables: {why}"
                    );
                    false
                }
            },
        };
        Ok(Script {
            lua,
            func,
            clock,
            lazy,
            proxy,
            reuse: proxy && lazy_record.is_none(),
        })
    }
}

struct LuaFilter {
    script: Mutex<Script>,
    /// Events marked with `lua_error` go to the error label (`Filtered::failed`).
    failures_routed: bool,
    time_as_table: bool,
    timeout: Duration,
}

impl Filter for LuaFilter {
    fn filter(&self, tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        // A panic cannot leave the state half-changed in a way that matters
        // more than losing the filter: go on with it.
        let script = self.script.lock().unwrap_or_else(|e| e.into_inner());
        // After a time-out the hook raises at every instruction: put the
        // ordinary one back.
        let hook = match script.clock.expired.load(Ordering::Relaxed) {
            true => install_hook(&script.lua, &script.clock),
            false => Ok(()),
        };
        script.clock.arm(self.timeout);
        let lazy = script.lazy.as_ref().filter(|_| script.proxy).map(|z| z.0);
        let mut batch = Batch {
            lazy,
            reuse: None,
            clock: &script.clock,
            time_as_table: self.time_as_table,
            out: Vec::with_capacity(parts.iter().map(|p| p.len()).sum::<usize>() * 5 / 4 + 64),
            writer: convert::Writer::new(lazy),
            count: 0,
            errors: 0,
            changed: false,
            failed: self.failures_routed.then(Vec::new),
        };
        let ran = hook.and_then(|()| {
            // SAFETY: `run` keeps to the stack discipline of convert.rs and
            // leaves the stack as it found it; the only Lua errors it can
            // meet outside its own `lua_pcall`s are memory errors.
            unsafe {
                script
                    .lua
                    .exec_raw::<()>((&script.func, tag), |l| batch.run(l, parts, script.reuse))
            }
        });
        if let Err(e) = ran {
            // Only a failed allocation in Lua can get here.
            tracing::warn!(error = %e, "lua: the batch goes on unfiltered");
            return Filtered::default();
        }
        if script.clock.expired.load(Ordering::Relaxed) {
            tracing::warn!(tag, timeout = ?self.timeout,
                "lua: a batch ran past the filter's timeout; its remaining events go on marked with lua_error");
        }
        if !batch.changed {
            return Filtered {
                errors: batch.errors,
                ..Filtered::default()
            };
        }
        // Routed failures are the events marked, outside the batch.
        let failed = batch
            .failed
            .filter(|_| batch.errors > 0)
            .map(|f| (Bytes::from(f), batch.errors as u32));
        Filtered {
            batch: Some((Bytes::from(batch.out), batch.count)),
            failed,
            errors: batch.errors,
            ..Filtered::default()
        }
    }
}

const TIMED_OUT_MARK: &str = "timed out: the batch ran longer than the filter's `timeout`";

/// One batch being filtered.
struct Batch<'a> {
    /// With `lazy_record`: the current event, for the proxies.
    lazy: Option<*mut lazy::Lazy>,
    /// With `Script::reuse`: the stack index of the one proxy every event
    /// of the batch gets (made by `run`).
    reuse: Option<c_int>,
    clock: &'a Clock,
    time_as_table: bool,
    out: Vec<u8>,
    writer: convert::Writer,
    count: u32,
    errors: u64,
    /// Some event was dropped, changed or marked.
    changed: bool,
    /// With an error label: where marked events go instead of `out`.
    failed: Option<Vec<u8>>,
}

/// What the script made of one event.
enum Outcome {
    Drop,
    Keep,
    /// The record(s) on the stack are the new event(s), with a new time
    /// (`None`: the event's own).
    Records(Option<EventTime>),
}

impl Batch<'_> {
    /// Filters every entry of `parts`; the stack holds the function and
    /// the tag at its top. With `reuse`, one proxy serves every event.
    unsafe fn run(&mut self, l: *mut lua_State, parts: &[Bytes], reuse: bool) {
        let (func, tag) = (ffi::lua_gettop(l) - 1, ffi::lua_gettop(l));
        // Lua strings are immutable and the tag's is pushed once: a value
        // that is this very string is the tag, which is UTF-8.
        self.writer.known_utf8 = convert::str_at(l, tag).as_ptr();
        // The proxies' metatable, above the tag (lazy_record).
        let meta = match self.lazy {
            Some(_) => {
                ffi::luaL_getmetatable(l, lazy::META.as_ptr());
                ffi::lua_gettop(l)
            }
            None => 0,
        };
        if reuse {
            ffi::lua_createtable(l, 0, 4);
            ffi::lua_pushvalue(l, meta);
            ffi::lua_setmetatable(l, -2);
            self.reuse = Some(ffi::lua_gettop(l));
        }
        // Each event's results go above this.
        let top = ffi::lua_gettop(l);
        for part in parts {
            let mut start = 0;
            // Entries were checked on the way in: 0x92, the time, a record.
            while let Some(r) = record::skip(part, start + 1) {
                // 0x92 and the time as they came.
                let head = &part[start..r];
                let time = record::entry_time(head);
                // Pushing the record finds its length; only when it is not
                // pushed is it walked for that.
                let mut len = None;
                let result = match self.clock.expired.load(Ordering::Relaxed) {
                    true => Err(TIMED_OUT_MARK.to_string()),
                    false => {
                        let at = self.out.len();
                        let result = self
                            .call(l, [func, tag, meta], time, &part[r..], &mut len)
                            .and_then(|outcome| {
                                let record = &part[r..r + len.unwrap_or(0)];
                                self.write(l, top, head, record, outcome)
                            });
                        if let Some(z) = self.lazy {
                            // Its proxy, if kept, no longer reads the record.
                            (*z).current = 0;
                        }
                        ffi::lua_settop(l, top);
                        if let Some(proxy) = self.reuse {
                            lazy::empty(l, proxy);
                        }
                        if result.is_err() {
                            self.out.truncate(at);
                        }
                        result
                    }
                };
                let Some(end) = len.map(|n| r + n).or_else(|| record::skip(part, r)) else {
                    break;
                };
                start = end;
                if let Err(m) = result {
                    let m = match self.clock.expired.load(Ordering::Relaxed) {
                        true => TIMED_OUT_MARK.to_string(),
                        false => m,
                    };
                    self.mark(head, &part[r..end], &m);
                }
            }
        }
    }

    /// Calls the script on one event, whose record is at the start of
    /// `rest`; its three results are left on the stack above its top when
    /// called. `at` holds the indices of the function, the tag and the
    /// proxies' metatable. Once the record is pushed, `len` is its length.
    unsafe fn call(
        &mut self,
        l: *mut lua_State,
        [func, tag, meta]: [c_int; 3],
        time: EventTime,
        rest: &[u8],
        len: &mut Option<usize>,
    ) -> Result<Outcome, String> {
        if ffi::lua_checkstack(l, 8) == 0 {
            return Err("the Lua stack is full".into());
        }
        let base = ffi::lua_gettop(l);
        ffi::lua_pushvalue(l, func);
        ffi::lua_pushvalue(l, tag);
        if self.time_as_table {
            ffi::lua_createtable(l, 0, 2);
            ffi::lua_pushinteger(l, time.secs.into());
            ffi::lua_setfield(l, -2, c"sec".as_ptr());
            ffi::lua_pushinteger(l, time.nanos.into());
            ffi::lua_setfield(l, -2, c"nsec".as_ptr());
        } else {
            ffi::lua_pushnumber(l, seconds(time));
        }
        // With lazy_record, a map of str keys gets a proxy (lazy.rs).
        let proxied = match self.lazy {
            Some(z) => (*z).begin(rest),
            None => None,
        };
        *len = Some(match proxied {
            Some(n) => {
                match self.reuse {
                    Some(proxy) => ffi::lua_pushvalue(l, proxy),
                    None => {
                        ffi::lua_createtable(l, 0, 2);
                        ffi::lua_pushvalue(l, meta);
                        ffi::lua_setmetatable(l, -2);
                    }
                }
                if let Some(z) = self.lazy {
                    (*z).current = ffi::lua_topointer(l, -1) as usize;
                }
                n
            }
            None => convert::push(l, rest)?,
        });
        if ffi::lua_pcall(l, 3, 3, 0) != ffi::LUA_OK {
            return Err(error_message(l));
        }
        let (code_at, ts_at, rec_at) = (base + 1, base + 2, base + 3);
        let code = match ffi::lua_type(l, code_at) {
            ffi::LUA_TNUMBER if ffi::lua_isinteger(l, code_at) != 0 => {
                ffi::lua_tointegerx(l, code_at, std::ptr::null_mut())
            }
            ffi::LUA_TNUMBER => {
                let c = ffi::lua_tonumberx(l, code_at, std::ptr::null_mut());
                if c.fract() != 0.0 {
                    return Err(format!(
                        "the function returned {c} where the code (-1, 0, 1 or 2) belongs"
                    ));
                }
                c as i64
            }
            _ => {
                return Err(format!(
                    "the function returned {} where the code (-1, 0, 1 or 2) belongs",
                    describe(l, code_at)
                ))
            }
        };
        let time = match code {
            -1 => return Ok(Outcome::Drop),
            0 => return Ok(Outcome::Keep),
            1 => self.time_back(l, ts_at, time)?,
            2 => None,
            c => {
                return Err(format!(
                    "the function returned code {c}: expected -1 (drop), 0 (keep), 1 (modified) or 2 (modified, keep the time)"
                ))
            }
        };
        if ffi::lua_type(l, rec_at) != ffi::LUA_TTABLE {
            return Err(format!(
                "the function returned {} where the record (a table) belongs",
                describe(l, rec_at)
            ));
        }
        Ok(Outcome::Records(time))
    }

    /// The time the script returned with code 1 (at `at`): `None` when it
    /// is the one it was given (so the event keeps its nanoseconds).
    unsafe fn time_back(
        &self,
        l: *mut lua_State,
        at: c_int,
        time: EventTime,
    ) -> Result<Option<EventTime>, String> {
        let bad = || {
            format!(
                "the function returned {} where the timestamp belongs",
                describe(l, at)
            )
        };
        let new = match ffi::lua_type(l, at) {
            ffi::LUA_TNUMBER if ffi::lua_isinteger(l, at) != 0 => {
                let s = ffi::lua_tointegerx(l, at, std::ptr::null_mut());
                EventTime::new(u32::try_from(s).map_err(|_| bad())?, 0)
            }
            ffi::LUA_TNUMBER => {
                let f = ffi::lua_tonumberx(l, at, std::ptr::null_mut());
                if !self.time_as_table && f == seconds(time) {
                    return Ok(None);
                }
                if !(f.is_finite() && (0.0..4_294_967_296.0).contains(&f)) {
                    return Err(bad());
                }
                let secs = f.floor();
                let nanos = (((f - secs) * 1e9).round() as u32).min(999_999_999);
                EventTime::new(secs as u32, nanos)
            }
            ffi::LUA_TTABLE if self.time_as_table => {
                let field = |name: &CStr| {
                    ffi::lua_pushstring(l, name.as_ptr());
                    let t = ffi::lua_rawget(l, at);
                    let v = (t == ffi::LUA_TNUMBER && ffi::lua_isinteger(l, -1) != 0)
                        .then(|| ffi::lua_tointegerx(l, -1, std::ptr::null_mut()));
                    ffi::lua_settop(l, -2);
                    v
                };
                let (sec, nsec) = (field(c"sec"), field(c"nsec").unwrap_or(0));
                match (sec.map(u32::try_from), nsec) {
                    (Some(Ok(s)), n @ 0..=999_999_999) => EventTime::new(s, n as u32),
                    _ => return Err(
                        "the function returned a timestamp table without whole `sec` (0 to 2^32-1) and `nsec` (0 to 999999999)"
                            .to_string(),
                    ),
                }
            }
            _ => return Err(bad()),
        };
        Ok((new != time).then_some(new))
    }

    /// Writes what the script made of an event; the record it returned is
    /// at `top + 3`.
    unsafe fn write(
        &mut self,
        l: *mut lua_State,
        top: c_int,
        head: &[u8],
        record: &[u8],
        outcome: Outcome,
    ) -> Result<(), String> {
        let time = match outcome {
            Outcome::Drop => {
                self.changed = true;
                return Ok(());
            }
            Outcome::Keep => {
                self.out.extend_from_slice(head);
                self.out.extend_from_slice(record);
                self.count += 1;
                return Ok(());
            }
            Outcome::Records(time) => time,
        };
        self.changed = true;
        let rec = top + 3;
        // An array of tables: one event per table (Fluent Bit's split).
        // (Only a table with an array part can be one: a record is not walked twice.)
        let rawlen = ffi::lua_rawlen(l, rec);
        let sequence = match rawlen {
            0 => None,
            _ => {
                // A proxy given numbered fields is a sequence only if the
                // whole record is one, as for a table.
                // (Once whole, it is written as the table it now is.)
                if let Some(z) = self
                    .lazy
                    .map(|z| &mut *z)
                    .filter(|z| lazy::is_current(l, rec, z))
                {
                    lazy::materialize(l, rec, z)?;
                    z.current = 0;
                }
                convert::shape(l, rec).1
            }
        };
        let split = match sequence {
            Some(n) => {
                ffi::lua_rawgeti(l, rec, 1);
                let tables = ffi::lua_type(l, -1) == ffi::LUA_TTABLE;
                ffi::lua_settop(l, -2);
                tables.then_some(n)
            }
            _ => None,
        };
        let one = |b: &mut Self, at: c_int, map: bool| {
            match time {
                Some(t) => nagare_forward::write_entry(&mut b.out, t, &[]),
                None => b.out.extend_from_slice(head),
            }
            b.count += 1;
            match map {
                true => b.writer.write_map(l, at, &mut b.out, Some(record)),
                false => b.writer.write(l, at, &mut b.out, Some(record)),
            }
        };
        let Some(n) = split else {
            // The common case, a record with no array part, is a map: the
            // writer need not ask its type and length again.
            return one(self, rec, rawlen == 0 && self.lazy.is_none());
        };
        for i in 1..=n {
            ffi::lua_rawgeti(l, rec, i as i64);
            if ffi::lua_type(l, -1) != ffi::LUA_TTABLE {
                return Err(format!(
                    "the function returned an array of records holding {}",
                    describe(l, -1)
                ));
            }
            one(self, ffi::lua_gettop(l), false)?;
            ffi::lua_settop(l, -2);
        }
        Ok(())
    }

    /// Keeps the event as it came, with `lua_error` = `why` (replacing a
    /// `lua_error` it had).
    fn mark(&mut self, head: &[u8], record: &[u8], why: &str) {
        self.changed = true;
        self.errors += 1;
        let out = match &mut self.failed {
            Some(failed) => failed,
            None => {
                self.count += 1;
                &mut self.out
            }
        };
        out.extend_from_slice(head);
        let Some((n, mut p)) = record::map_at(record, 0) else {
            // Inputs only pass maps on; should one not be, it goes on as it was.
            out.extend_from_slice(record);
            return;
        };
        let mut kept = Vec::with_capacity(n);
        for _ in 0..n {
            let Some(pair) = record::pair_at(record, p) else {
                break;
            };
            if pair.key.is_none_or(|(a, b)| &record[a..b] != b"lua_error") {
                kept.push((p, pair.end));
            }
            p = pair.end;
        }
        write_map_len(out, kept.len() + 1);
        for (a, b) in kept {
            out.extend_from_slice(&record[a..b]);
        }
        write_str(out, b"lua_error");
        write_str(out, why.as_bytes());
    }
}

/// The message of the error object on the top of the stack. Errors raised
/// with a string (Lua's own, `error("…")`) carry the script's name and line.
unsafe fn error_message(l: *mut lua_State) -> String {
    match ffi::lua_type(l, -1) {
        ffi::LUA_TSTRING => String::from_utf8_lossy(convert::str_at(l, -1)).into_owned(),
        _ => format!("(the error is {}, not a message)", convert::type_of(l, -1)),
    }
}

/// An event's time as Fluent Bit hands it to Lua: seconds with a fraction.
fn seconds(t: EventTime) -> f64 {
    t.secs as f64 + t.nanos as f64 / 1e9
}

/// A value the script returned (at `idx`), in an error message.
unsafe fn describe(l: *mut lua_State, idx: c_int) -> String {
    match ffi::lua_type(l, idx) {
        ffi::LUA_TNIL | ffi::LUA_TNONE => "nothing".into(),
        ffi::LUA_TSTRING => format!(
            "the string {:?}",
            String::from_utf8_lossy(convert::str_at(l, idx))
        ),
        ffi::LUA_TNUMBER if ffi::lua_isinteger(l, idx) != 0 => {
            ffi::lua_tointegerx(l, idx, std::ptr::null_mut()).to_string()
        }
        ffi::LUA_TNUMBER => ffi::lua_tonumberx(l, idx, std::ptr::null_mut()).to_string(),
        _ => convert::type_of(l, idx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::write_entry;
    use rmpv::Value as V;

    fn build(toml_text: &str) -> Result<Box<dyn Filter>, OptionError> {
        let cfg: LuaConfig = toml::from_str(toml_text).unwrap();
        cfg.build(&mut BuildContext::new("lua#0"))
    }

    fn m(pairs: &[(&str, V)]) -> V {
        V::Map(
            pairs
                .iter()
                .map(|(k, v)| (V::from(*k), v.clone()))
                .collect(),
        )
    }

    fn batch(events: &[(EventTime, V)]) -> Bytes {
        let mut e = Vec::new();
        for (t, r) in events {
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, r).unwrap();
            write_entry(&mut e, *t, &bytes);
        }
        Bytes::from(e)
    }

    fn decode(b: &[u8]) -> Vec<(EventTime, V)> {
        nagare_core::record::entries(b)
            .map(|(t, r, _)| (t, rmpv::decode::read_value(&mut &r[..]).unwrap()))
            .collect()
    }

    const T: EventTime = EventTime::new(1_700_000_000, 123_456_789);

    /// A filter that calls `cb` in `code` (its line 1 is the code's first
    /// line), with `options` (TOML lines) besides.
    fn script(options: &str, code: &str) -> Box<dyn Filter> {
        build(&format!(
            "call = \"cb\"\n{options}\ncode = '''\n{code}'''\n"
        ))
        .unwrap()
    }

    /// The events `f` makes of `events`, as one batch under `tag`.
    fn run(f: &dyn Filter, tag: &str, events: &[(EventTime, V)]) -> Vec<(EventTime, V)> {
        decode(
            &f.filter(tag, &[batch(events)], events.len() as u32)
                .batch
                .unwrap()
                .0,
        )
    }

    #[test]
    fn codes_split_and_time() {
        let f = script(
            "",
            r#"function cb(tag, ts, r)
  if r.op == "drop" then return -1, ts, r end
  if r.op == "keep" then r.x = 1 return 0, ts, r end
  if r.op == "same_ts" then r.tag = tag return 1, ts, r end
  if r.op == "new_ts" then return 1, 1000.5, r end
  if r.op == "keep_ts" then r.n = r.n + 1 return 2, 0, r end
  if r.op == "split" then return 2, ts, { { i = 1 }, { i = 2 } } end
end
"#,
        );
        let ev = |op: &str| (T, m(&[("op", op.into()), ("n", 1.into())]));
        let input = batch(&[
            ev("drop"),
            ev("keep"),
            ev("same_ts"),
            ev("new_ts"),
            ev("keep_ts"),
            ev("split"),
        ]);
        let out = f.filter("app.x", &[input], 6);
        let (b, n) = out.batch.unwrap();
        assert_eq!(out.errors, 0);
        assert_eq!(n, 6);
        let with = |op: &str, extra: &[(&str, V)]| {
            let mut r = vec![("op", V::from(op)), ("n", 1.into())];
            r.extend_from_slice(extra);
            m(&r)
        };
        assert_eq!(
            decode(&b),
            vec![
                (T, with("keep", &[])),
                (T, with("same_ts", &[("tag", "app.x".into())])),
                (EventTime::new(1000, 500_000_000), with("new_ts", &[])),
                (T, m(&[("op", "keep_ts".into()), ("n", 2.into())])),
                (T, m(&[("i", 1.into())])),
                (T, m(&[("i", 2.into())])),
            ]
        );
    }

    /// Records whose keys change from event to event, in place, kind and
    /// length: each event is written with its own keys in its own order,
    /// the ones removed gone and the new ones after them.
    #[test]
    fn keys_that_change_between_events_are_read_right() {
        let f = script(
            "",
            r#"function cb(tag, ts, r)
  local keys = {}
  for k, v in pairs(r) do
    if type(k) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  r.seen = table.concat(keys, ",")
  r.gone = nil
  if r.nested then r.nested.added = #r.nested.list end
  return 1, ts, r
end
"#,
        );
        let long = "k".repeat(41);
        let long2 = format!("{}x", "k".repeat(40));
        let many: Vec<(String, V)> = (0..40).map(|i| (format!("f{i}"), V::from(i))).collect();
        let nested = V::Map(vec![
            ("list".into(), V::Array(vec![1.into(), 2.into(), 3.into()])),
            ("inner".into(), m(&[("seq", 9.into())])),
        ]);
        let records: Vec<V> = vec![
            m(&[("seq", 1.into()), ("message", "a".into())]),
            m(&[("seq", 2.into()), ("message", "b".into())]),
            // The same keys in other places.
            m(&[("message", "c".into()), ("seq", 3.into())]),
            // Same length, other text.
            m(&[
                ("sez", 4.into()),
                ("message", "d".into()),
                ("gone", 1.into()),
            ]),
            // Keys past 40 bytes (Lua does not intern them), and one that differs at the end.
            m(&[(long.as_str(), 5.into()), ("seq", 5.into())]),
            m(&[(long2.as_str(), 6.into()), ("seq", 6.into())]),
            // Not a string key where a string key was (new keys that are
            // not strings go first among the new ones, so last here keeps
            // the order).
            V::Map(vec![("seq".into(), 7.into()), (7.into(), "int".into())]),
            V::Map(vec![(8.into(), "int".into())]),
            // More keys than the cache has places for.
            V::Map(
                many.iter()
                    .map(|(k, v)| (V::from(k.as_str()), v.clone()))
                    .collect(),
            ),
            m(&[("seq", 9.into()), ("nested", nested)]),
            m(&[]),
            m(&[("seq", 11.into())]),
        ];
        let input = batch(&records.iter().map(|r| (T, r.clone())).collect::<Vec<_>>());
        for round in 0..2 {
            let out = f.filter("t", std::slice::from_ref(&input), records.len() as u32);
            assert_eq!(out.errors, 0);
            let got = decode(&out.batch.unwrap().0);
            assert_eq!(got.len(), records.len());
            for ((_, got), want) in got.iter().zip(&records) {
                let V::Map(mut want) = want.clone() else {
                    panic!()
                };
                let mut keys: Vec<String> = want
                    .iter()
                    .filter_map(|(k, _)| k.as_str().map(str::to_string))
                    .collect();
                keys.sort();
                want.retain(|(k, _)| k.as_str() != Some("gone"));
                for (k, v) in want.iter_mut() {
                    if k.as_str() == Some("nested") {
                        let V::Map(n) = v else { panic!() };
                        n.push(("added".into(), 3.into()));
                    }
                }
                want.push(("seen".into(), keys.join(",").into()));
                assert_eq!(*got, V::Map(want), "round {round}");
            }
        }
    }

    #[test]
    fn a_batch_kept_whole_goes_on_unchanged() {
        let f =
            build("call = \"cb\"\ncode = 'function cb(t, ts, r) return 0, ts, r end'\n").unwrap();
        let out = f.filter("t", &[batch(&[(T, m(&[("a", 1.into())]))])], 1);
        assert!(out.batch.is_none());
        assert_eq!(out.errors, 0);
    }

    #[test]
    fn whole_second_times_are_read_and_kept() {
        let f = script(
            "",
            r#"function cb(tag, ts, r)
  r.ts = ts
  if r.k == 1 then return 1, ts, r end
  return 2, 0, r
end
"#,
        );
        // Entries with an int time, as the forward protocol allows.
        let mut e = Vec::new();
        for k in [1, 2] {
            e.extend_from_slice(&[0x92, 0xce]);
            e.extend_from_slice(&1_700_000_000u32.to_be_bytes());
            rmpv::encode::write_value(&mut e, &m(&[("k", k.into())])).unwrap();
        }
        let out = f.filter("t", &[Bytes::from(e.clone())], 2);
        let (b, n) = out.batch.unwrap();
        assert_eq!(n, 2);
        let want = |k: i64| m(&[("k", k.into()), ("ts", V::F64(1_700_000_000.0))]);
        assert_eq!(
            decode(&b),
            vec![
                (EventTime::new(1_700_000_000, 0), want(1)),
                (EventTime::new(1_700_000_000, 0), want(2))
            ]
        );
        // The times went on as they came: ints.
        assert_eq!(&b[..6], &e[..6]);
    }

    #[test]
    fn time_as_table_is_exact() {
        let f = script(
            "time_as_table = true",
            r#"function cb(tag, ts, r)
  r.sec, r.nsec = ts.sec, ts.nsec
  return 1, { sec = ts.sec + 1, nsec = 5 }, r
end
"#,
        );
        assert_eq!(
            run(&*f, "t", &[(T, m(&[]))]),
            vec![(
                EventTime::new(T.secs + 1, 5),
                m(&[("nsec", T.nanos.into()), ("sec", T.secs.into())])
            )]
        );
    }

    #[test]
    fn errors_and_bad_returns_mark_the_event() {
        let f = script(
            "",
            r#"function cb(tag, ts, r)
  if r.k == 1 then error("boom") end
  if r.k == 2 then return "x", ts, r end
  if r.k == 3 then return 7, ts, r end
  if r.k == 4 then return 1, ts, "str" end
  if r.k == 5 then r.f = print return 1, ts, r end
  return 1, ts, r
end
"#,
        );
        let ev = |k: i64| (T, m(&[("k", k.into()), ("lua_error", "old".into())]));
        let out = f.filter(
            "t",
            &[batch(&[ev(1), ev(2), ev(3), ev(4), ev(5), ev(6)])],
            6,
        );
        assert_eq!(out.errors, 5);
        let got = decode(&out.batch.unwrap().0);
        let errs: Vec<String> = got
            .iter()
            .map(|(t, r)| {
                assert_eq!(*t, T);
                let V::Map(p) = r else { panic!() };
                assert_eq!(p.len(), 2, "{r}");
                p[1].1.as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(errs[0], "code:2: boom");
        assert!(
            errs[1].contains("returned the string \"x\" where the code"),
            "{}",
            errs[1]
        );
        assert!(errs[2].contains("returned code 7"), "{}", errs[2]);
        assert!(
            errs[3].contains("where the record (a table) belongs"),
            "{}",
            errs[3]
        );
        assert!(
            errs[4].contains("a function cannot be a field's value"),
            "{}",
            errs[4]
        );
        assert_eq!(errs[5], "old", "a good event is untouched");
    }

    #[test]
    fn with_an_error_label_marked_events_leave_the_batch() {
        let cfg: LuaConfig = toml::from_str(
            "call = \"cb\"\ncode = 'function cb(tag, ts, r) if r.k == 1 then error(\"boom\") end return 1, ts, r end'\n",
        )
        .unwrap();
        let mut cx = BuildContext::new("lua#0");
        cx.failures_routed = true;
        let f = cfg.build(&mut cx).unwrap();
        let ev = |k: i64| (T, m(&[("k", k.into())]));
        let out = f.filter("t", &[batch(&[ev(0), ev(1), ev(2)])], 3);
        assert_eq!(out.errors, 1);
        let (kept, n) = out.batch.unwrap();
        assert_eq!(n, 2);
        let keys: Vec<V> = decode(&kept).into_iter().map(|(_, r)| r).collect();
        assert_eq!(keys, vec![m(&[("k", 0.into())]), m(&[("k", 2.into())])]);
        let (failed, n) = out.failed.expect("the failed event");
        assert_eq!(n, 1);
        assert_eq!(
            decode(&failed),
            vec![(
                T,
                m(&[("k", 1.into()), ("lua_error", "code:1: boom".into())])
            )]
        );
    }

    #[test]
    fn a_loop_is_stopped_and_the_rest_of_the_batch_marked() {
        let f = script(
            "timeout = \"200ms\"",
            r#"function cb(tag, ts, r)
  if r.k == 1 then
    while true do pcall(function() while true do end end) end
  end
  return 1, ts, r
end
"#,
        );
        let ev = |k: i64| (T, m(&[("k", k.into())]));
        let started = Instant::now();
        let out = f.filter("t", &[batch(&[ev(0), ev(1), ev(2)])], 3);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(out.errors, 2);
        let got = decode(&out.batch.unwrap().0);
        assert_eq!(got[0].1, m(&[("k", 0.into())]));
        for (i, (_, r)) in got.iter().enumerate().skip(1) {
            let V::Map(p) = r else { panic!() };
            assert_eq!(p[0], ("k".into(), (i as i64).into()));
            assert!(p[1].1.as_str().unwrap().starts_with("timed out"), "{r}");
        }
        // The next batch runs again.
        assert_eq!(run(&*f, "t", &[ev(0)]), vec![(T, m(&[("k", 0.into())]))]);
    }

    #[test]
    fn bad_scripts_are_option_errors() {
        let err = |t: &str| build(t).err().unwrap();
        let e = err("call = \"cb\"\ncode = '''\nfunction cb(\n'''\n");
        assert_eq!(e.key, "code");
        assert!(e.message.starts_with("code:2:"), "{e}");
        let e = err("call = \"nope\"\ncode = 'function cb() end'\n");
        assert_eq!(e.key, "call");
        assert!(e.message.contains("no global function `nope`"), "{e}");
        let e = err("call = \"x\"\ncode = 'x = 1'\n");
        assert!(e.message.contains("`x` is an integer in the script"), "{e}");
        let e = err("call = \"cb\"\nscript = \"/nonexistent/x.lua\"\n");
        assert_eq!(e.key, "script");
        assert!(e.message.contains("cannot read the script"), "{e}");
        let e = err("call = \"cb\"\ncode = 'error(\"at load\")'\n");
        assert!(e.message.contains("code:1: at load"), "{e}");
        let e = err("call = \"cb\"\ntimeout = \"50ms\"\ncode = 'while true do end'\n");
        assert!(e.message.contains("ran longer than `timeout`"), "{e}");
        assert!(err("call = \"cb\"\n").message.contains("needs `script`"));
        assert_eq!(err("call = \"cb\"\ncode = ''\nscript = 'a'\n").key, "code");
    }

    /// Scripts that read, set, delete, rename, walk and split records give
    /// the same events with `lazy_record` as with a table per record.
    #[test]
    fn lazy_records_give_what_tables_give() {
        let code = r#"
function cb(tag, ts, r)
  local op = r.op
  if op == "add" then r.added = tag
  elseif op == "set" then r.n = r.n * 10
  elseif op == "del" then r.n = nil; r.gone = r.n
  elseif op == "del_set" then local v = r.n; r.n = nil; r.n = v + 1
  elseif op == "rename" then r.m, r.n = r.n, nil
  elseif op == "walk" then
    local keys = {}
    for k, v in pairs(r) do keys[#keys + 1] = k end
    table.sort(keys)
    r.keys = table.concat(keys, ",")
  elseif op == "nested" then r.inner.x = 5; r.inner.list[1] = "one"
  elseif op == "raw" then rawset(r, "n", 99)
  elseif op == "split" then return 2, ts, { r, { op = "second", n = r.n } }
  elseif op == "wrap" then return 1, ts, { whole = r }
  elseif op == "keep" then r.x = 1 return 0, ts, r
  elseif op == "drop" then return -1, ts, r
  elseif op == "err" then error("boom")
  elseif op == "len" then r.len = #r
  end
  return 1, ts, r
end
"#;
        let build_with = |lazy: bool| {
            let cfg = format!("call = \"cb\"\nlazy_record = {lazy}\ncode = '''{code}'''\n");
            build(&cfg).unwrap()
        };
        let inner = V::Map(vec![
            ("list".into(), V::Array(vec![1.into(), 2.into()])),
            ("k".into(), "v".into()),
        ]);
        let mut records: Vec<V> = [
            "add", "set", "del", "del_set", "rename", "walk", "nested", "raw", "split", "wrap",
            "keep", "drop", "err", "len", "none",
        ]
        .iter()
        .map(|op| {
            m(&[
                ("op", (*op).into()),
                ("n", 7.into()),
                ("s", "text".into()),
                ("inner", inner.clone()),
                ("nil", V::Nil),
                ("bin", V::Binary(vec![0xff, 1])),
            ])
        })
        .collect();
        // Not all keys strings: an ordinary table.
        records.push(V::Map(vec![
            ("op".into(), "add".into()),
            (1.into(), "int key".into()),
        ]));
        records.push(m(&[]));
        let input = batch(&records.iter().map(|r| (T, r.clone())).collect::<Vec<_>>());
        let (eager, lazy) = (build_with(false), build_with(true));
        for round in 0..2 {
            let want = eager.filter("app", std::slice::from_ref(&input), records.len() as u32);
            let got = lazy.filter("app", std::slice::from_ref(&input), records.len() as u32);
            assert_eq!(want.errors, 1);
            assert_eq!(got.errors, want.errors);
            let (want, got) = (want.batch.unwrap(), got.batch.unwrap());
            assert_eq!(got.1, want.1);
            assert_eq!(decode(&got.0), decode(&want.0), "round {round}");
            // Bytes too: untouched pairs are copied as they came, in place.
            assert_eq!(got.0, want.0, "round {round}");
        }
    }

    /// Functions that use their record only through its fields (escape.rs)
    /// get lazy records by default, and make the same events, byte for
    /// byte, as with a table per record; others get tables.
    #[test]
    fn lazy_records_by_default_where_the_function_cannot_tell() {
        let bodies = [
            "r.source = tag",
            r#"if r.level == "debug" then return -1, ts, r end
               r.n = (r.n or 0) + 1; r.s = nil"#,
            r#"if r.inner then r.inner.x = 5; r.inner.list[1] = "one" end"#,
            r#"local k = "s"; r[k .. "2"] = r[k]; r[1] = "first"; r[2] = r.n"#,
            "r[1] = r.n",
            "r.m, r.n = r.n, nil",
            "local v = r.n; r.n = nil; if v then r.n = v + 1 end",
            "return 1, ts, { a = r.s, n = r.n }",
            "r.x = r.bin; return 1, 1000.5, r",
            "r.x = 1; return 0, ts, r",
            r#"if r.op == "err" then error("boom") end; r.n = nil"#,
            "return 2, ts, r",
        ];
        let inner = V::Map(vec![
            ("list".into(), V::Array(vec![1.into(), 2.into()])),
            ("k".into(), "v".into()),
        ]);
        let records = [
            m(&[
                ("op", "x".into()),
                ("n", 7.into()),
                ("s", "text".into()),
                ("inner", inner),
                ("nil", V::Nil),
                ("bin", V::Binary(vec![0xff, 1])),
                ("level", "info".into()),
            ]),
            m(&[("level", "debug".into()), ("n", 1.into())]),
            m(&[("op", "err".into()), ("n", 1.into())]),
            // The same key twice (a table keeps the last), and a key that
            // is not a string: these go as tables.
            V::Map(vec![
                ("n".into(), 1.into()),
                ("n".into(), 2.into()),
                ("s".into(), "a".into()),
            ]),
            V::Map(vec![("n".into(), 1.into()), (1.into(), "int key".into())]),
            m(&[]),
            // Wide records (their keys are checked sorted), one with a key twice.
            V::Map(
                (0..40)
                    .map(|i| (format!("k{i}").into(), i.into()))
                    .chain([("n".into(), 3.into())])
                    .collect(),
            ),
            V::Map(
                (0..40)
                    .map(|i| (format!("k{}", i % 39).into(), i.into()))
                    .collect(),
            ),
        ];
        let input = batch(&records.iter().map(|r| (T, r.clone())).collect::<Vec<_>>());
        for body in bodies {
            let code = format!("function cb(tag, ts, r)\ndo\n{body}\nend\nreturn 1, ts, r\nend\n");
            let load = |lazy| {
                Script::load(code.as_bytes(), "=code", "cb", Duration::from_secs(1), lazy)
                    .unwrap_or_else(|_| panic!("{code}"))
            };
            assert!(load(None).proxy, "{code}");
            assert!(!load(Some(false)).proxy);
            let (table, by_default) = (script("lazy_record = false", &code), script("", &code));
            for round in 0..2 {
                let n = records.len() as u32;
                let want = table.filter("app", std::slice::from_ref(&input), n);
                let got = by_default.filter("app", std::slice::from_ref(&input), n);
                assert_eq!(got.errors, want.errors, "{code}");
                // (No batch: every event kept as it came.)
                let (want, got) = (
                    want.batch.unwrap_or_else(|| (input.clone(), n)),
                    got.batch.unwrap_or_else(|| (input.clone(), n)),
                );
                assert_eq!(got.1, want.1, "{code}");
                assert_eq!(decode(&got.0), decode(&want.0), "{code} round {round}");
                assert_eq!(got.0, want.0, "{code} round {round}");
            }
        }
        // A field never touched keeps its form (a table writes a float 64).
        let code = "function cb(tag, ts, r) r.source = tag return 1, ts, r end";
        let f32 = batch(&[(T, m(&[("f", V::F32(1.5))]))]);
        let (table, by_default) = (script("lazy_record = false", code), script("", code));
        let field = |f: &dyn Filter| {
            decode(
                &f.filter("app", std::slice::from_ref(&f32), 1)
                    .batch
                    .unwrap()
                    .0,
            )
        };
        assert_eq!(
            field(&*by_default)[0].1,
            m(&[("f", V::F32(1.5)), ("source", "app".into())])
        );
        assert_eq!(
            field(&*table)[0].1,
            m(&[("f", V::F64(1.5)), ("source", "app".into())])
        );
        let walks =
            "function cb(tag, ts, r) for k in pairs(r) do r[k] = nil end return 1, ts, r end";
        let s = Script::load(
            walks.as_bytes(),
            "=code",
            "cb",
            Duration::from_secs(1),
            None,
        )
        .unwrap_or_else(|_| panic!());
        assert!(!s.proxy);
    }

    /// escape.rs relies on it: `debug.getlocal` could reach any register.
    #[test]
    fn scripts_have_no_debug_library() {
        let f = script(
            "",
            "function cb(tag, ts, r) r.debug = debug == nil and package.loaded.debug == nil return 1, ts, r end",
        );
        assert_eq!(
            run(&*f, "t", &[(T, m(&[]))]),
            vec![(T, m(&[("debug", true.into())]))]
        );
    }

    /// What a lazy record does that a table does not, as docs/lua.md says.
    #[test]
    fn lazy_record_limits() {
        let f = script(
            "lazy_record = true",
            r#"function cb(tag, ts, r)
  if r.k == 1 then kept = r; r.seen = next(r) return 1, ts, r end
  -- The record of the event before: only the fields touched in its call.
  r.old_k, r.old_other = kept.k, kept.other
  r.meta = getmetatable(r)
  r.set_meta = pcall(setmetatable, r, {})
  return 1, ts, r
end
"#,
        );
        let ev = |k: i64| (T, m(&[("k", k.into()), ("other", "x".into())]));
        let got = run(&*f, "t", &[ev(1), ev(2)]);
        assert_eq!(
            got[0].1,
            m(&[("k", 1.into()), ("other", "x".into()), ("seen", "k".into())])
        );
        assert_eq!(
            got[1].1,
            m(&[
                ("k", 2.into()),
                ("other", "x".into()),
                ("meta", "a lazy record".into()),
                ("old_k", 1.into()),
                ("set_meta", false.into()),
            ])
        );
    }
}

/// Not a test but a measurement, run by hand:
/// `cargo test --release -p nagare --bin nagare lua_cost -- --ignored --nocapture`.
/// Times the filter on batches of the filter bench's events (benches/filter-lua.toml:
/// `{seq, message}` of 100 bytes, a function adding one field) against the
/// floor: the Lua C API calls any msgpack ↔ Lua filter must make (a table
/// per record with its fields, the call, one walk of the returned table
/// reading each key and value), with no error handling, ordering or
/// re-encoding. Both run in one process, alternately, so the machine's load
/// falls on both.
#[cfg(test)]
mod cost {
    use super::*;
    use crate::filters::common::timing::{cpu_ns, median};
    use std::hint::black_box;

    const CODE: &str =
        "function add_source(tag, ts, record) record.source = tag return 1, ts, record end";
    const EVENTS: u32 = 200;

    fn bench_batch() -> Bytes {
        let mut e = Vec::new();
        for seq in 0..EVENTS {
            let mut rec = Vec::new();
            write_map_len(&mut rec, 2);
            write_str(&mut rec, b"seq");
            let _ = rmp::encode::write_uint(&mut rec, 1_000_000 + u64::from(seq));
            write_str(&mut rec, b"message");
            write_str(&mut rec, &[b'x'; 80]);
            nagare_forward::write_entry(&mut e, EventTime::new(1_700_000_000, seq), &rec);
        }
        Bytes::from(e)
    }

    /// The floor for one batch; returns the bytes read back (so nothing is optimised away).
    unsafe fn floor(l: *mut lua_State, batch: &[u8], out: &mut Vec<u8>) {
        let top = ffi::lua_gettop(l);
        let (func, tag) = (top - 1, top);
        out.clear();
        let message = [b'x'; 80];
        for seq in 0..EVENTS {
            ffi::lua_checkstack(l, 8);
            ffi::lua_pushvalue(l, func);
            ffi::lua_pushvalue(l, tag);
            ffi::lua_pushnumber(l, 1_700_000_000.0);
            ffi::lua_createtable(l, 0, 4);
            ffi::lua_pushlstring(l, c"seq".as_ptr(), 3);
            ffi::lua_pushinteger(l, 1_000_000 + i64::from(seq));
            ffi::lua_rawset(l, -3);
            ffi::lua_pushlstring(l, c"message".as_ptr(), 7);
            ffi::lua_pushlstring(l, message.as_ptr().cast(), message.len());
            ffi::lua_rawset(l, -3);
            assert_eq!(ffi::lua_pcall(l, 3, 3, 0), ffi::LUA_OK);
            let rec = ffi::lua_gettop(l);
            ffi::lua_pushnil(l);
            while ffi::lua_next(l, rec) != 0 {
                out.extend_from_slice(convert::str_at(l, -2));
                match ffi::lua_type(l, -1) {
                    ffi::LUA_TSTRING => out.extend_from_slice(convert::str_at(l, -1)),
                    _ => out.extend_from_slice(
                        &ffi::lua_tointegerx(l, -1, std::ptr::null_mut()).to_le_bytes(),
                    ),
                }
                ffi::lua_settop(l, -2);
            }
            ffi::lua_settop(l, top);
        }
        black_box(batch.len());
    }

    #[test]
    #[ignore = "a measurement, run by hand"]
    fn lua_cost_against_the_floor() {
        let build = |lazy_record| {
            LuaConfig {
                script: None,
                code: Some(CODE.into()),
                call: "add_source".into(),
                time_as_table: false,
                timeout: Dur::secs(1),
                lazy_record,
            }
            .build(&mut BuildContext::new("lua#0"))
            .unwrap()
        };
        // The default takes lazy records for this function (escape.rs).
        let (filter, lazy) = (build(Some(false)), build(None));
        let script = Script::load(
            CODE.as_bytes(),
            "=code",
            "add_source",
            Duration::from_secs(1),
            Some(false),
        )
        .unwrap_or_else(|_| panic!());
        let batch = bench_batch();
        let parts = [batch.clone()];
        let batches = 500;
        let per_event = |ns: f64| ns / f64::from(batches * EVENTS);
        let (mut ours, mut lazies, mut least) = (Vec::new(), Vec::new(), Vec::new());
        let mut out = Vec::new();
        // LUA_COST=default times the default filter alone (to profile it).
        let only_default = std::env::var("LUA_COST").is_ok_and(|v| v == "default");
        for _ in 0..11 {
            if only_default {
                for _ in 0..batches * 3 {
                    black_box(lazy.filter("bench.load", &parts, EVENTS));
                }
                continue;
            }
            let t = cpu_ns();
            for _ in 0..batches {
                black_box(filter.filter("bench.load", &parts, EVENTS));
            }
            ours.push(per_event(cpu_ns() - t));
            let t = cpu_ns();
            for _ in 0..batches {
                black_box(lazy.filter("bench.load", &parts, EVENTS));
            }
            lazies.push(per_event(cpu_ns() - t));
            let t = cpu_ns();
            for _ in 0..batches {
                // As the filter does for every batch.
                script.clock.arm(Duration::from_secs(1));
                unsafe {
                    script
                        .lua
                        .exec_raw::<()>((&script.func, "bench.load"), |l| {
                            floor(l, &batch, &mut out)
                        })
                        .unwrap();
                }
            }
            least.push(per_event(cpu_ns() - t));
        }
        if only_default {
            return;
        }
        let (ours, lazies, least) = (median(ours), median(lazies), median(least));
        println!(
            "lua filter, a table per record: {ours:.0} ns/event; by default (lazy records): {lazies:.0} ns/event; \
             floor of a table per record (Lua C API calls only): {least:.0} ns/event; table / floor = {:.2}, default / floor = {:.2} \
             (CPU time of this thread, medians of 11)",
            ours / least,
            lazies / least
        );
    }
}
