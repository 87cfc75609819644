//! `tracing` integration: a `tracing_subscriber::Layer` that emits every event
//! as a record `{"level", "target", "message", <fields>…}`.

use std::cell::RefCell;

use nagare_forward::encode::write_event_time;
use nagare_forward::msgpack::{write_map_len, write_str, write_str_header, write_uint};
use nagare_forward::EventTime;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use crate::Logger;

/// Emits tracing events through a [`Logger`].
///
/// The tag is fixed (`NagareLayer::new(logger, "app")`) or, with
/// [`NagareLayer::tag_from_target`], `<tag>.<target>` with `::` turned into
/// `.` (e.g. `app.my_crate.db`).
pub struct NagareLayer {
    logger: Logger,
    tag: String,
    from_target: bool,
    with_location: bool,
}

impl NagareLayer {
    pub fn new(logger: Logger, tag: impl Into<String>) -> Self {
        NagareLayer {
            logger,
            tag: tag.into(),
            from_target: false,
            with_location: false,
        }
    }

    /// Appends the event's target to the tag.
    pub fn tag_from_target(mut self, on: bool) -> Self {
        self.from_target = on;
        self
    }

    /// Adds `file` and `line` fields when the event has them.
    pub fn with_location(mut self, on: bool) -> Self {
        self.with_location = on;
        self
    }
}

/// Where the record's map header is in an entry: after the array header
/// (0x92) and the 10-byte EventTime.
const MAP_AT: usize = 11;

struct Scratch {
    /// The whole `[EventTime, record]` entry, built outside the logger's lock
    /// (a field's `Debug` may log, or take long) and copied into its buffer in
    /// one piece.
    entry: Vec<u8>,
    /// How many key/value pairs the record holds.
    count: usize,
    tag: String,
}

impl Scratch {
    const fn new() -> Scratch {
        Scratch {
            entry: Vec::new(),
            count: 0,
            tag: String::new(),
        }
    }
}

thread_local! {
    // const-initialised: no lazy-init check on each event
    static SCRATCH: RefCell<Scratch> = const { RefCell::new(Scratch::new()) };
}

/// `fmt::Write` into a byte buffer.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

struct Visitor<'a>(&'a mut Scratch);

impl Visitor<'_> {
    #[inline]
    fn key(&mut self, f: &Field) -> &mut Vec<u8> {
        self.0.count += 1;
        let name = f.name().as_bytes();
        let b = &mut self.0.entry;
        // field names are short: a fixstr header without write_str's size cases
        if name.len() < 32 {
            b.push(0xa0 | name.len() as u8);
            b.extend_from_slice(name);
        } else {
            write_str(b, name);
        }
        b
    }

    /// A formatted value as a msgpack str, formatted in place: its length is
    /// known only afterwards, so room for a str8 header is kept and the text
    /// moved when the smallest form (fixstr, str16, str32) needs another size.
    fn formatted(&mut self, f: &Field, args: std::fmt::Arguments<'_>) {
        let b = self.key(f);
        let start = b.len();
        b.extend_from_slice(&[0xd9, 0]);
        let _ = std::fmt::Write::write_fmt(&mut Bytes(b), args);
        let n = b.len() - start - 2;
        if n < 32 {
            b[start] = 0xa0 | n as u8;
            b.copy_within(start + 2.., start + 1);
            b.pop();
        } else if n < 256 {
            b[start + 1] = n as u8;
        } else {
            let end = b.len();
            let mut head = Vec::with_capacity(5);
            write_str_header(&mut head, n);
            b.resize(end + head.len() - 2, 0);
            b.copy_within(start + 2..end, start + head.len());
            b[start..start + head.len()].copy_from_slice(&head);
        }
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, f: &Field, v: &str) {
        write_str(self.key(f), v.as_bytes());
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        let out = self.key(f);
        if v >= 0 {
            write_uint(out, v as u64);
        } else {
            let _ = rmp::encode::write_sint(out, v);
        }
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        write_uint(self.key(f), v);
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        let _ = rmp::encode::write_f64(self.key(f), v);
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.key(f).push(if v { 0xc3 } else { 0xc2 });
    }
    fn record_error(&mut self, f: &Field, v: &(dyn std::error::Error + 'static)) {
        self.formatted(f, format_args!("{v}"));
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.formatted(f, format_args!("{v:?}"));
    }
}

/// `"level": <level>` as msgpack, one constant per level (no header to size).
fn level_pair(l: &Level) -> &'static [u8] {
    if *l == Level::INFO {
        b"\xa5level\xa4INFO"
    } else if *l == Level::DEBUG {
        b"\xa5level\xa5DEBUG"
    } else if *l == Level::WARN {
        b"\xa5level\xa4WARN"
    } else if *l == Level::ERROR {
        b"\xa5level\xa5ERROR"
    } else {
        b"\xa5level\xa5TRACE"
    }
}

/// Builds the event's whole entry `[time, {"level", "target", <fields>…,
/// "file"?, "line"?}]` in `s.entry`.
fn encode(s: &mut Scratch, event: &Event<'_>, time: EventTime, loc: bool) {
    let meta = event.metadata();
    let e = &mut s.entry;
    e.clear();
    e.push(0x92);
    write_event_time(e, time);
    debug_assert_eq!(e.len(), MAP_AT);
    e.push(0x80); // the map header, set below once the fields are counted
    e.extend_from_slice(level_pair(meta.level()));
    e.extend_from_slice(b"\xa6target");
    write_str(e, meta.target().as_bytes());
    s.count = 2;
    event.record(&mut Visitor(s));
    let e = &mut s.entry;
    if loc {
        e.extend_from_slice(b"\xa4file");
        write_str(e, meta.file().unwrap_or_default().as_bytes());
        e.extend_from_slice(b"\xa4line");
        write_uint(e, meta.line().unwrap_or(0) as u64);
        s.count += 2;
    }
    if s.count < 16 {
        e[MAP_AT] = 0x80 | s.count as u8;
    } else {
        // more than 15 pairs: a map16 header, 2 bytes longer than the fixmap's
        let mut head = Vec::with_capacity(5);
        write_map_len(&mut head, s.count);
        e.splice(MAP_AT..MAP_AT + 1, head);
    }
}

impl<S: Subscriber> Layer<S> for NagareLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let time = crate::now();
        let _ = SCRATCH.try_with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return; // an event emitted from inside this layer
            };
            let s = &mut *s;
            let meta = event.metadata();
            encode(s, event, time, self.with_location && meta.file().is_some());
            if self.from_target {
                s.tag.clear();
                s.tag.push_str(&self.tag);
                s.tag.push('.');
                s.tag.push_str(&meta.target().replace("::", "."));
            }
            let s = &*s;
            let tag: &str = if self.from_target { &s.tag } else { &self.tag };
            // The entry is copied into the logger's buffer in one piece (no
            // check that it is one msgpack map: it is built here). emit never
            // blocks by default; a full buffer is counted and reported
            // through the error callback.
            let _ = self.logger.emit_with(tag, |out| {
                out.extend_from_slice(&s.entry);
                Ok(())
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value formatted in place gets the same smallest str header as
    /// `write_str`, at every header-size boundary.
    #[test]
    fn formatted_values_have_the_smallest_str_header() {
        let f =
            tracing::field::FieldSet::new(&["message"], tracing::callsite::Identifier(&CALLSITE));
        let field = f.field("message").unwrap();
        for n in [0, 1, 31, 32, 255, 256, 65_535, 65_536] {
            let text = "é".repeat(n / 2) + &"x".repeat(n % 2);
            let mut s = Scratch::new();
            Visitor(&mut s).formatted(&field, format_args!("{text}"));
            let mut want = Vec::new();
            write_str(&mut want, b"message");
            write_str(&mut want, text.as_bytes());
            assert_eq!(s.entry, want, "{n} bytes");
            assert_eq!(s.count, 1);
        }
    }

    /// What `encode` builds for one event, and the event's location.
    type Captured = Vec<(Vec<u8>, &'static str, u32)>;

    /// Runs `encode` on every event, as `NagareLayer::on_event` does.
    struct Capture {
        loc: bool,
        out: std::sync::Arc<std::sync::Mutex<Captured>>,
    }

    impl<S: Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
            let meta = event.metadata();
            let mut s = Scratch::new();
            encode(&mut s, event, EventTime::new(1_700_000_000, 123), self.loc);
            self.out.lock().unwrap().push((
                s.entry,
                meta.file().unwrap_or_default(),
                meta.line().unwrap_or(0),
            ));
        }
    }

    fn capture(loc: bool, f: impl FnOnce()) -> Captured {
        use tracing_subscriber::layer::SubscriberExt;
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sub = tracing_subscriber::registry().with(Capture {
            loc,
            out: out.clone(),
        });
        tracing::subscriber::with_default(sub, f);
        let v = out.lock().unwrap().clone();
        v
    }

    /// The canonical msgpack of `[time, {pairs…}]` (smallest headers, rmpv's
    /// encoder): what the layer's hand-written writer must produce byte for
    /// byte.
    fn want(pairs: Vec<(&str, rmpv::Value)>) -> Vec<u8> {
        use rmpv::Value;
        let time = EventTime::new(1_700_000_000, 123).to_bytes();
        let map = pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect();
        let v = Value::Array(vec![Value::Ext(0, time[2..].to_vec()), Value::Map(map)]);
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &v).unwrap();
        out
    }

    fn head(level: &str) -> Vec<(&'static str, rmpv::Value)> {
        vec![
            ("level", level.into()),
            ("target", "nagare_logger::layer::tests".into()),
        ]
    }

    /// Every level, typed values written without `fmt`, a message with and
    /// without format arguments, strings at each header size, a record of
    /// more than 15 pairs (map16 header) and the location fields: byte for
    /// byte the canonical encoding.
    #[test]
    fn encode_writes_canonical_msgpack() {
        let long = "x".repeat(300);
        let huge = "y".repeat(70_000);
        let got = capture(false, || {
            tracing::info!(
                seq = 1u64,
                user = "ann",
                ok = true,
                no = false,
                ratio = 0.5,
                delta = -3i64,
                small = 7i64,
                big = u64::MAX,
                min = i64::MIN,
                "hello {}",
                "world"
            );
            tracing::trace!("plain");
            tracing::debug!(shown = %long, dbg = ?[1, 2], "{}", huge);
            tracing::warn!(target: "db::pool", s32 = "0123456789012345678901234567890123456789");
            tracing::error!(
                a = 1,
                b = 2,
                c = 3,
                d = 4,
                e = 5,
                f = 6,
                g = 7,
                h = 8,
                i = 9,
                j = 10,
                k = 11,
                l = 12,
                m = 13,
                n = 14
            );
        });
        let mut w = head("INFO");
        w.extend([
            ("message", "hello world".into()),
            ("seq", 1u64.into()),
            ("user", "ann".into()),
            ("ok", true.into()),
            ("no", false.into()),
            ("ratio", 0.5f64.into()),
            ("delta", (-3i64).into()),
            ("small", 7u64.into()),
            ("big", u64::MAX.into()),
            ("min", i64::MIN.into()),
        ]);
        assert_eq!(got[0].0, want(w));
        let mut w = head("TRACE");
        w.push(("message", "plain".into()));
        assert_eq!(got[1].0, want(w));
        let mut w = head("DEBUG");
        w.extend([
            ("message", huge.as_str().into()),
            ("shown", long.as_str().into()),
            ("dbg", "[1, 2]".into()),
        ]);
        assert_eq!(got[2].0, want(w));
        let w = vec![
            ("level", "WARN".into()),
            ("target", "db::pool".into()),
            ("s32", "0123456789012345678901234567890123456789".into()),
        ];
        assert_eq!(got[3].0, want(w));
        let mut w = head("ERROR");
        for (i, k) in [
            "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n",
        ]
        .into_iter()
        .enumerate()
        {
            w.push((k, (i as u64 + 1).into()));
        }
        assert_eq!(w.len(), 16);
        assert_eq!(got[4].0, want(w));
    }

    #[test]
    fn encode_adds_file_and_line() {
        let got = capture(true, || tracing::info!(n = 1u64));
        let (entry, file, line) = &got[0];
        assert_eq!(*file, file!());
        let mut w = head("INFO");
        w.extend([
            ("n", 1u64.into()),
            ("file", (*file).into()),
            ("line", (*line as u64).into()),
        ]);
        assert_eq!(*entry, want(w));
    }

    struct Cs;
    impl tracing::Callsite for Cs {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &tracing::Metadata<'_> {
            unimplemented!()
        }
    }
    static CALLSITE: Cs = Cs;
}
