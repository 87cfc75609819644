//! The `opentelemetry` input and output end to end: the OpenTelemetry
//! Python SDK (its OTLP/HTTP protobuf exporter, not nagare's code) sends
//! logs to the input, a forward sink checks them in the documented record
//! layout; curl sends OTLP JSON; bad requests fail alone; the output is
//! read by a Python server decoding with the OpenTelemetry protobuf
//! classes, and by a second nagare's input (JSON encoding).
//!
//! The Python packages live in a venv next to tests/otlp/requirements.txt,
//! which scripts/test-all.sh makes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::*;

/// The venv's python, or None (the test skips) when it is not made.
fn venv_python() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/.venv/bin/python");
    p.exists().then_some(p)
}

fn skip_without_venv() -> Option<PathBuf> {
    let p = venv_python();
    if skip_unless(
        p.is_some(),
        "no venv with the OpenTelemetry Python SDK at crates/nagare/tests/otlp/.venv (scripts/test-all.sh makes it)",
    ) {
        return None;
    }
    p
}

/// nagare with a monitor, an opentelemetry input (plus `extra` options)
/// and a forward output to `sink`.
fn otlp_to_sink(dir: &Path, extra: &str, sink: u16) -> (Daemon, u16) {
    let (port, mon) = (free_port(), free_port());
    let config = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n[[input]]\ntype = \"opentelemetry\"\nbind = \"127.0.0.1:{port}\"\n{extra}\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:{sink}\"\n\
         [output.buffer]\nflush_interval = \"50ms\"\n"
    );
    let mut d = Daemon::start(dir, "nagare", &config, Some(mon));
    d.wait_port(port);
    (d, port)
}

/// Logs 20 warnings through Python's logging module inside a span, with
/// the SDK's OTLP/HTTP exporter; prints the span's trace and span ids.
const SDK_SENDER: &str = r#"
import logging, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

provider = LoggerProvider(resource=Resource.create({"service.name": "shop"}))
provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=sys.argv[1])))
log = logging.getLogger("checkout")
log.addHandler(LoggingHandler(level=logging.INFO, logger_provider=provider))
log.setLevel(logging.INFO)
log.propagate = False
trace.set_tracer_provider(TracerProvider())
with trace.get_tracer("test").start_as_current_span("pay") as span:
    ctx = span.get_span_context()
    print(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"), flush=True)
    for i in range(20):
        log.warning("payment %d failed", i, extra={"seq": i})
provider.shutdown()
"#;

#[test]
fn the_python_sdk_sends_logs_in_the_record_layout() {
    let Some(python) = skip_without_venv() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (_d, port) = otlp_to_sink(dir.path(), "tag = \"otel.in\"", sink.port);
    let out = Command::new(python)
        .args([
            "-c",
            SDK_SENDER,
            &format!("http://127.0.0.1:{port}/v1/logs"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids = String::from_utf8_lossy(&out.stdout).into_owned();
    let (trace_id, span_id) = ids.trim().split_once(' ').unwrap();
    sink.wait_records(20);
    let records = sink.records();
    assert_eq!(records.len(), 20);
    for (i, (tag, t, r)) in records.iter().enumerate() {
        assert_eq!(tag, "otel.in");
        assert!(t.secs > 1_600_000_000);
        let s = |k: &str| field_of(r, k).and_then(|v| v.as_str()).map(String::from);
        assert_eq!(s("body"), Some(format!("payment {i} failed")));
        assert_eq!(
            field_of(r, "severity_number").and_then(|v| v.as_u64()),
            Some(13)
        );
        assert_eq!(s("severity_text").as_deref(), Some("WARN"));
        assert_eq!(
            (s("trace_id").as_deref(), s("span_id").as_deref()),
            (Some(trace_id), Some(span_id))
        );
        let attrs = field_of(r, "attributes").unwrap();
        assert_eq!(
            field_of(attrs, "seq").and_then(|v| v.as_u64()),
            Some(i as u64)
        );
        let resource = field_of(r, "resource").unwrap();
        assert_eq!(
            field_of(resource, "service.name").and_then(|v| v.as_str()),
            Some("shop")
        );
        let scope = field_of(r, "scope").unwrap();
        assert_eq!(
            field_of(scope, "name").and_then(|v| v.as_str()),
            Some("checkout")
        );
    }
}

/// An OTLP JSON request of two records (the spec's JSON mapping: hex ids,
/// integers as strings, enums as numbers).
const OTLP_JSON: &str = r#"{"resourceLogs":[{"resource":{"attributes":[{"key":"host.name","value":{"stringValue":"web-1"}}]},
"scopeLogs":[{"scope":{"name":"lib","version":"2"},"logRecords":[
{"timeUnixNano":"1700000000000000001","severityNumber":9,"severityText":"INFO","body":{"stringValue":"hello"},
 "attributes":[{"key":"n","value":{"intValue":"7"}}],"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708"},
{"timeUnixNano":"1700000000000000002","body":{"kvlistValue":{"values":[{"key":"k","value":{"boolValue":true}}]}}}]}]}]}"#;

fn curl_post(url: &str, content_type: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut child = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "20",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-H",
        ])
        .arg(format!("Content-Type: {content_type}"))
        .args(["--data-binary", "@-", url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run curl");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    let at = out.stdout.iter().rposition(|&b| b == b'\n').unwrap();
    let code = String::from_utf8_lossy(&out.stdout[at + 1..])
        .trim()
        .parse()
        .unwrap();
    (code, out.stdout[..at].to_vec())
}

#[test]
fn otlp_json_and_bad_requests() {
    if skip_unless(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = otlp_to_sink(
        dir.path(),
        "max_body_size = \"2KiB\"\nheader_timeout = \"1s\"",
        sink.port,
    );
    let url = format!("http://127.0.0.1:{port}/v1/logs");
    let (code, body) = curl_post(&url, "application/json", OTLP_JSON.as_bytes());
    assert_eq!((code, body.as_slice()), (200, &b"{}"[..]));

    // Garbage protobuf, a truncated one, JSON that is not OTLP, a wrong
    // path, a wrong type, an oversized body: each refused alone.
    assert_eq!(
        curl_post(&url, "application/x-protobuf", b"\xff\xff\xff\xff garbage").0,
        400
    );
    assert_eq!(
        curl_post(&url, "application/x-protobuf", b"\x0a\x10\x0a").0,
        400
    );
    assert_eq!(
        curl_post(&url, "application/json", b"{\"resourceLogs\": 5}").0,
        400
    );
    assert_eq!(
        curl_post(
            &format!("http://127.0.0.1:{port}/v1/traces"),
            "application/json",
            b"{}"
        )
        .0,
        404
    );
    assert_eq!(curl_post(&url, "text/plain", b"hi").0, 415);
    assert_eq!(
        curl_post(&url, "application/json", &vec![b' '; 3000]).0,
        413
    );
    // A slow client is closed after header_timeout.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow.write_all(b"POST /v1/logs HTTP/1.1\r\n").unwrap();
    slow.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 64];
    let n = slow.read(&mut b).unwrap_or(0);
    assert!(!String::from_utf8_lossy(&b[..n]).contains("200"));
    d.wait_log("header_timeout");
    // An empty export (no records) is fine and adds nothing.
    assert_eq!(curl_post(&url, "application/x-protobuf", b"").0, 200);
    assert_eq!(
        curl_post(&url, "application/json", OTLP_JSON.as_bytes()).0,
        200
    );

    sink.wait_records(4);
    let records = sink.records();
    assert_eq!(records.len(), 4);
    let (tag, t, r) = &records[0];
    assert_eq!(
        (tag.as_str(), t.secs, t.nanos),
        ("otlp.logs", 1_700_000_000, 1)
    );
    let s = |k: &str| field_of(r, k).and_then(|v| v.as_str()).map(String::from);
    assert_eq!(s("body").as_deref(), Some("hello"));
    assert_eq!(
        s("trace_id").as_deref(),
        Some("0102030405060708090a0b0c0d0e0f10")
    );
    assert_eq!(s("span_id").as_deref(), Some("0102030405060708"));
    assert_eq!(
        field_of(field_of(r, "attributes").unwrap(), "n").and_then(|v| v.as_i64()),
        Some(7)
    );
    assert_eq!(
        field_of(field_of(r, "resource").unwrap(), "host.name").and_then(|v| v.as_str()),
        Some("web-1")
    );
    assert_eq!(
        field_of(field_of(r, "scope").unwrap(), "version").and_then(|v| v.as_str()),
        Some("2")
    );
    let body = field_of(&records[1].2, "body").unwrap();
    assert_eq!(field_of(body, "k").and_then(|v| v.as_bool()), Some(true));
    assert_eq!(records[2].2, records[0].2);
}

/// A receiver that is not nagare's code: decodes each POST body as an
/// ExportLogsServiceRequest with the OpenTelemetry protobuf classes and
/// appends it as a JSON line (MessageToDict) to a file.
const PROTO_RECEIVER: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
out = open(sys.argv[2], "a")
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        req = ExportLogsServiceRequest()
        req.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        out.write(json.dumps({"path": self.path, "type": self.headers["Content-Type"], "req": MessageToDict(req)}) + "\n")
        out.flush()
        body = ExportLogsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"#;

#[test]
fn the_output_sends_protobuf_the_sdk_decodes_and_json_to_a_second_nagare() {
    let Some(python) = skip_without_venv() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (rport, log) = (free_port(), dir.path().join("received.jsonl"));
    let mut receiver = Command::new(&python)
        .args(["-c", PROTO_RECEIVER, &rport.to_string()])
        .arg(&log)
        .spawn()
        .unwrap();
    // A second nagare takes the JSON encoding into its own input.
    let sink = Sink::start(SinkOpts::default());
    let bdir = dir.path().join("b");
    std::fs::create_dir(&bdir).unwrap();
    let (_b, bport) = otlp_to_sink(&bdir, "", sink.port);
    wait_port(rport);
    let sections = format!(
        "[[output]]\ntype = \"copy\"\nmatch = \"**\"\n\
         [[output.store]]\ntype = \"opentelemetry\"\nendpoint = \"http://127.0.0.1:{rport}/v1/logs\"\n[output.store.buffer]\nflush_interval = \"50ms\"\n\
         [[output.store]]\ntype = \"opentelemetry\"\nendpoint = \"http://127.0.0.1:{bport}/v1/logs\"\nencoding = \"json\"\ncompress = \"gzip\"\n[output.store.buffer]\nflush_interval = \"50ms\"\n"
    );
    let (_a, aport) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(aport);
    s.packed("app.otel", 0..10, None);
    s.finish();

    let requests = || -> Vec<serde_json::Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    wait_until(WAIT, "10 log records at the Python receiver", || {
        requests()
            .iter()
            .map(|r| {
                r["req"]["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
                    .as_array()
                    .map_or(0, |a| a.len())
            })
            .sum::<usize>()
            >= 10
    });
    let mut got = Vec::new();
    for r in requests() {
        assert_eq!(
            (r["path"].as_str(), r["type"].as_str()),
            (Some("/v1/logs"), Some("application/x-protobuf"))
        );
        for lr in r["req"]["resourceLogs"][0]["scopeLogs"][0]["logRecords"]
            .as_array()
            .unwrap()
        {
            got.push(lr.clone());
        }
    }
    assert_eq!(got.len(), 10);
    for (i, lr) in got.iter().enumerate() {
        // A plain record is sent as a map body.
        let values = lr["body"]["kvlistValue"]["values"].as_array().unwrap();
        assert_eq!(values[0]["key"], "seq");
        assert_eq!(values[0]["value"]["intValue"], i.to_string());
        assert_eq!(values[1]["value"]["stringValue"], message_for(i as u64));
        assert!(lr["timeUnixNano"].as_str().unwrap().len() >= 19);
    }
    // The JSON copy went through a second nagare's input.
    sink.wait_records(10);
    for (i, (tag, _, r)) in sink.records().iter().enumerate() {
        assert_eq!(tag, "otlp.logs");
        let body = field_of(r, "body").unwrap();
        assert_eq!(seq_of(body), i as u64);
        assert_eq!(
            field_of(body, "message").and_then(|v| v.as_str()),
            Some(message_for(i as u64).as_str())
        );
    }
    let _ = receiver.kill();
    let _ = receiver.wait();
}
