//! Fluent Bit → nagare for the outputs to stores and services (`es`,
//! `opensearch`, `loki`, `splunk`, `s3`, `pgsql`) and the `systemd`,
//! `exec`, `elasticsearch` and `splunk` inputs. Each option with an
//! equivalent is mapped; approximations carry an `approx:` comment; the
//! rest is listed by `Ctx::unused` (file:line, not converted).

use super::{all, bind, tls, val, Ctx, Used};
use crate::convert::common;
use crate::convert::emit::{Table, Val};
use crate::convert::fluent_bit::Section;

/// `scheme://host:port` from `Host`, `Port` and `tls`.
fn base_url(s: &Section, used: &mut Used, port: &str) -> String {
    let host = val(s, used, "host").unwrap_or("127.0.0.1").to_string();
    let port = val(s, used, "port").unwrap_or(port).to_string();
    let secure = s.value("tls").and_then(common::boolean) == Some(true);
    let scheme = if secure { "https" } else { "http" };
    format!("{scheme}://{host}:{port}")
}

/// `Header NAME VALUE` (any number) → `[output.headers]`.
fn headers(s: &Section, used: &mut Used, t: &mut Table) {
    let mut h = Table::new("headers", false);
    for e in all(s, used, "header") {
        if let Some((k, v)) = e.value.trim().split_once(char::is_whitespace) {
            h.set(k, Val::s(v.trim()));
        }
    }
    if !h.entries.is_empty() {
        t.children.push(h);
    }
}

/// The body size limit of Fluent Bit's HTTP server inputs: `buffer_max_size`,
/// named `http_server.buffer_max_size` since 5.0 (the old name is an alias).
fn http_server_limits(s: &Section, used: &mut Used, t: &mut Table) {
    for k in ["http_server.buffer_max_size", "buffer_max_size"] {
        if let Some(sz) = val(s, used, k).and_then(common::size) {
            t.set("max_body_size", Val::s(sz));
        }
    }
    // Read sizes and HTTP/2 (nagare's listeners speak HTTP/1.1, which every
    // client of these APIs speaks): nothing to set.
    for k in [
        "buffer_chunk_size",
        "http_server.buffer_chunk_size",
        "http2",
        "http_server.http2",
    ] {
        used.mark(k);
    }
}

fn basic_auth(s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(u) = val(s, used, "http_user") {
        t.set("username", Val::s(u));
    }
    if let Some(p) = val(s, used, "http_passwd") {
        t.set("password", Val::s(p));
    }
}

/// A value that may be a record accessor (`$field`, `$a['b']`) as a
/// template; None for one nagare's paths cannot say.
fn accessor_template(v: &str) -> Option<String> {
    let v = v.trim();
    if !v.starts_with('$') {
        return Some(v.to_string());
    }
    let f = common::field(v)?;
    Some(format!("${{record.{}}}", f.trim_start_matches("$.")))
}

/// The field name a record accessor reads (`$a['b']` → `a.b` as a path).
fn accessor_field(v: &str) -> Option<String> {
    common::field(v.trim())
}

/// `es` and `opensearch` → the `elasticsearch` output.
pub fn out_es(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let base = base_url(s, used, "9200");
    let path = val(s, used, "path").unwrap_or("").trim_end_matches('/');
    t.set("endpoint", Val::s(format!("{base}{path}")));
    basic_auth(s, used, t);
    if let Some(k) = val(s, used, "http_api_key") {
        t.set("api_key", Val::s(k));
    }
    let logstash = val(s, used, "logstash_format").and_then(common::boolean) == Some(true);
    let index = val(s, used, "index").unwrap_or("fluent-bit").to_string();
    if logstash {
        let prefix = val(s, used, "logstash_prefix").unwrap_or("logstash");
        let sep = val(s, used, "logstash_prefix_separator").unwrap_or("-");
        let date = val(s, used, "logstash_dateformat").unwrap_or("%Y.%m.%d");
        t.set("index", Val::s(format!("{prefix}{sep}{date}")));
    } else {
        t.set("index", Val::s(index));
    }
    if let Some(k) = val(s, used, "logstash_prefix_key") {
        ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            format!("Logstash_Prefix_Key {k}"),
            "write the field into `index` as ${FIELD}",
        );
    }
    // Fluent Bit always writes the time, under Time_Key.
    t.set(
        "time_key",
        Val::s(val(s, used, "time_key").unwrap_or("@timestamp")),
    );
    used.mark("time_key_format");
    used.mark("time_key_nanos");
    if val(s, used, "include_tag_key").and_then(common::boolean) == Some(true) {
        t.set(
            "tag_key",
            // FLB_ES_DEFAULT_TAG_KEY (plugins/out_es/es.h); the docs say "_flb-key".
            Val::s(val(s, used, "tag_key").unwrap_or("flb-key")),
        );
    } else {
        used.mark("tag_key");
    }
    // nagare derives ids from the chunk either way (a re-sent chunk adds
    // no copies); Fluent Bit hashes the record, or lets the server choose.
    if val(s, used, "generate_id").and_then(common::boolean) == Some(true) {
        t.set_commented(
            "generate_id",
            Val::Bool(true),
            Some("approx: ids from the chunk and position (Fluent Bit hashes the record)".into()),
        );
    }
    if let Some(k) = val(s, used, "id_key") {
        t.set("id_key", Val::s(k));
    }
    if let Some(p) = val(s, used, "pipeline") {
        t.set("pipeline", Val::s(p));
    }
    // Fluent Bit's Write_Operation defaults to "create"; nagare's action to "index".
    match val(s, used, "write_operation").map(str::to_ascii_lowercase) {
        None => t.set("action", Val::s("create")),
        Some(w) => match w.as_str() {
            op @ ("index" | "create") => t.set("action", Val::s(op)),
            other => ctx.notes.unmapped_on(
                t,
                &s.file,
                s.line,
                format!("Write_Operation {other}"),
                "nagare's elasticsearch output indexes or creates documents",
            ),
        },
    }
    if val(s, used, "compress") == Some("gzip") {
        t.set("compress", Val::s("gzip"));
    }
    // Document types are gone from Elasticsearch 8; the buffer is the HTTP client's.
    for k in [
        "type",
        "suppress_type_name",
        "buffer_size",
        "trace_output",
        "trace_error",
    ] {
        used.mark(k);
    }
    tls(s, used, t, true);
}

/// `loki` → the `loki` output.
pub fn out_loki(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let base = base_url(s, used, "3100");
    let uri = val(s, used, "uri").unwrap_or("/loki/api/v1/push");
    t.set("endpoint", Val::s(format!("{base}{uri}")));
    basic_auth(s, used, t);
    if let Some(b) = val(s, used, "bearer_token") {
        t.set("bearer_token", Val::s(b));
    }
    if let Some(x) = val(s, used, "tenant_id") {
        t.set("tenant", Val::s(x));
    }
    let mut labels = Table::new("labels", false);
    let mut label = |ctx: &mut Ctx, item: &str, e_file: &str, e_line: usize| {
        let item = item.trim();
        if item.is_empty() {
            return;
        }
        let (name, tmpl) = match item.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), accessor_template(v)),
            // `$sub['stream']` alone: the label is named after the last key.
            None => {
                let f = accessor_field(item);
                let name = f
                    .as_deref()
                    .map(|f| f.rsplit('.').next().unwrap_or(f).to_string())
                    .unwrap_or_default();
                (name, accessor_template(item))
            }
        };
        match tmpl {
            Some(v) if !name.is_empty() => labels.set(&name, Val::s(v)),
            _ => ctx.notes.unmapped(
                e_file,
                e_line,
                format!("label {item}"),
                "nagare's field paths have no array indexes",
            ),
        }
    };
    for k in ["labels", "label_keys"] {
        if let Some(e) = super::get(s, used, k).cloned() {
            for item in e.value.split(',') {
                label(ctx, item, &e.file, e.line);
            }
        }
    }
    if labels.entries.is_empty() {
        // Fluent Bit's default.
        labels.set("job", Val::s("fluent-bit"));
    }
    if labels.entries.iter().any(|e| {
        matches!(&e.val, Val::Str(v) if v.strip_prefix("${record.").is_some_and(|f| f.contains('.')))
    }) {
        labels.comments.push(
            "approx: Fluent Bit takes nested label keys out of the line too; nagare only top-level ones"
                .into(),
        );
    }
    t.children.push(labels);
    let mut meta = Table::new("structured_metadata", false);
    if let Some(m) = val(s, used, "structured_metadata") {
        for item in m.split(',') {
            if let Some((k, v)) = item.split_once('=') {
                if let Some(v) = accessor_template(v) {
                    meta.set(k.trim(), Val::s(v));
                }
            }
        }
    }
    if !meta.entries.is_empty() {
        t.children.push(meta);
    }
    // Fluent Bit takes the record keys that labels read (`$key` in Labels,
    // Label_Keys) out of the line, as nagare does (keep_label_fields false).
    headers(s, used, t);
    // Fluent Bit gzips its JSON push with `compress gzip`; nagare's
    // protobuf push is snappy-compressed always.
    used.mark("compress");
    if let Some(r) = val(s, used, "remove_keys") {
        ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            format!("remove_keys {r}"),
            "remove them with a modify filter before the output (or set keep_label_fields = false for label fields)",
        );
    }
    if let Some(f) = val(s, used, "line_format") {
        if !f.eq_ignore_ascii_case("json") {
            ctx.notes.approx(
                &s.file,
                s.line,
                format!("line_format {f}"),
                "nagare's lines are the record as JSON",
            );
        }
    }
    if val(s, used, "drop_single_key").and_then(common::boolean) == Some(true) {
        ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            "drop_single_key on",
            "set `line_key` to the field that is the line",
        );
    }
    tls(s, used, t, true);
}

/// `splunk` → the `splunk_hec` output.
pub fn out_splunk(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let base = base_url(s, used, "8088");
    let raw = val(s, used, "splunk_send_raw").and_then(common::boolean) == Some(true);
    if raw {
        t.set("endpoint", Val::s(format!("{base}/services/collector/raw")));
        t.set("mode", Val::s("raw"));
    } else {
        t.set(
            "endpoint",
            Val::s(format!("{base}/services/collector/event")),
        );
    }
    if let Some(x) = val(s, used, "splunk_token") {
        t.set("token", Val::s(x));
    }
    basic_auth(s, used, t);
    if let Some(k) = val(s, used, "event_key") {
        match accessor_field(k) {
            Some(f) => t.set("event_key", Val::s(f)),
            None => ctx.notes.unmapped_on(
                t,
                &s.file,
                s.line,
                format!("event_key {k}"),
                "nagare's field paths have no array indexes",
            ),
        }
    }
    for (peer, nagare) in [
        ("event_host", "host"),
        ("event_source", "source"),
        ("event_sourcetype", "sourcetype"),
        ("event_index", "index"),
    ] {
        if let Some(v) = val(s, used, peer).and_then(accessor_template) {
            t.set(nagare, Val::s(v));
        }
    }
    for (peer, nagare) in [
        ("event_sourcetype_key", "sourcetype"),
        ("event_index_key", "index"),
    ] {
        if let Some(v) = val(s, used, peer).and_then(accessor_template) {
            t.set(nagare, Val::s(v));
        }
    }
    let mut fields = Table::new("fields", false);
    for e in all(s, used, "event_field") {
        let mut p = e.value.split_whitespace();
        if let (Some(k), Some(v)) = (p.next(), p.next()) {
            if let Some(v) = accessor_template(v) {
                fields.set(k, Val::s(v));
            }
        }
    }
    if !fields.entries.is_empty() {
        t.children.push(fields);
    }
    if let Some(c) = val(s, used, "channel") {
        t.set("channel", Val::s(c));
    }
    if val(s, used, "compress") == Some("gzip") {
        t.set("compress", Val::s("gzip"));
    }
    used.mark("http_buffer_size");
    used.mark("http_debug_bad_request");
    tls(s, used, t, true);
}

/// `s3` → the `s3` output.
pub fn out_s3(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    for (peer, nagare) in [
        ("bucket", "bucket"),
        ("region", "region"),
        ("endpoint", "endpoint"),
        ("storage_class", "storage_class"),
    ] {
        if let Some(v) = val(s, used, peer) {
            t.set(nagare, Val::s(v));
        }
    }
    let format = val(s, used, "s3_key_format")
        .unwrap_or("/fluent-bit-logs/$TAG/%Y/%m/%d/%H/%M/%S")
        .to_string();
    let mut key = String::new();
    let mut tag_part = false;
    let mut rest = format.as_str();
    while let Some(i) = rest.find('$') {
        key.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(a) = after.strip_prefix("$TAG[") {
            // nagare's key has the whole tag only.
            let (_, r) = a.split_once(']').unwrap_or((a, ""));
            key.push_str("${tag}");
            tag_part = true;
            rest = r;
        } else if let Some(r) = after.strip_prefix("$TAG") {
            key.push_str("${tag}");
            rest = r;
        } else if let Some(r) = after.strip_prefix("$UUID") {
            key.push_str("${chunk_id}");
            rest = r;
        } else if let Some(r) = after.strip_prefix("$INDEX") {
            key.push_str("${chunk_id}");
            rest = r;
        } else {
            key.push('$');
            rest = &after[1..];
        }
    }
    key.push_str(rest);
    let mut key = key.trim_start_matches('/').to_string();
    let mut approx = Vec::new();
    if tag_part {
        approx.push("$TAG[n] is the whole tag");
    }
    if !key.contains("${chunk_id}") {
        // Fluent Bit makes keys unique with a random suffix.
        key.push_str("-${chunk_id}");
        approx.push("the chunk id keeps keys unique (Fluent Bit appends a random string)");
    }
    if !approx.is_empty() {
        ctx.notes.approx(
            &s.file,
            s.line,
            format!("s3_key_format {format}"),
            approx.join("; "),
        );
    }
    t.set_commented(
        "key",
        Val::s(key),
        (!approx.is_empty()).then(|| format!("approx: {}", approx.join("; "))),
    );
    match val(s, used, "compression") {
        Some("gzip") => t.set("compression", Val::s("gzip")),
        Some("zstd") => t.set("compression", Val::s("zstd")),
        Some(other) => ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            format!("compression {other}"),
            "nagare compresses with gzip or zstd",
        ),
        None => {}
    }
    if let Some(k) = val(s, used, "log_key") {
        t.set("format", Val::s("single_value"));
        t.set("message_key", Val::s(k));
    } else {
        t.set_commented(
            "format",
            Val::s("json"),
            Some("approx: JSON lines with time, tag and record (Fluent Bit: the record with json_date_key)".into()),
        );
        used.mark("json_date_key");
        used.mark("json_date_format");
    }
    for k in [
        "total_file_size",
        "upload_timeout",
        "upload_chunk_size",
        "use_put_object",
        "store_dir",
    ] {
        if let Some(v) = val(s, used, k) {
            ctx.notes.approx(
                &s.file,
                s.line,
                format!("{k} {v}"),
                "each nagare object is one buffer chunk: size and time them in [output.buffer]",
            );
        }
    }
    used.mark("send_content_md5");
    used.mark("auto_retry_requests");
}

/// `pgsql` → the `postgresql` output, writing Fluent Bit's table layout
/// (tag, time, data).
pub fn out_pgsql(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    let mut conn = Vec::new();
    for (peer, key, default) in [
        ("host", "host", Some("127.0.0.1")),
        ("port", "port", Some("5432")),
        ("user", "user", None),
        ("database", "dbname", Some("fluentbit")),
    ] {
        if let Some(v) = val(s, used, peer).or(default) {
            conn.push(format!("{key}={v}"));
        }
    }
    t.set("connection", Val::s(conn.join(" ")));
    if let Some(p) = val(s, used, "password") {
        t.set("password", Val::s(p));
    }
    t.set(
        "table",
        Val::s(val(s, used, "table").unwrap_or("fluentbit")),
    );
    t.set("tag_column", Val::s("tag"));
    t.set("time_column", Val::s("time"));
    t.set("record_column", Val::s("data"));
    for k in ["chunk_id_column", "position_column"] {
        t.set_commented(
            k,
            Val::s(""),
            Some("Fluent Bit's table (tag, time, data) has no such column".into()),
        );
    }
    ctx.notes.approx(
        &s.file,
        s.line,
        "[OUTPUT] pgsql",
        "nagare does not create the table as Fluent Bit does: CREATE TABLE it (tag varchar, time timestamp, data jsonb) first",
    );
    if let Some(k) = val(s, used, "timestamp_key") {
        ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            format!("Timestamp_Key {k}"),
            "the time goes to the `time` column, not into `data`",
        );
    }
    for k in ["async", "min_pool_size", "max_pool_size"] {
        used.mark(k);
    }
}

/// `systemd` → the `journald` input.
pub fn in_systemd(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    // `Tag host.*`: Fluent Bit puts the unit's name in place of the `*`.
    if let Some(Val::Str(tag)) = t.get("tag").cloned() {
        if tag.contains('*') {
            t.set("tag", Val::s(tag.replace('*', "${record._SYSTEMD_UNIT}")));
        }
    }
    if let Some(p) = val(s, used, "path") {
        t.set("directory", Val::s(p));
    }
    let or = val(s, used, "systemd_filter_type").is_some_and(|v| v.eq_ignore_ascii_case("or"));
    let mut m = Vec::new();
    for e in all(s, used, "systemd_filter") {
        if or && !m.is_empty() {
            m.push(Val::s("+"));
        }
        m.push(Val::s(e.value.trim()));
    }
    if !m.is_empty() {
        t.set("matches", Val::Arr(m));
    }
    let tail = val(s, used, "read_from_tail").and_then(common::boolean) == Some(true);
    t.set("read_from_head", Val::Bool(!tail));
    if let Some(db) = val(s, used, "db") {
        t.set_commented(
            "cursor_file",
            Val::s(format!("{db}.nagare-cursor")),
            Some("approx: nagare's own cursor file; Fluent Bit's DB is not read".into()),
        );
        ctx.notes.approx(
            &s.file,
            s.line,
            format!("DB {db}"),
            "nagare keeps its own cursor beside it; it starts from read_from_head the first time",
        );
    }
    for k in ["max_entries", "max_fields", "db.sync"] {
        used.mark(k);
    }
}

/// `exec` → the `exec` input.
pub fn in_exec(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    if let Some(c) = val(s, used, "command") {
        // Fluent Bit runs it with popen(3): through a shell.
        t.set(
            "command",
            Val::Arr(vec![Val::s("sh"), Val::s("-c"), Val::s(c)]),
        );
    }
    let secs: u64 = val(s, used, "interval_sec")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(1);
    let nsecs: u64 = val(s, used, "interval_nsec")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    t.set("mode", Val::s("scheduled"));
    let ms = secs * 1000 + nsecs / 1_000_000;
    t.set("interval", Val::s(format!("{ms}ms")));
    if let Some(b) = val(s, used, "buf_size").and_then(common::size) {
        t.set("max_line_size", Val::s(b));
    }
    if val(s, used, "oneshot").and_then(common::boolean) == Some(true) {
        ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            "Oneshot true",
            "nagare runs the command every `interval` (or keeps it running, mode \"streaming\")",
        );
    }
    // Fluent Bit's record without a parser: {"exec": line}.
    let pt = match super::get(s, used, "parser").cloned() {
        Some(p) => super::parser_table(ctx, &p.value, &p, "exec"),
        None => {
            let mut pt = Table::new("parser", false);
            pt.set("type", Val::s("none"));
            pt.set("message_key", Val::s("exec"));
            pt
        }
    };
    t.children.push(pt);
}

/// `elasticsearch` (the input) → the `elasticsearch` input.
pub fn in_elasticsearch(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    bind(s, used, t, 9200);
    http_server_limits(s, used, t);
    if let Some(v) = val(s, used, "version") {
        t.set("version", Val::s(v));
    }
    // `meta_key` holds the action's metadata (index, id) in Fluent Bit.
    if let Some(k) = val(s, used, "meta_key") {
        ctx.notes.approx(
            &s.file,
            s.line,
            format!("Meta_Key {k}"),
            "nagare adds the index and id as fields of their own (index_key, id_key)",
        );
    }
    used.mark("hostname");
    if let Some(k) = val(s, used, "tag_key") {
        ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            format!("Tag_Key {k}"),
            "the tag is `tag` (with ${index}), not a record field",
        );
    }
    tls(s, used, t, false);
}

/// `splunk` (the input) → the `splunk_hec` input.
pub fn in_splunk(ctx: &mut Ctx, s: &Section, used: &mut Used, t: &mut Table) {
    bind(s, used, t, 8088);
    http_server_limits(s, used, t);
    if let Some(tok) = val(s, used, "splunk_token") {
        // Comma-separated, each trimmed (in_splunk's setup_hec_tokens).
        t.set(
            "tokens",
            Val::Arr(
                tok.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(Val::s)
                    .collect(),
            ),
        );
    }
    used.mark("store_token_in_metadata");
    if let Some(k) = val(s, used, "tag_key") {
        ctx.notes.unmapped_on(
            t,
            &s.file,
            s.line,
            format!("Tag_Key {k}"),
            "the tag is the input's `tag`, not a record field",
        );
    }
    tls(s, used, t, false);
}
