//! The line task: the bytes written to the files → lines → PackedForward
//! batches, one per tag → the outputs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_forward::EventTime;
use tokio::sync::{mpsc, oneshot};

use super::{FuseConfig, Msg};
use crate::inputs::common::append::append_batch;
use crate::inputs::common::follow::LongLines;
use crate::inputs::common::lines::encode_line;
use crate::parsers::Parser;
use crate::router::LiveRouter;

/// A tag's batch is appended at once when it holds this many bytes or lines.
const BATCH_BYTES: usize = 1 << 20;
const BATCH_LINES: u32 = 10_000;

/// The unterminated line of one writer in one file.
struct Partial {
    buf: Vec<u8>,
    /// Inside a line longer than max_line_size that is being skipped.
    skipping: bool,
    /// The current line was already counted as too long.
    long: bool,
    /// The writer's last data: partial_line_timeout counts from here.
    at: Instant,
    tag: Arc<str>,
    path: Arc<str>,
}

/// Entries waiting to be appended, for one tag.
struct Batch {
    out: Vec<u8>,
    count: u32,
    since: Instant,
}

/// The line task's state: partial lines per (file, writer), batches per tag.
pub(super) struct Lines {
    name: String,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    parser: Parser,
    max_line: usize,
    long_lines: LongLines,
    path_key: Option<String>,
    flush_interval: Duration,
    /// A partial line quiet this long is an event on its own.
    partial_timeout: Duration,
    partials: HashMap<(u64, u32), Partial>,
    batches: HashMap<Arc<str>, Batch>,
}

impl Lines {
    pub(super) fn new(
        name: &str,
        cfg: &FuseConfig,
        parser: Parser,
        router: LiveRouter,
        stats: Arc<PluginStats>,
    ) -> Lines {
        Lines {
            name: name.to_string(),
            router,
            stats,
            parser,
            max_line: (cfg.max_line_size.0 as usize).max(1),
            long_lines: cfg.long_lines,
            path_key: cfg.path_key.clone(),
            flush_interval: cfg.flush_interval.0.max(Duration::from_millis(1)),
            partial_timeout: cfg.partial_line_timeout.0.max(Duration::from_millis(1)),
            partials: HashMap::new(),
            batches: HashMap::new(),
        }
    }

    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<Msg>, finish: oneshot::Receiver<()>) {
        // Often enough for both deadlines to be met within half their length.
        let period = self.flush_interval.min(self.partial_timeout) / 2;
        let mut tick = tokio::time::interval(period.max(Duration::from_millis(1)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut finish = finish;
        let mut finishing = false;
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(m) => self.handle(m).await,
                    // The filesystem is gone (unmounted): everything it sent is here.
                    None => break,
                },
                _ = tick.tick() => self.flush_due(false).await,
                r = &mut finish, if !finishing => {
                    finishing = true;
                    if r.is_ok() {
                        // Files stay open on a detached mount: take what was
                        // written, and make later writes fail.
                        rx.close();
                    }
                }
            }
        }
        self.flush_due(true).await;
    }

    async fn handle(&mut self, m: Msg) {
        match m {
            Msg::Data {
                ino,
                pid,
                tag,
                path,
                data,
            } => {
                self.data(ino, pid, tag.clone(), path, &data);
                let full = self
                    .batches
                    .get(&tag)
                    .is_some_and(|b| b.out.len() >= BATCH_BYTES || b.count >= BATCH_LINES);
                if full {
                    if let Some(b) = self.batches.remove(&tag) {
                        self.append(&tag, b).await;
                    }
                }
            }
            Msg::Close { ino, pid } => {
                if let Some(p) = self.partials.remove(&(ino, pid)) {
                    self.finish_partial(p);
                }
            }
        }
    }

    /// Turns the complete lines of `data` into entries of the tag's batch;
    /// keeps the unterminated rest in the writer's partial line.
    fn data(&mut self, ino: u64, pid: u32, tag: Arc<str>, path: Arc<str>, data: &[u8]) {
        let now = EventTime::now();
        let mut p = self
            .partials
            .remove(&(ino, pid))
            .unwrap_or_else(|| Partial {
                buf: Vec::new(),
                skipping: false,
                long: false,
                at: Instant::now(),
                tag: tag.clone(),
                path: path.clone(),
            });
        p.at = Instant::now();
        p.tag = tag;
        p.path = path;
        let mut batch = self.take_batch(&p.tag, data.len() + data.len() / 4 + 64);
        let mut rest = data;
        // The writer's pending line first.
        if !p.buf.is_empty() || p.skipping {
            match memchr::memchr(b'\n', rest) {
                Some(nl) => {
                    if !p.skipping {
                        p.buf.extend_from_slice(&rest[..nl]);
                        let line = std::mem::take(&mut p.buf);
                        self.line(&mut batch, now, &line, &mut p);
                        p.buf = line;
                        p.buf.clear();
                    }
                    p.skipping = false;
                    p.long = false;
                    rest = &rest[nl + 1..];
                }
                None => {
                    if !p.skipping {
                        p.buf.extend_from_slice(rest);
                    }
                    rest = &[];
                }
            }
        }
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', rest) {
            self.line(&mut batch, now, &rest[start..nl], &mut p);
            p.long = false;
            start = nl + 1;
        }
        p.buf.extend_from_slice(&rest[start..]);
        self.bound_partial(&mut batch, now, &mut p);
        if batch.count > 0 {
            self.batches.insert(p.tag.clone(), batch);
        }
        if !p.buf.is_empty() || p.skipping {
            self.partials.insert((ino, pid), p);
        }
    }

    /// The tag's batch, or a new one with room for `capacity` bytes.
    fn take_batch(&mut self, tag: &Arc<str>, capacity: usize) -> Batch {
        self.batches.remove(tag).unwrap_or_else(|| Batch {
            out: Vec::with_capacity(capacity),
            count: 0,
            since: Instant::now(),
        })
    }

    /// A partial line longer than max_line_size is split (or dropped) now,
    /// so memory stays bounded by writers × max_line_size.
    fn bound_partial(&self, batch: &mut Batch, now: EventTime, p: &mut Partial) {
        if p.buf.len() <= self.max_line {
            return;
        }
        self.count_long(p);
        match self.long_lines {
            LongLines::Split => {
                // Whole pieces go; the rest (1..=max_line bytes) waits for
                // the line's end, so no empty piece is made.
                let cut = (p.buf.len() - 1) / self.max_line * self.max_line;
                for piece in p.buf[..cut].chunks(self.max_line) {
                    self.entry(batch, now, piece, p);
                }
                p.buf.drain(..cut);
            }
            LongLines::Skip => {
                p.buf.clear();
                p.skipping = true;
            }
        }
    }

    fn count_long(&self, p: &mut Partial) {
        if p.long {
            return;
        }
        p.long = true;
        PluginStats::add(&self.stats.errors, 1);
        let what = match self.long_lines {
            LongLines::Split => "split into pieces",
            LongLines::Skip => "skipped",
        };
        tracing::warn!(input = %self.name, path = %p.path, limit = self.max_line,
            "line longer than max_line_size: {what}");
    }

    /// One complete line (without its newline).
    fn line(&self, batch: &mut Batch, now: EventTime, line: &[u8], p: &mut Partial) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() <= self.max_line {
            return self.entry(batch, now, line, p);
        }
        self.count_long(p);
        if self.long_lines == LongLines::Split {
            for piece in line.chunks(self.max_line) {
                self.entry(batch, now, piece, p);
            }
        }
    }

    fn entry(&self, batch: &mut Batch, now: EventTime, line: &[u8], p: &Partial) {
        let path_key = self.path_key.as_deref().map(|k| (k, p.path.as_ref()));
        if !encode_line(&mut batch.out, now, line, &self.parser, path_key) {
            PluginStats::add(&self.stats.errors, 1);
        }
        batch.count += 1;
    }

    /// The writer is done with its line (closed the file, or went quiet).
    fn finish_partial(&mut self, mut p: Partial) {
        if p.skipping || p.buf.is_empty() {
            return;
        }
        let mut batch = self.take_batch(&p.tag, 0);
        let line = std::mem::take(&mut p.buf);
        self.line(&mut batch, EventTime::now(), &line, &mut p);
        if batch.count > 0 {
            self.batches.insert(p.tag.clone(), batch);
        }
    }

    /// Emits partial lines quiet for partial_line_timeout and appends batches
    /// that waited flush_interval (everything when `all`).
    async fn flush_due(&mut self, all: bool) {
        let quiet_for = self.partial_timeout;
        let quiet: Vec<(u64, u32)> = self
            .partials
            .iter()
            .filter(|(_, p)| all || p.at.elapsed() >= quiet_for)
            .map(|(k, _)| *k)
            .collect();
        for k in quiet {
            if let Some(p) = self.partials.remove(&k) {
                self.finish_partial(p);
            }
        }
        let wait = self.flush_interval;
        let due: Vec<Arc<str>> = self
            .batches
            .iter()
            .filter(|(_, b)| all || b.since.elapsed() >= wait)
            .map(|(t, _)| t.clone())
            .collect();
        for tag in due {
            if let Some(b) = self.batches.remove(&tag) {
                self.append(&tag, b).await;
            }
        }
    }

    async fn append(&self, tag: &str, mut b: Batch) {
        let count = b.count;
        // Buffers count a batch's length, not its capacity: give the spare
        // room of a grown Vec back so memory stays what is accounted.
        if b.out.capacity() - b.out.len() > b.out.len() / 4 {
            b.out.shrink_to_fit();
        }
        if !append_batch(
            &self.name,
            &self.router,
            &self.stats,
            tag,
            Bytes::from(b.out),
            count,
            false,
        )
        .await
        {
            PluginStats::add(&self.stats.errors, count as u64);
            tracing::error!(input = %self.name, tag, events = count, "the outputs are closed (shutting down): these lines are lost");
        }
    }
}
