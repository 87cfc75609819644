//! `tracing` integration: a `tracing_subscriber::Layer` that emits every event
//! as a record `{"level", "target", "message", <fields>…}`.

use std::cell::RefCell;

use nagare_forward::encode::write_event_time;
use nagare_forward::msgpack::{write_map_len, write_str, write_str_header, write_uint};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
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

#[derive(Default)]
struct Scratch {
    /// The event's fields, already msgpack key/value pairs: the record map's
    /// body, copied into the logger's buffer in one piece.
    body: Vec<u8>,
    /// How many pairs `body` holds.
    count: usize,
    tag: String,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
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
    fn key(&mut self, f: &Field) -> &mut Vec<u8> {
        self.0.count += 1;
        write_str(&mut self.0.body, f.name().as_bytes());
        &mut self.0.body
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

/// Appends the event's record (a msgpack map) to `out`.
fn write_record(out: &mut Vec<u8>, s: &Scratch, meta: &tracing::Metadata<'_>, loc: bool) {
    let n = 2 + s.count + if loc { 2 } else { 0 };
    // one reservation for the whole record instead of one check per piece
    out.reserve(48 + s.body.len() + meta.target().len());
    write_map_len(out, n);
    // the fixed keys with their str headers, as constants (no length to compute)
    out.extend_from_slice(b"\xa5level");
    write_str(out, meta.level().as_str().as_bytes());
    out.extend_from_slice(b"\xa6target");
    write_str(out, meta.target().as_bytes());
    out.extend_from_slice(&s.body);
    if loc {
        write_str(out, b"file");
        write_str(out, meta.file().unwrap_or_default().as_bytes());
        write_str(out, b"line");
        write_uint(out, meta.line().unwrap_or(0) as u64);
    }
}

impl<S: Subscriber> Layer<S> for NagareLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let time = crate::now();
        SCRATCH.with(|s| {
            let Ok(mut s) = s.try_borrow_mut() else {
                return; // an event emitted from inside this layer
            };
            let s = &mut *s;
            s.body.clear();
            s.count = 0;
            event.record(&mut Visitor(s));
            let meta = event.metadata();
            let loc = self.with_location && meta.file().is_some();
            if self.from_target {
                s.tag.clear();
                s.tag.push_str(&self.tag);
                s.tag.push('.');
                s.tag.push_str(&meta.target().replace("::", "."));
            }
            let s = &*s;
            let tag: &str = if self.from_target { &s.tag } else { &self.tag };
            // The record is written straight into the logger's buffer (no
            // copy, and no check that it is one msgpack map: it is built
            // here). emit never blocks by default; a full buffer is counted
            // and reported through the error callback.
            let _ = self.logger.emit_with(tag, |out| {
                out.push(0x92);
                write_event_time(out, time);
                write_record(out, s, meta, loc);
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
            let mut s = Scratch::default();
            Visitor(&mut s).formatted(&field, format_args!("{text}"));
            let mut want = Vec::new();
            write_str(&mut want, b"message");
            write_str(&mut want, text.as_bytes());
            assert_eq!(s.body, want, "{n} bytes");
            assert_eq!(s.count, 1);
        }
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
