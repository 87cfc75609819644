//! The `http` input and output end to end: curl sends Fluentd-style and
//! Fluent Bit-style requests to the real binary, a forward sink checks what
//! arrived by tag, content, time and order; bad requests (garbage, a
//! truncated body, an oversized body, slow headers, too many connections)
//! fail alone and lose nothing already taken; full buffers answer 503 and
//! the request sent again is delivered. The output is checked by a Python
//! http.server (not nagare's code) and by a second nagare's http input.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::*;
use nagare_forward::EventTime;

/// nagare with a monitor, an http input (plus `input_extra` options) and a
/// forward output to `sink`; returns it once the input listens, and its port.
fn http_to_sink(dir: &Path, input_extra: &str, sink: u16, buffer_extra: &str) -> (Daemon, u16) {
    let (port, mon) = (free_port(), free_port());
    let config = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n[[input]]\ntype = \"http\"\nbind = \"127.0.0.1:{port}\"\n{input_extra}\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:{sink}\"\n\
         [output.buffer]\nflush_interval = \"50ms\"\n{buffer_extra}\n"
    );
    let d = Daemon::start(dir, "nagare", &config, Some(mon));
    // The log line, not a probe connection: a probe holds one of
    // `max_connections` until its task ends, which the limit test would see.
    d.wait_log("http input listening");
    (d, port)
}

/// Runs curl with `args`; returns its stdout (with `-w` output).
fn curl(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20"])
        .args(args)
        .output()
        .expect("run curl (Debian package curl)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// curl POSTing `body` (bytes, from stdin) with `headers` to `url`; returns
/// (status, response body).
fn post(url: &str, headers: &[&str], body: &[u8]) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "20",
        "-o",
        "-",
        "-w",
        "\n%{http_code}",
        "--data-binary",
        "@-",
    ]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let mut child = cmd
        .arg(url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run curl");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_string())
}

fn skip_without_curl() -> bool {
    skip_unless(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed (Debian package curl)",
    )
}

/// (tag, seq, time secs) of every event at the sink, in order.
fn arrived(sink: &Sink) -> Vec<(String, u64, u32)> {
    sink.records()
        .into_iter()
        .map(|(tag, t, r)| (tag, seq_of(&r), t.secs))
        .collect()
}

#[test]
fn fluentd_and_fluent_bit_requests_arrive_once_in_order_per_tag() {
    if skip_without_curl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = http_to_sink(
        dir.path(),
        "tag = \"bit.default\"\ntag_key = \"route\"",
        sink.port,
        "",
    );
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");

    // Fluentd in_http: a form field, the time parameter.
    curl(&[
        "-d",
        "json={\"seq\":0,\"message\":\"a b\"}",
        &url("/fd.form?time=1700000000"),
    ]);
    // Fluentd: an array is a batch; each record's "time" is its time.
    curl(&[
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"[{"seq":1,"time":1700000001},{"seq":2,"time":1700000002.25}]"#,
        &url("/fd.array"),
    ]);
    // Fluentd: msgpack body.
    let mut mp = Vec::new();
    rmpv::encode::write_value(
        &mut mp,
        &rmpv::Value::Map(vec![
            ("seq".into(), 3.into()),
            ("time".into(), 1_700_000_003u64.into()),
        ]),
    )
    .unwrap();
    assert_eq!(
        post(
            &url("/fd.msgpack"),
            &["Content-Type: application/msgpack"],
            &mp
        )
        .0,
        200
    );
    // Fluent Bit in_http: an object to /, the input's tag; tag_key moves one.
    curl(&[
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"seq":4}"#,
        &url("/"),
    ]);
    curl(&[
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"[{"seq":5,"route":"bit.routed"},{"seq":6}]"#,
        &url("/"),
    ]);
    // NDJSON, gzip and zstd.
    let ndjson = |from: u64| -> Vec<u8> {
        (from..from + 3)
            .map(|s| format!("{{\"seq\":{s},\"message\":\"{}\"}}\n", message_for(s)))
            .collect::<String>()
            .into_bytes()
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&ndjson(7)).unwrap();
    let gz = gz.finish().unwrap();
    let (code, _) = post(
        &url("/nd.gzip"),
        &[
            "Content-Type: application/x-ndjson",
            "Content-Encoding: gzip",
        ],
        &gz,
    );
    assert_eq!(code, 200);
    let zs = zstd::encode_all(&ndjson(10)[..], 3).unwrap();
    let (code, _) = post(
        &url("/nd.zstd"),
        &[
            "Content-Type: application/x-ndjson",
            "Content-Encoding: zstd",
        ],
        &zs,
    );
    assert_eq!(code, 200);
    // Keep-alive: two requests in one curl run share one connection.
    let connects = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{num_connects} ",
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"seq":13}"#,
        &url("/ka"),
        "--next",
        "-o",
        "/dev/null",
        "-w",
        "%{num_connects}",
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"seq":14}"#,
        &url("/ka"),
    ]);
    assert_eq!(
        connects.trim(),
        "1 0",
        "the second request reused the connection"
    );

    // Fluent Bit's out_http, `Format msgpack`: its chunk as it is, events
    // `[[EventTime, {metadata}], {record}]` one after another.
    let mut chunk = Vec::new();
    for seq in [15u64, 16] {
        let mut et = (1_700_000_000u32 + seq as u32).to_be_bytes().to_vec();
        et.extend_from_slice(&0u32.to_be_bytes());
        let event = rmpv::Value::Array(vec![
            rmpv::Value::Array(vec![rmpv::Value::Ext(0, et), rmpv::Value::Map(vec![])]),
            rmpv::Value::Map(vec![("seq".into(), seq.into())]),
        ]);
        rmpv::encode::write_value(&mut chunk, &event).unwrap();
    }
    let (code, _) = post(
        &url("/fb.msgpack"),
        &["Content-Type: application/msgpack"],
        &chunk,
    );
    assert_eq!(code, 200);
    // Fluent Bit's out_http, `Format json_stream`: objects one after another.
    let (code, _) = post(
        &url("/fb.stream"),
        &["Content-Type: application/json"],
        br#"{"seq":17}{"seq":18}"#,
    );
    assert_eq!(code, 200);

    sink.wait_records(19);
    let got = arrived(&sink);
    // Every event once, with its tag; order is kept within a tag (events of
    // different tags go out in different chunks, in no set order).
    let mut tags: Vec<(&str, u64)> = got.iter().map(|(t, s, _)| (t.as_str(), *s)).collect();
    for tag in ["fd.array", "bit.default", "nd.gzip", "nd.zstd", "ka"] {
        let seqs: Vec<u64> = tags
            .iter()
            .filter(|(t, _)| *t == tag)
            .map(|(_, s)| *s)
            .collect();
        assert!(seqs.is_sorted(), "{tag} arrived out of order: {seqs:?}");
    }
    tags.sort_by_key(|(_, s)| *s);
    assert_eq!(
        tags,
        [
            ("fd.form", 0),
            ("fd.array", 1),
            ("fd.array", 2),
            ("fd.msgpack", 3),
            ("bit.default", 4),
            ("bit.routed", 5),
            ("bit.default", 6),
            ("nd.gzip", 7),
            ("nd.gzip", 8),
            ("nd.gzip", 9),
            ("nd.zstd", 10),
            ("nd.zstd", 11),
            ("nd.zstd", 12),
            ("ka", 13),
            ("ka", 14),
            ("fb.msgpack", 15),
            ("fb.msgpack", 16),
            ("fb.stream", 17),
            ("fb.stream", 18),
        ]
    );
    let time_of = |seq: u64| got.iter().find(|g| g.1 == seq).map(|g| g.2);
    let times: Vec<u32> = (0..4).filter_map(time_of).collect();
    assert_eq!(
        times,
        [1_700_000_000, 1_700_000_001, 1_700_000_002, 1_700_000_003]
    );
    assert_eq!(time_of(16), Some(1_700_000_016), "the event's own time");
    let records = sink.records();
    let by_seq = |seq: u64| {
        records
            .iter()
            .find(|r| seq_of(&r.2) == seq)
            .expect("every seq arrived")
    };
    assert_eq!(by_seq(2).1.nanos, 250_000_000);
    // Time fields are taken out of the record; other fields stay as sent.
    assert_eq!(
        by_seq(1).2,
        rmpv::Value::Map(vec![("seq".into(), 1.into())])
    );
    assert_eq!(
        field_of(&by_seq(0).2, "message").unwrap().as_str(),
        Some("a b")
    );
    assert_eq!(
        field_of(&by_seq(5).2, "route").unwrap().as_str(),
        Some("bit.routed")
    );
    assert_eq!(
        field_of(&by_seq(8).2, "message").unwrap().as_str(),
        Some(message_for(8).as_str())
    );
    d.wait_metric("events_in_total", "http#0", 19);
}

/// Every body Fluent Bit's out_http (`Format` json, json_lines,
/// json_stream, msgpack, gelf) and Fluentd's out_http (`<format>` json, with
/// and without `json_array`, and msgpack) send, byte for byte as the
/// senders write them, with their Content-Type: Fluent Bit's
/// plugins/out_http/http.c (compose_payload: flb_pack_msgpack_to_json_format
/// with its `date` key as a double; compose_payload_gelf: one GELF object
/// per record, each followed by "\n", as application/json) and Fluentd's
/// lib/fluent/plugin/out_http.rb (json: a record and "\n" each, as
/// application/x-ndjson; json_array: "[" + the records joined by "\n," +
/// "\n]"; msgpack: maps one after another, as application/x-msgpack).
/// Each request is answered 200 and every record arrives once, as sent.
#[test]
fn every_out_http_format_of_fluent_bit_and_fluentd_is_taken() {
    if skip_without_curl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = http_to_sink(dir.path(), "", sink.port, "");
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let fb = "User-Agent: Fluent-Bit";
    let json = "Content-Type: application/json";

    let mut chunk = Vec::new();
    for seq in [6u64, 7] {
        let mut et = (1_700_000_000u32 + seq as u32).to_be_bytes().to_vec();
        et.extend_from_slice(&123_000_000u32.to_be_bytes());
        let event = rmpv::Value::Array(vec![
            rmpv::Value::Array(vec![rmpv::Value::Ext(0, et), rmpv::Value::Map(vec![])]),
            rmpv::Value::Map(vec![("seq".into(), seq.into()), ("log".into(), "m".into())]),
        ]);
        rmpv::encode::write_value(&mut chunk, &event).unwrap();
    }
    let mut fd_msgpack = Vec::new();
    for seq in [13u64, 14] {
        let rec = rmpv::Value::Map(vec![("seq".into(), seq.into()), ("log".into(), "m".into())]);
        rmpv::encode::write_value(&mut fd_msgpack, &rec).unwrap();
    }
    let requests: [(&str, &[&str], &[u8]); 7] = [
        (
            "/fb.json",
            &[fb, json],
            br#"[{"date":1700000000.123456,"seq":0,"log":"m"},{"date":1700000001.123456,"seq":1,"log":"m"}]"#,
        ),
        (
            "/fb.json_lines",
            &[fb, "Content-Type: application/x-ndjson"],
            b"{\"date\":1700000002.123456,\"seq\":2,\"log\":\"m\"}\n{\"date\":1700000003.123456,\"seq\":3,\"log\":\"m\"}\n",
        ),
        (
            "/fb.json_stream",
            &[fb, json],
            br#"{"date":1700000004.123456,"seq":4,"log":"m"}{"date":1700000005.123456,"seq":5,"log":"m"}"#,
        ),
        ("/fb.msgpack", &[fb, "Content-Type: application/msgpack"], &chunk),
        (
            "/fb.gelf",
            &[fb, json],
            b"{\"version\":\"1.1\",\"short_message\":\"m\",\"_seq\":8,\"_k8s_pod\":\"p\",\"timestamp\":1700000008.123}\n{\"version\":\"1.1\",\"short_message\":\"m\",\"_seq\":9,\"_ok\":\"true\",\"timestamp\":1700000009.123}\n",
        ),
        (
            "/fd.json",
            &["Content-Type: application/x-ndjson"],
            b"{\"seq\":10,\"log\":\"m\"}\n{\"seq\":11,\"log\":\"m\"}\n",
        ),
        (
            "/fd.json_array",
            &[json],
            b"[{\"seq\":12,\"log\":\"m\"}\n,{\"seq\":15,\"log\":\"m\"}\n]",
        ),
    ];
    for (path, headers, body) in requests {
        let (code, answer) = post(&url(path), headers, body);
        assert_eq!(code, 200, "{path}: {answer}");
    }
    let (code, answer) = post(
        &url("/fd.msgpack"),
        &["Content-Type: application/x-msgpack"],
        &fd_msgpack,
    );
    assert_eq!(code, 200, "{answer}");

    sink.wait_records(16);
    let records = sink.records();
    assert_eq!(records.len(), 16);
    let seq = |r: &rmpv::Value| {
        field_of(r, "seq")
            .or_else(|| field_of(r, "_seq"))
            .and_then(|v| v.as_u64())
            .expect("a seq")
    };
    let mut got: Vec<(u64, &str)> = records
        .iter()
        .map(|(t, _, r)| (seq(r), t.as_str()))
        .collect();
    got.sort();
    let want: Vec<(u64, &str)> = [
        (0, "fb.json"),
        (1, "fb.json"),
        (2, "fb.json_lines"),
        (3, "fb.json_lines"),
        (4, "fb.json_stream"),
        (5, "fb.json_stream"),
        (6, "fb.msgpack"),
        (7, "fb.msgpack"),
        (8, "fb.gelf"),
        (9, "fb.gelf"),
        (10, "fd.json"),
        (11, "fd.json"),
        (12, "fd.json_array"),
        (13, "fd.msgpack"),
        (14, "fd.msgpack"),
        (15, "fd.json_array"),
    ]
    .to_vec();
    assert_eq!(got, want);
    let by_seq = |n: u64| records.iter().find(|r| seq(&r.2) == n).unwrap();
    // Records as sent: Fluent Bit's `date` stays a field (time_key is
    // "time"); the msgpack chunk's own EventTime is the event's time.
    assert_eq!(
        field_of(&by_seq(0).2, "date").and_then(|v| v.as_f64()),
        Some(1_700_000_000.123456)
    );
    assert_eq!(by_seq(7).1, EventTime::new(1_700_000_007, 123_000_000));
    let gelf = &by_seq(9).2;
    for (k, v) in [("version", "1.1"), ("short_message", "m"), ("_ok", "true")] {
        assert_eq!(field_of(gelf, k).and_then(|x| x.as_str()), Some(v), "{k}");
    }
    assert_eq!(
        field_of(gelf, "timestamp").and_then(|v| v.as_f64()),
        Some(1_700_000_009.123)
    );
    assert_eq!(
        field_of(&by_seq(15).2, "log").and_then(|v| v.as_str()),
        Some("m")
    );
    d.wait_metric("events_in_total", "http#0", 16);
}

/// Sends raw bytes on a new connection and reads until the server closes
/// it (or `WAIT`); returns what it answered.
fn raw_exchange(port: u16, bytes: &[u8], close_write: bool) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(bytes).unwrap();
    if close_write {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn bad_requests_fail_alone_and_lose_nothing() {
    if skip_without_curl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = http_to_sink(
        dir.path(),
        "bearer_token = \"s3cret\"\nmax_body_size = \"4KiB\"\nheader_timeout = \"1s\"",
        sink.port,
        "",
    );
    let url = format!("http://127.0.0.1:{port}/ok");
    let auth = "Authorization: Bearer s3cret";
    let json = "Content-Type: application/json";
    let mut sent = 0u64;
    let send_ok = |sent: &mut u64| {
        let (code, body) = post(
            &url,
            &[auth, json],
            format!("{{\"seq\":{sent}}}").as_bytes(),
        );
        assert_eq!(code, 200, "{body}");
        *sent += 1;
    };
    send_ok(&mut sent);

    // Authentication.
    assert_eq!(post(&url, &[json], b"{\"seq\":99}").0, 401);
    assert_eq!(
        post(&url, &["Authorization: Bearer nope", json], b"{\"seq\":99}").0,
        401
    );
    // A bad NDJSON record: 400 naming its line; nothing of the request taken.
    let (code, body) = post(
        &url,
        &[auth, "Content-Type: application/x-ndjson"],
        b"{\"seq\":99}\n{\"seq\":98}\n{\"seq\"\n",
    );
    assert_eq!(
        (code, body.lines().next().unwrap_or("").split(':').next()),
        (400, Some("line 3")),
        "{body}"
    );
    // Oversized, declared and undeclared (chunked), and a zip bomb.
    let big = vec![b' '; 5000];
    assert_eq!(post(&url, &[auth, json], &big).0, 413);
    assert_eq!(
        post(&url, &[auth, json, "Transfer-Encoding: chunked"], &big).0,
        413
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&vec![b' '; 100_000]).unwrap();
    assert_eq!(
        post(
            &url,
            &[auth, json, "Content-Encoding: gzip"],
            &gz.finish().unwrap()
        )
        .0,
        413
    );
    // Garbage that is not HTTP: the connection is answered 400 and closed.
    let answer = raw_exchange(port, b"\x00\x01garbage\r\n\r\n", false);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
        "{answer:?}"
    );
    // A truncated body: the client closes inside it; nothing is taken.
    let head = format!("POST /ok HTTP/1.1\r\nHost: x\r\n{auth}\r\n{json}\r\nContent-Length: 100\r\n\r\n{{\"seq\":97");
    let answer = raw_exchange(port, head.as_bytes(), true);
    assert!(!answer.contains("200 OK"), "{answer:?}");
    send_ok(&mut sent);

    // Slowloris: headers never finished; closed after header_timeout.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"POST /ok HTTP/1.1\r\nHost: x\r\n").unwrap();
    slow.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 256];
    let n = slow.read(&mut b).unwrap_or(0);
    assert!(
        !String::from_utf8_lossy(&b[..n]).contains("200"),
        "the slow client got an answer"
    );
    d.wait_log("header_timeout");

    // The connection limit, on a second input with the default
    // header_timeout (so idle connections stay): 3 idle connections, the
    // 4th is closed at once; once they go, requests are served again.
    let ldir = dir.path().join("limit");
    std::fs::create_dir(&ldir).unwrap();
    let (d2, port2) = http_to_sink(&ldir, "max_connections = 3", sink.port, "");
    let url2 = format!("http://127.0.0.1:{port2}/ok");
    let idle: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(("127.0.0.1", port2)).unwrap())
        .collect();
    let request = "POST /ok HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{\"seq\":96}";
    let answer = raw_exchange(port2, request.as_bytes(), false);
    assert!(answer.is_empty(), "over max_connections: {answer:?}");
    d2.wait_log("max_connections reached");
    drop(idle);
    wait_until(
        WAIT,
        "a request served after the idle connections closed",
        || post(&url2, &[json], format!("{{\"seq\":{sent}}}").as_bytes()).0 == 200,
    );
    sent += 1;
    send_ok(&mut sent);

    sink.wait_records(sent as usize);
    let seqs: Vec<u64> = arrived(&sink).into_iter().map(|(_, s, _)| s).collect();
    assert_exact_seqs(&seqs, sent);
}

fn wait_metric_at_least(d: &Daemon, name: &str, plugin: &str, want: u64) {
    wait_until(
        WAIT,
        &format!("nagare_{name}{{plugin={plugin}}} >= {want}"),
        || d.metric(name, plugin) >= want,
    );
}

#[test]
fn full_buffers_answer_503_and_the_resent_request_is_delivered() {
    if skip_without_curl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The sink is down: the output's small buffer fills.
    let sink_port = free_port();
    let (d, port) = http_to_sink(dir.path(), "retry_after = \"2s\"", sink_port, "total_limit_size = \"8KiB\"\nchunk_limit_size = \"1KiB\"\nretry_wait = \"100ms\"\nretry_max_interval = \"200ms\"");
    let url = format!("http://127.0.0.1:{port}/full");
    let batch = |i: u64| -> Vec<u8> {
        (i * 10..i * 10 + 10)
            .map(|s| format!("{{\"seq\":{s},\"message\":\"{}\"}}\n", message_for(s)))
            .collect::<String>()
            .into_bytes()
    };
    let mut taken = 0u64;
    let refused = loop {
        let mut cmd = Command::new("curl");
        let out = cmd
            .args([
                "-sS",
                "-i",
                "--max-time",
                "20",
                "-H",
                "Content-Type: application/x-ndjson",
                "--data-binary",
                &String::from_utf8(batch(taken)).unwrap(),
                &url,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.starts_with("HTTP/1.1 200") {
            taken += 1;
            assert!(taken < 100, "the buffer never filled");
            continue;
        }
        break text;
    };
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(
        refused.to_ascii_lowercase().contains("retry-after: 2"),
        "{refused}"
    );
    assert!(d.metric("rejected_events_total", "http#0") >= 10);
    // The sink comes up; the refused batch sent again is taken.
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    wait_until(WAIT, "the refused request taken when sent again", || {
        post(&url, &["Content-Type: application/x-ndjson"], &batch(taken)).0 == 200
    });
    taken += 1;
    sink.wait_records(taken as usize * 10);
    let seqs: Vec<u64> = arrived(&sink).into_iter().map(|(_, s, _)| s).collect();
    assert_exact_seqs(&seqs, taken * 10);
}

#[test]
fn delivered_ack_answers_after_delivery() {
    if skip_without_curl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sink_port = free_port();
    let (_d, port) = http_to_sink(
        dir.path(),
        "ack = \"delivered\"",
        sink_port,
        "retry_wait = \"100ms\"\nretry_max_interval = \"200ms\"",
    );
    // The request is held while the sink is down, answered once it is up.
    let url = format!("http://127.0.0.1:{port}/acked");
    let pending =
        std::thread::spawn(move || post(&url, &["Content-Type: application/json"], b"{\"seq\":0}"));
    let d = &_d;
    wait_metric_at_least(d, "events_in_total", "http#0", 1);
    assert!(!pending.is_finished(), "answered before delivery");
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    assert_eq!(pending.join().unwrap().0, 200);
    sink.wait_count(1);
    assert_eq!(sink.seqs(), [0]);
}

/// A Python http.server that is not nagare's code: records each request's
/// path, headers and (gunzipped) body as a JSON line in `log`; answers
/// the first request 503 with Retry-After: 1, requests to /bad 400, and
/// every other one 200.
const RECEIVER: &str = r#"
import gzip, json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
log = open(sys.argv[2], "a")
first = [True]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        if first[0]:
            first[0] = False
            code = 503
        elif self.path.startswith("/bad"):
            code = 400
        else:
            code = 200
        log.write(json.dumps({"path": self.path, "code": code,
            "auth": self.headers.get("Authorization"), "x": self.headers.get("X-Env"),
            "type": self.headers.get("Content-Type"), "body": body.decode("latin-1")}) + "\n")
        log.flush()
        self.send_response(code)
        if code == 503:
            self.send_header("Retry-After", "1")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

/// Starts RECEIVER in `dir` on a free port; returns it, the port and the
/// file it logs each request to.
fn start_receiver(dir: &Path) -> (std::process::Child, u16, std::path::PathBuf) {
    let (port, log) = (free_port(), dir.join("received.jsonl"));
    let script = dir.join("receiver.py");
    std::fs::write(&script, RECEIVER).unwrap();
    let receiver = Command::new("python3")
        .arg(&script)
        .arg(port.to_string())
        .arg(&log)
        .spawn()
        .unwrap();
    wait_port(port);
    (receiver, port, log)
}

#[test]
fn output_posts_ndjson_to_a_python_server_with_retries_and_dead_letters() {
    if skip_unless(
        Command::new("python3").arg("--version").output().is_ok(),
        "python3 is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut receiver, rport, log) = start_receiver(dir.path());
    let dead = dir.path().join("dead");
    let sections = format!(
        r#"[[output]]
type = "http"
match = "bad.**"
endpoint = "http://127.0.0.1:{rport}/bad/${{tag}}"
[output.buffer]
flush_interval = "50ms"
[output.secondary]
type = "file"
path = "{dead}/bad"
[[output]]
type = "http"
match = "**"
endpoint = "http://127.0.0.1:{rport}/in/${{tag}}"
compress = "gzip"
tag_key = "tag"
bearer_token = "tok"
[output.headers]
X-Env = "test"
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
"#,
        dead = dead.display()
    );
    let (d, fport) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(fport);
    s.packed("app.web", 0..5, None);
    s.finish();
    let lines = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    wait_until(WAIT, "the retried request answered 200", || {
        lines().iter().any(|l| l["code"] == 200)
    });
    let got = lines();
    // The first try got 503 + Retry-After; the same body came again.
    assert_eq!(got[0]["code"], 503);
    assert_eq!(got[0]["body"], got[1]["body"]);
    let r = &got[1];
    assert_eq!(
        (r["path"].as_str(), r["auth"].as_str(), r["x"].as_str()),
        (Some("/in/app.web"), Some("Bearer tok"), Some("test"))
    );
    assert_eq!(r["type"], "application/x-ndjson");
    let events: Vec<serde_json::Value> = r["body"]
        .as_str()
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 5);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            (e["seq"].as_u64(), e["tag"].as_str()),
            (Some(i as u64), Some("app.web"))
        );
        assert_eq!(e["message"], message_for(i as u64));
        assert!(e["time"].as_f64().unwrap() > 1.6e9, "{e}");
    }
    // A 400 is permanent: the chunk goes to the secondary at once, untried again.
    let mut s = Sender::tcp(fport);
    s.packed("bad.one", 0..2, None);
    s.finish();
    wait_until(WAIT, "the refused chunk in the secondary", || {
        d.metric("permanent_errors_total", "http#0") == 1
    });
    assert_eq!(lines().iter().filter(|l| l["code"] == 400).count(), 1);
    let _ = receiver.kill();
    let _ = receiver.wait();
}

/// Nothing accepted is discarded: a chunk the server refuses for good
/// (400), with no secondary output, is a dead-letter file under
/// `[system] dead_letter_dir` that `nagare replay` sends whole.
#[test]
fn a_refused_chunk_without_secondary_becomes_a_dead_letter_replay_sends() {
    if skip_unless(
        Command::new("python3").arg("--version").output().is_ok(),
        "python3 is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (mut receiver, rport, _log) = start_receiver(dir.path());
    let letters = dir.path().join("letters");
    let sections = format!(
        r#"[system]
dead_letter_dir = "{letters}"
[[output]]
type = "http"
match = "**"
endpoint = "http://127.0.0.1:{rport}/bad/${{tag}}"
[output.buffer]
flush_interval = "50ms"
retry_wait = "50ms"
"#,
        letters = letters.display()
    );
    let (d, fport) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(fport);
    s.packed("app.refused", 0..40, None);
    s.finish();
    // The first answer is a 503 (retried), the second a 400 (for good).
    wait_until(WAIT, "the refused chunk written as a dead letter", || {
        d.metric("secondary_events_total", "http#0") == 40
    });
    assert_eq!(d.metric("lost_events_total", "http#0"), 0);
    d.wait_log("written to the dead-letter file");
    replay_delivers(&letters.join("http#0"), 40);
    let _ = receiver.kill();
    let _ = receiver.wait();
}

#[test]
fn output_to_a_second_nagare_keeps_tags_times_and_records() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (_b, bport) = http_to_sink(dir.path(), "", sink.port, "");
    for format in ["ndjson", "json_array", "msgpack"] {
        let sub = dir.path().join(format);
        std::fs::create_dir(&sub).unwrap();
        let out = format!(
            "[[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:{bport}/${{tag}}\"\nformat = \"{format}\"\n[output.buffer]\nflush_interval = \"50ms\"\n"
        );
        let (_a, aport) = start_forward_daemon(&sub, &out);
        let mut s = Sender::tcp(aport);
        s.packed(&format!("relay.{format}"), 0..50, None);
        s.finish();
        let before = sink.count();
        sink.wait_count(before + 50);
    }
    let records = sink.records();
    assert_eq!(records.len(), 150);
    for (i, (tag, t, r)) in records.iter().enumerate() {
        let format = ["ndjson", "json_array", "msgpack"][i / 50];
        assert_eq!(tag, &format!("relay.{format}"));
        assert_eq!(seq_of(r), (i % 50) as u64);
        assert_eq!(
            field_of(r, "message").unwrap().as_str(),
            Some(message_for((i % 50) as u64).as_str())
        );
        assert!(t.secs > 1_600_000_000);
    }
}

#[test]
fn check_names_bad_options() {
    let cases: &[(&str, &str, &str)] = &[
        ("[[input]]\ntype = \"http\"\nbind = \"nowhere\"\n", ":7: key `bind`:", "nowhere"),
        ("[[input]]\ntype = \"http\"\nbind = \"127.0.0.1:0\"\nmax_connections = 0\n", ":8: key `max_connections`:", "at least 1"),
        ("[[input]]\ntype = \"http\"\nbind = \"127.0.0.1:0\"\ntag = \"a b\"\n", ":8: key `tag`:", "not a tag"),
        ("[[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"http://x/\"\n[output.tls]\nverify = false\n", ":9: key `tls`:", "the endpoint is http://: write https://"),
        ("[[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"https://x/\"\n[output.tls]\nenable = false\n", ":10: key `tls.enable`:", "the endpoint is https://"),
        ("[[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"http://x/\"\nformat = \"xml\"\n", ":9: key `format`:", "ndjson"),
        ("[[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"http://x/\"\nbearer_token = \"t\"\nusername = \"u\"\n", ":9: key `bearer_token`:", "not both"),
        ("[[output]]\ntype = \"opentelemetry\"\nmatch = \"**\"\nendpoint = \"ftp://x/\"\n", ":8: key `endpoint`:", "expected http://"),
        ("[[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"http://x/\"\nrequest_concurrency = 0\n", ":9: key `request_concurrency`:", "at least 1"),
    ];
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, cases);
}

/// A `Content-Type` in `[output.headers]` replaces the output's own: one
/// that names the other family than the body (msgpack labelled JSON) is
/// warned about at check, since the receiver reads the body by it (Fluent
/// Bit's in_http answers such a msgpack body "400 unable to process
/// records"); NDJSON labelled `application/json` (what Fluent Bit's in_http
/// wants) is not.
#[test]
fn check_warns_when_content_type_does_not_match_the_format() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, format: &str, ct: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("{CHECK_BASE}[[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:9880/app\"\nformat = \"{format}\"\n[output.headers]\nContent-Type = \"{ct}\"\n"),
        )
        .unwrap();
        let out = run_check(&path);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        stderr
    };
    let e = run("mp.toml", "msgpack", "application/json");
    assert!(
        e.contains("warning:")
            && e.contains("headers")
            && e.contains("\"application/json\" does not match the body of format \"msgpack\""),
        "{e}"
    );
    let e = run("js.toml", "json_array", "application/x-msgpack");
    assert!(
        e.contains("does not match the body of format \"json_array\""),
        "{e}"
    );
    let e = run("nd.toml", "ndjson", "application/json");
    assert!(!e.contains("warning:"), "{e}");
}

/// The answer rule every HTTP output shares for refused credentials: a
/// 401 from a second nagare's http input (its `bearer_token` is another)
/// keeps the events in the buffer and retries them with a clear error
/// naming the peer — no dead letter, nothing lost — until the token is
/// fixed (a reload of the sender), then every event arrives once.
#[test]
fn refused_credentials_keep_the_events_until_the_token_is_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (_b, bport) = http_to_sink(dir.path(), "bearer_token = \"right\"", sink.port, "");
    let sub = dir.path().join("sender");
    std::fs::create_dir(&sub).unwrap();
    let (port, mon) = (free_port(), free_port());
    let letters = sub.join("letters");
    let config = |token: &str| {
        format!(
            "[system]\ndead_letter_dir = \"{}\"\n[monitor]\nbind = \"127.0.0.1:{mon}\"\n{}\
             [[output]]\ntype = \"http\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:{bport}/${{tag}}\"\n\
             bearer_token = \"{token}\"\n[output.buffer]\nflush_interval = \"50ms\"\nretry_wait = \"100ms\"\nretry_max_interval = \"200ms\"\n",
            letters.display(),
            forward_input(port)
        )
    };
    let mut d = Daemon::start(&sub, "nagare", &config("wrong"), Some(mon));
    d.wait_port(port);
    let mut s = Sender::tcp(port);
    s.packed("app.auth", 0..30, None);
    s.finish();
    let line = d.wait_log_line("the refused credentials, named with the peer", |l| {
        l.contains("flush failed; will retry")
            && l.contains(&format!(
                "127.0.0.1:{bport} answered 401 Unauthorized: the server refused the credentials"
            ))
    });
    assert!(line.contains("the events are kept and retried"), "{line}");
    wait_until(WAIT, "a few retries", || {
        d.metric("retries_total", "http#0") >= 3
    });
    assert_eq!(sink.count(), 0);
    for m in [
        "permanent_errors_total",
        "secondary_events_total",
        "lost_events_total",
    ] {
        assert_eq!(d.metric(m, "http#0"), 0, "{m}");
    }
    assert!(
        !letters.join("http#0").exists(),
        "a dead letter was written"
    );
    // The token fixed: the kept chunk goes with the reloaded output.
    std::fs::write(&d.config, config("right")).unwrap();
    let (st, body) = http_post(mon, "/api/reload");
    assert_eq!(st, 200, "reload: {body}\n{}", d.stderr());
    sink.wait_count(30);
    d.wait_metric("events_out_total", "http#0", 30);
    assert_exact_seqs(&sink.seqs(), 30);
    assert_eq!(d.metric("lost_events_total", "http#0"), 0);
}
