//! Fluentd → nagare: the mapping tables of `<source>`, `<filter>` and
//! `<match>` types (one entry each: adding a plugin is one line in a table,
//! with a function or a table of options), and what the directives every
//! plugin may hold become (`<parse>`, `<buffer>`, `<format>`, `<server>`,
//! `<security>`, `<transport tls>`, `<secondary>`, `<store>`).

use std::collections::HashSet;
use std::path::Path;

use super::common::{self, Notes, Used};
use super::emit::{Doc, Table, Val};
use super::fluentd::{Directive, Param};
use super::Note;

mod stores;

/// How one peer option becomes a nagare option.
#[derive(Clone, Copy)]
pub enum Conv {
    Str,
    Int,
    Bool,
    Size,
    Dur,
    /// A comma-separated list (or a JSON array) as an array of strings.
    List,
}

/// How a plugin type is mapped: a function, or a plain table of options
/// (peer option, nagare option, conversion) for plugins that need no more.
#[derive(Clone, Copy)]
pub enum Mapper {
    Fn(fn(&mut Ctx, &Directive, &mut Opts, &mut Table)),
    Options(&'static [(&'static str, &'static str, Conv)]),
}

/// `<source @type X>` → `[[input]] type = Y`.
const SOURCES: &[(&str, &str, Mapper)] = &[
    ("forward", "forward", Mapper::Fn(src_forward)),
    ("unix", "forward", Mapper::Fn(src_unix)),
    ("tail", "tail", Mapper::Fn(src_tail)),
    ("http", "http", Mapper::Fn(src_http)),
    ("syslog", "syslog", Mapper::Fn(src_syslog)),
    ("tcp", "tcp", Mapper::Fn(src_tcp)),
    ("udp", "udp", Mapper::Fn(src_udp)),
    ("kafka", "kafka", Mapper::Fn(src_kafka)),
    ("kafka_group", "kafka", Mapper::Fn(src_kafka)),
    ("systemd", "journald", Mapper::Fn(stores::src_systemd)),
    ("exec", "exec", Mapper::Fn(stores::src_exec)),
    ("beats", "beats", Mapper::Fn(src_beats)),
];

/// `<filter>` types → `[[filter]]`.
const FILTERS: &[(&str, &str, Mapper)] = &[
    ("grep", "grep", Mapper::Fn(flt_grep)),
    (
        "record_transformer",
        "modify",
        Mapper::Fn(flt_record_transformer),
    ),
    ("parser", "parser", Mapper::Fn(flt_parser)),
];

/// `<match>` types → `[[output]]` (rewrite_tag_filter becomes a filter).
const OUTPUTS: &[(&str, &str, Mapper)] = &[
    ("stdout", "stdout", Mapper::Fn(out_stdout)),
    ("null", "null", Mapper::Options(&[])),
    ("file", "file", Mapper::Fn(out_file)),
    ("forward", "forward", Mapper::Fn(out_forward)),
    ("http", "http", Mapper::Fn(out_http)),
    ("kafka2", "kafka", Mapper::Fn(out_kafka)),
    ("kafka", "kafka", Mapper::Fn(out_kafka)),
    ("kafka_buffered", "kafka", Mapper::Fn(out_kafka)),
    ("rdkafka2", "kafka", Mapper::Fn(out_kafka)),
    ("copy", "copy", Mapper::Fn(out_copy)),
    ("secondary_file", "file", Mapper::Fn(out_secondary_file)),
    (
        "elasticsearch",
        "elasticsearch",
        Mapper::Fn(stores::out_elasticsearch),
    ),
    (
        "opensearch",
        "elasticsearch",
        Mapper::Fn(stores::out_elasticsearch),
    ),
    ("loki", "loki", Mapper::Fn(stores::out_loki)),
    (
        "splunk_hec",
        "splunk_hec",
        Mapper::Fn(stores::out_splunk_hec),
    ),
    ("s3", "s3", Mapper::Fn(stores::out_s3)),
    ("sql", "postgresql", Mapper::Fn(stores::out_sql)),
    (
        "clickhouse",
        "clickhouse",
        Mapper::Fn(stores::out_clickhouse),
    ),
];

/// Types nagare does not have yet, with what to say. When one lands, its
/// entry moves to the table above.
const NOT_YET: &[(&str, &str)] = &[
    ("postgresql", "fluent-plugin-postgres inserts with its own SQL statement: write nagare's `postgresql` output by hand (connection, table, columns)"),
    ("exec", "nagare has no exec output (the exec filter runs a program on events)"),
    ("exec_filter", "use a [[filter]] type = \"exec\" (a long-lived program on stdin/stdout, JSON lines or msgpack)"),
    ("sample", "nagare has no generator input (`nagare gen` writes generated events to a file, TCP, HTTP or a forward port)"),
    ("dummy", "nagare has no generator input (`nagare gen` writes generated events to a file, TCP, HTTP or a forward port)"),
    ("monitor_agent", "nagare's monitor is the [monitor] section (bind = \"HOST:PORT\"): /api/plugins and /metrics"),
    ("prometheus", "nagare's [monitor] serves /metrics in the Prometheus text format"),
    ("relabel", "labels in nagare are chosen by inputs only"),
    ("stdout_filter", "use `nagare tap` to watch events"),
];

/// Parameters every plugin may have that need no equivalent.
const SILENT: &[&str] = &["@type", "type", "@id", "@label", "@log_level", "log_level"];

/// The parameters of one directive, marking those the mapping used; the
/// others are reported as not converted.
pub struct Opts<'a> {
    d: &'a Directive,
    used: Used,
}

impl<'a> Opts<'a> {
    fn new(d: &'a Directive) -> Opts<'a> {
        Opts {
            d,
            used: Used::default(),
        }
    }

    fn get(&mut self, key: &str) -> Option<&'a Param> {
        let p = self.d.params.iter().find(|p| p.key == key)?;
        self.used.mark(key);
        Some(p)
    }

    fn val(&mut self, key: &str) -> Option<&'a str> {
        self.get(key).map(|p| p.value.as_str())
    }

    fn flag(&mut self, key: &str) -> Option<bool> {
        self.val(key).and_then(common::boolean)
    }

    /// Maps `peer` to `nagare` with `conv`, noting a value that does not convert.
    fn map(&mut self, ctx: &mut Ctx, t: &mut Table, peer: &str, nagare: &str, conv: Conv) {
        let Some(p) = self.get(peer) else { return };
        match convert_value(&p.value, conv) {
            Some(v) => t.set(nagare, v),
            None => ctx.notes.unmapped(
                &p.file,
                p.line,
                format!("{peer} {}", p.value),
                format!("`{}` is not a value nagare's `{nagare}` takes", p.value),
            ),
        }
    }

    /// [`Opts::map`] for each (peer, nagare, conversion) of `table`.
    fn map_all(&mut self, ctx: &mut Ctx, t: &mut Table, table: &[(&str, &str, Conv)]) {
        for (peer, nagare, conv) in table {
            self.map(ctx, t, peer, nagare, *conv);
        }
    }

    /// Reports every parameter not used.
    fn finish(self, ctx: &mut Ctx, t: &mut Table, what: &str) {
        for p in &self.d.params {
            if self.used.has(&p.key) || SILENT.contains(&p.key.as_str()) {
                continue;
            }
            ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("{what}: {} {}", p.key, p.value),
                "no equivalent option in nagare",
            );
        }
    }
}

fn convert_value(v: &str, conv: Conv) -> Option<Val> {
    Some(match conv {
        Conv::Str => Val::s(v),
        Conv::Int => Val::Int(v.trim().parse().ok()?),
        Conv::Bool => Val::Bool(common::boolean(v)?),
        Conv::Size => Val::s(common::size(v)?),
        Conv::Dur => Val::s(common::duration(v)?),
        Conv::List => Val::Arr(list(v).into_iter().map(Val::Str).collect()),
    })
}

/// A comma-separated list or a JSON array of strings.
fn list(v: &str) -> Vec<String> {
    let t = v.trim();
    if t.starts_with('[') {
        if let Ok(a) = serde_json::from_str::<Vec<String>>(t) {
            return a;
        }
    }
    t.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The state of one conversion.
pub struct Ctx {
    pub notes: Notes,
    inputs: Vec<Table>,
    filters: Vec<Table>,
    outputs: Vec<Table>,
    system: Table,
    /// Labels that some `<source>` sets with `@label`: nagare labels.
    source_labels: HashSet<String>,
    /// The label whose sections are being converted (Some only for a
    /// nagare label; a flattened label's sections get none).
    label: Option<String>,
}

/// Converts a parsed Fluentd config into nagare TOML and its notes.
pub fn convert(root: &Directive, path: &Path) -> (String, Vec<Note>) {
    let mut notes = Notes::default();
    let mut root = root.clone();
    embedded_ruby(&mut root, &mut notes);
    let root = &root;
    let mut ctx = Ctx {
        notes,
        inputs: Vec::new(),
        filters: Vec::new(),
        outputs: Vec::new(),
        system: Table::new("system", false),
        source_labels: HashSet::new(),
        label: None,
    };
    for d in &root.children {
        if d.name == "source" {
            if let Some(l) = d.value("@label") {
                ctx.source_labels
                    .insert(l.trim_start_matches('@').to_string());
            }
        }
    }
    for p in &root.params {
        ctx.notes.unmapped(
            &p.file,
            p.line,
            format!("{} {}", p.key, p.value),
            "a parameter outside any directive",
        );
    }
    // Sources and the unlabelled flow first, then the labels: sections a
    // label holds run after the filter that sends events there.
    for d in &root.children {
        match d.name.as_str() {
            "system" => system(&mut ctx, d),
            "source" => source(&mut ctx, d),
            "filter" => filter(&mut ctx, d),
            "match" => output(&mut ctx, d),
            "label" => {}
            "worker" => ctx.notes.unmapped(&d.file, d.line, format!("<worker {}>", d.arg), "nagare runs one process with threads ([system] workers); its sections are not converted"),
            other => ctx.notes.unmapped(&d.file, d.line, format!("<{other}>"), "not a Fluentd top-level directive nagare knows"),
        }
    }
    for d in root.children.iter().filter(|d| d.name == "label") {
        let name = d.arg.trim_start_matches('@').to_string();
        if d.arg == "@FLUENT_LOG" {
            ctx.notes.unmapped(&d.file, d.line, "<label @FLUENT_LOG>", "nagare's own log is not routed as events ([system] log_file, log_format = \"json\")");
            continue;
        }
        if d.arg == "@ERROR" {
            ctx.system.set_commented("error_label", Val::s("ERROR"), Some("approx: nagare's error label gets the events filters failed on, not emit errors".into()));
            ctx.notes.approx(&d.file, d.line, "<label @ERROR>", "nagare's [system] error_label receives the records filters could not handle (parse errors, Lua errors), not Fluentd's emit errors");
            ctx.label = Some("ERROR".into());
        } else if ctx.source_labels.contains(&name) {
            ctx.label = Some(name);
        } else {
            ctx.notes.approx(&d.file, d.line, format!("<label {}>", d.arg), "entered by tag rewriting, not by an input: its sections are converted without a label and select their events by tag alone");
            ctx.label = None;
        }
        for c in &d.children {
            match c.name.as_str() {
                "filter" => filter(&mut ctx, c),
                "match" => output(&mut ctx, c),
                other => ctx.notes.unmapped(
                    &c.file,
                    c.line,
                    format!("<{other}> in a label"),
                    "only <filter> and <match> belong in a label",
                ),
            }
        }
        ctx.label = None;
    }
    let mut doc = Doc {
        header: vec![
            format!("Converted by `nagare convert` from {} (Fluentd).", path.display()),
            "Lines marked `approx:` behave differently from the peer; `not converted:` comments list what has no equivalent.".into(),
        ],
        ..Doc::default()
    };
    if !ctx.system.entries.is_empty() || !ctx.system.comments.is_empty() {
        doc.tables.push(ctx.system);
    }
    doc.tables.extend(ctx.inputs);
    doc.tables.extend(ctx.filters);
    doc.tables.extend(ctx.outputs);
    for n in &ctx.notes.list {
        if n.kind == super::NoteKind::Unmapped {
            doc.footer.push(format!("not converted: {n}"));
        }
    }
    (doc.render(), ctx.notes.list)
}

/// `#{…}` in every value: environment variables become nagare's
/// `${NAME}` (`${NAME:-default}`), the host name `${hostname}`; other Ruby
/// is noted and left as written.
fn embedded_ruby(d: &mut Directive, notes: &mut Notes) {
    static RUBY: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"#\{([^}]*)\}").expect("static regex"));
    for p in &mut d.params {
        if !p.value.contains("#{") {
            continue;
        }
        let mut failed = None;
        let v = RUBY.replace_all(&p.value, |c: &regex::Captures| match ruby_embedded(&c[1]) {
            Ok(v) => v,
            Err(why) => {
                failed = Some(why);
                c[0].to_string()
            }
        });
        let v = v.into_owned();
        if let Some(why) = failed {
            notes.unmapped(&p.file, p.line, format!("{} {}", p.key, p.value), why);
        }
        p.value = v;
    }
    for c in &mut d.children {
        embedded_ruby(c, notes);
    }
}

fn lookup<'m>(
    table: &'m [(&str, &str, Mapper)],
    ty: &str,
) -> Option<&'m (&'m str, &'m str, Mapper)> {
    table.iter().find(|(t, _, _)| *t == ty)
}

fn not_yet(ty: &str) -> Option<&'static str> {
    NOT_YET.iter().find(|(t, _)| *t == ty).map(|(_, why)| *why)
}

fn apply(ctx: &mut Ctx, m: Mapper, d: &Directive, o: &mut Opts, t: &mut Table) {
    match m {
        Mapper::Fn(f) => f(ctx, d, o, t),
        Mapper::Options(opts) => o.map_all(ctx, t, opts),
    }
}

fn system(ctx: &mut Ctx, d: &Directive) {
    let mut o = Opts::new(d);
    let mut t = std::mem::replace(&mut ctx.system, Table::new("system", false));
    if let Some(p) = o.get("log_level") {
        let level = match p.value.as_str() {
            "fatal" => {
                ctx.notes.approx(
                    &p.file,
                    p.line,
                    "log_level fatal",
                    "nagare's quietest level is error",
                );
                "error"
            }
            l => l,
        };
        t.set("log_level", Val::s(level));
    }
    if let Some(p) = o.get("workers") {
        ctx.notes.approx(
            &p.file,
            p.line,
            format!("workers {}", p.value),
            "nagare runs one process; [system] workers sets its threads (one per core by default)",
        );
    }
    if let Some(p) = o.get("format") {
        if p.value == "json" {
            t.set("log_format", Val::s("json"));
        }
    }
    for c in &d.children {
        if c.name == "log" {
            if let Some(f) = c.value("format") {
                if f == "json" {
                    t.set("log_format", Val::s("json"));
                }
            }
        } else {
            ctx.notes.unmapped(
                &c.file,
                c.line,
                format!("<{}> in <system>", c.name),
                "no equivalent",
            );
        }
    }
    o.finish(ctx, &mut t, "<system>");
    ctx.system = t;
}

fn source(ctx: &mut Ctx, d: &Directive) {
    let ty = d.plugin_type();
    let Some(&(_, nagare, m)) = lookup(SOURCES, ty) else {
        let why = match ty {
            // Not a receiver: it reads documents back out of an index.
            "elasticsearch" | "opensearch" => "fluent-plugin-elasticsearch's input queries an index; nagare's elasticsearch input receives `_bulk` requests (from Beats, Logstash, clients) instead",
            _ => not_yet(ty).unwrap_or("nagare has no input of this type"),
        };
        ctx.notes
            .unmapped(&d.file, d.line, format!("<source> @type {ty}"), why);
        return;
    };
    let mut t = Table::new("input", true);
    t.comments
        .push(format!("<source> @type {ty} ({}:{})", d.file, d.line));
    t.set("type", Val::s(nagare));
    if let Some(l) = d.value("@label") {
        let l = l.trim_start_matches('@');
        t.set("label", Val::s(l));
    }
    let mut o = Opts::new(d);
    apply(ctx, m, d, &mut o, &mut t);
    o.finish(ctx, &mut t, &format!("<source @type {ty}>"));
    ctx.inputs.push(t);
}

fn with_label(ctx: &Ctx, t: &mut Table) {
    if let Some(l) = &ctx.label {
        t.set("label", Val::s(l));
    }
}

fn filter(ctx: &mut Ctx, d: &Directive) {
    let ty = d.plugin_type();
    let Some(&(_, nagare, m)) = lookup(FILTERS, ty) else {
        let why = not_yet(ty).unwrap_or("nagare has no filter of this type");
        ctx.notes.unmapped(
            &d.file,
            d.line,
            format!("<filter {}> @type {ty}", d.arg),
            why,
        );
        return;
    };
    let mut t = Table::new("filter", true);
    t.comments.push(format!(
        "<filter {}> @type {ty} ({}:{})",
        d.arg, d.file, d.line
    ));
    t.set("type", Val::s(nagare));
    t.set("match", Val::s(pattern(&d.arg)));
    with_label(ctx, &mut t);
    let mut o = Opts::new(d);
    apply(ctx, m, d, &mut o, &mut t);
    o.finish(ctx, &mut t, &format!("<filter @type {ty}>"));
    ctx.filters.push(t);
}

fn pattern(arg: &str) -> String {
    let p = arg.split_whitespace().collect::<Vec<_>>().join(" ");
    if p.is_empty() {
        "**".into()
    } else {
        p
    }
}

fn output(ctx: &mut Ctx, d: &Directive) {
    let ty = d.plugin_type();
    if ty == "rewrite_tag_filter" {
        let mut t = Table::new("filter", true);
        t.comments.push(format!(
            "<match {}> @type rewrite_tag_filter ({}:{})",
            d.arg, d.file, d.line
        ));
        t.set("type", Val::s("rewrite_tag"));
        t.set("match", Val::s(pattern(&d.arg)));
        with_label(ctx, &mut t);
        let mut o = Opts::new(d);
        rewrite_tag_filter(ctx, d, &mut o, &mut t);
        o.finish(ctx, &mut t, "<match @type rewrite_tag_filter>");
        ctx.filters.push(t);
        return;
    }
    if let Some(mut t) = build_output(ctx, d, "output") {
        t.entries.insert(
            1,
            super::emit::Entry {
                key: "match".into(),
                val: Val::s(pattern(&d.arg)),
                comment: None,
            },
        );
        if let Some(l) = &ctx.label {
            t.entries.insert(
                2,
                super::emit::Entry {
                    key: "label".into(),
                    val: Val::s(l),
                    comment: None,
                },
            );
        }
        ctx.outputs.push(t);
    }
}

/// An output table (`[[output]]`, a copy's `[[output.store]]` or a
/// `[output.secondary]`) from a `<match>`, `<store>` or `<secondary>`.
fn build_output(ctx: &mut Ctx, d: &Directive, name: &str) -> Option<Table> {
    let ty = d.plugin_type();
    let Some(&(_, nagare, m)) = lookup(OUTPUTS, ty) else {
        let why = not_yet(ty).unwrap_or("nagare has no output of this type");
        ctx.notes.unmapped(
            &d.file,
            d.line,
            format!("<{} {}> @type {ty}", d.name, d.arg),
            why,
        );
        return None;
    };
    let mut t = Table::new(name, name != "secondary");
    t.comments.push(
        format!("<{} {}> @type {ty} ({}:{})", d.name, d.arg, d.file, d.line).replace("  ", " "),
    );
    t.set("type", Val::s(nagare));
    let mut o = Opts::new(d);
    apply(ctx, m, d, &mut o, &mut t);
    if t.get("type") == Some(&Val::s("__skip__")) {
        // The mapping left it out whole, with a note saying why.
        return None;
    }
    o.finish(ctx, &mut t, &format!("<{} @type {ty}>", d.name));
    for c in &d.children {
        match c.name.as_str() {
            "buffer" => buffer(ctx, c, &mut t),
            "secondary" => {
                if let Some(s) = build_output(ctx, c, "secondary") {
                    t.children.push(s);
                }
            }
            // Read by the plugin's own mapping.
            "format" | "inject" | "server" | "security" | "store" | "transport" | "auth"
            | "rule" | "parse" | "label" | "fields" | "table" => {}
            other => ctx.notes.unmapped_on(
                &mut t,
                &c.file,
                c.line,
                format!("<{other}> in <{} @type {ty}>", d.name),
                "no equivalent",
            ),
        }
    }
    Some(t)
}

fn buffer(ctx: &mut Ctx, d: &Directive, out: &mut Table) {
    let mut o = Opts::new(d);
    let mut b = Table::new("buffer", false);
    let keys: Vec<String> = d
        .arg
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let ty = d.plugin_type();
    o.get("@type");
    match ty {
        "" | "memory" => {}
        "file" | "file_single" => {
            b.set("type", Val::s("file"));
            o.map(ctx, &mut b, "path", "path", Conv::Str);
        }
        other => ctx.notes.unmapped(
            &d.file,
            d.line,
            format!("<buffer> @type {other}"),
            "nagare's buffers are memory or file",
        ),
    }
    for k in &keys {
        if k != "time" && k != "tag" {
            ctx.notes.approx(&d.file, d.line, format!("<buffer {}>", d.arg), format!("nagare's chunks are split by tag (and the file output's path by time); the chunk key `{k}` is not used"));
        }
    }
    o.map_all(
        ctx,
        &mut b,
        &[
            ("chunk_limit_size", "chunk_limit_size", Conv::Size),
            ("chunk_limit_records", "chunk_limit_records", Conv::Int),
            ("total_limit_size", "total_limit_size", Conv::Size),
            ("flush_interval", "flush_interval", Conv::Dur),
            ("flush_thread_count", "flush_thread_count", Conv::Int),
            ("retry_wait", "retry_wait", Conv::Dur),
            ("retry_max_interval", "retry_max_interval", Conv::Dur),
            ("retry_max_times", "retry_max_times", Conv::Int),
            ("retry_timeout", "retry_timeout", Conv::Dur),
            ("retry_randomize", "retry_randomize", Conv::Bool),
        ],
    );
    if let Some(p) = o.get("overflow_action") {
        let v = match p.value.as_str() {
            "block" => Some("block"),
            "drop_oldest_chunk" => Some("drop_oldest_chunk"),
            "throw_exception" => Some("throw"),
            _ => None,
        };
        match v {
            Some(v) => b.set("overflow_action", Val::s(v)),
            None => ctx.notes.unmapped(
                &p.file,
                p.line,
                format!("overflow_action {}", p.value),
                "nagare has block, drop_oldest_chunk and throw",
            ),
        }
    }
    if let Some(p) = o.get("flush_mode") {
        match p.value.as_str() {
            "interval" | "default" | "lazy" => {}
            "immediate" => b.set_commented(
                "flush_interval",
                Val::s("10ms"),
                Some("approx: flush_mode immediate".into()),
            ),
            _ => {}
        }
    }
    // nagare always flushes every buffer at shutdown, and the file output
    // reads these for its path (out_file).
    for k in [
        "flush_at_shutdown",
        "timekey",
        "timekey_wait",
        "timekey_use_utc",
        "timekey_zone",
        "retry_type",
        "retry_exponential_backoff_base",
    ] {
        o.get(k);
    }
    if let Some(p) = o.get("retry_forever") {
        if common::boolean(&p.value) == Some(true) {
            b.set_commented(
                "retry_timeout",
                Val::s("100000days"),
                Some("approx: retry_forever".into()),
            );
        }
    }
    if let Some(p) = o.get("retry_type") {
        if p.value == "periodic" {
            ctx.notes.approx(
                &p.file,
                p.line,
                "retry_type periodic",
                "nagare's retries back off exponentially",
            );
        }
    }
    let mut tmp = Table::new("buffer", false);
    o.finish(ctx, &mut tmp, "<buffer>");
    out.comments.extend(tmp.comments);
    if !b.entries.is_empty() {
        out.children.push(b);
    }
}

// ---------------------------------------------------------------- sources

fn host_port(host: &str, port: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn bind(o: &mut Opts, t: &mut Table, default_port: u16) {
    let host = o.val("bind").unwrap_or("0.0.0.0").to_string();
    let port = o
        .val("port")
        .map(str::to_string)
        .unwrap_or_else(|| default_port.to_string());
    t.set("bind", Val::s(host_port(&host, &port)));
}

fn tls_server(ctx: &mut Ctx, d: &Directive, t: &mut Table) {
    for c in d.children.iter().filter(|c| c.name == "transport") {
        if c.arg != "tls" {
            continue;
        }
        let mut o = Opts::new(c);
        let mut tls = Table::new("tls", false);
        o.map_all(
            ctx,
            &mut tls,
            &[
                ("cert_path", "cert", Conv::Str),
                ("private_key_path", "key", Conv::Str),
                ("ca_path", "ca", Conv::Str),
            ],
        );
        if let Some(p) = o.get("version") {
            if p.value.contains("1_3") {
                tls.set("min_version", Val::s("1.3"));
            }
        }
        o.get("client_cert_auth");
        for k in [
            "ciphers",
            "insecure",
            "private_key_passphrase",
            "cert_verifier",
            "ca_private_key_path",
            "ca_private_key_passphrase",
            "generate_private_key_length",
        ] {
            if let Some(p) = o.get(k) {
                ctx.notes.unmapped(
                    &p.file,
                    p.line,
                    format!("<transport tls> {}", p.key),
                    "no equivalent in nagare's [input.tls]",
                );
            }
        }
        if let Some(p) = o.get("cert_path").or(None) {
            let _ = p;
        }
        o.finish(ctx, t, "<transport tls>");
        t.children.push(tls);
    }
}

fn src_forward(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    bind(o, t, 24224);
    o.map(ctx, t, "chunk_size_limit", "max_frame_size", Conv::Size);
    security_server(ctx, d, t);
    tls_server(ctx, d, t);
}

fn src_unix(ctx: &mut Ctx, _d: &Directive, o: &mut Opts, t: &mut Table) {
    o.map(ctx, t, "path", "path", Conv::Str);
    if t.get("path").is_none() {
        t.set("path", Val::s("/var/run/fluent/fluent.sock"));
    }
}

fn security_server(ctx: &mut Ctx, d: &Directive, t: &mut Table) {
    for c in d.children.iter().filter(|c| c.name == "security") {
        let mut o = Opts::new(c);
        o.map(ctx, t, "shared_key", "shared_key", Conv::Str);
        o.map(ctx, t, "self_hostname", "self_hostname", Conv::Str);
        o.get("user_auth");
        for u in c.children.iter().filter(|u| u.name == "user") {
            let mut user = Table::new("users", true);
            let mut uo = Opts::new(u);
            uo.map(ctx, &mut user, "username", "username", Conv::Str);
            uo.map(ctx, &mut user, "password", "password", Conv::Str);
            uo.finish(ctx, t, "<user>");
            t.children.push(user);
        }
        for cl in c.children.iter().filter(|u| u.name == "client") {
            ctx.notes.unmapped(
                &cl.file,
                cl.line,
                "<client> in <security>",
                "nagare's forward input has no per-client allow list (use a firewall)",
            );
        }
        o.finish(ctx, t, "<security>");
    }
}

fn src_tail(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    if let Some(p) = o.get("path") {
        let paths = list(&p.value);
        if paths.len() == 1 {
            t.set("path", Val::s(&paths[0]));
        } else {
            t.set("path", Val::Arr(paths.into_iter().map(Val::Str).collect()));
        }
    }
    o.map(ctx, t, "tag", "tag", Conv::Str);
    if let Some(p) = o.get("pos_file") {
        // nagare keeps its own position file beside Fluentd's, and at its
        // first start resumes each file where Fluentd's left it.
        t.set_commented(
            "position_db",
            Val::s(format!("{}.nagare", p.value)),
            Some("nagare's own positions".into()),
        );
        // Only a file that is there: nagare refuses to start on a missing one.
        if Path::new(&p.value).exists() {
            t.set_commented(
                "import_fluentd_pos_file",
                Val::s(&p.value),
                Some("resume where Fluentd left off (first start)".into()),
            );
        } else {
            t.comments.push(format!("import_fluentd_pos_file = {:?} when Fluentd has written it (it was not there when converted)", p.value));
        }
    }
    o.map_all(
        ctx,
        t,
        &[
            ("read_from_head", "read_from_head", Conv::Bool),
            ("refresh_interval", "refresh_interval", Conv::Dur),
            ("exclude_path", "exclude", Conv::List),
            ("path_key", "path_key", Conv::Str),
            ("read_lines_limit", "batch_lines", Conv::Int),
            ("max_line_size", "max_line_size", Conv::Size),
        ],
    );
    if let Some(p) = o.get("enable_stat_watcher") {
        if common::boolean(&p.value) == Some(false) {
            t.set("watch", Val::Bool(false));
        }
    }
    for k in [
        "rotate_wait",
        "follow_inodes",
        "enable_watch_timer",
        "skip_refresh_on_startup",
    ] {
        if let Some(p) = o.get(k) {
            ctx.notes.approx(&p.file, p.line, format!("{} {}", p.key, p.value), "nagare follows files by inode, reads a rotated file on for 5 s, and watches with inotify with timers as the fallback");
        }
    }
    let flush = o.val("multiline_flush_interval").map(str::to_string);
    let emit_unmatched = o.flag("emit_unmatched_lines").unwrap_or(false);
    let mut has_parse = false;
    for c in d.children.iter().filter(|c| c.name == "parse") {
        has_parse = true;
        let mut pt = Table::new("parser", false);
        parse_section(ctx, c, &mut pt, true);
        if let Some(f) = &flush {
            if pt.get("type") == Some(&Val::s("multiline")) {
                if let Some(dur) = common::duration(f) {
                    pt.set("multiline_flush_interval", Val::s(dur));
                }
            }
        }
        t.children.push(pt);
    }
    if !has_parse {
        if let Some(f) = o.val("format") {
            // v0 style: `format json` on the source itself.
            let mut pt = Table::new("parser", false);
            let fake = Directive {
                name: "parse".into(),
                arg: String::new(),
                params: vec![Param {
                    key: "@type".into(),
                    value: f.to_string(),
                    file: d.file.clone(),
                    line: d.line,
                }],
                children: Vec::new(),
                file: d.file.clone(),
                line: d.line,
            };
            parse_section(ctx, &fake, &mut pt, true);
            t.children.push(pt);
        }
    }
    for c in d.children.iter().filter(|c| c.name != "parse") {
        ctx.notes.unmapped(
            &c.file,
            c.line,
            format!("<{}> in <source @type tail>", c.name),
            "no equivalent",
        );
    }
    // Fluentd drops the lines its parser cannot read (and, with multiline,
    // those before the first first line); nagare keeps them marked with
    // parse_error: a grep filter drops them as Fluentd does.
    let parsed = t
        .children
        .iter()
        .any(|c| c.name == "parser" && c.get("type") != Some(&Val::s("none")));
    if parsed {
        if emit_unmatched {
            ctx.notes.approx(&d.file, d.line, "emit_unmatched_lines true", "lines that do not parse go on as {\"message\": line, \"parse_error\": reason} (Fluentd: {\"unmatched_line\": line})");
        } else if let Some(Val::Str(tag)) = t.get("tag").cloned() {
            let mut g = Table::new("filter", true);
            g.comments.push(format!(
                "Fluentd drops the lines the parser of <source> ({}:{}) cannot read",
                d.file, d.line
            ));
            g.set("type", Val::s("grep"));
            let pattern: Vec<&str> = tag
                .split('.')
                .map(|p| if p.contains('*') { "**" } else { p })
                .collect();
            g.set("match", Val::s(pattern.join(".")));
            if let Some(l) = t.get("label").cloned() {
                g.set("label", l);
            }
            let mut r = Table::new("exclude", true);
            r.set("key", Val::s("parse_error"));
            r.set("pattern", Val::s("^"));
            g.children.push(r);
            ctx.filters.insert(0, g);
        }
    }
}

/// `<parse>` → `[input.parser]` / `[filter.parser]`.
fn parse_section(ctx: &mut Ctx, d: &Directive, pt: &mut Table, multiline_ok: bool) {
    let mut o = Opts::new(d);
    let ty = d.plugin_type();
    o.get("@type");
    let simple = [
        "none",
        "json",
        "ltsv",
        "csv",
        "tsv",
        "apache2",
        "apache_error",
        "syslog",
    ];
    match ty {
        // Fluentd 1.16's nginx parser keeps every field a string ("-"
        // included); nagare's `nginx` type makes code and size integers.
        "nginx" => {
            pt.set("type", Val::s("regex"));
            pt.set_commented(
                "expression",
                Val::s(NGINX),
                Some("Fluentd's nginx parser".into()),
            );
            pt.set("time_format", Val::s("%d/%b/%Y:%H:%M:%S %z"));
        }
        t if simple.contains(&t) => pt.set("type", Val::s(t)),
        "regexp" => {
            pt.set("type", Val::s("regex"));
            if let Some(p) = o.get("expression") {
                match common::regex(&p.value) {
                    Ok(r) => pt.set("expression", Val::s(r)),
                    Err(why) => {
                        ctx.notes
                            .unmapped(&p.file, p.line, format!("expression {}", p.value), why)
                    }
                }
            }
            if let Some(p) = o.get("ignorecase") {
                if common::boolean(&p.value) == Some(true) {
                    if let Some(Val::Str(e)) = pt.get("expression").cloned() {
                        pt.set("expression", Val::s(format!("(?i){e}")));
                    }
                }
            }
            if let Some(p) = o.get("multiline") {
                if common::boolean(&p.value) == Some(true) {
                    if let Some(Val::Str(e)) = pt.get("expression").cloned() {
                        pt.set("expression", Val::s(format!("(?s){e}")));
                    }
                }
            }
        }
        "multiline" if multiline_ok => {
            pt.set("type", Val::s("multiline"));
            if let Some(p) = o.get("format_firstline") {
                match common::regex(&p.value) {
                    Ok(r) => pt.set("format_firstline", Val::s(r)),
                    Err(why) => ctx.notes.unmapped(&p.file, p.line, "format_firstline", why),
                }
            }
            let mut expr = String::new();
            let mut first: Option<&Param> = None;
            for n in 1..=20 {
                if let Some(p) = o.get(&format!("format{n}")) {
                    first.get_or_insert(p);
                    let v = p.value.trim();
                    let body = if v.starts_with('/') && v.len() > 1 {
                        &v[1..v.rfind('/').unwrap_or(v.len())]
                    } else {
                        v
                    };
                    expr.push_str(body);
                }
            }
            if let Some(p) = first {
                match common::regex(&expr) {
                    Ok(r) => pt.set("expression", Val::s(r)),
                    Err(why) => ctx.notes.unmapped(&p.file, p.line, "format1…", why),
                }
            }
        }
        "" => {}
        other => {
            ctx.notes.unmapped(&d.file, d.line, format!("<parse> @type {other}"), "nagare has no parser of this type (it has none, json, regex, ltsv, csv, tsv, apache2, apache_error, nginx, syslog, multiline)");
            pt.set("type", Val::s("none"));
        }
    }
    o.map(ctx, pt, "message_key", "message_key", Conv::Str);
    o.map(ctx, pt, "time_key", "time_key", Conv::Str);
    if let Some(p) = o.get("time_format") {
        match common::time_format(&p.value) {
            Some(f) => pt.set("time_format", Val::s(f)),
            None => pt.comments.push(format!(
                "time_format {}: RFC 3339, read without a format",
                p.value
            )),
        }
    }
    o.map_all(
        ctx,
        pt,
        &[
            ("keep_time_key", "keep_time_key", Conv::Bool),
            ("message_format", "message_format", Conv::Str),
            ("delimiter", "delimiter", Conv::Str),
            ("label_delimiter", "label_delimiter", Conv::Str),
            ("keys", "keys", Conv::List),
        ],
    );
    if let Some(p) = o.get("time_type") {
        if p.value == "unixtime" || p.value == "float" {
            // nagare reads seconds since the epoch without a time_format.
        } else if p.value == "mixed" {
            ctx.notes.approx(
                &p.file,
                p.line,
                "time_type mixed",
                "nagare reads one time_format (or RFC 3339 / epoch seconds without one)",
            );
        }
    }
    if let Some(p) = o.get("types") {
        let mut types = Table::new("types", false);
        for pair in p.value.split(',') {
            let (k, v) = pair.split_once(':').unwrap_or((pair, "string"));
            let v = v.split(':').next().unwrap_or("string").trim();
            let v = match v {
                "integer" | "float" | "bool" | "string" => v,
                other => {
                    ctx.notes.unmapped(
                        &p.file,
                        p.line,
                        format!("types {k}:{other}"),
                        "nagare converts to integer, float, bool or string",
                    );
                    continue;
                }
            };
            types.set(k.trim(), Val::s(v));
        }
        pt.children.push(types);
    }
    for k in ["timezone", "utc", "localtime"] {
        if let Some(p) = o.get(k) {
            if k == "utc" && common::boolean(&p.value) == Some(true) || k == "timezone" {
                let tz = if k == "utc" {
                    "+00:00".to_string()
                } else {
                    p.value.clone()
                };
                pt.comments.push(format!("approx: {} {} — nagare reads times without a zone as local time: run it with TZ set to this zone", p.key, p.value));
                ctx.notes.approx(&p.file, p.line, format!("{} {}", p.key, p.value), format!("nagare has no time zone option: times without a zone are read in the local zone, so run nagare with TZ={}", posix_tz(&tz)));
            }
        }
    }
    let mut tmp = Table::new("x", false);
    o.finish(ctx, &mut tmp, &format!("<parse @type {ty}>"));
    pt.comments.extend(tmp.comments);
}

/// Fluentd's parser_nginx expression.
const NGINX: &str = r#"^(?<remote>[^ ]*) (?<host>[^ ]*) (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>[^\"]*?)(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>[^\"]*)" "(?<agent>[^\"]*)"(?:\s+\"?(?<http_x_forwarded_for>[^\"]*)\"?)?)?$"#;

/// `+01:00` as the POSIX TZ value that means it (`<+0100>-1`); a zone name
/// as it is.
pub fn posix_tz(offset: &str) -> String {
    let o = offset.trim();
    let (sign, rest) = match o.chars().next() {
        Some('+') => ('+', &o[1..]),
        Some('-') => ('-', &o[1..]),
        _ => return o.to_string(),
    };
    let digits: String = rest.chars().filter(|c| c.is_ascii_digit()).collect();
    if digits.len() < 2 {
        return o.to_string();
    }
    let h: u32 = digits[..2].parse().unwrap_or(0);
    let m: u32 = digits.get(2..4).and_then(|s| s.parse().ok()).unwrap_or(0);
    // POSIX offsets are west-positive: UTC+1 is "-1".
    let posix_sign = if sign == '+' { '-' } else { '+' };
    let name = format!("<{sign}{h:02}{m:02}>");
    if m == 0 {
        format!("{name}{posix_sign}{h}")
    } else {
        format!("{name}{posix_sign}{h}:{m:02}")
    }
}

fn src_http(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    bind(o, t, 9880);
    o.map(ctx, t, "body_size_limit", "max_body_size", Conv::Size);
    for c in d.children.iter().filter(|c| c.name == "parse") {
        let ty = c.plugin_type();
        if ty == "json" || ty == "msgpack" || ty == "in_http" {
            ctx.notes.approx(&c.file, c.line, format!("<parse> @type {ty}"), "nagare's http input reads JSON, NDJSON, msgpack and form bodies by their Content-Type");
        } else {
            ctx.notes.unmapped(
                &c.file,
                c.line,
                format!("<parse> @type {ty}"),
                "nagare's http input reads JSON, NDJSON, msgpack and form bodies only",
            );
        }
    }
    tls_server(ctx, d, t);
}

fn parser_child(ctx: &mut Ctx, d: &Directive, t: &mut Table) {
    for c in d.children.iter().filter(|c| c.name == "parse") {
        let mut pt = Table::new("parser", false);
        parse_section(ctx, c, &mut pt, false);
        t.children.push(pt);
    }
}

fn src_syslog(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    bind(o, t, 5140);
    o.map(ctx, t, "tag", "tag", Conv::Str);
    let mut proto = o.val("protocol_type").map(str::to_string);
    for c in d.children.iter().filter(|c| c.name == "transport") {
        if c.arg == "tcp" || c.arg == "udp" {
            proto = Some(c.arg.clone());
        } else if c.arg == "tls" {
            proto = Some("tcp".into());
        }
    }
    if let Some(p) = proto {
        t.set("protocol", Val::s(p));
    }
    o.map_all(
        ctx,
        t,
        &[
            ("message_format", "message_format", Conv::Str),
            ("source_address_key", "source_address_key", Conv::Str),
            ("severity_key", "severity_key", Conv::Str),
            ("facility_key", "facility_key", Conv::Str),
            ("message_length_limit", "max_message_size", Conv::Size),
        ],
    );
    for c in d.children.iter().filter(|c| c.name == "parse") {
        if let Some(f) = c.value("message_format") {
            t.set("message_format", Val::s(f));
        }
    }
    o.get("frame_type");
    tls_server(ctx, d, t);
}

fn src_tcp(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    bind(o, t, 5170);
    o.map_all(
        ctx,
        t,
        &[
            ("tag", "tag", Conv::Str),
            ("delimiter", "delimiter", Conv::Str),
            ("source_address_key", "source_address_key", Conv::Str),
            ("message_length_limit", "max_line_size", Conv::Size),
        ],
    );
    parser_child(ctx, d, t);
    tls_server(ctx, d, t);
}

/// fluent-plugin-beats's `beats` (lib/fluent/plugin/in_beats.rb: `port`
/// 5044, `bind`, `tag`, `metadata_as_tag`, `max_connections`, `use_ssl`,
/// `ssl_certificate`, `ssl_key`, `format`/`<parse>`): the events are the
/// Beats' maps with `@timestamp` as their time, as nagare's beats input
/// takes them.
fn src_beats(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    bind(o, t, 5044);
    o.map_all(
        ctx,
        t,
        &[
            ("tag", "tag", Conv::Str),
            ("max_connections", "max_connections", Conv::Int),
        ],
    );
    if let Some(p) = o.get("metadata_as_tag") {
        if common::boolean(&p.value) == Some(true) {
            ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                "metadata_as_tag true",
                "the tag is the input's `tag`: retag on `$.@metadata.beat` with a rewrite_tag filter",
            );
        }
    }
    if o.val("use_ssl").and_then(common::boolean) == Some(true) {
        let mut tls = Table::new("tls", false);
        o.map(ctx, &mut tls, "ssl_certificate", "cert", Conv::Str);
        o.map(ctx, &mut tls, "ssl_key", "key", Conv::Str);
        t.children.push(tls);
    }
    if let Some(p) = o.get("format") {
        ctx.notes.unmapped_on(
            t,
            &p.file,
            p.line,
            format!("format {}", p.value),
            "nagare's beats input keeps `message` as sent: parse it with a parser filter",
        );
    }
    if let Some(c) = d.children.iter().find(|c| c.name == "parse") {
        ctx.notes.unmapped_on(
            t,
            &c.file,
            c.line,
            "<parse>",
            "nagare's beats input keeps `message` as sent: parse it with a parser filter",
        );
    }
}

fn src_udp(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    bind(o, t, 5160);
    o.map_all(
        ctx,
        t,
        &[
            ("tag", "tag", Conv::Str),
            ("delimiter", "delimiter", Conv::Str),
            ("source_address_key", "source_address_key", Conv::Str),
            ("message_length_limit", "max_line_size", Conv::Size),
        ],
    );
    parser_child(ctx, d, t);
}

fn src_kafka(ctx: &mut Ctx, _d: &Directive, o: &mut Opts, t: &mut Table) {
    o.map_all(
        ctx,
        t,
        &[
            ("brokers", "addresses", Conv::List),
            ("topics", "topics", Conv::List),
            ("consumer_group", "group", Conv::Str),
        ],
    );
    if let Some(f) = o.val("format") {
        let f = if f == "text" { "text" } else { f };
        t.set("format", Val::s(f));
    }
    if let Some(p) = o.val("add_prefix") {
        t.set("tag", Val::s(format!("{p}.${{topic}}")));
    }
    if let Some(b) = o.flag("start_from_beginning") {
        t.set("start_from", Val::s(if b { "earliest" } else { "latest" }));
    }
}

// ---------------------------------------------------------------- filters

fn flt_grep(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    let rule = |ctx: &mut Ctx, c: &Directive, name: &str, t: &mut Table| {
        let mut r = Table::new(name, true);
        let mut ro = Opts::new(c);
        if let Some(p) = ro.get("key") {
            match common::field(&p.value) {
                Some(f) => r.set("key", Val::s(f)),
                None => ctx.notes.unmapped(
                    &p.file,
                    p.line,
                    format!("key {}", p.value),
                    "nagare's field paths have no array indexes",
                ),
            }
        }
        if let Some(p) = ro.get("pattern") {
            match common::regex(&p.value) {
                Ok(re) => r.set("pattern", Val::s(re)),
                Err(why) => {
                    ctx.notes
                        .unmapped(&p.file, p.line, format!("pattern {}", p.value), why)
                }
            }
        }
        ro.finish(ctx, t, &format!("<{}>", c.name));
        if r.get("key").is_some() && r.get("pattern").is_some() {
            t.children.push(r);
        }
    };
    for c in &d.children {
        match c.name.as_str() {
            "regexp" => rule(ctx, c, "regex", t),
            "exclude" => rule(ctx, c, "exclude", t),
            "and" | "or" => {
                for g in &c.children {
                    let name = if g.name == "regexp" {
                        "regex"
                    } else {
                        "exclude"
                    };
                    let combine = if name == "regex" {
                        "regex_combine"
                    } else {
                        "exclude_combine"
                    };
                    t.set(combine, Val::s(c.name.clone()));
                    rule(ctx, g, name, t);
                }
            }
            other => ctx.notes.unmapped_on(
                t,
                &c.file,
                c.line,
                format!("<{other}> in grep"),
                "no equivalent",
            ),
        }
    }
    // Fluentd v0.12's `regexpN key pattern` and `excludeN key pattern`.
    for p in &d.params {
        for (prefix, name) in [("regexp", "regex"), ("exclude", "exclude")] {
            if p.key.starts_with(prefix)
                && p.key[prefix.len()..].chars().all(|c| c.is_ascii_digit())
                && p.key.len() > prefix.len()
            {
                o.get(&p.key);
                let (k, pat) = p
                    .value
                    .split_once(char::is_whitespace)
                    .unwrap_or((&p.value, ""));
                let mut r = Table::new(name, true);
                r.set("key", Val::s(k));
                match common::regex(pat.trim()) {
                    Ok(re) => {
                        r.set("pattern", Val::s(re));
                        t.children.push(r);
                    }
                    Err(why) => ctx.notes.unmapped(&p.file, p.line, p.key.clone(), why),
                }
            }
        }
    }
}

/// A record_transformer value as a nagare template: `${record["a"]["b"]}`
/// → `${record.a.b}`; `${tag}`, `${tag_parts[N]}`, `${hostname}` and
/// `${time}` as they are. Err names what has no equivalent.
fn template(v: &str) -> Result<String, String> {
    static RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"\$\{([^}]*)\}|#\{([^}]*)\}"#).expect("static regex")
    });
    static REC: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"^record((?:\[\s*["'][^"']*["']\s*\])+)$"#).expect("static regex")
    });
    static PART: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"\[\s*["']([^"']*)["']\s*\]"#).expect("static regex")
    });
    let mut out = String::new();
    let mut last = 0;
    for m in RE.captures_iter(v) {
        let whole = m.get(0).expect("match");
        out.push_str(&v[last..whole.start()]);
        last = whole.end();
        if let Some(ruby) = m.get(2) {
            out.push_str(&ruby_embedded(ruby.as_str())?);
            continue;
        }
        let inner = m.get(1).expect("group").as_str().trim();
        if inner == "tag" || inner == "hostname" || inner == "time" {
            out.push_str(&format!("${{{inner}}}"));
        } else if let Some(n) = inner
            .strip_prefix("tag_parts[")
            .and_then(|r| r.strip_suffix(']'))
        {
            out.push_str(&format!("${{tag_parts[{}]}}", n.trim()));
        } else if let Some(c) = REC.captures(inner) {
            let parts: Vec<&str> = PART
                .captures_iter(&c[1])
                .map(|p| p.get(1).expect("g").as_str())
                .collect();
            out.push_str(&format!("${{record.{}}}", parts.join(".")));
        } else {
            return Err(format!("`${{{inner}}}` has no equivalent in nagare's templates (${{tag}}, ${{tag_parts[N]}}, ${{hostname}}, ${{time}}, ${{record.a.b}})"));
        }
    }
    out.push_str(&v[last..]);
    Ok(out)
}

/// `#{…}` Ruby in a double-quoted value: `ENV['X']` (with `|| 'default'`)
/// and `Socket.gethostname`; anything else has no equivalent.
pub fn ruby_embedded(code: &str) -> Result<String, String> {
    static ENV: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"^ENV\s*(?:\[\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*\]|\.fetch\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']\s*(?:,\s*["']([^"']*)["']\s*)?\))\s*(?:\|\|\s*["']([^"']*)["'])?$"#).expect("static regex")
    });
    let c = code.trim();
    if c == "Socket.gethostname" || c == "hostname" {
        return Ok("${hostname}".into());
    }
    if let Some(m) = ENV.captures(c) {
        let name = m.get(1).or(m.get(2)).expect("one").as_str();
        if name.chars().any(|ch| ch.is_ascii_lowercase()) {
            return Err(format!(
                "the environment variable {name}: nagare expands only upper-case names"
            ));
        }
        let default = m.get(3).or(m.get(4)).map(|d| d.as_str());
        return Ok(match default {
            Some(d) => format!("${{{name}:-{d}}}"),
            None => format!("${{{name}}}"),
        });
    }
    Err(format!("Ruby code `#{{{c}}}` is not run by nagare"))
}

/// Replaces `#{…}` in a plain option value (ENV only), noting what cannot be.
fn plain_value(ctx: &mut Ctx, p: &Param) -> String {
    if !p.value.contains("#{") {
        return p.value.clone();
    }
    match template(&p.value) {
        Ok(v) if !v.contains("${hostname}") => v,
        Ok(v) => {
            ctx.notes.approx(
                &p.file,
                p.line,
                format!("{} {}", p.key, p.value),
                "the host name is not known when the config is converted; written as ${hostname}",
            );
            v
        }
        Err(why) => {
            ctx.notes
                .unmapped(&p.file, p.line, format!("{} {}", p.key, p.value), why);
            p.value.clone()
        }
    }
}

fn flt_record_transformer(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    let renew = o.flag("renew_record").unwrap_or(false);
    o.get("enable_ruby");
    o.get("auto_typecast");
    let mut set = Table::new("set", false);
    for rec in d.children.iter().filter(|c| c.name == "record") {
        for p in &rec.params {
            let single_record = p.value.trim().starts_with("${record[")
                && p.value.trim().ends_with("]}")
                && p.value.matches("${").count() == 1;
            match template(&p.value) {
                Ok(v) => {
                    let comment = single_record.then(|| {
                        "approx: a missing field sets nothing (Fluentd sets null)".to_string()
                    });
                    set.set_commented(&p.key, Val::s(v), comment);
                }
                Err(why) => ctx.notes.unmapped_on(
                    t,
                    &p.file,
                    p.line,
                    format!("<record> {} {}", p.key, p.value),
                    why,
                ),
            }
        }
    }
    if let Some(p) = o.get("remove_keys") {
        let keys: Vec<Val> = list(&p.value)
            .into_iter()
            .filter_map(|k| common::field(&k))
            .map(Val::Str)
            .collect();
        t.set("remove", Val::Arr(keys));
    }
    let keep: Option<Vec<String>> = o.get("keep_keys").map(|p| {
        list(&p.value)
            .into_iter()
            .filter_map(|k| common::field(&k))
            .collect()
    });
    if renew {
        // An allow-list of the fields set (always kept) and keep_keys.
        let mut k = keep.clone().unwrap_or_default();
        if k.is_empty() {
            k.extend(set.entries.iter().map(|e| e.key.clone()));
        }
        if k.is_empty() {
            ctx.notes.unmapped_on(
                t,
                &d.file,
                d.line,
                "renew_record true without <record> or keep_keys",
                "nagare's keep needs at least one field",
            );
        } else {
            t.set("keep", Val::Arr(k.into_iter().map(Val::Str).collect()));
        }
    } else if let Some(k) = keep {
        ctx.notes.approx(
            &d.file,
            d.line,
            "keep_keys without renew_record",
            "Fluentd reads keep_keys only with renew_record true; nagare's keep always applies",
        );
        let _ = k;
    }
    if let Some(p) = o.get("renew_time_key") {
        ctx.notes.unmapped_on(
            t,
            &p.file,
            p.line,
            format!("renew_time_key {}", p.value),
            "nagare's modify does not change the event time",
        );
    }
    if !set.entries.is_empty() {
        t.children.push(set);
    }
}

fn flt_parser(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    o.map_all(
        ctx,
        t,
        &[
            ("key_name", "key_name", Conv::Str),
            ("reserve_data", "reserve_data", Conv::Bool),
            ("remove_key_name_field", "remove_key_name_field", Conv::Bool),
            ("reserve_time", "reserve_time", Conv::Bool),
            ("inject_key_prefix", "inject_key_prefix", Conv::Str),
            ("hash_value_field", "hash_value_field", Conv::Str),
        ],
    );
    if let Some(p) = o.get("emit_invalid_record_to_error") {
        ctx.notes.approx(&p.file, p.line, "emit_invalid_record_to_error", "records that do not parse go on marked with parse_error, or to [system] error_label when one is set");
    }
    parser_child(ctx, d, t);
    if !t.has_child("parser") {
        t.child("parser").set("type", Val::s("none"));
    }
}

fn rewrite_tag_filter(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    t.set("unmatched", Val::s("drop"));
    o.get("capitalize_regex_backreference");
    if let Some(p) = o.get("hostname_command") {
        ctx.notes.unmapped(
            &p.file,
            p.line,
            "hostname_command",
            "nagare has no ${hostname} in tags",
        );
    }
    for c in d.children.iter().filter(|c| c.name == "rule") {
        let mut r = Table::new("rule", true);
        let mut ro = Opts::new(c);
        if let Some(p) = ro.get("key") {
            match common::field(&p.value) {
                Some(f) => r.set("key", Val::s(f)),
                None => ctx.notes.unmapped(
                    &p.file,
                    p.line,
                    format!("key {}", p.value),
                    "nagare's field paths have no array indexes",
                ),
            }
        }
        if let Some(p) = ro.get("pattern") {
            match common::regex(&p.value) {
                Ok(re) => r.set("pattern", Val::s(re)),
                Err(why) => {
                    ctx.notes
                        .unmapped(&p.file, p.line, format!("pattern {}", p.value), why)
                }
            }
        }
        if let Some(p) = ro.get("tag") {
            r.set("tag", Val::s(p.value.replace("__TAG__", "${tag}")));
        }
        if let Some(inv) = ro.flag("invert") {
            if inv {
                r.set("invert", Val::Bool(true));
            }
        }
        if let Some(p) = ro.get("label") {
            let l = p.value.trim_start_matches('@');
            if ctx.source_labels.contains(l) {
                ctx.notes.unmapped(&p.file, p.line, format!("label {}", p.value), "a rewritten event stays in its nagare label (labels are chosen by inputs); the label's sections are not reached");
            } else {
                r.comments.push(format!("label {}: its sections are converted without a label and select events by their new tag", p.value));
            }
        }
        ro.finish(ctx, t, "<rule>");
        if r.get("key").is_some() && r.get("pattern").is_some() && r.get("tag").is_some() {
            t.children.push(r);
        }
    }
}

// ---------------------------------------------------------------- outputs

fn format_child(d: &Directive) -> Option<&Directive> {
    d.children.iter().find(|c| c.name == "format")
}

fn out_stdout(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    o.get("output_type");
    let ty = format_child(d).map(|f| f.plugin_type()).unwrap_or("");
    match ty {
        "json" | "ltsv" | "msgpack" | "single_value" => t.set("format", Val::s(ty)),
        _ => {
            t.set_commented(
                "format",
                Val::s("json"),
                Some(
                    "approx: one JSON object per event (Fluentd prints `time tag: record`)".into(),
                ),
            );
            ctx.notes.approx(
                &d.file,
                d.line,
                "<match> @type stdout",
                "nagare prints each event as a JSON object {time, tag, record}",
            );
        }
    }
    inject_note(ctx, d);
}

fn inject_note(ctx: &mut Ctx, d: &Directive) {
    if let Some(i) = d.children.iter().find(|c| c.name == "inject") {
        ctx.notes.approx(&i.file, i.line, "<inject>", "nagare's json format writes the time and tag beside the record ({\"time\", \"tag\", \"record\"}), not as keys inside it");
    }
}

/// Fluentd's out_file names: the chunk's time in the name by the timekey.
pub(crate) fn timekey_format(secs: u64) -> &'static str {
    match secs {
        0..60 => "%Y%m%d%H%M%S",
        60..3600 => "%Y%m%d%H%M",
        3600..86400 => "%Y%m%d%H",
        _ => "%Y%m%d",
    }
}

fn out_file(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    let buf = d.children.iter().find(|c| c.name == "buffer");
    // `<buffer>` without keys keeps out_file's default key `time` (1d).
    let has_time = match buf {
        None => true,
        Some(b) => b.arg.trim().is_empty() || b.arg.split(',').any(|k| k.trim() == "time"),
    };
    let timekey = buf
        .and_then(|b| b.value("timekey"))
        .and_then(common::duration)
        .and_then(|d| humantime::parse_duration(&d).ok())
        .map(|d| d.as_secs())
        .unwrap_or(86400);
    let suffix = o.val("path_suffix").unwrap_or(".log").to_string();
    let mut append = o.flag("append").unwrap_or(false);
    if let Some(p) = o.get("path") {
        let mut path = plain_value(ctx, p);
        if path.contains("${tag[") {
            ctx.notes.approx(
                &p.file,
                p.line,
                "path ${tag[N]}",
                "nagare's file path takes ${tag} and strftime fields only",
            );
        }
        let has_strftime = path.contains('%');
        if path.contains('*') {
            path = path.replace(
                '*',
                if has_time {
                    timekey_format(timekey)
                } else {
                    ""
                },
            );
            t.set("path", Val::s(path));
        } else if has_time && !has_strftime {
            t.set(
                "path",
                Val::s(format!("{path}.{}{suffix}", timekey_format(timekey))),
            );
        } else {
            t.set("path", Val::s(format!("{path}{suffix}")));
        }
        if has_time {
            if let Some(b) = buf {
                if b.value("timekey_use_utc").and_then(common::boolean) != Some(true) {
                    ctx.notes.approx(
                        &b.file,
                        b.line,
                        "timekey_use_utc false",
                        "nagare names files by the events' UTC time",
                    );
                }
            }
        }
    }
    if !append && o.val("append").is_none() {
        // Fluentd's default writes a file per chunk; so does append = false.
        append = false;
    }
    t.set("append", Val::Bool(append));
    if let Some(p) = o.get("compress") {
        if p.value == "gzip" {
            t.set("compress", Val::s("gzip"));
        }
    }
    o.get("symlink_path");
    o.get("recompress");
    let ty = format_child(d)
        .map(|f| f.plugin_type())
        .unwrap_or("out_file");
    match ty {
        "json" | "ltsv" | "msgpack" | "single_value" => {
            t.set_commented(
                "format",
                Val::s(ty),
                (ty == "json")
                    .then(|| "approx: {\"time\",\"tag\",\"record\"} per line".to_string()),
            );
            if ty == "single_value" {
                if let Some(k) = format_child(d).and_then(|f| f.value("message_key")) {
                    t.set("message_key", Val::s(k));
                }
            }
        }
        other => {
            t.set_commented(
                "format",
                Val::s("json"),
                Some(format!("approx: Fluentd's {other} format")),
            );
            ctx.notes.approx(
                &d.file,
                d.line,
                format!("<format> {other}"),
                "written as nagare's json format ({\"time\",\"tag\",\"record\"} per line)",
            );
        }
    }
    inject_note(ctx, d);
}

fn out_secondary_file(ctx: &mut Ctx, _d: &Directive, o: &mut Opts, t: &mut Table) {
    let dir = o.val("directory").unwrap_or(".");
    let base = o.val("basename").unwrap_or("dump.bin");
    t.set("path", Val::s(format!("{dir}/{base}")));
    t.set("format", Val::s("msgpack"));
    let _ = ctx;
}

fn out_forward(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    o.map_all(
        ctx,
        t,
        &[
            ("require_ack_response", "require_ack_response", Conv::Bool),
            ("ack_response_timeout", "ack_response_timeout", Conv::Dur),
            ("heartbeat_interval", "heartbeat_interval", Conv::Dur),
            ("phi_threshold", "phi_threshold", Conv::Int),
            ("hard_timeout", "hard_timeout", Conv::Dur),
            ("connect_timeout", "connect_timeout", Conv::Dur),
            ("send_timeout", "send_timeout", Conv::Dur),
            ("keepalive", "keepalive", Conv::Bool),
        ],
    );
    if let Some(h) = o.val("heartbeat_type") {
        t.set("heartbeat_type", Val::s(h));
    }
    if let Some(c) = o.val("compress") {
        if c == "gzip" {
            t.set("compress", Val::s("gzip"));
        }
    }
    o.get("transport");
    o.get("recover_wait");
    for sec in d.children.iter().filter(|c| c.name == "security") {
        let mut so = Opts::new(sec);
        so.map(ctx, t, "shared_key", "shared_key", Conv::Str);
        if let Some(p) = so.get("self_hostname") {
            let v = plain_value(ctx, p);
            if v != "${hostname}" {
                t.set("self_hostname", Val::s(v));
            }
        }
        so.finish(ctx, t, "<security>");
    }
    for s in d.children.iter().filter(|c| c.name == "server") {
        let mut st = Table::new("server", true);
        let mut so = Opts::new(s);
        let host = so.val("host").unwrap_or("127.0.0.1").to_string();
        let port = so.val("port").unwrap_or("24224").to_string();
        st.set("address", Val::s(host_port(&host, &port)));
        so.map_all(
            ctx,
            &mut st,
            &[
                ("weight", "weight", Conv::Int),
                ("standby", "standby", Conv::Bool),
                ("shared_key", "shared_key", Conv::Str),
                ("username", "username", Conv::Str),
                ("password", "password", Conv::Str),
            ],
        );
        so.get("name");
        so.finish(ctx, t, "<server>");
        t.children.push(st);
    }
    if o.val("transport") == Some("tls") || d.value("transport") == Some("tls") {
        let mut tls = Table::new("tls", false);
        if let Some(p) = o.get("tls_cert_path") {
            let l = list(&p.value);
            if let Some(first) = l.first() {
                tls.set("ca", Val::s(first));
            }
        }
        o.map(ctx, &mut tls, "tls_client_cert_path", "cert", Conv::Str);
        o.map(
            ctx,
            &mut tls,
            "tls_client_private_key_path",
            "key",
            Conv::Str,
        );
        if o.flag("tls_insecure_mode") == Some(true) || o.flag("tls_verify_hostname") == Some(false)
        {
            tls.set("verify", Val::Bool(false));
        }
        o.get("tls_version");
        o.get("tls_allow_self_signed_cert");
        tls.set("enable", Val::Bool(true));
        t.children.push(tls);
    }
    if let Some(sd) = d.children.iter().find(|c| c.name == "service_discovery") {
        ctx.notes.unmapped_on(
            t,
            &sd.file,
            sd.line,
            "<service_discovery>",
            "write nagare's [output.service_discovery] (type file or dns) by hand",
        );
    }
}

fn out_http(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    o.map(ctx, t, "endpoint", "endpoint", Conv::Str);
    if let Some(p) = o.get("http_method") {
        if p.value != "post" {
            ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("http_method {}", p.value),
                "nagare's http output POSTs",
            );
        }
    }
    let ty = format_child(d).map(|f| f.plugin_type()).unwrap_or("json");
    let array = o.flag("json_array").unwrap_or(false);
    match ty {
        "json" if array => t.set("format", Val::s("json_array")),
        "json" => t.set("format", Val::s("ndjson")),
        "msgpack" => t.set("format", Val::s("msgpack")),
        other => ctx.notes.unmapped_on(
            t,
            &d.file,
            d.line,
            format!("<format> {other}"),
            "nagare's http output sends ndjson, a JSON array or msgpack",
        ),
    }
    t.set_commented(
        "time_key",
        Val::s(""),
        Some("Fluentd's out_http sends the record alone".into()),
    );
    if let Some(c) = o.val("compress") {
        if c == "gzip" {
            t.set("compress", Val::s("gzip"));
        }
    }
    let mut headers = Table::new("headers", false);
    if let Some(p) = o.get("headers") {
        match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&p.value) {
            Ok(m) => {
                for (k, v) in m {
                    headers.set(
                        &k,
                        Val::s(
                            v.as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| v.to_string()),
                        ),
                    );
                }
            }
            Err(_) => ctx
                .notes
                .unmapped(&p.file, p.line, "headers", "not a JSON object"),
        }
    }
    if let Some(ct) = o.val("content_type") {
        headers.set("Content-Type", Val::s(ct));
    }
    if !headers.entries.is_empty() {
        t.children.push(headers);
    }
    if let Some(p) = o.get("read_timeout").or(None) {
        if let Some(dur) = common::duration(&p.value) {
            t.set("timeout", Val::s(dur));
        }
    }
    o.get("open_timeout");
    for a in d.children.iter().filter(|c| c.name == "auth") {
        let mut ao = Opts::new(a);
        ao.get("method");
        ao.map(ctx, t, "username", "username", Conv::Str);
        ao.map(ctx, t, "password", "password", Conv::Str);
        ao.finish(ctx, t, "<auth>");
    }
    let mut tls = Table::new("tls", false);
    o.map_all(
        ctx,
        &mut tls,
        &[
            ("tls_ca_cert_path", "ca", Conv::Str),
            ("tls_client_cert_path", "cert", Conv::Str),
            ("tls_private_key_path", "key", Conv::Str),
        ],
    );
    if o.val("tls_verify_mode") == Some("none") {
        tls.set("verify", Val::Bool(false));
    }
    if !tls.entries.is_empty() {
        t.children.push(tls);
    }
    inject_note(ctx, d);
}

fn out_kafka(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    o.map(ctx, t, "brokers", "addresses", Conv::List);
    if let Some(p) = o.get("default_topic").or(None) {
        t.set("topic", Val::s(&p.value));
    }
    if t.get("topic").is_none() {
        if let Some(p) = o.get("topic") {
            t.set("topic", Val::s(&p.value));
        }
    }
    if t.get("topic").is_none() {
        t.set_commented(
            "topic",
            Val::s("${tag}"),
            Some("Fluentd's kafka output sends to the tag's topic without default_topic".into()),
        );
    }
    if let Some(p) = o.get("topic_key") {
        ctx.notes.unmapped_on(
            t,
            &p.file,
            p.line,
            format!("topic_key {}", p.value),
            "nagare's topic comes from `topic` (with ${tag}), not from a record field",
        );
    }
    o.map(ctx, t, "message_key_key", "key_field", Conv::Str);
    if let Some(p) = o.get("required_acks") {
        match p.value.trim() {
            "-1" => t.set("acks", Val::s("all")),
            "1" => t.set("acks", Val::s("leader")),
            _ => ctx.notes.unmapped(
                &p.file,
                p.line,
                format!("required_acks {}", p.value),
                "nagare waits for the leader or all replicas",
            ),
        }
    }
    if let Some(c) = o.val("compression_codec") {
        t.set("compression", Val::s(c));
    }
    let ty = format_child(d).map(|f| f.plugin_type()).unwrap_or("json");
    match ty {
        "json" | "msgpack" | "single_value" => t.set("format", Val::s(ty)),
        other => ctx.notes.unmapped_on(
            t,
            &d.file,
            d.line,
            format!("<format> {other}"),
            "nagare's kafka output writes json, msgpack or single_value",
        ),
    }
    if let (Some(u), Some(pw)) = (o.val("username"), o.val("password")) {
        let mut s = Table::new("sasl", false);
        let mech = match o.val("scram_mechanism") {
            Some("sha256") => "SCRAM-SHA-256",
            Some("sha512") => "SCRAM-SHA-512",
            _ => "PLAIN",
        };
        s.set("mechanism", Val::s(mech));
        s.set("username", Val::s(u));
        s.set("password", Val::s(pw));
        t.children.push(s);
    }
    let mut tls = Table::new("tls", false);
    o.map_all(
        ctx,
        &mut tls,
        &[
            ("ssl_ca_cert", "ca", Conv::Str),
            ("ssl_client_cert", "cert", Conv::Str),
            ("ssl_client_cert_key", "key", Conv::Str),
        ],
    );
    if !tls.entries.is_empty() {
        t.children.push(tls);
    }
    inject_note(ctx, d);
}

fn out_copy(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    if let Some(p) = o.get("copy_mode") {
        if p.value != "no_copy" && p.value != "shallow" {
            ctx.notes.approx(
                &p.file,
                p.line,
                format!("copy_mode {}", p.value),
                "each nagare store gets the same events; a store cannot change them",
            );
        }
    }
    for s in d.children.iter().filter(|c| c.name == "store") {
        if let Some(p) = s.value("ignore_error") {
            let _ = p;
            ctx.notes.approx(&s.file, s.line, "<store ignore_error>", "nagare's stores have buffers of their own: one store's failures never stop the others");
        }
        if let Some(st) = build_output(ctx, s, "store") {
            t.children.push(st);
        }
    }
}
