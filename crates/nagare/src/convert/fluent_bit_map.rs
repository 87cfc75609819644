//! Fluent Bit (classic or YAML, read into the same sections) → nagare: the
//! mapping tables of `[INPUT]`, `[FILTER]` and `[OUTPUT]` plugins (one
//! entry each), `[SERVICE]`, and the `[PARSER]`/`[MULTILINE_PARSER]`
//! sections an input or a parser filter names.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::common::{self, Notes, Used};
use super::emit::{Doc, Table, Val};
use super::fluent_bit::{Config, Entry, Section};
use super::{Dialect, Note, NoteKind};

mod stores;

type MapFn = fn(&mut Ctx, &Section, &mut Used, &mut Table);

/// `[INPUT] Name X` → `[[input]] type = Y`.
const INPUTS: &[(&str, &str, MapFn)] = &[
    ("tail", "tail", in_tail),
    ("forward", "forward", in_forward),
    ("http", "http", in_http),
    ("syslog", "syslog", in_syslog),
    ("tcp", "tcp", in_tcp),
    ("udp", "udp", in_tcp),
    ("kafka", "kafka", in_kafka),
    ("systemd", "journald", stores::in_systemd),
    ("exec", "exec", stores::in_exec),
    ("elasticsearch", "elasticsearch", stores::in_elasticsearch),
    ("splunk", "splunk_hec", stores::in_splunk),
];

/// `[FILTER] Name X` → `[[filter]] type = Y`.
const FILTERS: &[(&str, &str, MapFn)] = &[
    ("grep", "grep", flt_grep),
    ("modify", "modify", flt_modify),
    ("record_modifier", "modify", flt_record_modifier),
    ("parser", "parser", flt_parser),
    ("rewrite_tag", "rewrite_tag", flt_rewrite_tag),
    ("throttle", "throttle", flt_throttle),
    ("lua", "lua", flt_lua),
];

/// `[OUTPUT] Name X` → `[[output]] type = Y`.
const OUTPUTS: &[(&str, &str, MapFn)] = &[
    ("stdout", "stdout", out_stdout),
    ("file", "file", out_file),
    ("null", "null", out_null),
    ("forward", "forward", out_forward),
    ("http", "http", out_http),
    ("kafka", "kafka", out_kafka),
    ("es", "elasticsearch", stores::out_es),
    ("opensearch", "elasticsearch", stores::out_es),
    ("loki", "loki", stores::out_loki),
    ("splunk", "splunk_hec", stores::out_splunk),
    ("s3", "s3", stores::out_s3),
    ("pgsql", "postgresql", stores::out_pgsql),
];

/// Plugins nagare does not have yet (or never will), with what to say. When
/// one lands, its entry moves to a table above.
const NOT_YET: &[(&str, &str)] = &[
    ("dummy", "nagare has no generator input (`nagare gen` writes generated events to a file, TCP, HTTP or a forward port)"),
    ("kubernetes", "nagare has no kubernetes metadata filter"),
    ("nest", "nagare's modify cannot nest or lift maps"),
    ("multiline", "use a tail input's multiline parser (format_firstline)"),
    ("stdout", "use `nagare tap` to watch events"),
];

/// Keys every plugin section may have that the mapping reads itself or
/// that need no equivalent.
const COMMON: &[&str] = &[
    "name",
    "match",
    "tag",
    "alias",
    "log_level",
    "mem_buf_limit",
    "storage.type",
    "retry_limit",
    "workers",
    "mkdir",
];

pub struct Ctx {
    notes: Notes,
    parsers: HashMap<String, Section>,
    multiline: HashMap<String, Section>,
    base: PathBuf,
    flush: Option<String>,
}

impl Ctx {
    fn unused(&mut self, s: &Section, used: &Used, t: &mut Table) {
        for e in &s.entries {
            if used.has(&e.key) || COMMON.contains(&e.key.to_ascii_lowercase().as_str()) {
                continue;
            }
            let name = s.value("name").unwrap_or("");
            self.notes.unmapped_on(
                t,
                &e.file,
                e.line,
                format!("[{}] {name}: {} {}", s.name, e.key, e.value),
                "no equivalent option in nagare",
            );
        }
    }
}

fn get<'a>(s: &'a Section, used: &mut Used, key: &str) -> Option<&'a Entry> {
    let e = s.get(key)?;
    used.mark(key);
    Some(e)
}

fn val<'a>(s: &'a Section, used: &mut Used, key: &str) -> Option<&'a str> {
    get(s, used, key).map(|e| e.value.as_str())
}

fn all<'a>(s: &'a Section, used: &mut Used, key: &'a str) -> Vec<&'a Entry> {
    used.mark(key);
    s.all(key).collect()
}

pub fn convert(cfg: &Config, path: &Path, dialect: Dialect) -> (String, Vec<Note>) {
    let mut ctx = Ctx {
        notes: Notes::default(),
        parsers: HashMap::new(),
        multiline: HashMap::new(),
        base: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
        flush: None,
    };
    for (file, line, name) in &cfg.unknown_vars {
        ctx.notes.unmapped(
            file,
            *line,
            format!("${{{name}}}"),
            "not set by @SET/env; nagare reads only upper-case environment variables",
        );
    }
    for s in &cfg.sections {
        if let Some(n) = s.value("name") {
            match s.name.as_str() {
                "PARSER" => {
                    ctx.parsers.insert(n.to_string(), s.clone());
                }
                "MULTILINE_PARSER" => {
                    ctx.multiline.insert(n.to_string(), s.clone());
                }
                _ => {}
            }
        }
    }
    let mut doc = Doc {
        header: vec![
            format!("Converted by `nagare convert` from {} ({dialect}).", path.display()),
            "Lines marked `approx:` behave differently from the peer; `not converted:` comments list what has no equivalent.".into(),
        ],
        ..Doc::default()
    };
    let mut system = Table::new("system", false);
    let mut monitor = None;
    let (mut inputs, mut filters, mut outputs) = (Vec::new(), Vec::new(), Vec::new());
    let mut index: HashMap<String, usize> = HashMap::new();
    for s in &cfg.sections {
        match s.name.as_str() {
            "SERVICE" => service(&mut ctx, s, &mut system, &mut monitor),
            "INPUT" | "FILTER" | "OUTPUT" => {
                let name = s.value("name").unwrap_or("").to_ascii_lowercase();
                let (table, kind, list) = match s.name.as_str() {
                    "INPUT" => (INPUTS, "input", &mut inputs),
                    "FILTER" => (FILTERS, "filter", &mut filters),
                    _ => (OUTPUTS, "output", &mut outputs),
                };
                let i = index.entry(format!("{kind}/{name}")).or_insert(0);
                let n = *i;
                *i += 1;
                let Some(&(_, nagare, map)) = table.iter().find(|(t, _, _)| *t == name) else {
                    let why = NOT_YET
                        .iter()
                        .find(|(t, _)| *t == name)
                        .map(|(_, w)| *w)
                        .unwrap_or("nagare has no plugin of this type");
                    ctx.notes
                        .unmapped(&s.file, s.line, format!("[{}] Name {name}", s.name), why);
                    continue;
                };
                let mut t = Table::new(kind, true);
                t.comments
                    .push(format!("[{}] {name} ({}:{})", s.name, s.file, s.line));
                t.set("type", Val::s(nagare));
                let mut used = Used::default();
                if kind == "input" {
                    let tag = s
                        .value("tag")
                        .map(str::to_string)
                        .unwrap_or_else(|| format!("{name}.{n}"));
                    if !matches!(nagare, "forward" | "http" | "kafka") || s.value("tag").is_some() {
                        t.set("tag", Val::s(tag));
                    }
                } else {
                    if let Some(e) = s.get("match_regex") {
                        used.mark("match_regex");
                        ctx.notes.unmapped(&e.file, e.line, format!("Match_Regex {}", e.value), "nagare selects tags with match patterns (*, **, {a,b}) only; the section is not converted");
                        continue;
                    }
                    let Some(m) = s.get("match") else {
                        ctx.notes.unmapped(
                            &s.file,
                            s.line,
                            format!("[{}] {name} without Match", s.name),
                            "Fluent Bit gives it no records; not converted",
                        );
                        continue;
                    };
                    let (pat, approx) = common::fluent_bit_match(&m.value);
                    if approx {
                        ctx.notes.approx(&m.file, m.line, format!("Match {}", m.value), "nagare's `*` matches one whole tag part; a `*` inside a part is not a wildcard");
                    }
                    t.set("match", Val::s(pat));
                }
                map(&mut ctx, s, &mut used, &mut t);
                if t.get("type") == Some(&Val::s("__skip__")) {
                    continue;
                }
                ctx.unused(s, &used, &mut t);
                if kind == "output" {
                    if let Some(f) = &ctx.flush {
                        if f != "1s" {
                            t.child("buffer").set_commented(
                                "flush_interval",
                                Val::s(f),
                                Some("[SERVICE] Flush".into()),
                            );
                        }
                    }
                }
                list.push(t);
            }
            "PARSER" | "MULTILINE_PARSER" => {}
            other => ctx.notes.unmapped(
                &s.file,
                s.line,
                format!("[{other}]"),
                "no equivalent section in nagare",
            ),
        }
    }
    if !system.entries.is_empty() {
        doc.tables.push(system);
    }
    if let Some(m) = monitor {
        doc.tables.push(m);
    }
    doc.tables.extend(inputs);
    doc.tables.extend(filters);
    doc.tables.extend(outputs);
    for n in &ctx.notes.list {
        if n.kind == NoteKind::Unmapped {
            doc.footer.push(format!("not converted: {n}"));
        }
    }
    (doc.render(), ctx.notes.list)
}

fn service(ctx: &mut Ctx, s: &Section, system: &mut Table, monitor: &mut Option<Table>) {
    let mut used = Used::default();
    if let Some(l) = val(s, &mut used, "log_level") {
        let l = match l.to_ascii_lowercase().as_str() {
            "off" => "error".to_string(),
            "warning" => "warn".to_string(),
            other => other.to_string(),
        };
        system.set("log_level", Val::s(l));
    }
    if let Some(f) = val(s, &mut used, "flush") {
        ctx.flush = common::duration(f);
    }
    if let Some(g) = val(s, &mut used, "grace").and_then(common::duration) {
        system.set("shutdown_timeout", Val::s(g));
    }
    if val(s, &mut used, "http_server").and_then(common::boolean) == Some(true) {
        let host = val(s, &mut used, "http_listen").unwrap_or("0.0.0.0");
        let port = val(s, &mut used, "http_port").unwrap_or("2020");
        let mut m = Table::new("monitor", false);
        m.set_commented(
            "bind",
            Val::s(format!("{host}:{port}")),
            Some("approx: nagare's /api/plugins and /metrics, not Fluent Bit's API".into()),
        );
        *monitor = Some(m);
    }
    for k in [
        "http_listen",
        "http_port",
        "parsers_file",
        "daemon",
        "plugins_file",
        "streams_file",
        "hot_reload",
    ] {
        used.mark(k);
    }
    if let Some(e) = get(s, &mut used, "daemon") {
        if common::boolean(&e.value) == Some(true) {
            ctx.notes.approx(
                &e.file,
                e.line,
                "Daemon On",
                "nagare stays in the foreground (run it under systemd)",
            );
        }
    }
    let mut tmp = Table::new("x", false);
    ctx.unused(s, &used, &mut tmp);
    system.comments.extend(tmp.comments);
}

// ---------------------------------------------------------------- parsers

/// A `[PARSER]` as an `[input.parser]`/`[filter.parser]` table; unparsable
/// lines land under `message_key` (Fluent Bit's `log`).
fn parser_table(ctx: &mut Ctx, name: &str, at: &Entry, message_key: &str) -> Table {
    let mut pt = Table::new("parser", false);
    let Some(p) = ctx.parsers.get(name).cloned() else {
        let builtin = [
            "json",
            "docker",
            "syslog-rfc5424",
            "syslog-rfc3164",
            "apache2",
            "nginx",
            "apache_error",
        ];
        let ty = match name {
            "json" | "docker" => Some("json"),
            "syslog-rfc5424" | "syslog-rfc3164" | "syslog-rfc3164-local" => Some("syslog"),
            "apache2" | "nginx" | "apache_error" => Some(name),
            _ => None,
        };
        match ty {
            Some(t) if builtin.iter().any(|b| name.starts_with(b)) => {
                pt.set("type", Val::s(t));
                ctx.notes.approx(&at.file, at.line, format!("Parser {name}"), format!("not defined in a Parsers_File read here: nagare's own `{t}` parser is used"));
            }
            _ => {
                ctx.notes.unmapped(
                    &at.file,
                    at.line,
                    format!("Parser {name}"),
                    "no [PARSER] of that name in the Parsers_File; lines are kept whole",
                );
                pt.set("type", Val::s("none"));
            }
        }
        pt.set("message_key", Val::s(message_key));
        return pt;
    };
    let mut used = Used::default();
    used.mark("name");
    let format = val(&p, &mut used, "format")
        .unwrap_or("")
        .to_ascii_lowercase();
    match format.as_str() {
        "regex" => {
            pt.set("type", Val::s("regex"));
            if let Some(e) = get(&p, &mut used, "regex") {
                match common::regex(&e.value) {
                    Ok(r) => pt.set("expression", Val::s(r)),
                    Err(why) => ctx.notes.unmapped(&e.file, e.line, "Regex", why),
                }
            }
        }
        "json" | "ltsv" => pt.set("type", Val::s(&format)),
        other => {
            ctx.notes.unmapped(&p.file, p.line, format!("[PARSER] {name} Format {other}"), "nagare's parsers: none, json, regex, ltsv, csv, tsv, apache2, nginx, syslog, multiline");
            pt.set("type", Val::s("none"));
        }
    }
    pt.set("message_key", Val::s(message_key));
    if let Some(k) = val(&p, &mut used, "time_key") {
        pt.set("time_key", Val::s(k));
    } else {
        // Fluent Bit reads no time without Time_Key; nagare would read `time`.
        pt.set_commented(
            "time_key",
            Val::s("__fluent_bit_no_time_key__"),
            Some("Fluent Bit reads no event time without Time_Key".into()),
        );
    }
    if let Some(f) = val(&p, &mut used, "time_format") {
        match common::time_format(f) {
            Some(f) => pt.set("time_format", Val::s(f)),
            None => pt
                .comments
                .push(format!("Time_Format {f}: RFC 3339, read without a format")),
        }
    }
    if let Some(k) = val(&p, &mut used, "time_keep").and_then(common::boolean) {
        pt.set("keep_time_key", Val::Bool(k));
    }
    if let Some(e) = get(&p, &mut used, "time_offset") {
        pt.comments.push(format!("approx: Time_Offset {} — nagare reads times without a zone as local time: run it with TZ set to this offset", e.value));
        ctx.notes.approx(&e.file, e.line, format!("Time_Offset {}", e.value), format!("nagare has no time offset option: times without a zone are read in the local zone, so run nagare with TZ={}", super::fluentd_map::posix_tz(&e.value)));
    }
    if let Some(e) = get(&p, &mut used, "types") {
        let mut types = Table::new("types", false);
        for pair in e.value.split_whitespace() {
            if let Some((k, v)) = pair.split_once(':') {
                let v = match v {
                    "integer" | "float" | "bool" | "string" => v,
                    "hex" => "integer",
                    _ => "string",
                };
                types.set(k, Val::s(v));
            }
        }
        pt.children.push(types);
    }
    let mut tmp = Table::new("x", false);
    ctx.unused(&p, &used, &mut tmp);
    pt.comments.extend(tmp.comments);
    if !matches!(format.as_str(), "json") {
        ctx.notes.approx(&at.file, at.line, format!("Parser {name}"), format!("a line that does not parse is kept as {{\"{message_key}\": line}} with a parse_error field (Fluent Bit adds none)"));
    }
    pt
}

/// A `[MULTILINE_PARSER]` of type regex as a multiline parser: the
/// `start_state` rule starts an event, every other line continues it.
fn multiline_table(ctx: &mut Ctx, name: &str, at: &Entry, message_key: &str) -> Option<Table> {
    let Some(m) = ctx.multiline.get(name).cloned() else {
        let why = match name {
            "java" | "python" | "go" | "ruby" => "nagare has no built-in multiline language rules: write a multiline parser with format_firstline",
            _ => "no [MULTILINE_PARSER] of that name",
        };
        ctx.notes
            .unmapped(&at.file, at.line, format!("multiline.parser {name}"), why);
        return None;
    };
    let mut pt = Table::new("parser", false);
    pt.set("type", Val::s("multiline"));
    pt.set("message_key", Val::s(message_key));
    let mut used = Used::default();
    used.mark("name");
    if let Some(t) = val(&m, &mut used, "type") {
        if t != "regex" {
            ctx.notes.unmapped(
                &m.file,
                m.line,
                format!("[MULTILINE_PARSER] {name} type {t}"),
                "only type regex converts",
            );
            return None;
        }
    }
    let mut conts = Vec::new();
    for r in all(&m, &mut used, "rule") {
        let parts = quoted_parts(&r.value);
        if parts.len() < 3 {
            ctx.notes.unmapped(
                &r.file,
                r.line,
                format!("rule {}", r.value),
                "a rule is \"state\" \"/regex/\" \"next state\"",
            );
            continue;
        }
        if parts[0] == "start_state" {
            match common::regex(&parts[1]) {
                Ok(re) => pt.set("format_firstline", Val::s(re)),
                Err(why) => ctx.notes.unmapped(&r.file, r.line, "start_state rule", why),
            }
        } else {
            match common::regex(&parts[1]) {
                Ok(re) => conts.push(format!("(?:{re})")),
                Err(why) => ctx
                    .notes
                    .unmapped(&r.file, r.line, format!("rule {}", r.value), why),
            }
        }
    }
    if !conts.is_empty() {
        // Fluent Bit's states are folded into one: a line any continuation
        // rule matches continues the event, whatever state it is in.
        pt.set_commented(
            "format_continuation",
            Val::s(conts.join("|")),
            (conts.len() > 1)
                .then(|| "approx: the continuation rules of every state, as one".to_string()),
        );
        ctx.notes.approx(
            &m.file,
            m.line,
            format!("[MULTILINE_PARSER] {name}"),
            "joined lines end without the newline Fluent Bit ends each message with",
        );
    }
    if let Some(f) =
        val(&m, &mut used, "flush_timeout").and_then(|ms| ms.trim().parse::<u64>().ok())
    {
        pt.set("multiline_flush_interval", Val::s(format!("{f}ms")));
    }
    if let Some(e) = get(&m, &mut used, "parser") {
        let inner = parser_table(ctx, &e.value.clone(), e, message_key);
        if let Some(x) = inner.get("expression").cloned() {
            pt.set("expression", x);
        }
        for k in ["time_key", "time_format", "keep_time_key"] {
            if let Some(v) = inner.get(k).cloned() {
                pt.set(k, v);
            }
        }
    }
    let mut tmp = Table::new("x", false);
    ctx.unused(&m, &used, &mut tmp);
    pt.comments.extend(tmp.comments);
    Some(pt)
}

/// `"a" "b c" "d"` or `a b c` as its parts.
fn quoted_parts(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = v.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&c) = chars.peek() else { break };
        let mut cur = String::new();
        if c == '"' || c == '\'' {
            chars.next();
            for ch in chars.by_ref() {
                if ch == c {
                    break;
                }
                cur.push(ch);
            }
        } else {
            while let Some(&ch) = chars.peek() {
                if ch.is_whitespace() {
                    break;
                }
                cur.push(ch);
                chars.next();
            }
        }
        out.push(cur);
    }
    out
}

// ---------------------------------------------------------------- inputs

fn bind(s: &Section, used: &mut Used, t: &mut Table, port: u16) {
    let host = val(s, used, "listen").unwrap_or("0.0.0.0").to_string();
    let port = val(s, used, "port")
        .map(str::to_string)
        .unwrap_or_else(|| port.to_string());
    t.set("bind", Val::s(format!("{host}:{port}")));
}

fn tls(s: &Section, used: &mut Used, t: &mut Table, client: bool) {
    if val(s, used, "tls").and_then(common::boolean) != Some(true) {
        return;
    }
    let mut tls = Table::new("tls", false);
    for (k, n) in [
        ("tls.crt_file", "cert"),
        ("tls.key_file", "key"),
        ("tls.ca_file", "ca"),
    ] {
        if let Some(v) = val(s, used, k) {
            tls.set(n, Val::s(v));
        }
    }
    if let Some(v) = val(s, used, "tls.verify").and_then(common::boolean) {
        tls.set("verify", Val::Bool(v));
    }
    if client {
        if let Some(v) = val(s, used, "tls.vhost") {
            tls.set("server_name", Val::s(v));
        }
    }
    tls.set("enable", Val::Bool(true));
    t.children.push(tls);
}

fn in_tail(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(p) = val(s, used, "path") {
        let paths: Vec<String> = p
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect();
        if paths.len() == 1 {
            t.set("path", Val::s(&paths[0]));
        } else {
            t.set("path", Val::Arr(paths.into_iter().map(Val::Str).collect()));
        }
    }
    if let Some(p) = val(s, used, "exclude_path") {
        t.set(
            "exclude",
            Val::Arr(p.split(',').map(|x| Val::s(x.trim())).collect()),
        );
    }
    if let Some(e) = get(s, used, "db") {
        // nagare keeps its own position file beside Fluent Bit's DB, and at
        // its first start resumes each file where the DB left it.
        t.set_commented(
            "position_db",
            Val::s(format!("{}.nagare", e.value)),
            Some("nagare's own positions".into()),
        );
        // Only a file that is there: nagare refuses to start on a missing one.
        if Path::new(&e.value).exists() {
            t.set_commented(
                "import_fluent_bit_db",
                Val::s(&e.value),
                Some("resume where Fluent Bit left off (first start)".into()),
            );
        } else {
            t.comments.push(format!("import_fluent_bit_db = {:?} when Fluent Bit has written it (it was not there when converted)", e.value));
        }
    }
    if let Some(b) = val(s, used, "read_from_head").and_then(common::boolean) {
        t.set("read_from_head", Val::Bool(b));
    }
    if let Some(d) = val(s, used, "refresh_interval").and_then(common::duration) {
        t.set("refresh_interval", Val::s(d));
    }
    if let Some(k) = val(s, used, "path_key") {
        t.set("path_key", Val::s(k));
    }
    if val(s, used, "skip_long_lines").and_then(common::boolean) == Some(true) {
        t.set("long_lines", Val::s("skip"));
    }
    if let Some(sz) = val(s, used, "buffer_max_size").and_then(common::size) {
        t.set("max_line_size", Val::s(sz));
    }
    if val(s, used, "inotify_watcher").and_then(common::boolean) == Some(false) {
        t.set("watch", Val::Bool(false));
    }
    for k in [
        "rotate_wait",
        "db.sync",
        "db.locking",
        "db.journal_mode",
        "buffer_chunk_size",
        "refresh_interval",
    ] {
        used.mark(k);
    }
    let key = val(s, used, "key").unwrap_or("log").to_string();
    let ml = get(s, used, "multiline.parser").cloned();
    let parser = get(s, used, "parser").cloned();
    let old_ml = val(s, used, "multiline").and_then(common::boolean) == Some(true);
    let firstline = get(s, used, "parser_firstline").cloned();
    if let Some(m) = ml {
        let name = m.value.split(',').next().unwrap_or("").trim().to_string();
        if name == "docker" || name == "cri" {
            // The built-ins join a container runtime's split lines: nagare's
            // parsers of the same names do.
            let mut pt = Table::new("parser", false);
            pt.set("type", Val::s(&name));
            pt.set("message_key", Val::s(&key));
            if m.value.contains(',') {
                pt.comments.push(format!(
                    "approx: multiline.parser {}: nagare reads the first format only",
                    m.value
                ));
                ctx.notes.approx(
                    &m.file,
                    m.line,
                    format!("multiline.parser {}", m.value),
                    "nagare's tail reads one container format: the first listed",
                );
            }
            t.children.push(pt);
            return;
        }
        if let Some(pt) = multiline_table(ctx, &name, &m, &key) {
            t.children.push(pt);
            return;
        }
    }
    if let (true, Some(f)) = (old_ml, firstline) {
        let first = parser_table(ctx, &f.value, &f, &key);
        let mut pt = Table::new("parser", false);
        pt.set("type", Val::s("multiline"));
        pt.set("message_key", Val::s(&key));
        if let Some(Val::Str(e)) = first.get("expression") {
            pt.set("format_firstline", Val::s(e));
            pt.set("expression", Val::s(e));
        }
        for k in ["time_key", "time_format", "keep_time_key"] {
            if let Some(v) = first.get(k).cloned() {
                pt.set(k, v);
            }
        }
        if let Some(ms) = val(s, used, "multiline_flush").and_then(common::duration) {
            pt.set("multiline_flush_interval", Val::s(ms));
        }
        t.children.push(pt);
        return;
    }
    let pt = match parser {
        Some(p) => parser_table(ctx, &p.value, &p, &key),
        None => {
            let mut pt = Table::new("parser", false);
            pt.set("type", Val::s("none"));
            pt.set("message_key", Val::s(&key));
            pt
        }
    };
    t.children.push(pt);
}

fn in_forward(_ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(p) = val(s, used, "unix_path") {
        t.set("path", Val::s(p));
    } else {
        bind(s, used, t, 24224);
    }
    if let Some(k) = val(s, used, "shared_key") {
        t.set("shared_key", Val::s(k));
    }
    if let Some(k) = val(s, used, "self_hostname") {
        t.set("self_hostname", Val::s(k));
    }
    if let Some(sz) = val(s, used, "buffer_max_size").and_then(common::size) {
        t.set("max_frame_size", Val::s(sz));
    }
    used.mark("buffer_chunk_size");
    tls(s, used, t, false);
}

fn in_http(_ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    bind(s, used, t, 9880);
    if let Some(k) = val(s, used, "tag_key") {
        t.set("tag_key", Val::s(k));
    }
    if let Some(sz) = val(s, used, "buffer_max_size").and_then(common::size) {
        t.set("max_body_size", Val::s(sz));
    }
    used.mark("buffer_chunk_size");
    tls(s, used, t, false);
}

fn in_syslog(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let mode = val(s, used, "mode")
        .unwrap_or("unix_udp")
        .to_ascii_lowercase();
    match mode.as_str() {
        "udp" | "tcp" => {
            bind(s, used, t, 5140);
            t.set("protocol", Val::s(&mode));
        }
        "unix_udp" | "unix_tcp" => {
            if let Some(p) = val(s, used, "path") {
                t.set("path", Val::s(p));
            }
            t.set(
                "socket_type",
                Val::s(if mode == "unix_udp" {
                    "dgram"
                } else {
                    "stream"
                }),
            );
        }
        _ => {}
    }
    if let Some(p) = val(s, used, "parser") {
        let f = if p.contains("5424") {
            "rfc5424"
        } else {
            "rfc3164"
        };
        t.set("message_format", Val::s(f));
    }
    if let Some(sz) = val(s, used, "buffer_max_size").and_then(common::size) {
        t.set("max_message_size", Val::s(sz));
    }
    used.mark("buffer_chunk_size");
    ctx.notes.approx(
        &s.file,
        s.line,
        "[INPUT] syslog Tag",
        "nagare adds .<facility>.<severity> to the tag, as Fluentd does (match it with `tag.**`)",
    );
}

fn in_tcp(_ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    bind(s, used, t, 5170);
    let format = val(s, used, "format")
        .unwrap_or("json")
        .to_ascii_lowercase();
    if let Some(sep) = val(s, used, "separator") {
        t.set(
            "delimiter",
            Val::s(sep.replace("\\n", "\n").replace("\\r", "\r")),
        );
    }
    if let Some(sz) = val(s, used, "buffer_size").and_then(common::size) {
        t.set("max_line_size", Val::s(sz));
    }
    used.mark("chunk_size");
    let mut pt = Table::new("parser", false);
    if format == "none" {
        pt.set("type", Val::s("none"));
        pt.set("message_key", Val::s("log"));
    } else {
        pt.set("type", Val::s("json"));
    }
    t.children.push(pt);
}

fn in_kafka(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(b) = val(s, used, "brokers") {
        t.set(
            "addresses",
            Val::Arr(b.split(',').map(|x| Val::s(x.trim())).collect()),
        );
    }
    if let Some(b) = val(s, used, "topics") {
        t.set(
            "topics",
            Val::Arr(b.split(',').map(|x| Val::s(x.trim())).collect()),
        );
    }
    if let Some(g) = val(s, used, "group_id") {
        t.set("group", Val::s(g));
    }
    let f = val(s, used, "format").unwrap_or("none");
    if f == "json" {
        t.set("format", Val::s("json"));
    } else {
        t.set("format", Val::s("text"));
        ctx.notes.approx(&s.file, s.line, "[INPUT] kafka Format none", "nagare's text format puts the payload in `message` (Fluent Bit: `payload`, with topic, partition, offset and key)");
    }
}

// ---------------------------------------------------------------- filters

fn rule_parts(v: &str) -> (String, String) {
    let v = v.trim();
    match v.split_once(char::is_whitespace) {
        Some((k, r)) => (k.to_string(), r.trim().to_string()),
        None => (v.to_string(), String::new()),
    }
}

fn flt_grep(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let op = val(s, used, "logical_op")
        .unwrap_or("legacy")
        .to_ascii_lowercase();
    let rules: Vec<&Entry> = s
        .entries
        .iter()
        .filter(|e| e.key.eq_ignore_ascii_case("regex") || e.key.eq_ignore_ascii_case("exclude"))
        .collect();
    used.mark("regex");
    used.mark("exclude");
    let mut decided = false;
    for e in rules {
        if decided {
            // Legacy mode: the first Regex rule decides, later rules are never tried.
            ctx.notes.approx(&e.file, e.line, format!("{} {}", e.key, e.value), "Fluent Bit's grep (without Logical_Op) never tries a rule after the first Regex rule, so neither does the converted filter");
            continue;
        }
        let is_regex = e.key.eq_ignore_ascii_case("regex");
        // Only one space separates the field from the expression: more are
        // part of the expression, as Fluent Bit reads it.
        let (k, pat) = match e.value.split_once(' ') {
            Some((k, p)) => (k.to_string(), p.to_string()),
            None => (e.value.clone(), String::new()),
        };
        let Some(field) = common::field(&k) else {
            ctx.notes.unmapped_on(
                t,
                &e.file,
                e.line,
                format!("{} {}", e.key, e.value),
                "nagare's field paths have no array indexes",
            );
            continue;
        };
        let re = match common::regex(&pat) {
            Ok(r) => r,
            Err(why) => {
                ctx.notes
                    .unmapped_on(t, &e.file, e.line, format!("{} {}", e.key, e.value), why);
                continue;
            }
        };
        let mut r = Table::new(if is_regex { "regex" } else { "exclude" }, true);
        r.set("key", Val::s(field));
        r.set("pattern", Val::s(re));
        t.children.push(r);
        if is_regex && op == "legacy" {
            decided = true;
        }
    }
    match op.as_str() {
        "and" => {
            t.set("regex_combine", Val::s("and"));
            t.set("exclude_combine", Val::s("and"));
        }
        "or" => {
            t.set("regex_combine", Val::s("or"));
            t.set("exclude_combine", Val::s("or"));
        }
        _ => {}
    }
}

/// A modify `Condition TYPE KEY [VALUE]` as `[[filter.when]]` tables (all
/// must hold, as Fluent Bit's conditions).
fn modify_condition(value: &str) -> Result<Vec<Table>, String> {
    // Fields are separated by runs of blanks; the value is the rest.
    let v = value.trim();
    let (kind, rest) = v.split_once(char::is_whitespace).unwrap_or((v, ""));
    let kind = kind.to_ascii_lowercase();
    let rest = rest.trim_start();
    let (key, arg) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let arg = arg.trim();
    let when = |pattern: Option<String>, invert: bool| {
        let mut w = Table::new("when", true);
        w.set("key", Val::s(key));
        if let Some(p) = pattern {
            w.set("pattern", Val::s(p));
        }
        if invert {
            w.set("invert", Val::Bool(true));
        }
        w
    };
    if key.is_empty() {
        return Err("a condition names a key".into());
    }
    let needs_arg = || {
        if arg.is_empty() {
            Err(format!("{kind} needs a value"))
        } else {
            Ok(())
        }
    };
    Ok(match kind.as_str() {
        "key_exists" => vec![when(None, false)],
        "key_does_not_exist" => vec![when(None, true)],
        "key_value_equals" => {
            needs_arg()?;
            vec![when(Some(format!("^{}$", regex::escape(arg))), false)]
        }
        "key_value_matches" => {
            needs_arg()?;
            vec![when(Some(common::regex(arg)?), false)]
        }
        // Fluent Bit: false when the key is missing, so "is there" too.
        "key_value_does_not_equal" => {
            needs_arg()?;
            vec![
                when(None, false),
                when(Some(format!("^{}$", regex::escape(arg))), true),
            ]
        }
        "key_value_does_not_match" => {
            needs_arg()?;
            vec![when(None, false), when(Some(common::regex(arg)?), true)]
        }
        _ => {
            return Err(format!(
                "nagare's modify has no condition on key names ({kind})"
            ))
        }
    })
}

fn flt_modify(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    for c in all(s, used, "condition") {
        match modify_condition(&c.value) {
            Ok(whens) => t.children.extend(whens),
            Err(why) => {
                // Without its condition the filter would change every
                // record: it is left out whole.
                ctx.notes.unmapped(
                    &c.file,
                    c.line,
                    format!("[FILTER] modify with Condition {}", c.value),
                    format!("{why}; the filter is not converted (its changes would apply to every record)"),
                );
                t.set("type", Val::s("__skip__"));
                return;
            }
        }
    }
    let mut set = Table::new("set", false);
    let mut add = Table::new("add", false);
    let mut rename = Table::new("rename", false);
    let mut copy = Table::new("copy", false);
    let mut remove = Vec::new();
    for e in &s.entries {
        let k = e.key.to_ascii_lowercase();
        let (a, b) = rule_parts(&e.value);
        match k.as_str() {
            "set" => set.set(&a, Val::s(b)),
            "add" => add.set(&a, Val::s(b)),
            "remove" => remove.push(Val::s(a)),
            "rename" | "hard_rename" => {
                rename.set_commented(
                    &a,
                    Val::s(b),
                    (k == "rename").then(|| {
                        "approx: Fluent Bit does not rename onto an existing field".to_string()
                    }),
                );
            }
            "copy" | "hard_copy" => copy.set(&a, Val::s(b)),
            "name" | "match" | "alias" | "condition" => continue,
            _ => {
                ctx.notes.unmapped_on(
                    t,
                    &e.file,
                    e.line,
                    format!("{} {}", e.key, e.value),
                    "no equivalent in nagare's modify",
                );
            }
        }
        used.mark(&e.key);
    }
    if !remove.is_empty() {
        t.set("remove", Val::Arr(remove));
    }
    for c in [set, add, rename, copy] {
        if !c.entries.is_empty() {
            t.children.push(c);
        }
    }
}

fn flt_record_modifier(_ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let mut set = Table::new("set", false);
    for e in all(s, used, "record") {
        let (a, b) = rule_parts(&e.value);
        set.set(&a, Val::s(b));
    }
    let remove: Vec<Val> = all(s, used, "remove_key")
        .into_iter()
        .map(|e| Val::s(&e.value))
        .collect();
    let mut keep: Vec<Val> = all(s, used, "allowlist_key")
        .into_iter()
        .map(|e| Val::s(&e.value))
        .collect();
    keep.extend(
        all(s, used, "whitelist_key")
            .into_iter()
            .map(|e| Val::s(&e.value)),
    );
    if !remove.is_empty() {
        t.set("remove", Val::Arr(remove));
    }
    if !keep.is_empty() {
        t.set("keep", Val::Arr(keep));
    }
    if !set.entries.is_empty() {
        t.children.push(set);
    }
}

fn flt_parser(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(k) = val(s, used, "key_name") {
        t.set("key_name", Val::s(k));
    }
    let reserve = val(s, used, "reserve_data")
        .and_then(common::boolean)
        .unwrap_or(false);
    let preserve = val(s, used, "preserve_key")
        .and_then(common::boolean)
        .unwrap_or(false);
    if reserve {
        t.set("reserve_data", Val::Bool(true));
        if !preserve {
            t.set("remove_key_name_field", Val::Bool(true));
        }
    }
    let parsers: Vec<Entry> = all(s, used, "parser").into_iter().cloned().collect();
    for extra in parsers.iter().skip(1) {
        ctx.notes.unmapped(
            &extra.file,
            extra.line,
            format!("Parser {}", extra.value),
            "nagare's parser filter takes one parser",
        );
    }
    if let Some(p) = parsers.first() {
        let mut pt = parser_table(ctx, &p.value, p, "log");
        if pt.get("type") == Some(&Val::s("multiline")) {
            pt.set("type", Val::s("none"));
        }
        t.children.push(pt);
    }
    ctx.notes.approx(&s.file, s.line, "[FILTER] parser", "a record whose field does not parse goes on with a parse_error field (Fluent Bit passes it unchanged)");
}

fn flt_rewrite_tag(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    for k in [
        "emitter_name",
        "emitter_storage.type",
        "emitter_mem_buf_limit",
    ] {
        used.mark(k);
    }
    for e in all(s, used, "rule") {
        let parts: Vec<&str> = e.value.split_whitespace().collect();
        if parts.len() < 4 {
            ctx.notes.unmapped_on(
                t,
                &e.file,
                e.line,
                format!("Rule {}", e.value),
                "a rule is $KEY REGEX NEW_TAG KEEP",
            );
            continue;
        }
        let (key, re, tag, keep) = (parts[0], parts[1], parts[2], parts[3]);
        let Some(field) = common::field(key) else {
            ctx.notes.unmapped_on(
                t,
                &e.file,
                e.line,
                format!("Rule {}", e.value),
                "nagare's field paths have no array indexes",
            );
            continue;
        };
        let pattern = match common::regex(re) {
            Ok(r) => r,
            Err(why) => {
                ctx.notes
                    .unmapped_on(t, &e.file, e.line, format!("Rule {}", e.value), why);
                continue;
            }
        };
        let mut r = Table::new("rule", true);
        r.set("key", Val::s(field));
        r.set("pattern", Val::s(pattern));
        // Fluent Bit's record accessor regex matches strings only: a 503
        // number is not matched by ^5[0-9][0-9]$.
        r.set("strings_only", Val::Bool(true));
        let mut new_tag = String::new();
        let mut rest = tag;
        while let Some(i) = rest.find("$TAG") {
            new_tag.push_str(&rest[..i]);
            let after = &rest[i + 4..];
            if let Some(idx) = after.strip_prefix('[').and_then(|a| a.split_once(']')) {
                new_tag.push_str(&format!("${{tag_parts[{}]}}", idx.0));
                rest = idx.1;
            } else {
                new_tag.push_str("${tag}");
                rest = after;
            }
        }
        new_tag.push_str(rest);
        r.set("tag", Val::s(new_tag));
        if common::boolean(keep) == Some(true) {
            r.set("keep", Val::Bool(true));
        }
        t.children.push(r);
    }
}

fn flt_throttle(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let rate: i64 = val(s, used, "rate")
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or(1);
    let window: i64 = val(s, used, "window")
        .and_then(|r| r.trim().parse().ok())
        .unwrap_or(5);
    let interval = val(s, used, "interval")
        .and_then(common::duration)
        .unwrap_or_else(|| "1s".into());
    t.set("rate", Val::Int(rate));
    t.set("period", Val::s(interval));
    t.set_commented(
        "burst",
        Val::Int(rate * window),
        Some("approx: Rate × Window, the burst Fluent Bit's sliding window lets through".into()),
    );
    if let Some(p) = val(s, used, "print_status").and_then(common::boolean) {
        t.set("log", Val::Bool(p));
    }
    ctx.notes.approx(&s.file, s.line, "[FILTER] throttle", "nagare's token bucket refills continuously at Rate per Interval with a burst of Rate × Window; Fluent Bit averages over a sliding window");
}

fn flt_lua(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(sc) = val(s, used, "script") {
        // Fluent Bit reads the script next to the config; nagare from its
        // working directory: written as a path that works from anywhere.
        let p = Path::new(sc);
        let full = if p.is_absolute() {
            p.to_path_buf()
        } else {
            ctx.base.join(p)
        };
        let full = std::path::absolute(&full).unwrap_or(full);
        t.set("script", Val::s(full.display().to_string()));
    }
    if let Some(c) = val(s, used, "code") {
        t.set("code", Val::s(c));
    }
    if let Some(c) = val(s, used, "call") {
        t.set("call", Val::s(c));
    }
    if let Some(b) = val(s, used, "time_as_table").and_then(common::boolean) {
        t.set("time_as_table", Val::Bool(b));
    }
    used.mark("protected_mode");
}

// ---------------------------------------------------------------- outputs

fn out_null(_ctx: &mut Ctx, _s: &Section, _used: &mut Used, _t: &mut Table) {}

fn out_stdout(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    used.mark("format");
    used.mark("json_date_key");
    used.mark("json_date_format");
    t.set_commented(
        "format",
        Val::s("json"),
        Some("approx: one JSON object {time, tag, record} per event".into()),
    );
    ctx.notes.approx(
        &s.file,
        s.line,
        "[OUTPUT] stdout",
        "nagare prints each event as one JSON object {time, tag, record}",
    );
}

fn out_file(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let dir = val(s, used, "path")
        .unwrap_or(".")
        .trim_end_matches('/')
        .to_string();
    let file = val(s, used, "file")
        .map(str::to_string)
        .unwrap_or_else(|| "${tag}".into());
    t.set("path", Val::s(format!("{dir}/{file}")));
    let f = val(s, used, "format")
        .unwrap_or("out_file")
        .to_ascii_lowercase();
    match f.as_str() {
        "ltsv" | "msgpack" => t.set("format", Val::s(&f)),
        other => {
            t.set_commented(
                "format",
                Val::s("json"),
                Some(format!("approx: Fluent Bit's {other} format")),
            );
            ctx.notes.approx(
                &s.file,
                s.line,
                format!("[OUTPUT] file Format {other}"),
                "written as nagare's json format ({\"time\",\"tag\",\"record\"} per line)",
            );
        }
    }
    for k in ["delimiter", "label_delimiter", "template"] {
        used.mark(k);
    }
}

fn out_forward(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(e) = get(s, used, "upstream") {
        ctx.notes.unmapped(
            &e.file,
            e.line,
            format!("Upstream {}", e.value),
            "write the [UPSTREAM] nodes as [[output.server]] tables",
        );
    }
    if let Some(k) = val(s, used, "shared_key") {
        t.set("shared_key", Val::s(k));
    }
    if let Some(k) = val(s, used, "self_hostname") {
        t.set("self_hostname", Val::s(k));
    }
    if let Some(b) = val(s, used, "require_ack_response").and_then(common::boolean) {
        t.set("require_ack_response", Val::Bool(b));
    }
    if val(s, used, "compress") == Some("gzip") {
        t.set("compress", Val::s("gzip"));
    }
    let host = val(s, used, "host").unwrap_or("127.0.0.1").to_string();
    let port = val(s, used, "port").unwrap_or("24224").to_string();
    let mut server = Table::new("server", true);
    server.set("address", Val::s(format!("{host}:{port}")));
    t.children.push(server);
    tls(s, used, t, true);
}

fn out_http(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let host = val(s, used, "host").unwrap_or("127.0.0.1").to_string();
    let secure = s.value("tls").and_then(common::boolean) == Some(true);
    let port = val(s, used, "port")
        .unwrap_or(if secure { "443" } else { "80" })
        .to_string();
    let uri = val(s, used, "uri").unwrap_or("/").to_string();
    let scheme = if secure { "https" } else { "http" };
    t.set("endpoint", Val::s(format!("{scheme}://{host}:{port}{uri}")));
    let f = val(s, used, "format")
        .unwrap_or("msgpack")
        .to_ascii_lowercase();
    match f.as_str() {
        "json" => t.set("format", Val::s("json_array")),
        "json_lines" => t.set("format", Val::s("ndjson")),
        "json_stream" => t.set_commented(
            "format",
            Val::s("ndjson"),
            Some("approx: json_stream".into()),
        ),
        "msgpack" => t.set("format", Val::s("msgpack")),
        other => ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            format!("Format {other}"),
            "nagare's http output sends ndjson, a JSON array or msgpack",
        ),
    }
    let date_key = val(s, used, "json_date_key").unwrap_or("date");
    if common::boolean(date_key) == Some(false) {
        t.set("time_key", Val::s(""));
    } else {
        t.set("time_key", Val::s(date_key));
    }
    used.mark("json_date_format");
    if val(s, used, "compress") == Some("gzip") {
        t.set("compress", Val::s("gzip"));
    }
    if let Some(u) = val(s, used, "http_user") {
        t.set("username", Val::s(u));
    }
    if let Some(p) = val(s, used, "http_passwd") {
        t.set("password", Val::s(p));
    }
    let mut headers = Table::new("headers", false);
    for h in all(s, used, "header") {
        let (k, v) = rule_parts(&h.value);
        headers.set(&k, Val::s(v));
    }
    if !headers.entries.is_empty() {
        t.children.push(headers);
    }
    tls(s, used, t, true);
}

fn out_kafka(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(b) = val(s, used, "brokers") {
        t.set(
            "addresses",
            Val::Arr(b.split(',').map(|x| Val::s(x.trim())).collect()),
        );
    }
    let topics = val(s, used, "topics").unwrap_or("fluent-bit");
    let mut it = topics.split(',');
    t.set("topic", Val::s(it.next().unwrap_or("").trim()));
    if it.next().is_some() {
        ctx.notes.approx(
            &s.file,
            s.line,
            format!("Topics {topics}"),
            "nagare writes to one topic (the first); use ${tag} in `topic` to spread by tag",
        );
    }
    let f = val(s, used, "format")
        .unwrap_or("json")
        .to_ascii_lowercase();
    if f == "msgpack" || f == "json" {
        t.set("format", Val::s(&f));
    }
    if let Some(k) = val(s, used, "message_key_field") {
        t.set("key_field", Val::s(k));
    }
    used.mark("timestamp_key");
    used.mark("timestamp_format");
    let props: Vec<&Entry> = s
        .entries
        .iter()
        .filter(|e| e.key.to_ascii_lowercase().starts_with("rdkafka."))
        .collect();
    if !props.is_empty() {
        let mut p = Table::new("properties", false);
        for e in props {
            used.mark(&e.key);
            p.set(&e.key[8..], Val::s(&e.value));
        }
        t.children.push(p);
    }
}
