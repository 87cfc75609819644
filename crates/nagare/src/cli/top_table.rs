//! What `nagare top` shows, apart from the terminal: rates from two samples
//! of `/api/plugins`, the columns that fit a width, and the sort order.

use std::time::Instant;

/// One plugin's counters in one sample of `/api/plugins`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    pub name: String,
    pub kind: String,
    pub plugin_type: String,
    pub events_in: u64,
    pub events_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub buffer_bytes: u64,
    pub buffer_chunks: u64,
    pub retries: u64,
    pub errors: u64,
    pub dropped: u64,
}

impl Counters {
    /// The plugins of an `/api/plugins` answer, in its (config) order.
    pub fn parse_all(v: &serde_json::Value) -> Result<Vec<Counters>, String> {
        let list = v["plugins"]
            .as_array()
            .ok_or("the monitor's /api/plugins has no `plugins` list")?;
        Ok(list
            .iter()
            .map(|p| {
                let n = |k: &str| p[k].as_u64().unwrap_or(0);
                let s = |k: &str| p[k].as_str().unwrap_or("").to_string();
                Counters {
                    name: s("name"),
                    kind: s("kind"),
                    plugin_type: s("type"),
                    events_in: n("events_in"),
                    events_out: n("events_out"),
                    bytes_in: n("bytes_in"),
                    bytes_out: n("bytes_out"),
                    buffer_bytes: n("buffer_bytes"),
                    buffer_chunks: n("buffer_chunks"),
                    retries: n("retries"),
                    errors: n("errors"),
                    dropped: n("dropped_events"),
                }
            })
            .collect())
    }
}

/// A plugin's line: its counters and the rates since the previous sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub now: Counters,
    pub in_rate: f64,
    pub out_rate: f64,
    /// Bytes per second: received by inputs, delivered by outputs, passed on
    /// by filters.
    pub bytes_rate: f64,
}

/// Rows from two samples taken `secs` apart. A plugin new in `now` (or whose
/// counters went back, after a reload) has no rate yet: 0.
pub fn rows(prev: &[Counters], now: Vec<Counters>, secs: f64) -> Vec<Row> {
    now.into_iter()
        .map(|c| {
            let before = prev
                .iter()
                .find(|p| p.name == c.name && p.kind == c.kind)
                .filter(|p| p.events_in <= c.events_in && p.events_out <= c.events_out);
            let rate = |f: fn(&Counters) -> u64| match before {
                Some(p) if secs > 0.0 => f(&c).saturating_sub(f(p)) as f64 / secs,
                _ => 0.0,
            };
            let bytes: fn(&Counters) -> u64 = if c.kind == "input" {
                |c| c.bytes_in
            } else {
                |c| c.bytes_out
            };
            Row {
                in_rate: rate(|c| c.events_in),
                out_rate: rate(|c| c.events_out),
                bytes_rate: rate(bytes),
                now: c,
            }
        })
        .collect()
}

/// A column of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Plugin,
    Kind,
    Type,
    InRate,
    OutRate,
    BytesRate,
    Buffer,
    Chunks,
    Retries,
    Errors,
    Dropped,
}

/// Every column, in display order.
pub const COLUMNS: [Column; 11] = [
    Column::Plugin,
    Column::Kind,
    Column::Type,
    Column::InRate,
    Column::OutRate,
    Column::BytesRate,
    Column::Buffer,
    Column::Chunks,
    Column::Retries,
    Column::Errors,
    Column::Dropped,
];

/// When the terminal is narrow, columns go in this order (docs/monitoring.md).
/// PLUGIN, KIND (names repeat across kinds: `forward#0` may be an input and
/// an output) and IN/s always stay.
pub const DROP_ORDER: [Column; 8] = [
    Column::Type,
    Column::Chunks,
    Column::BytesRate,
    Column::Retries,
    Column::Dropped,
    Column::Buffer,
    Column::Errors,
    Column::OutRate,
];

/// The narrowest the PLUGIN column gets before other columns go.
pub const PLUGIN_MIN: u16 = 16;

impl Column {
    pub fn title(self) -> &'static str {
        match self {
            Column::Plugin => "PLUGIN",
            Column::Kind => "KIND",
            Column::Type => "TYPE",
            Column::InRate => "IN/s",
            Column::OutRate => "OUT/s",
            Column::BytesRate => "BYTES/s",
            Column::Buffer => "BUFFER",
            Column::Chunks => "CHUNKS",
            Column::Retries => "RETRIES",
            Column::Errors => "ERRORS",
            Column::Dropped => "DROPPED",
        }
    }

    /// Width of the fixed columns (PLUGIN takes what is left): numbers take
    /// at most 5 characters (`si`, `bytes`).
    pub fn width(self) -> u16 {
        match self {
            Column::Plugin => PLUGIN_MIN,
            Column::Type => 10,
            c => c.title().len().max(5) as u16,
        }
    }

    pub fn cell(self, r: &Row) -> String {
        let c = &r.now;
        match self {
            Column::Plugin => c.name.clone(),
            Column::Kind => kind_short(&c.kind).to_string(),
            Column::Type => c.plugin_type.clone(),
            Column::InRate => si(r.in_rate),
            Column::OutRate => si(r.out_rate),
            Column::BytesRate => bytes(r.bytes_rate),
            Column::Buffer => bytes(c.buffer_bytes as f64),
            Column::Chunks => si(c.buffer_chunks as f64),
            Column::Retries => si(c.retries as f64),
            Column::Errors => si(c.errors as f64),
            Column::Dropped => si(c.dropped as f64),
        }
    }

    /// The value rows are sorted by (PLUGIN sorts by name instead).
    fn key(self, r: &Row) -> f64 {
        let c = &r.now;
        match self {
            Column::Plugin | Column::Kind | Column::Type => 0.0,
            Column::InRate => r.in_rate,
            Column::OutRate => r.out_rate,
            Column::BytesRate => r.bytes_rate,
            Column::Buffer => c.buffer_bytes as f64,
            Column::Chunks => c.buffer_chunks as f64,
            Column::Retries => c.retries as f64,
            Column::Errors => c.errors as f64,
            Column::Dropped => c.dropped as f64,
        }
    }
}

/// The columns that fit `width` cells (one space between columns), in
/// display order.
pub fn fitting(width: u16) -> Vec<Column> {
    let mut cols = COLUMNS.to_vec();
    let need = |cols: &[Column]| -> u16 {
        cols.iter().map(|c| c.width()).sum::<u16>() + cols.len() as u16 - 1
    };
    for drop in DROP_ORDER {
        if need(&cols) <= width {
            break;
        }
        cols.retain(|c| *c != drop);
    }
    cols
}

/// How the rows are ordered: as the monitor lists them (config order), or
/// by a column (names A→Z, numbers largest first), maybe reversed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sort {
    pub by: Option<Column>,
    pub reversed: bool,
}

impl Sort {
    /// `s`: the next column (after the last one, config order again).
    pub fn next(&mut self) {
        let sortable = COLUMNS
            .iter()
            .filter(|c| !matches!(c, Column::Kind | Column::Type));
        let after = match self.by {
            None => sortable.clone().next(),
            Some(by) => sortable.skip_while(|c| **c != by).nth(1),
        };
        self.by = after.copied();
    }

    pub fn label(&self) -> String {
        let by = self.by.map_or("config order", |c| c.title());
        if self.reversed {
            format!("{by}, reversed")
        } else {
            by.to_string()
        }
    }

    pub fn apply(&self, rows: &mut [Row]) {
        match self.by {
            None => {}
            Some(Column::Plugin) => {
                rows.sort_by(|a, b| (&a.now.name, &a.now.kind).cmp(&(&b.now.name, &b.now.kind)))
            }
            Some(col) => rows.sort_by(|a, b| col.key(b).total_cmp(&col.key(a))),
        }
        if self.reversed {
            rows.reverse();
        }
    }
}

/// `in`, `flt` or `out`.
fn kind_short(kind: &str) -> &str {
    match kind {
        "input" => "in",
        "filter" => "flt",
        "output" => "out",
        other => other,
    }
}

/// A count or rate in at most 5 characters: 0, 999, 12.3k, 4.56M.
pub fn si(v: f64) -> String {
    scaled(v, 1000.0, &["", "k", "M", "G", "T"])
}

/// Bytes in at most 5 characters: 512B, 12.3K, 4.56M (powers of 1024).
pub fn bytes(v: f64) -> String {
    scaled(v, 1024.0, &["B", "K", "M", "G", "T"])
}

fn scaled(mut v: f64, step: f64, units: &[&str]) -> String {
    let mut unit = 0;
    while v >= step * 0.9995 && unit + 1 < units.len() {
        v /= step;
        unit += 1;
    }
    let u = units[unit];
    if unit == 0 {
        return format!("{}{u}", v.round() as u64);
    }
    if v < 9.995 {
        format!("{v:.2}{u}")
    } else if v < 99.95 {
        format!("{v:.1}{u}")
    } else {
        format!("{v:.0}{u}")
    }
}

/// The state of the view between two frames.
pub struct View {
    pub addr: String,
    pub rows: Vec<Row>,
    last: Option<(Instant, Vec<Counters>)>,
    /// Why the last sample failed (the daemon is unreachable).
    pub error: Option<String>,
    pub updated: Option<chrono::DateTime<chrono::Local>>,
    pub sort: Sort,
}

impl View {
    pub fn new(addr: String) -> View {
        View {
            addr,
            rows: Vec::new(),
            last: None,
            error: None,
            updated: None,
            sort: Sort::default(),
        }
    }

    /// Takes a new sample (or the reason there is none).
    pub fn update(&mut self, sample: Result<Vec<Counters>, String>, at: Instant) {
        match sample {
            Ok(now) => {
                let (prev, secs) = match &self.last {
                    Some((t, prev)) => (&prev[..], at.duration_since(*t).as_secs_f64()),
                    None => (&[][..], 0.0),
                };
                self.rows = rows(prev, now.clone(), secs);
                self.last = Some((at, now));
                self.error = None;
                self.updated = Some(chrono::Local::now());
            }
            Err(e) => {
                // Rates from a sample before the outage would be wrong.
                self.last = None;
                self.error = Some(e);
            }
        }
    }

    /// The rows in the chosen order.
    pub fn sorted(&self) -> Vec<Row> {
        let mut rows = self.rows.clone();
        self.sort.apply(&mut rows);
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, events: u64, buffer: u64) -> Counters {
        Counters {
            name: name.into(),
            kind: "output".into(),
            events_in: events,
            events_out: events,
            bytes_out: events * 10,
            buffer_bytes: buffer,
            ..Default::default()
        }
    }

    #[test]
    fn rates_come_from_two_samples() {
        let prev = vec![c("a", 100, 0), c("b", 500, 0)];
        let now = vec![c("a", 300, 0), c("b", 400, 0), c("new", 50, 0)];
        let r = rows(&prev, now, 2.0);
        assert_eq!(
            (r[0].in_rate, r[0].out_rate, r[0].bytes_rate),
            (100.0, 100.0, 1000.0)
        );
        // Counters that went back (the plugin restarted) and new plugins: 0.
        assert_eq!(r[1].in_rate, 0.0);
        assert_eq!(r[2].in_rate, 0.0);
    }

    #[test]
    fn numbers_fit_five_characters() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(999.0), "999");
        assert_eq!(si(12_345.0), "12.3k");
        assert_eq!(si(4_560_000.0), "4.56M");
        assert_eq!(si(999_999.0), "1.00M");
        assert_eq!(bytes(512.0), "512B");
        assert_eq!(bytes(1536.0), "1.50K");
        assert_eq!(bytes(200.0 * 1024.0 * 1024.0), "200M");
        assert_eq!(bytes(1023.0), "1023B");
        for v in [1.0, 9.9999, 99_999.0, 1023.6, 123_456_789_012_345.0] {
            assert!(si(v).len() <= 5 && bytes(v).len() <= 5, "{v}");
        }
    }

    #[test]
    fn narrow_terminals_drop_columns_in_the_documented_order() {
        let all = fitting(200);
        assert_eq!(all, COLUMNS.to_vec());
        // 80 columns: everything but TYPE.
        let at80 = fitting(80);
        assert_eq!(at80.len(), COLUMNS.len() - 1);
        assert!(!at80.contains(&Column::Type));
        let at40 = fitting(40);
        assert!([Column::Plugin, Column::Kind, Column::InRate]
            .iter()
            .all(|c| at40.contains(c)));
        assert!(!at40.contains(&Column::Chunks) && !at40.contains(&Column::BytesRate));
        assert_eq!(fitting(10), [Column::Plugin, Column::Kind, Column::InRate]);
        let width = |cols: &[Column]| cols.iter().map(|c| c.width() + 1).sum::<u16>() - 1;
        assert!(width(&at80) <= 80 && width(&at40) <= 40);
    }

    #[test]
    fn sorting_cycles_through_the_columns_and_back_to_config_order() {
        let mut v = View::new("x".into());
        v.update(
            Ok(vec![c("b", 0, 5), c("a", 0, 9), c("c", 0, 1)]),
            Instant::now(),
        );
        let names = |v: &View| {
            v.sorted()
                .iter()
                .map(|r| r.now.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&v), ["b", "a", "c"]);
        v.sort.next();
        assert_eq!(v.sort.label(), "PLUGIN");
        assert_eq!(names(&v), ["a", "b", "c"]);
        while v.sort.by != Some(Column::Buffer) {
            v.sort.next();
        }
        assert_eq!(names(&v), ["a", "b", "c"]);
        v.sort.reversed = true;
        assert_eq!(names(&v), ["c", "b", "a"]);
        // Buffer, then CHUNKS, RETRIES, ERRORS, DROPPED, and config order.
        for _ in 0..5 {
            v.sort.next();
        }
        assert_eq!(v.sort.by, None);
    }
}
