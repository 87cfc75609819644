//! Whether a script's function can let the record it is given leave the
//! call: read from its Lua 5.4 bytecode (`string.dump` of the function).
//!
//! A record that only has its fields read and set (`record.x`,
//! `record[k] = v`) and is returned as the third result cannot be told
//! apart from a lazy proxy (lazy.rs): no `next`, `pairs`, `rawget`,
//! `#record` or `setmetatable` can reach it, and no global, upvalue or
//! table keeps it after the call. For such a function the filter hands
//! over the proxy by default, which spares building every record as a
//! whole table; any other use of the record takes the ordinary table.
//!
//! The analysis follows every path through the function (jumps and tests
//! taken both ways): a register may hold the record after a `MOVE` from
//! one that may, until an instruction writes it. It is over-cautious by
//! design: any instruction that reads a register that may hold the
//! record, other than the few accepted below, refuses the function, and
//! so does bytecode it cannot read. It relies on the script having no
//! `debug` library (mlua's safe subset leaves it out), whose `getlocal`
//! could reach any register.

/// Why the function may let the record escape (or reach it otherwise than
/// by field name); `Ok` when it cannot.
pub fn record_stays_in_call(dump: &[u8]) -> Result<(), &'static str> {
    let mut r = Reader { buf: dump, at: 0 };
    r.header().ok_or("its bytecode is not Lua 5.4's")?;
    r.byte().ok_or(TRUNCATED)?; // the main closure's upvalue count
    let f = r.function().ok_or(TRUNCATED)?;
    check(&f)
}

const TRUNCATED: &str = "its bytecode could not be read";

/// The register of the third parameter, the record.
const RECORD: usize = 2;

/// What the analysis needs of a function prototype.
struct Proto {
    numparams: u8,
    is_vararg: bool,
    code: Vec<u32>,
    /// For each nested function: its upvalues that are registers of this
    /// function (`instack`), by register.
    nested_captures: Vec<Vec<usize>>,
    /// This function's own upvalues: (instack, idx).
    upvalues: Vec<(bool, usize)>,
}

// Lua 5.4's opcodes (lopcodes.h), the ones the analysis names.
const MOVE: u32 = 0;
const LOADI: u32 = 1;
const LOADF: u32 = 2;
const LOADK: u32 = 3;
const LOADKX: u32 = 4;
const LOADFALSE: u32 = 5;
const LFALSESKIP: u32 = 6;
const LOADTRUE: u32 = 7;
const LOADNIL: u32 = 8;
const GETUPVAL: u32 = 9;
const SETUPVAL: u32 = 10;
const GETTABUP: u32 = 11;
const GETTABLE: u32 = 12;
const GETI: u32 = 13;
const GETFIELD: u32 = 14;
const SETTABUP: u32 = 15;
const SETTABLE: u32 = 16;
const SETI: u32 = 17;
const SETFIELD: u32 = 18;
const NEWTABLE: u32 = 19;
const SELF: u32 = 20;
const ADDI: u32 = 21;
const SHLI: u32 = 33;
const ADD: u32 = 34;
const SHR: u32 = 45;
const MMBIN: u32 = 46;
const MMBINI: u32 = 47;
const MMBINK: u32 = 48;
const UNM: u32 = 49;
const LEN: u32 = 52;
const CONCAT: u32 = 53;
const CLOSE: u32 = 54;
const TBC: u32 = 55;
const JMP: u32 = 56;
const EQ: u32 = 57;
const LE: u32 = 59;
const EQK: u32 = 60;
const GEI: u32 = 65;
const TEST: u32 = 66;
const TESTSET: u32 = 67;
const CALL: u32 = 68;
const TAILCALL: u32 = 69;
const RETURN: u32 = 70;
const RETURN0: u32 = 71;
const RETURN1: u32 = 72;
const FORLOOP: u32 = 73;
const FORPREP: u32 = 74;
const TFORPREP: u32 = 75;
const TFORLOOP: u32 = 77;
const SETLIST: u32 = 78;
const CLOSURE: u32 = 79;
const VARARG: u32 = 80;
const VARARGPREP: u32 = 81;
const EXTRAARG: u32 = 82;

fn check(f: &Proto) -> Result<(), &'static str> {
    if usize::from(f.numparams) <= RECORD {
        // The record is not a named parameter: unseen, unless it is in `...`.
        return match f.is_vararg {
            true => Err("it takes the record through `...`"),
            false => Ok(()),
        };
    }
    // Which registers may hold the record before each instruction: a
    // forward walk of every path (a join is the union), from the record's
    // own register at the entry.
    let n = f.code.len();
    if n == 0 {
        return Err(TRUNCATED);
    }
    let mut before: Vec<Option<Regs>> = vec![None; n];
    let mut entry = Regs::default();
    entry.set(RECORD, true);
    before[0] = Some(entry);
    let mut todo = vec![0usize];
    while let Some(pc) = todo.pop() {
        let Some(holds) = before[pc] else { continue };
        let i = f.code[pc];
        use_of_the_record(f, i, &holds)?;
        let after = holds.after(i);
        for next in successors(pc, i) {
            let slot = before.get_mut(next).ok_or(TRUNCATED)?;
            let joined = match slot {
                Some(old) => old.union(&after),
                None => after,
            };
            if *slot != Some(joined) {
                *slot = Some(joined);
                todo.push(next);
            }
        }
    }
    Ok(())
}

/// Refuses instruction `i` if it uses a register in `holds` otherwise
/// than to read a field by name, set one by name, copy the record or
/// return it as the third result.
fn use_of_the_record(f: &Proto, i: u32, holds: &Regs) -> Result<(), &'static str> {
    let (a, b, c, k) = (arg_a(i), arg_b(i), arg_c(i), arg_k(i));
    let h = |r: usize| holds.get(r);
    // C as a register, unless it is a constant (k).
    let hc = || !k && h(c);
    let passes = "it passes the record to a function";
    let stores = "it stores the record in a table, a global or an upvalue";
    let other = "it uses the record otherwise than by field name";
    let (refused, why) = match op(i) {
        MOVE | GETFIELD => (false, other),
        LOADI | LOADF | LOADK | LOADKX | LOADFALSE | LFALSESKIP | LOADTRUE | LOADNIL | GETUPVAL
        | GETTABUP | NEWTABLE | JMP | CLOSE | RETURN0 | VARARG | VARARGPREP | EXTRAARG => {
            (false, other)
        }
        SETFIELD => (hc(), stores),
        SETTABUP => (hc(), stores),
        SETUPVAL => (h(a), stores),
        // Fields by a computed key or a number: as a table would, the
        // proxy finds none that is not a string, and keeps what is set.
        SETTABLE => (h(b) || hc(), stores),
        SETI => (hc(), stores),
        GETTABLE => (h(c), other),
        GETI => (false, other),
        SELF => (h(b) || hc(), passes),
        // The record may only be the third result.
        RETURN => {
            let wrong = match b {
                0 => holds.any_from(a),
                n => (a..a + n - 1).any(|r| h(r) && r != a + RECORD),
            };
            (
                wrong,
                "it returns the record other than as the third result",
            )
        }
        RETURN1 => (h(a), "it returns the record other than as the third result"),
        CALL | TAILCALL => (
            match b {
                0 => holds.any_from(a),
                n => holds.any_in(a, n),
            },
            passes,
        ),
        SETLIST => (
            match b {
                0 => holds.any_from(a),
                n => holds.any_in(a, n + 1),
            },
            stores,
        ),
        CLOSURE => {
            let bx = (i >> 15) as usize;
            let keeps = f
                .nested_captures
                .get(bx)
                .is_none_or(|regs| regs.iter().any(|&r| h(r)));
            (keeps, "a function defined in it keeps the record")
        }
        CONCAT => (holds.any_in(a, b), other),
        TBC | TEST | MMBINI | MMBINK => (h(a), other),
        o if (EQK..=GEI).contains(&o) => (h(a), other),
        MMBIN => (h(a) || h(b), other),
        o if (EQ..=LE).contains(&o) => (h(a) || h(b), other),
        TESTSET => (h(b), other),
        o if (ADDI..=SHLI).contains(&o) || (UNM..=LEN).contains(&o) => (h(b), other),
        o if (ADD..=SHR).contains(&o) => (h(b) || h(c), other),
        // The numeric and generic for loops: their control registers.
        o if (FORLOOP..=TFORLOOP).contains(&o) => (holds.any_in(a, 5), other),
        _ => (
            true,
            "its bytecode has an instruction this check does not know",
        ),
    };
    match refused {
        true => Err(why),
        false => Ok(()),
    }
}

/// Where control may go after instruction `i` at `pc`: a superset is
/// safe (it only adds to what registers may hold).
fn successors(pc: usize, i: u32) -> impl Iterator<Item = usize> {
    let next = pc + 1;
    let bx = (i >> 15) as usize;
    let (x, y): (Option<usize>, Option<usize>) = match op(i) {
        RETURN | RETURN0 | RETURN1 => (None, None),
        JMP => {
            let sj = ((i >> 7) & 0x1ff_ffff) as i64 - 0xff_ffff;
            (usize::try_from(next as i64 + sj).ok(), None)
        }
        // Tests skip the instruction after them.
        o if (EQ..=TESTSET).contains(&o) || o == LFALSESKIP => (Some(next), Some(next + 1)),
        FORPREP => (Some(next), Some(next + bx + 1)),
        TFORPREP => (Some(next), Some(next + bx)),
        FORLOOP | TFORLOOP => (Some(next), next.checked_sub(bx)),
        _ => (Some(next), None),
    };
    x.into_iter().chain(y)
}

/// A set of registers (a Lua function has at most 255).
#[derive(Clone, Copy, Default, PartialEq)]
struct Regs([u64; 4]);

impl Regs {
    fn get(&self, r: usize) -> bool {
        r < 256 && self.0[r / 64] >> (r % 64) & 1 == 1
    }

    fn set(&mut self, r: usize, on: bool) {
        if r < 256 {
            let bit = 1 << (r % 64);
            match on {
                true => self.0[r / 64] |= bit,
                false => self.0[r / 64] &= !bit,
            }
        }
    }

    fn any_in(&self, start: usize, n: usize) -> bool {
        (start..start + n).any(|r| self.get(r))
    }

    fn any_from(&self, start: usize) -> bool {
        self.any_in(start, 256usize.saturating_sub(start))
    }

    fn union(&self, other: &Regs) -> Regs {
        Regs(std::array::from_fn(|w| self.0[w] | other.0[w]))
    }

    /// What may hold the record after `i` (which `use_of_the_record`
    /// accepted): a MOVE copies; an instruction that writes its A (and
    /// only A, or a known run from A) overwrites it. Others leave the set
    /// as it was, which can only make it larger than the truth.
    fn after(&self, i: u32) -> Regs {
        let mut next = *self;
        let (a, b, c) = (arg_a(i), arg_b(i), arg_c(i));
        match op(i) {
            MOVE => next.set(a, self.get(b)),
            LOADI | LOADF | LOADK | LOADKX | LOADFALSE | LFALSESKIP | LOADTRUE | GETUPVAL
            | GETTABUP | GETTABLE | GETI | GETFIELD | NEWTABLE | CONCAT | CLOSURE => {
                next.set(a, false)
            }
            o if (ADDI..=SHR).contains(&o) || (UNM..=LEN).contains(&o) => next.set(a, false),
            LOADNIL => (a..=a + b).for_each(|r| next.set(r, false)),
            SELF => (a..=a + 1).for_each(|r| next.set(r, false)),
            // The results from A. With C = 0 (all there are), at least A:
            // a call that returns nothing leaves its function there.
            CALL => (a..a + c.saturating_sub(1).max(1)).for_each(|r| next.set(r, false)),
            // `...` with C = 0 may write nothing.
            VARARG => (a..a + c.saturating_sub(1)).for_each(|r| next.set(r, false)),
            _ => {}
        }
        next
    }
}

fn op(i: u32) -> u32 {
    i & 0x7f
}
fn arg_a(i: u32) -> usize {
    ((i >> 7) & 0xff) as usize
}
fn arg_k(i: u32) -> bool {
    (i >> 15) & 1 == 1
}
fn arg_b(i: u32) -> usize {
    ((i >> 16) & 0xff) as usize
}
fn arg_c(i: u32) -> usize {
    ((i >> 24) & 0xff) as usize
}

/// Reads a `string.dump` (ldump.c of Lua 5.4).
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.buf.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    fn byte(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    /// ldump.c's `dumpSize`: 7 bits a byte, most significant first, the
    /// last byte marked with 0x80.
    fn size(&mut self) -> Option<usize> {
        let mut x: usize = 0;
        loop {
            let b = self.byte()?;
            x = x.checked_mul(128)? | usize::from(b & 0x7f);
            if b & 0x80 != 0 {
                return Some(x);
            }
        }
    }

    fn string(&mut self) -> Option<()> {
        match self.size()? {
            0 => Some(()),
            n => self.take(n - 1).map(drop),
        }
    }

    fn header(&mut self) -> Option<()> {
        let ok = self.take(4)? == b"\x1bLua"
            && self.byte()? == 0x54
            && self.byte()? == 0
            && self.take(6)? == b"\x19\x93\r\n\x1a\n"
            && self.take(3)? == [4, 8, 8]
            && self.take(8)? == 0x5678_i64.to_ne_bytes()
            && self.take(8)? == 370.5_f64.to_ne_bytes();
        ok.then_some(())
    }

    fn function(&mut self) -> Option<Proto> {
        self.string()?; // source
        self.size()?; // linedefined
        self.size()?; // lastlinedefined
        let numparams = self.byte()?;
        let is_vararg = self.byte()? != 0;
        self.byte()?; // maxstacksize
        let n = self.size()?;
        let code = self
            .take(n.checked_mul(4)?)?
            .chunks_exact(4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        for _ in 0..self.size()? {
            match self.byte()? {
                0x03 | 0x13 => drop(self.take(8)?), // integer, float
                0x04 | 0x14 => self.string()?,      // short, long string
                0x00 | 0x01 | 0x11 => {}            // nil, false, true
                _ => return None,
            }
        }
        let mut upvalues = Vec::new();
        for _ in 0..self.size()? {
            let d = self.take(3)?;
            upvalues.push((d[0] != 0, usize::from(d[1])));
        }
        let mut nested_captures = Vec::new();
        for _ in 0..self.size()? {
            let p = self.function()?;
            nested_captures.push(p.upvalues.iter().filter(|u| u.0).map(|u| u.1).collect());
        }
        // Debug information (none when stripped; skipped either way).
        let lines = self.size()?;
        self.take(lines)?;
        for _ in 0..self.size()? {
            self.size()?;
            self.size()?;
        }
        for _ in 0..self.size()? {
            self.string()?;
            self.size()?;
            self.size()?;
        }
        for _ in 0..self.size()? {
            self.string()?;
        }
        Some(Proto {
            numparams,
            is_vararg,
            code,
            nested_captures,
            upvalues,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{Function, Lua};

    /// The verdict on `cb` as `code` defines it.
    fn verdict(code: &str) -> Result<(), &'static str> {
        let lua = Lua::new();
        lua.load(code).exec().unwrap();
        let f: Function = lua.globals().get("cb").unwrap();
        let stripped = record_stays_in_call(&f.dump(true));
        // Debug information changes nothing but is read past.
        assert_eq!(record_stays_in_call(&f.dump(false)), stripped, "{code}");
        stripped
    }

    #[test]
    fn records_used_by_field_name_stay_in_the_call() {
        for code in [
            "function cb(tag, ts, record) record.source = tag return 1, ts, record end",
            r#"function cb(t, ts, r)
                 if r.level == "debug" then return -1, ts, r end
                 r["log-level"] = nil
                 r.n = (r.n or 0) + 1
                 r.msg = r.msg:upper() .. string.rep("!", #r.msg)
                 r.kubernetes.labels.app = "x"
                 return 2, ts, r
               end"#,
            // Fields handed to functions, closures that do not keep the
            // record, a new table returned, loops and a global counter.
            r#"count = 0
               function cb(t, ts, r)
                 local f = function(x) return x * 2 end
                 count = count + 1
                 for i = 1, 3 do r["k" .. i] = f(i) end
                 local out = { a = r.a, b = tostring(r.b) }
                 if r.drop then return -1, ts, out end
                 return 1, ts, out
               end"#,
            // Only two parameters: the record is not seen at all.
            "function cb(tag, ts) return 0, ts, {} end",
            // Fields by computed keys and numbers.
            "function cb(t, ts, r) local k = 'a' r[k] = r[k .. 'b'] r[1] = r[2] return 1, ts, r end",
            // A vararg function whose record is a named parameter.
            "function cb(tag, ts, r, ...) r.x = select('#', ...) return 1, ts, r end",
        ] {
            assert_eq!(verdict(code), Ok(()), "{code}");
        }
    }

    #[test]
    fn records_that_may_leave_the_call_or_be_walked_are_refused() {
        for (code, why) in [
            (
                "function cb(t, ts, r) for k, v in pairs(r) do end return 1, ts, r end",
                "passes the record to a function",
            ),
            (
                "function cb(t, ts, r) new_record = r return 1, ts, new_record end",
                "stores the record",
            ),
            (
                "local saved function cb(t, ts, r) saved = r return 1, ts, r end",
                "stores the record",
            ),
            (
                "function cb(t, ts, r) local t2 = {} t2.rec = r return 1, ts, r end",
                "stores the record",
            ),
            (
                "function cb(t, ts, r) return 1, ts, { r } end",
                "stores the record",
            ),
            (
                "function cb(t, ts, r) return 1, r, ts end",
                "returns the record other",
            ),
            (
                "function cb(t, ts, r) return r end",
                "returns the record other",
            ),
            (
                "function cb(t, ts, r) return f(1, ts, r) end",
                "passes the record to a function",
            ),
            (
                "function cb(t, ts, r) local g = function() return r.a end return 1, ts, r end",
                "keeps the record",
            ),
            (
                "function cb(t, ts, r) local t2 = {} t2[r] = 1 return 1, ts, r end",
                "stores the record",
            ),
            (
                "function cb(t, ts, r) local t2 = {} return 1, ts, t2[r] end",
                "other",
            ),
            (
                "function cb(t, ts, r) r.n = #r return 1, ts, r end",
                "other",
            ),
            (
                "function cb(t, ts, r) r:m() return 1, ts, r end",
                "passes the record to a function",
            ),
            (
                "function cb(t, ts, r) if r then return 1, ts, r end end",
                "other",
            ),
            (
                "function cb(t, ts, r) local x = r or {} return 1, ts, x end",
                "other",
            ),
            (
                "function cb(t, ts, r) if r == other then return 0, ts, r end return 1, ts, r end",
                "other",
            ),
            (
                "function cb(t, ts, r) local s = 'x' .. r return 1, ts, r end",
                "other",
            ),
            (
                "function cb(t, ts, r) setmetatable(r, {}) return 1, ts, r end",
                "passes the record to a function",
            ),
            (
                "function cb(...) local t, ts, r = ... return 1, ts, r end",
                "through `...`",
            ),
        ] {
            let got = verdict(code);
            assert!(got.is_err_and(|m| m.contains(why)), "{code}: {got:?}");
        }
    }

    #[test]
    fn bytes_that_are_not_lua_5_4_bytecode_are_refused() {
        let lua = Lua::new();
        lua.load("function cb(t, ts, r) r.a = 1 return 1, ts, r end")
            .exec()
            .unwrap();
        let f: Function = lua.globals().get("cb").unwrap();
        let dump = f.dump(true);
        assert_eq!(record_stays_in_call(&dump), Ok(()));
        for n in 0..dump.len() {
            assert!(record_stays_in_call(&dump[..n]).is_err(), "cut at {n}");
        }
        assert!(record_stays_in_call(b"function").is_err());
    }
}
