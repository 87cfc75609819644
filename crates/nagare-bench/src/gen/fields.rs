//! Field generators: each `[[field]]` of a gen config compiles once into a
//! [`FieldGen`] that appends its value to a byte buffer without allocating.

use std::fmt::Write as _;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

/// A small, fast PRNG (wyrand). Not for cryptography; plenty for test data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x2d35_8dcc_aa6c_78a5)
    }

    /// A seed from the clock and a counter, different for every call.
    pub fn from_entropy() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let mut r = Rng::new(t ^ N.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed));
        r.next_u64();
        r
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = (self.0 as u128).wrapping_mul((self.0 ^ 0xe703_7ed1_a0b4_28db) as u128);
        ((t >> 64) ^ t) as u64
    }

    /// Uniform in `0..n` (`n` > 0), by multiply-shift.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// One `[[field]]` table of the config file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// The field's name (the label in LTSV, the key in JSON, `{name}` in a template).
    pub name: String,
    /// `integer`, `float`, `string`, `datetime`, `uuid` or `ipv4`.
    #[serde(rename = "type")]
    pub kind: String,
    /// integer/float: `[min, max]` (inclusive); datetime with `random`: two RFC 3339 times.
    pub range: Option<Vec<toml::Value>>,
    /// integer: count up from `value` (or `range[0]`, or 0), one per line.
    #[serde(default)]
    pub countup: bool,
    /// A fixed value (any type), or the first value of `countup`.
    pub value: Option<toml::Value>,
    /// printf-style for numbers (`%04d`, `%x`, `%.2f`), strftime for datetime.
    pub format: Option<String>,
    /// One of these values per line (uniform, or by `weights`).
    pub any: Option<Vec<toml::Value>>,
    /// Relative weights for `any`, one per value.
    pub weights: Option<Vec<f64>>,
    /// string: random alphanumeric text of this length.
    pub length: Option<usize>,
    /// datetime: a random time (in `range`, default the last 7 days) instead of now.
    #[serde(default)]
    pub random: bool,
    /// datetime: UTC instead of local time.
    #[serde(default)]
    pub utc: bool,
}

/// printf-like number layout: literal prefix, flags, width, precision, conversion, suffix.
#[derive(Debug, Clone, PartialEq)]
pub struct NumFmt {
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    left: bool,
    zero: bool,
    plus: bool,
    width: usize,
    prec: Option<usize>,
    conv: u8,
}

impl NumFmt {
    /// Parses `text%[-0+][width][.prec]conv text` with conv one of `allowed`.
    pub fn parse(s: &str, allowed: &[u8]) -> Result<NumFmt> {
        let b = s.as_bytes();
        let mut i = 0;
        let mut prefix = Vec::new();
        while i < b.len() {
            if b[i] == b'%' {
                if b.get(i + 1) == Some(&b'%') {
                    prefix.push(b'%');
                    i += 2;
                    continue;
                }
                break;
            }
            prefix.push(b[i]);
            i += 1;
        }
        if i >= b.len() {
            bail!("format {s:?} has no % conversion");
        }
        i += 1;
        let (mut left, mut zero, mut plus) = (false, false, false);
        while i < b.len() && matches!(b[i], b'-' | b'0' | b'+') {
            match b[i] {
                b'-' => left = true,
                b'0' => zero = true,
                _ => plus = true,
            }
            i += 1;
        }
        let mut width = 0usize;
        while i < b.len() && b[i].is_ascii_digit() {
            width = width * 10 + (b[i] - b'0') as usize;
            i += 1;
        }
        let mut prec = None;
        if i < b.len() && b[i] == b'.' {
            i += 1;
            let mut p = 0usize;
            while i < b.len() && b[i].is_ascii_digit() {
                p = p * 10 + (b[i] - b'0') as usize;
                i += 1;
            }
            prec = Some(p.min(18));
        }
        if width > 64 {
            bail!("format {s:?}: width above 64");
        }
        let conv = *b.get(i).ok_or_else(|| anyhow!("format {s:?} ends early"))?;
        if !allowed.contains(&conv) {
            bail!(
                "format {s:?}: conversion %{} not allowed here (use one of {})",
                conv as char,
                allowed
                    .iter()
                    .map(|c| format!("%{}", *c as char))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        let rest = &s[i + 1..];
        if rest.replace("%%", "").contains('%') {
            bail!("format {s:?} has more than one conversion");
        }
        Ok(NumFmt {
            prefix,
            suffix: rest.replace("%%", "%").into_bytes(),
            left,
            zero,
            plus,
            width,
            prec,
            conv,
        })
    }

    /// True when the output is a plain JSON number (no text, padding or base).
    fn is_json_number(&self) -> bool {
        self.prefix.is_empty()
            && self.suffix.is_empty()
            && self.width == 0
            && !self.plus
            && matches!(self.conv, b'd' | b'i' | b'f')
    }

    fn pad(&self, neg: bool, digits: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&self.prefix);
        let sign: &[u8] = if neg {
            b"-"
        } else if self.plus {
            b"+"
        } else {
            b""
        };
        let len = sign.len() + digits.len();
        let fill = self.width.saturating_sub(len);
        if self.left {
            out.extend_from_slice(sign);
            out.extend_from_slice(digits);
            out.resize(out.len() + fill, b' ');
        } else if self.zero {
            out.extend_from_slice(sign);
            out.resize(out.len() + fill, b'0');
            out.extend_from_slice(digits);
        } else {
            out.resize(out.len() + fill, b' ');
            out.extend_from_slice(sign);
            out.extend_from_slice(digits);
        }
        out.extend_from_slice(&self.suffix);
    }

    #[inline]
    pub fn write_int(&self, v: i64, out: &mut Vec<u8>) {
        let neg = v < 0;
        let u = v.unsigned_abs();
        let mut tmp = [0u8; 66];
        let digits: &[u8] = match self.conv {
            b'x' | b'X' | b'o' | b'b' => {
                let (base, upper) = match self.conv {
                    b'x' => (16, false),
                    b'X' => (16, true),
                    b'o' => (8, false),
                    _ => (2, false),
                };
                let mut n = u;
                let mut p = tmp.len();
                loop {
                    p -= 1;
                    let d = (n % base) as u8;
                    tmp[p] = match d {
                        0..=9 => b'0' + d,
                        _ if upper => b'A' + d - 10,
                        _ => b'a' + d - 10,
                    };
                    n /= base;
                    if n == 0 {
                        break;
                    }
                }
                &tmp[p..]
            }
            _ => {
                let mut b = itoa::Buffer::new();
                let s = b.format(u).as_bytes();
                let p = tmp.len() - s.len();
                tmp[p..].copy_from_slice(s);
                return self.pad(neg, &tmp[p..], out);
            }
        };
        self.pad(neg, digits, out)
    }

    #[inline]
    pub fn write_float(&self, v: f64, out: &mut Vec<u8>) {
        let prec = self.prec.unwrap_or(3);
        let neg = v < 0.0;
        let scale = POW10[prec];
        let scaled = (v.abs() * scale as f64).round();
        if !scaled.is_finite() || scaled >= 1.8e19 {
            // Out of the fast path's range: let the standard library do it.
            let s = format!("{:.*}", prec, v.abs());
            return self.pad(neg && v != 0.0, s.as_bytes(), out);
        }
        let scaled = scaled as u64;
        let (ip, fp) = (scaled / scale, scaled % scale);
        let mut tmp = [0u8; 48];
        let mut b = itoa::Buffer::new();
        let is = b.format(ip).as_bytes();
        tmp[..is.len()].copy_from_slice(is);
        let mut n = is.len();
        if prec > 0 {
            tmp[n] = b'.';
            n += 1;
            let fs = b.format(fp).as_bytes();
            for _ in fs.len()..prec {
                tmp[n] = b'0';
                n += 1;
            }
            tmp[n..n + fs.len()].copy_from_slice(fs);
            n += fs.len();
        }
        self.pad(neg && scaled != 0, &tmp[..n], out)
    }
}

const POW10: [u64; 19] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    100_000_000_000,
    1_000_000_000_000,
    10_000_000_000_000,
    100_000_000_000_000,
    1_000_000_000_000_000,
    10_000_000_000_000_000,
    100_000_000_000_000_000,
    1_000_000_000_000_000_000,
];

/// Appends `s` with JSON string escaping (without the quotes).
pub fn json_escape(s: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &c) in s.iter().enumerate() {
        let esc: &[u8] = match c {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&s[start..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(c >> 4) as usize]);
                out.push(HEX[(c & 15) as usize]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&s[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&s[start..]);
}

/// A list of preformatted values, picked uniformly or by weight.
#[derive(Debug, Clone)]
pub struct Choice {
    items: Vec<Vec<u8>>,
    /// Cumulative weights scaled to u64; `None` for uniform.
    cum: Option<Vec<u64>>,
}

impl Choice {
    pub fn new(items: Vec<Vec<u8>>, weights: Option<&[f64]>) -> Result<Choice> {
        if items.is_empty() {
            bail!("`any` needs at least one value");
        }
        let cum = match weights {
            None => None,
            Some(w) => {
                if w.len() != items.len() {
                    bail!(
                        "`weights` has {} entries but `any` has {}",
                        w.len(),
                        items.len()
                    );
                }
                if w.iter().any(|x| !x.is_finite() || *x < 0.0) {
                    bail!("`weights` must be finite and not negative");
                }
                let total: f64 = w.iter().sum();
                if total <= 0.0 {
                    bail!("`weights` must not all be zero");
                }
                let mut acc = 0.0;
                let mut cum = Vec::with_capacity(w.len());
                for x in w {
                    acc += x;
                    cum.push(((acc / total) * u64::MAX as f64) as u64);
                }
                *cum.last_mut().unwrap() = u64::MAX;
                Some(cum)
            }
        };
        Ok(Choice { items, cum })
    }

    #[inline]
    pub fn pick(&self, rng: &mut Rng) -> usize {
        match &self.cum {
            None => rng.below(self.items.len() as u64) as usize,
            Some(cum) => {
                let r = rng.next_u64();
                cum.partition_point(|&c| c < r).min(cum.len() - 1)
            }
        }
    }

    pub fn items(&self) -> &[Vec<u8>] {
        &self.items
    }
}

const ALNUM: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// How a datetime is rendered, with a cache keyed by the shown resolution.
#[derive(Debug, Clone)]
pub struct DateFmt {
    fmt: String,
    utc: bool,
    /// Nanoseconds per distinct rendering (1e9 when the format shows seconds).
    resolution: i64,
    cache_key: i64,
    cache: Vec<u8>,
    cache_json: Vec<u8>,
}

impl DateFmt {
    pub fn new(fmt: &str, utc: bool) -> Result<DateFmt> {
        use chrono::format::{Item, StrftimeItems};
        if StrftimeItems::new(fmt).any(|i| matches!(i, Item::Error)) {
            bail!("datetime format {fmt:?} is not a valid strftime format");
        }
        // Finest sub-second specifier decides how long one rendering holds.
        let b = fmt.as_bytes();
        let mut resolution = 1_000_000_000i64;
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' {
                let mut j = i + 1;
                if b.get(j) == Some(&b'%') {
                    i += 2;
                    continue;
                }
                if b.get(j) == Some(&b'.') {
                    j += 1;
                }
                let digit = b.get(j).filter(|c| c.is_ascii_digit()).copied();
                if digit.is_some() {
                    j += 1;
                }
                if b.get(j) == Some(&b'f') {
                    let r = match digit {
                        Some(b'3') => 1_000_000,
                        Some(b'6') => 1_000,
                        _ => 1,
                    };
                    resolution = resolution.min(r);
                }
                if b.get(j) == Some(&b's') || b.get(i + 1) == Some(&b's') {
                    resolution = resolution.min(1_000_000_000);
                }
            }
            i += 1;
        }
        Ok(DateFmt {
            fmt: fmt.to_owned(),
            utc,
            resolution,
            cache_key: i64::MIN,
            cache: Vec::new(),
            cache_json: Vec::new(),
        })
    }

    fn render(&self, nanos: i64, out: &mut Vec<u8>) {
        let secs = nanos.div_euclid(1_000_000_000);
        let ns = nanos.rem_euclid(1_000_000_000) as u32;
        let dt = chrono::DateTime::from_timestamp(secs, ns).unwrap_or_default();
        let mut s = String::with_capacity(40);
        if self.utc {
            let _ = write!(s, "{}", dt.format(&self.fmt));
        } else {
            let _ = write!(s, "{}", dt.with_timezone(&chrono::Local).format(&self.fmt));
        }
        out.extend_from_slice(s.as_bytes());
    }

    /// Appends the time `nanos` (since the epoch), reusing the last rendering
    /// while the visible part of the time has not changed.
    #[inline]
    pub fn write(&mut self, nanos: i64, json: bool, out: &mut Vec<u8>) {
        let key = nanos.div_euclid(self.resolution);
        if key != self.cache_key {
            self.cache.clear();
            let mut c = std::mem::take(&mut self.cache);
            self.render(nanos, &mut c);
            self.cache = c;
            self.cache_json.clear();
            json_escape(&self.cache, &mut self.cache_json);
            self.cache_key = key;
        }
        out.extend_from_slice(if json { &self.cache_json } else { &self.cache });
    }

    /// Appends without caching (for random times).
    pub fn write_uncached(&self, nanos: i64, json: bool, out: &mut Vec<u8>) {
        if json {
            let mut tmp = Vec::with_capacity(40);
            self.render(nanos, &mut tmp);
            json_escape(&tmp, out);
        } else {
            self.render(nanos, out);
        }
    }
}

/// The default datetime layout (dummer's, with milliseconds).
pub const DEFAULT_DATETIME_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.3f";

#[derive(Debug, Clone)]
enum Kind {
    /// A fixed value: raw text and its JSON form (quoted or not).
    Fixed {
        raw: Vec<u8>,
        json: Vec<u8>,
    },
    /// Preformatted values: raw and JSON forms share the index.
    Any {
        choice: Choice,
        json: Vec<Vec<u8>>,
    },
    IntRange {
        lo: i64,
        span: u64,
        fmt: NumFmt,
    },
    IntCountup {
        start: i64,
        fmt: NumFmt,
    },
    FloatRange {
        lo: f64,
        width: f64,
        fmt: NumFmt,
    },
    RandString {
        len: usize,
    },
    DateNow(DateFmt),
    DateRandom {
        lo: i64,
        span: u64,
        fmt: DateFmt,
    },
    Uuid,
    Ipv4,
}

/// A compiled field generator.
#[derive(Debug, Clone)]
pub struct FieldGen {
    pub name: String,
    kind: Kind,
    /// Quote the value in JSON output.
    quoted: bool,
}

fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn range_i64(spec: &FieldSpec) -> Result<Option<(i64, i64)>> {
    let Some(r) = &spec.range else {
        return Ok(None);
    };
    let [a, b] = r.as_slice() else {
        bail!("`range` needs exactly two values [min, max]");
    };
    let get = |v: &toml::Value| {
        v.as_integer()
            .ok_or_else(|| anyhow!("`range` of an integer field needs integers, got {v}"))
    };
    let (lo, hi) = (get(a)?, get(b)?);
    if lo > hi {
        bail!("`range` min {lo} is above max {hi}");
    }
    Ok(Some((lo, hi)))
}

fn range_f64(spec: &FieldSpec) -> Result<Option<(f64, f64)>> {
    let Some(r) = &spec.range else {
        return Ok(None);
    };
    let [a, b] = r.as_slice() else {
        bail!("`range` needs exactly two values [min, max]");
    };
    let get = |v: &toml::Value| match v {
        toml::Value::Integer(i) => Ok(*i as f64),
        toml::Value::Float(f) => Ok(*f),
        _ => Err(anyhow!("`range` of a float field needs numbers, got {v}")),
    };
    let (lo, hi) = (get(a)?, get(b)?);
    if lo > hi || !lo.is_finite() || !hi.is_finite() {
        bail!("`range` [{lo}, {hi}] is not a finite range with min <= max");
    }
    Ok(Some((lo, hi)))
}

fn time_value(v: &toml::Value) -> Result<i64> {
    let s = match v {
        toml::Value::Datetime(d) => d.to_string(),
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(i) => return Ok(*i * 1_000_000_000),
        _ => bail!("a datetime `range` needs RFC 3339 times or epoch seconds, got {v}"),
    };
    let t = chrono::DateTime::parse_from_rfc3339(&s)
        .with_context(|| format!("{s:?} is not an RFC 3339 time"))?;
    t.timestamp_nanos_opt()
        .ok_or_else(|| anyhow!("{s:?} is out of range"))
}

impl FieldGen {
    pub fn compile(spec: &FieldSpec) -> Result<FieldGen> {
        Self::compile_inner(spec).with_context(|| format!("field {:?}", spec.name))
    }

    fn compile_inner(spec: &FieldSpec) -> Result<FieldGen> {
        if spec.name.is_empty() {
            bail!("every field needs a `name`");
        }
        let kind_name = spec.kind.as_str();
        let numeric = matches!(kind_name, "integer" | "float");
        let num_fmt = |allowed: &[u8], default: &str| -> Result<NumFmt> {
            NumFmt::parse(spec.format.as_deref().unwrap_or(default), allowed)
        };
        let quoted_num = |f: &NumFmt| !f.is_json_number();
        let any_of =
            |fmt_one: &dyn Fn(&toml::Value) -> Result<Vec<u8>>, quoted: bool| -> Result<Kind> {
                let vals = spec.any.as_ref().unwrap();
                let mut raw = Vec::new();
                let mut json = Vec::new();
                for v in vals {
                    let r = fmt_one(v)?;
                    json.push(json_form(&r, quoted));
                    raw.push(r);
                }
                Ok(Kind::Any {
                    choice: Choice::new(raw, spec.weights.as_deref())?,
                    json,
                })
            };
        if spec.weights.is_some() && spec.any.is_none() {
            bail!("`weights` needs `any`");
        }
        let (kind, quoted) = match kind_name {
            "integer" => {
                let fmt = num_fmt(b"diuxXob", "%d")?;
                let q = quoted_num(&fmt);
                let kind = if spec.any.is_some() {
                    any_of(
                        &|v| {
                            let i = v.as_integer().ok_or_else(|| {
                                anyhow!("`any` of an integer field needs integers, got {v}")
                            })?;
                            let mut o = Vec::new();
                            fmt.write_int(i, &mut o);
                            Ok(o)
                        },
                        q,
                    )?
                } else if spec.countup {
                    let start = match &spec.value {
                        Some(v) => v
                            .as_integer()
                            .ok_or_else(|| anyhow!("`value` must be an integer, got {v}"))?,
                        None => range_i64(spec)?.map(|r| r.0).unwrap_or(0),
                    };
                    Kind::IntCountup { start, fmt }
                } else if let Some(v) = &spec.value {
                    let i = v
                        .as_integer()
                        .ok_or_else(|| anyhow!("`value` must be an integer, got {v}"))?;
                    let mut raw = Vec::new();
                    fmt.write_int(i, &mut raw);
                    Kind::Fixed {
                        json: json_form(&raw, q),
                        raw,
                    }
                } else {
                    let (lo, hi) = range_i64(spec)?.unwrap_or((0, i32::MAX as i64));
                    Kind::IntRange {
                        lo,
                        span: (hi as i128 - lo as i128 + 1).min(u64::MAX as i128) as u64,
                        fmt,
                    }
                };
                (kind, q)
            }
            "float" => {
                let fmt = num_fmt(b"f", "%.3f")?;
                let q = quoted_num(&fmt);
                let as_f = |v: &toml::Value| match v {
                    toml::Value::Integer(i) => Ok(*i as f64),
                    toml::Value::Float(f) => Ok(*f),
                    _ => Err(anyhow!("a float field needs numbers, got {v}")),
                };
                let kind = if spec.any.is_some() {
                    any_of(
                        &|v| {
                            let mut o = Vec::new();
                            fmt.write_float(as_f(v)?, &mut o);
                            Ok(o)
                        },
                        q,
                    )?
                } else if let Some(v) = &spec.value {
                    let mut raw = Vec::new();
                    fmt.write_float(as_f(v)?, &mut raw);
                    Kind::Fixed {
                        json: json_form(&raw, q),
                        raw,
                    }
                } else {
                    let (lo, hi) = range_f64(spec)?.unwrap_or((0.0, 1.0));
                    Kind::FloatRange {
                        lo,
                        width: hi - lo,
                        fmt,
                    }
                };
                (kind, q)
            }
            "string" => {
                let kind = if spec.any.is_some() {
                    any_of(&|v| Ok(value_text(v).into_bytes()), true)?
                } else if let Some(len) = spec.length {
                    Kind::RandString { len }
                } else if let Some(v) = &spec.value {
                    let raw = value_text(v).into_bytes();
                    Kind::Fixed {
                        json: json_form(&raw, true),
                        raw,
                    }
                } else {
                    bail!("a string field needs `any`, `length` or `value`");
                };
                (kind, true)
            }
            "datetime" => {
                let fmt = DateFmt::new(
                    spec.format.as_deref().unwrap_or(DEFAULT_DATETIME_FORMAT),
                    spec.utc,
                )?;
                let kind = if let Some(v) = &spec.value {
                    let mut raw = Vec::new();
                    fmt.write_uncached(time_value(v)?, false, &mut raw);
                    Kind::Fixed {
                        json: json_form(&raw, true),
                        raw,
                    }
                } else if spec.random {
                    let (lo, hi) = match &spec.range {
                        Some(r) => {
                            let [a, b] = r.as_slice() else {
                                bail!("`range` needs exactly two times [from, to]");
                            };
                            (time_value(a)?, time_value(b)?)
                        }
                        None => {
                            let now = now_nanos();
                            (now - 7 * 86_400 * 1_000_000_000, now)
                        }
                    };
                    if lo > hi {
                        bail!("datetime `range` starts after it ends");
                    }
                    Kind::DateRandom {
                        lo,
                        span: (hi - lo) as u64 + 1,
                        fmt,
                    }
                } else {
                    Kind::DateNow(fmt)
                };
                (kind, true)
            }
            "uuid" => (Kind::Uuid, true),
            "ipv4" => {
                let kind = if spec.any.is_some() {
                    any_of(&|v| Ok(value_text(v).into_bytes()), true)?
                } else {
                    Kind::Ipv4
                };
                (kind, true)
            }
            other => bail!(
                "unknown field type {other:?} (expected integer, float, string, datetime, uuid or ipv4)"
            ),
        };
        let _ = numeric;
        Ok(FieldGen {
            name: spec.name.clone(),
            kind,
            quoted,
        })
    }

    /// Whether the JSON form carries its own quotes (strings) or not (numbers).
    pub fn json_quoted(&self) -> bool {
        self.quoted
    }

    /// Appends this field's value for line `idx` at time `now` (ns since the epoch).
    /// With `json`, string values come out escaped and quoted.
    #[inline]
    pub fn write(&mut self, idx: u64, now: i64, rng: &mut Rng, json: bool, out: &mut Vec<u8>) {
        let q = json && self.quoted;
        match &mut self.kind {
            Kind::Fixed { raw, json: j } => out.extend_from_slice(if json { j } else { raw }),
            Kind::Any { choice, json: j } => {
                let i = choice.pick(rng);
                out.extend_from_slice(if json { &j[i] } else { &choice.items()[i] });
            }
            Kind::IntRange { lo, span, fmt } => {
                if q {
                    out.push(b'"');
                }
                let v = (*lo as i128 + rng.below(*span) as i128) as i64;
                fmt.write_int(v, out);
                if q {
                    out.push(b'"');
                }
            }
            Kind::IntCountup { start, fmt } => {
                if q {
                    out.push(b'"');
                }
                fmt.write_int(start.wrapping_add(idx as i64), out);
                if q {
                    out.push(b'"');
                }
            }
            Kind::FloatRange { lo, width, fmt } => {
                if q {
                    out.push(b'"');
                }
                fmt.write_float(*lo + rng.unit_f64() * *width, out);
                if q {
                    out.push(b'"');
                }
            }
            Kind::RandString { len } => {
                if q {
                    out.push(b'"');
                }
                let mut left = *len;
                while left > 0 {
                    // Ten 6-bit draws per random word.
                    let mut r = rng.next_u64();
                    for _ in 0..left.min(10) {
                        out.push(ALNUM[((r & 63) % 62) as usize]);
                        r >>= 6;
                    }
                    left -= left.min(10);
                }
                if q {
                    out.push(b'"');
                }
            }
            Kind::DateNow(f) => {
                if q {
                    out.push(b'"');
                }
                f.write(now, json, out);
                if q {
                    out.push(b'"');
                }
            }
            Kind::DateRandom { lo, span, fmt } => {
                if q {
                    out.push(b'"');
                }
                fmt.write_uncached(*lo + rng.below(*span) as i64, json, out);
                if q {
                    out.push(b'"');
                }
            }
            Kind::Uuid => {
                if q {
                    out.push(b'"');
                }
                write_uuid(rng, out);
                if q {
                    out.push(b'"');
                }
            }
            Kind::Ipv4 => {
                if q {
                    out.push(b'"');
                }
                let r = rng.next_u64();
                let mut b = itoa::Buffer::new();
                for k in 0..4 {
                    if k > 0 {
                        out.push(b'.');
                    }
                    out.extend_from_slice(b.format((r >> (k * 8)) as u8).as_bytes());
                }
                if q {
                    out.push(b'"');
                }
            }
        }
    }
}

fn json_form(raw: &[u8], quoted: bool) -> Vec<u8> {
    if !quoted {
        return raw.to_vec();
    }
    let mut o = vec![b'"'];
    json_escape(raw, &mut o);
    o.push(b'"');
    o
}

/// A random version-4 UUID in its 36-character text form.
pub fn write_uuid(rng: &mut Rng, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let a = rng.next_u64();
    let b = rng.next_u64();
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&a.to_le_bytes());
    bytes[8..].copy_from_slice(&b.to_le_bytes());
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    for (i, x) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out.push(b'-');
        }
        out.push(HEX[(x >> 4) as usize]);
        out.push(HEX[(x & 15) as usize]);
    }
}

/// Nanoseconds since the Unix epoch now.
pub fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
