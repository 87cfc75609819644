//! `tracing` integration: a `tracing_subscriber::Layer` that emits every event
//! as a record `{"level", "target", "message", <fields>…}`.

use std::cell::RefCell;
use std::fmt::Write as _;

use nagare_forward::encode::write_event_time;
use nagare_forward::msgpack::{write_map_len, write_str, write_uint};
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

enum Val {
    Str(usize, usize),
    I(i64),
    U(u64),
    F(f64),
    B(bool),
}

#[derive(Default)]
struct Scratch {
    fields: Vec<(&'static str, Val)>,
    text: String,
    tag: String,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

struct Visitor<'a>(&'a mut Scratch);

impl Visitor<'_> {
    fn text(&mut self, f: &Field, s: impl std::fmt::Display) {
        let a = self.0.text.len();
        let _ = write!(self.0.text, "{s}");
        let b = self.0.text.len();
        self.0.fields.push((f.name(), Val::Str(a, b)));
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, f: &Field, v: &str) {
        self.text(f, v);
    }
    fn record_i64(&mut self, f: &Field, v: i64) {
        self.0.fields.push((f.name(), Val::I(v)));
    }
    fn record_u64(&mut self, f: &Field, v: u64) {
        self.0.fields.push((f.name(), Val::U(v)));
    }
    fn record_f64(&mut self, f: &Field, v: f64) {
        self.0.fields.push((f.name(), Val::F(v)));
    }
    fn record_bool(&mut self, f: &Field, v: bool) {
        self.0.fields.push((f.name(), Val::B(v)));
    }
    fn record_error(&mut self, f: &Field, v: &(dyn std::error::Error + 'static)) {
        self.text(f, v);
    }
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        let a = self.0.text.len();
        let _ = write!(self.0.text, "{v:?}");
        let b = self.0.text.len();
        self.0.fields.push((f.name(), Val::Str(a, b)));
    }
}

/// Appends the event's record (a msgpack map) to `out`.
fn write_record(out: &mut Vec<u8>, s: &Scratch, meta: &tracing::Metadata<'_>, loc: bool) {
    let n = 2 + s.fields.len() + if loc { 2 } else { 0 };
    // one reservation for the whole record instead of one check per piece
    out.reserve(64 + s.text.len() + s.fields.len() * 24 + meta.target().len());
    write_map_len(out, n);
    // the fixed keys with their str headers, as constants (no length to compute)
    out.extend_from_slice(b"\xa5level");
    write_str(out, meta.level().as_str().as_bytes());
    out.extend_from_slice(b"\xa6target");
    write_str(out, meta.target().as_bytes());
    for (k, v) in &s.fields {
        write_str(out, k.as_bytes());
        match *v {
            Val::Str(a, b) => write_str(out, &s.text.as_bytes()[a..b]),
            Val::I(i) if i >= 0 => write_uint(out, i as u64),
            Val::I(i) => {
                let _ = rmp::encode::write_sint(out, i);
            }
            Val::U(u) => write_uint(out, u),
            Val::F(f) => {
                let _ = rmp::encode::write_f64(out, f);
            }
            Val::B(b) => out.push(if b { 0xc3 } else { 0xc2 }),
        }
    }
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
            s.fields.clear();
            s.text.clear();
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
