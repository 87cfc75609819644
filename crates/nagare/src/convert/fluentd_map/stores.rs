//! Fluentd → nagare for the plugins that write to stores and services
//! (fluent-plugin-elasticsearch / -opensearch, -grafana-loki, -splunk-hec,
//! -s3, -sql, -clickhouse) and the systemd and exec sources. Each peer
//! option with an equivalent is mapped; approximations carry an `approx:`
//! comment; the rest is listed by `Opts::finish` (file:line, not converted).

use super::{Conv, Ctx, Opts};
use crate::convert::common;
use crate::convert::emit::{Table, Val};
use crate::convert::fluentd::Directive;

/// Options these plugins take that change nothing nagare does (connection
/// pool and reload tuning of the Ruby clients): used without a note.
const CLIENT_TUNING: &[&str] = &[
    "reconnect_on_error",
    "reload_on_failure",
    "reload_connections",
    "reload_after",
    "log_es_400_reason",
    "type_name",
    "suppress_type_name",
    "with_transporter_log",
    "sniffer_class_name",
    "verify_es_version_at_startup",
    "default_elasticsearch_version",
    "fail_on_detecting_es_version_retry_exceed",
    "coerce_to_utf8",
    "utf8_encoding",
    "idle_timeout",
    "open_timeout",
];

/// A `custom_headers` hash (JSON, or Fluentd's `k1:v1,k2:v2`) →
/// `[output.headers]`.
fn custom_headers(ctx: &mut Ctx, o: &mut Opts, t: &mut Table) {
    let Some(p) = o.get("custom_headers") else {
        return;
    };
    let v = p.value.trim();
    let pairs: Option<Vec<(String, String)>> = if v.starts_with('{') {
        serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(v)
            .ok()
            .map(|m| {
                m.into_iter()
                    .map(|(k, v)| (k, v.as_str().map(str::to_string).unwrap_or(v.to_string())))
                    .collect()
            })
    } else {
        v.split(',')
            .filter(|x| !x.trim().is_empty())
            .map(|kv| {
                kv.split_once(':')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            })
            .collect()
    };
    match pairs {
        Some(pairs) if !pairs.is_empty() => {
            let mut h = Table::new("headers", false);
            for (k, v) in pairs {
                h.set(&k, Val::s(v));
            }
            t.children.push(h);
        }
        _ => ctx.notes.unmapped_on(
            t,
            &p.file,
            p.line,
            format!("custom_headers {v}"),
            "not a hash (JSON object or key:value,…)",
        ),
    }
}

fn tuning(o: &mut Opts) {
    for k in CLIENT_TUNING {
        o.get(k);
    }
}

/// `[output.tls]` from the plugin's own option names; `insecure` (true
/// turns checking off) or `verify` (false does).
fn client_tls(
    ctx: &mut Ctx,
    o: &mut Opts,
    t: &mut Table,
    names: [&str; 3],
    insecure: Option<&str>,
    verify: Option<&str>,
) {
    let mut tls = Table::new("tls", false);
    o.map(ctx, &mut tls, names[0], "ca", Conv::Str);
    o.map(ctx, &mut tls, names[1], "cert", Conv::Str);
    o.map(ctx, &mut tls, names[2], "key", Conv::Str);
    if insecure.and_then(|k| o.flag(k)) == Some(true)
        || verify.and_then(|k| o.flag(k)) == Some(false)
    {
        tls.set("verify", Val::Bool(false));
    }
    if !tls.entries.is_empty() {
        t.children.push(tls);
    }
}

/// fluent-plugin-elasticsearch's `elasticsearch` and fluent-plugin-opensearch's
/// `opensearch` → the `elasticsearch` output.
pub fn out_elasticsearch(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    tuning(o);
    let scheme = o.val("scheme").unwrap_or("http").to_string();
    let path = o
        .val("path")
        .unwrap_or("")
        .trim_end_matches('/')
        .to_string();
    if let Some(p) = o.get("hosts") {
        // "h1:9200,h2:9200" or URLs: nagare's output takes one endpoint.
        let first = p.value.split(',').next().unwrap_or("").trim();
        let url = if first.contains("://") {
            first.to_string()
        } else {
            format!("{scheme}://{first}{path}")
        };
        let many = p.value.contains(',');
        t.set_commented(
            "endpoint",
            Val::s(url),
            many.then(|| "approx: the first of `hosts` (nagare sends to one endpoint: put a load balancer in front)".into()),
        );
        o.get("host");
        o.get("port");
    } else {
        let host = o.val("host").unwrap_or("localhost");
        let port = o.val("port").unwrap_or("9200");
        t.set(
            "endpoint",
            Val::s(format!("{scheme}://{}{path}", super::host_port(host, port))),
        );
    }
    o.map_all(
        ctx,
        t,
        &[
            ("user", "username", Conv::Str),
            ("password", "password", Conv::Str),
            ("api_key", "api_key", Conv::Str),
        ],
    );
    let logstash = o.flag("logstash_format").unwrap_or(false);
    if logstash {
        let prefix = o.val("logstash_prefix").unwrap_or("logstash");
        let sep = o.val("logstash_prefix_separator").unwrap_or("-");
        let date = o.val("logstash_dateformat").unwrap_or("%Y.%m.%d");
        t.set("index", Val::s(format!("{prefix}{sep}{date}")));
        o.get("index_name");
    } else if let Some(i) = o.val("index_name") {
        t.set("index", Val::s(i));
    } else {
        t.set("index", Val::s("fluentd"));
    }
    // Fluentd writes @timestamp only with logstash_format or include_timestamp.
    if !logstash && o.flag("include_timestamp") != Some(true) {
        t.set_commented(
            "time_key",
            Val::s(""),
            Some("Fluentd adds no @timestamp without logstash_format".into()),
        );
    }
    if let Some(p) = o.get("time_key") {
        ctx.notes.unmapped_on(
            t,
            &p.file,
            p.line,
            format!("time_key {}", p.value),
            "nagare's @timestamp is the event time; parse the field into the event time upstream",
        );
    }
    if o.flag("include_tag_key") == Some(true) {
        let key = o.val("tag_key").unwrap_or("tag");
        t.set("tag_key", Val::s(key));
    } else {
        o.get("tag_key");
    }
    o.map_all(
        ctx,
        t,
        &[
            ("id_key", "id_key", Conv::Str),
            ("routing_key", "routing_key", Conv::Str),
            ("pipeline", "pipeline", Conv::Str),
        ],
    );
    if let Some(p) = o.get("write_operation") {
        match p.value.trim() {
            "index" | "create" => t.set("action", Val::s(p.value.trim())),
            other => ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("write_operation {other}"),
                "nagare's elasticsearch output indexes or creates documents",
            ),
        }
    }
    o.map(ctx, t, "request_timeout", "timeout", Conv::Dur);
    o.map(
        ctx,
        t,
        "bulk_message_request_threshold",
        "bulk_max_size",
        Conv::Size,
    );
    o.get("http_backend");
    if let Some(c) = o.val("compression_level") {
        if c != "no_compression" {
            t.set("compress", Val::s("gzip"));
        }
    }
    client_tls(
        ctx,
        o,
        t,
        ["ca_file", "client_cert", "client_key"],
        None,
        Some("ssl_verify"),
    );
    let _ = d;
}

/// fluent-plugin-grafana-loki's `loki` → the `loki` output.
pub fn out_loki(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    tuning(o);
    let url = o
        .val("url")
        .unwrap_or("https://logs-prod-us-central1.grafana.net");
    t.set(
        "endpoint",
        Val::s(format!("{}/loki/api/v1/push", url.trim_end_matches('/'))),
    );
    o.map_all(
        ctx,
        t,
        &[
            ("username", "username", Conv::Str),
            ("password", "password", Conv::Str),
            ("tenant", "tenant", Conv::Str),
        ],
    );
    let mut labels = Table::new("labels", false);
    for l in d.children.iter().filter(|c| c.name == "label") {
        // `name` (the record's field of that name) or `name $.a.b`.
        for p in &l.params {
            let field = if p.value.trim().is_empty() {
                p.key.clone()
            } else {
                match common::field(&p.value) {
                    Some(f) => f.trim_start_matches("$.").to_string(),
                    None => {
                        ctx.notes.unmapped(
                            &p.file,
                            p.line,
                            format!("<label> {} {}", p.key, p.value),
                            "nagare's field paths have no array indexes",
                        );
                        continue;
                    }
                }
            };
            // out_loki.rb: `name.gsub(/[.\-\/]/, '_')`.
            let name = p.key.replace(['.', '-', '/'], "_");
            labels.set(&name, Val::s(format!("${{record.{field}}}")));
        }
    }
    // extra_labels win over <label> ones of the same name (format_labels).
    if let Some(p) = o.get("extra_labels") {
        match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&p.value) {
            Ok(m) => {
                for (k, v) in m {
                    let v = v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string());
                    labels.set(&k, Val::s(v));
                }
            }
            Err(_) => ctx
                .notes
                .unmapped(&p.file, p.line, "extra_labels", "not a JSON object"),
        }
    }
    if labels.entries.is_empty() {
        labels.comments.push(
            "approx: Fluentd's loki output sends no labels of its own; nagare needs one".into(),
        );
        labels.set("tag", Val::s("${tag}"));
    }
    t.children.push(labels);
    match o.val("line_format").unwrap_or("key_value") {
        "json" => {}
        other => {
            t.comments.push(format!(
                "approx: line_format {other}: nagare's lines are the record as JSON"
            ));
            ctx.notes.approx(
                &d.file,
                d.line,
                format!("<match> loki line_format {other}"),
                "the line is the record as JSON (Fluentd's default writes key=value pairs)",
            );
        }
    }
    if let Some(p) = o.get("drop_single_key") {
        if common::boolean(&p.value) == Some(true) {
            ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                "drop_single_key true",
                "set `line_key` to the field a record's line is",
            );
        }
    }
    if let Some(p) = o.get("remove_keys") {
        ctx.notes.approx(
            &p.file,
            p.line,
            format!("remove_keys {}", p.value),
            "nagare removes the fields the labels read from the line; other fields stay",
        );
    }
    if let Some(p) = o.get("bearer_token_file") {
        ctx.notes.unmapped_on(
            t,
            &p.file,
            p.line,
            format!("bearer_token_file {}", p.value),
            "write the token as `bearer_token` (e.g. \"${LOKI_TOKEN}\" from the environment)",
        );
    }
    custom_headers(ctx, o, t);
    // `compress gzip` gzips Fluentd's JSON push; nagare's protobuf push is
    // snappy-compressed always.
    o.get("compress");
    client_tls(
        ctx,
        o,
        t,
        ["ca_cert", "cert", "key"],
        Some("insecure_tls"),
        None,
    );
}

/// fluent-plugin-splunk-hec's `splunk_hec` → the `splunk_hec` output.
pub fn out_splunk_hec(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    tuning(o);
    // construct_api: `full_url` + "/" + `hec_endpoint`, or
    // `protocol://hec_host:hec_port/hec_endpoint`.
    let path = o
        .val("hec_endpoint")
        .unwrap_or("services/collector")
        .trim_matches('/');
    // /services/collector is the event endpoint too.
    let path = if path == "services/collector" {
        "services/collector/event"
    } else {
        path
    };
    if let Some(url) = o.val("full_url").filter(|u| !u.trim().is_empty()) {
        t.set(
            "endpoint",
            Val::s(format!("{}/{path}", url.trim().trim_end_matches('/'))),
        );
        for k in ["protocol", "hec_host", "hec_port"] {
            o.get(k);
        }
    } else {
        let proto = o.val("protocol").unwrap_or("https");
        let host = o.val("hec_host").unwrap_or("localhost");
        let port = o.val("hec_port").unwrap_or("8088");
        t.set(
            "endpoint",
            Val::s(format!("{proto}://{}/{path}", super::host_port(host, port))),
        );
    }
    o.map(ctx, t, "hec_token", "token", Conv::Str);
    for (fixed, key) in [
        ("index", "index_key"),
        ("source", "source_key"),
        ("sourcetype", "sourcetype_key"),
        ("host", "host_key"),
    ] {
        if let Some(v) = o.val(key) {
            t.set_commented(
                fixed,
                Val::s(format!("${{record.{v}}}")),
                Some(format!(
                    "approx: Fluentd removes `{v}` from the event (keep_keys false)"
                )),
            );
            o.get(fixed);
        } else if let Some(v) = o.val(fixed) {
            t.set(fixed, Val::s(v));
        }
    }
    if t.get("host").is_none() {
        // Fluentd sends its own host name by default.
        t.set("host", Val::s("${hostname}"));
    }
    o.get("keep_keys");
    let mut fields = Table::new("fields", false);
    for f in d.children.iter().filter(|c| c.name == "fields") {
        for p in &f.params {
            let field = if p.value.trim().is_empty() {
                p.key.as_str()
            } else {
                p.value.trim()
            };
            fields.set(&p.key, Val::s(format!("${{record.{field}}}")));
        }
    }
    if !fields.entries.is_empty() {
        fields
            .comments
            .push("approx: Fluentd also removes these fields from the event".into());
        t.children.push(fields);
    }
    if let Some(p) = o.get("data_type") {
        if p.value.trim() != "event" {
            ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("data_type {}", p.value),
                "nagare's splunk_hec output sends events, not metrics",
            );
        }
    }
    if let Some(f) = super::format_child(d) {
        match f.plugin_type() {
            "json" => {}
            "single_value" => {
                t.set(
                    "event_key",
                    Val::s(f.value("message_key").unwrap_or("message")),
                );
            }
            other => ctx.notes.unmapped_on(
                t,
                &f.file,
                f.line,
                format!("<format> @type {other}"),
                "nagare sends the record (or `event_key`) as the event",
            ),
        }
    }
    o.map(ctx, t, "read_timeout", "timeout", Conv::Dur);
    custom_headers(ctx, o, t);
    if let Some(g) = o.flag("gzip_compression") {
        if g {
            t.set("compress", Val::s("gzip"));
        }
    }
    client_tls(
        ctx,
        o,
        t,
        ["ca_file", "client_cert", "client_key"],
        Some("insecure_ssl"),
        None,
    );
}

/// fluent-plugin-s3's `s3` → the `s3` output.
pub fn out_s3(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    tuning(o);
    o.map_all(
        ctx,
        t,
        &[
            ("s3_bucket", "bucket", Conv::Str),
            ("s3_region", "region", Conv::Str),
            ("s3_endpoint", "endpoint", Conv::Str),
            ("force_path_style", "path_style", Conv::Bool),
            ("aws_key_id", "access_key_id", Conv::Str),
            ("aws_sec_key", "secret_access_key", Conv::Str),
            ("storage_class", "storage_class", Conv::Str),
        ],
    );
    let path = o.val("path").unwrap_or("").to_string();
    // Without time_slice_format, the slice follows the buffer's timekey
    // (default 1 day: %Y%m%d), as out_s3's timekey_to_timeformat does.
    let timekey = d
        .children
        .iter()
        .find(|c| c.name == "buffer")
        .and_then(|b| b.value("timekey"))
        .and_then(common::duration)
        .and_then(|d| humantime::parse_duration(&d).ok())
        .map(|d| d.as_secs())
        .unwrap_or(86400);
    let slice = o
        .val("time_slice_format")
        .unwrap_or(super::timekey_format(timekey))
        .to_string();
    let format = o
        .val("s3_object_key_format")
        .unwrap_or("%{path}%{time_slice}_%{index}.%{file_extension}")
        .to_string();
    // %{index} counts the objects of one time slice; nagare's key holds the
    // chunk id instead, as unique.
    let mut key = format
        .replace("%{path}", &path)
        .replace("%{time_slice}", &slice)
        .replace(".%{file_extension}", "${ext}")
        .replace("%{file_extension}", "${ext}")
        .replace("%{index}", "${chunk_id}")
        .replace("%{uuid_flush}", "${chunk_id}")
        .replace("%{hex_random}", "${chunk_id}")
        .replace("%{hostname}", "${hostname}");
    if key.contains("%{") {
        ctx.notes.unmapped_on(
            t,
            &d.file,
            d.line,
            format!("s3_object_key_format {format}"),
            "a placeholder nagare's key has no equivalent for (it takes ${tag}, ${chunk_id}, ${hostname}, ${ext} and strftime)",
        );
        key = key.replace("%{", "{");
    }
    t.set_commented(
        "key",
        Val::s(key),
        format
            .contains("%{index}")
            .then(|| "approx: %{index} (a per-slice counter) is the chunk id".into()),
    );
    if let Some(p) = o.get("store_as") {
        match p.value.trim() {
            "gzip" => t.set("compression", Val::s("gzip")),
            "zstd" => t.set("compression", Val::s("zstd")),
            "json" | "text" | "txt" => t.set("compression", Val::s("none")),
            other => ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("store_as {other}"),
                "nagare compresses with gzip or zstd, or not at all",
            ),
        }
    } else {
        // fluent-plugin-s3 gzips by default.
        t.set("compression", Val::s("gzip"));
    }
    match super::format_child(d)
        .map(|f| f.plugin_type())
        .unwrap_or("out_file")
    {
        "json" => t.set("format", Val::s("json")),
        "ltsv" => t.set("format", Val::s("ltsv")),
        "msgpack" => t.set("format", Val::s("msgpack")),
        "single_value" => t.set("format", Val::s("single_value")),
        other => {
            t.set_commented(
                "format",
                Val::s("json"),
                Some(format!(
                    "approx: <format> {other}: one JSON object per line (time, tag, record)"
                )),
            );
            ctx.notes.approx(
                &d.file,
                d.line,
                format!("<match> s3 <format> {other}"),
                "nagare writes JSON lines with time, tag and record",
            );
        }
    }
    o.get("auto_create_bucket");
    o.get("check_bucket");
    o.get("check_object");
}

/// fluent-plugin-sql's `sql` (adapter postgresql) → the `postgresql` output.
pub fn out_sql(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    if let Some(p) = o.get("adapter") {
        if !p.value.contains("postgres") {
            ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("adapter {}", p.value),
                "nagare writes to PostgreSQL only",
            );
            t.set("type", Val::s("__skip__"));
            return;
        }
    }
    let mut conn = Vec::new();
    for (peer, key) in [
        ("host", "host"),
        ("port", "port"),
        ("database", "dbname"),
        ("username", "user"),
        ("socket", "host"),
    ] {
        if let Some(v) = o.val(peer) {
            conn.push(format!("{key}={v}"));
        }
    }
    t.set("connection", Val::s(conn.join(" ")));
    o.map(ctx, t, "password", "password", Conv::Str);
    let tables: Vec<&Directive> = d.children.iter().filter(|c| c.name == "table").collect();
    for (i, tb) in tables.iter().enumerate() {
        if i > 0 {
            ctx.notes.unmapped_on(
                t,
                &tb.file,
                tb.line,
                format!("<table {}>", tb.arg),
                "one table per nagare output: add an output with a match for it",
            );
            continue;
        }
        if let Some(name) = tb.value("table") {
            t.set("table", Val::s(name));
        }
        let mut cols = Table::new("columns", false);
        if let Some(m) = tb.value("column_mapping") {
            // "record_key:column" or "key" (the same name).
            for pair in m.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (field, col) = pair.split_once(':').unwrap_or((pair, pair));
                cols.set(col.trim(), Val::s(field.trim()));
            }
        }
        if !cols.entries.is_empty() {
            t.children.push(cols);
        }
    }
    // fluent-plugin-sql inserts the mapped columns only.
    for k in ["time_column", "chunk_id_column", "position_column"] {
        t.set_commented(
            k,
            Val::s(""),
            Some("Fluentd's sql output writes the mapped columns only".into()),
        );
    }
    o.get("remove_tag_prefix");
    o.get("num_retries");
}

/// A `clickhouse` output of Fluentd (host, port, database, table, user,
/// password) → the `clickhouse` output.
pub fn out_clickhouse(ctx: &mut Ctx, _d: &Directive, o: &mut Opts, t: &mut Table) {
    let scheme = if o.flag("ssl") == Some(true) || o.flag("tls") == Some(true) {
        "https"
    } else {
        "http"
    };
    let host = o.val("host").unwrap_or("localhost");
    let port = o.val("port").unwrap_or("8123");
    t.set(
        "endpoint",
        Val::s(format!("{scheme}://{}", super::host_port(host, port))),
    );
    // fluent-plugin-clickhouse queries with database=default unless told.
    if o.val("database").is_none() {
        t.set("database", Val::s("default"));
    }
    if let Some(p) = o.get("fields") {
        ctx.notes.unmapped_on(
            t,
            &p.file,
            p.line,
            format!("fields {}", p.value),
            "Fluentd inserts these as CSV in the table's column order (tag, _DATETIME and _DATE are the tag and time); nagare fills columns by name: name them in [output.columns] (column = \"field\"), tag_column and time_column",
        );
    }
    o.map_all(
        ctx,
        t,
        &[
            ("database", "database", Conv::Str),
            ("table", "table", Conv::Str),
            ("user", "user", Conv::Str),
            ("username", "user", Conv::Str),
            ("password", "key", Conv::Str),
            ("datetime_column_name", "time_column", Conv::Str),
        ],
    );
    t.set_commented(
        "chunk_id_column",
        Val::s("chunk_id"),
        Some("left out when the table has no such column".into()),
    );
}

/// fluent-plugin-systemd's `systemd` → the `journald` input.
pub fn src_systemd(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    o.map_all(
        ctx,
        t,
        &[
            ("tag", "tag", Conv::Str),
            ("path", "directory", Conv::Str),
            ("read_from_head", "read_from_head", Conv::Bool),
        ],
    );
    if let Some(p) = o.get("matches") {
        // [{"_SYSTEMD_UNIT": "a.service"}, {...}]: the objects are ORed
        // ("+" in journalctl), the pairs of one object ANDed.
        match serde_json::from_str::<Vec<serde_json::Map<String, serde_json::Value>>>(&p.value) {
            Ok(groups) => {
                let mut m = Vec::new();
                for (i, g) in groups.iter().enumerate() {
                    if i > 0 {
                        m.push(Val::s("+"));
                    }
                    for (k, v) in g {
                        let vals: Vec<String> = match v {
                            serde_json::Value::Array(a) => a
                                .iter()
                                .map(|x| {
                                    x.as_str()
                                        .map(str::to_string)
                                        .unwrap_or_else(|| x.to_string())
                                })
                                .collect(),
                            other => vec![other
                                .as_str()
                                .map(str::to_string)
                                .unwrap_or_else(|| other.to_string())],
                        };
                        for v in vals {
                            m.push(Val::s(format!("{k}={v}")));
                        }
                    }
                }
                t.set("matches", Val::Arr(m));
            }
            Err(_) => ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("matches {}", p.value),
                "not a JSON array of objects",
            ),
        }
    }
    for s in d.children.iter().filter(|c| c.name == "storage") {
        match s.value("path") {
            Some(path) => t.set("cursor_file", Val::s(path)),
            None => ctx.notes.approx(
                &s.file,
                s.line,
                "<storage> without path",
                "the cursor is not kept across restarts: set `cursor_file`",
            ),
        }
    }
    for e in d.children.iter().filter(|c| c.name == "entry") {
        ctx.notes.unmapped_on(
            t,
            &e.file,
            e.line,
            "<entry> (field_map, fields_strip_underscores, fields_lowercase)",
            "nagare keeps journald's field names: rename them with a modify filter",
        );
    }
}

/// Fluentd's `exec` source → the `exec` input.
pub fn src_exec(ctx: &mut Ctx, d: &Directive, o: &mut Opts, t: &mut Table) {
    if let Some(c) = o.val("command") {
        // Fluentd runs the command through a shell.
        t.set(
            "command",
            Val::Arr(vec![Val::s("sh"), Val::s("-c"), Val::s(c)]),
        );
    }
    o.map(ctx, t, "tag", "tag", Conv::Str);
    match o.val("run_interval") {
        Some(i) => {
            t.set("mode", Val::s("scheduled"));
            if let Some(dur) = common::duration(i) {
                t.set("interval", Val::s(dur));
            }
        }
        None => t.set("mode", Val::s("streaming")),
    }
    let mut parsed = false;
    for c in d.children.iter().filter(|c| c.name == "parse") {
        let mut pt = Table::new("parser", false);
        super::parse_section(ctx, c, &mut pt, false);
        t.children.push(pt);
        parsed = true;
    }
    if !parsed {
        // Fluentd's exec parses tab-separated values by default.
        t.comments
            .push("approx: Fluentd parses tsv by default; each line goes to `message` here".into());
        ctx.notes.approx(
            &d.file,
            d.line,
            "<source> exec without <parse>",
            "each line goes whole to `message` (Fluentd reads tsv with `keys`)",
        );
    }
    for k in ["tag_key", "time_key"] {
        if let Some(p) = o.get(k) {
            ctx.notes.unmapped_on(
                t,
                &p.file,
                p.line,
                format!("{k} {}", p.value),
                "the exec input's tag and time are its own",
            );
        }
    }
}
