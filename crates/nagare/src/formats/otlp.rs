//! OpenTelemetry logs (OTLP) ↔ events: the record layout the
//! `opentelemetry` input writes and the `opentelemetry` output reads
//! (docs/opentelemetry.md shows it).
//!
//! One LogRecord is one event. Its time is `time_unix_nano`, else
//! `observed_time_unix_nano`, else the time of arrival; its record holds
//! the fields below, each only when the LogRecord has it:
//!
//! | field | from |
//! | --- | --- |
//! | `body` | the body, as a native value (string, number, map, array, bytes) |
//! | `severity_text`, `severity_number` | the severity |
//! | `attributes` | the log record's attributes, a map |
//! | `trace_id`, `span_id` | lowercase hex |
//! | `flags` | the trace flags |
//! | `event_name` | the event name |
//! | `observed_time_unix_nano` | an integer |
//! | `resource` | the resource's attributes, a map |
//! | `scope` | `{"name", "version", "attributes"}` of the instrumentation scope |
//!
//! Back to OTLP, the same fields are read; a record without `body` is sent
//! with its other fields (those not named above) as a map body, and a
//! record with `body` sends its other fields as more attributes. Records
//! with the same `resource` and `scope` share a ResourceLogs / ScopeLogs.

use nagare_forward::msgpack::{write_array_len, write_bool, write_map_len, write_str};
use nagare_forward::EventTime;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use rmpv::Value;

/// The record fields of the layout (everything else is the body or more
/// attributes on the way back).
const LAYOUT: &[&str] = &[
    "body",
    "severity_text",
    "severity_number",
    "attributes",
    "trace_id",
    "span_id",
    "flags",
    "event_name",
    "observed_time_unix_nano",
    "resource",
    "scope",
];

/// Appends one PackedForward entry per log record of `req`; returns how
/// many. `now` is the time of records that carry none.
pub fn write_entries(req: &ExportLogsServiceRequest, now: EventTime, out: &mut Vec<u8>) -> u32 {
    let mut count = 0;
    for rl in &req.resource_logs {
        let resource = rl.resource.as_ref().map_or(&[][..], |r| &r.attributes[..]);
        for sl in &rl.scope_logs {
            for lr in &sl.log_records {
                out.push(0x92);
                let nanos = match (lr.time_unix_nano, lr.observed_time_unix_nano) {
                    (0, 0) => None,
                    (0, t) | (t, _) => Some(t),
                };
                let time = nanos.map_or(now, |n| {
                    EventTime::new((n / 1_000_000_000) as u32, (n % 1_000_000_000) as u32)
                });
                out.extend_from_slice(&time.to_bytes());
                write_record(lr, resource, sl.scope.as_ref(), out);
                count += 1;
            }
        }
    }
    count
}

fn write_record(
    lr: &LogRecord,
    resource: &[KeyValue],
    scope: Option<&InstrumentationScope>,
    out: &mut Vec<u8>,
) {
    let scope =
        scope.filter(|s| !(s.name.is_empty() && s.version.is_empty() && s.attributes.is_empty()));
    let fields = [
        lr.body.as_ref().and_then(|b| b.value.as_ref()).is_some(),
        !lr.severity_text.is_empty(),
        lr.severity_number != 0,
        !lr.attributes.is_empty(),
        !lr.trace_id.is_empty(),
        !lr.span_id.is_empty(),
        lr.flags != 0,
        !lr.event_name.is_empty(),
        lr.observed_time_unix_nano != 0,
        !resource.is_empty(),
        scope.is_some(),
    ];
    write_map_len(out, fields.iter().filter(|f| **f).count());
    let key = |out: &mut Vec<u8>, i: usize| {
        let on = fields[i];
        if on {
            write_str(out, LAYOUT[i].as_bytes());
        }
        on
    };
    if key(out, 0) {
        write_any(lr.body.as_ref(), out);
    }
    if key(out, 1) {
        write_str(out, lr.severity_text.as_bytes());
    }
    if key(out, 2) {
        let _ = rmp::encode::write_sint(out, lr.severity_number as i64);
    }
    if key(out, 3) {
        write_kvs(&lr.attributes, out);
    }
    if key(out, 4) {
        write_str(out, hex::encode(&lr.trace_id).as_bytes());
    }
    if key(out, 5) {
        write_str(out, hex::encode(&lr.span_id).as_bytes());
    }
    if key(out, 6) {
        let _ = rmp::encode::write_uint(out, lr.flags as u64);
    }
    if key(out, 7) {
        write_str(out, lr.event_name.as_bytes());
    }
    if key(out, 8) {
        let _ = rmp::encode::write_uint(out, lr.observed_time_unix_nano);
    }
    if key(out, 9) {
        write_kvs(resource, out);
    }
    if let Some(s) = scope.filter(|_| key(out, 10)) {
        let n = [
            !s.name.is_empty(),
            !s.version.is_empty(),
            !s.attributes.is_empty(),
        ];
        write_map_len(out, n.iter().filter(|x| **x).count());
        if n[0] {
            write_str(out, b"name");
            write_str(out, s.name.as_bytes());
        }
        if n[1] {
            write_str(out, b"version");
            write_str(out, s.version.as_bytes());
        }
        if n[2] {
            write_str(out, b"attributes");
            write_kvs(&s.attributes, out);
        }
    }
}

fn write_kvs(kvs: &[KeyValue], out: &mut Vec<u8>) {
    write_map_len(out, kvs.len());
    for kv in kvs {
        write_str(out, kv.key.as_bytes());
        write_any(kv.value.as_ref(), out);
    }
}

/// An AnyValue as its natural msgpack value (an empty one as nil).
fn write_any(v: Option<&AnyValue>, out: &mut Vec<u8>) {
    match v.and_then(|v| v.value.as_ref()) {
        None => out.push(0xc0),
        Some(Any::StringValue(s)) => write_str(out, s.as_bytes()),
        Some(Any::BoolValue(b)) => write_bool(out, *b),
        Some(Any::IntValue(i)) => {
            let _ = rmp::encode::write_sint(out, *i);
        }
        Some(Any::DoubleValue(d)) => {
            let _ = rmp::encode::write_f64(out, *d);
        }
        Some(Any::BytesValue(b)) => {
            let _ = rmp::encode::write_bin(out, b);
        }
        Some(Any::ArrayValue(a)) => {
            write_array_len(out, a.values.len());
            for x in &a.values {
                write_any(Some(x), out);
            }
        }
        Some(Any::KvlistValue(kv)) => write_kvs(&kv.values, out),
        // Profiles' string-table references: not sent in logs.
        #[allow(unreachable_patterns)]
        Some(_) => out.push(0xc0),
    }
}

/// Builds an export request of every event in `entries`: records in the
/// layout above, grouped by their `resource` and `scope`.
#[derive(Default)]
pub struct RequestBuilder {
    /// (resource attributes value, its ResourceLogs), in order of first use.
    resources: Vec<(Value, ResourceLogs)>,
}

impl RequestBuilder {
    pub fn add_entries(&mut self, entries: &[u8]) {
        for (time, rec, _) in nagare_core::record::entries(entries) {
            let Ok(v) = rmpv::decode::read_value(&mut &rec[..]) else {
                continue;
            };
            let Value::Map(fields) = v else {
                continue;
            };
            self.add(time, fields);
        }
    }

    fn add(&mut self, time: EventTime, fields: Vec<(Value, Value)>) {
        let mut lr = LogRecord {
            time_unix_nano: time.secs as u64 * 1_000_000_000 + time.nanos as u64,
            ..LogRecord::default()
        };
        let mut resource = Value::Nil;
        let mut scope = Value::Nil;
        let mut rest = Vec::new();
        let mut body = None;
        for (k, v) in fields {
            let name = k.as_str().unwrap_or("");
            match name {
                "body" => body = Some(any(v)),
                "severity_text" => lr.severity_text = text(v),
                "severity_number" => lr.severity_number = v.as_i64().unwrap_or(0) as i32,
                "attributes" => lr.attributes.extend(kvs(v)),
                "trace_id" => lr.trace_id = hex::decode(text(v)).unwrap_or_default(),
                "span_id" => lr.span_id = hex::decode(text(v)).unwrap_or_default(),
                "flags" => lr.flags = v.as_u64().unwrap_or(0) as u32,
                "event_name" => lr.event_name = text(v),
                "observed_time_unix_nano" => lr.observed_time_unix_nano = v.as_u64().unwrap_or(0),
                "resource" => resource = v,
                "scope" => scope = v,
                _ => rest.push((key_text(k), v)),
            }
        }
        match body {
            Some(b) => {
                lr.body = Some(b);
                lr.attributes
                    .extend(rest.into_iter().map(|(k, v)| kv(k, v)));
            }
            None => {
                lr.body = Some(AnyValue {
                    value: Some(Any::KvlistValue(KeyValueList {
                        values: rest.into_iter().map(|(k, v)| kv(k, v)).collect(),
                    })),
                })
            }
        }
        let r = match self.resources.iter().position(|(v, _)| *v == resource) {
            Some(i) => i,
            None => {
                let rl = ResourceLogs {
                    resource: (resource != Value::Nil).then(|| Resource {
                        attributes: kvs(resource.clone()),
                        ..Resource::default()
                    }),
                    ..ResourceLogs::default()
                };
                self.resources.push((resource, rl));
                self.resources.len() - 1
            }
        };
        let scope = scope_of(scope);
        let rl = &mut self.resources[r].1;
        let s = match rl.scope_logs.iter().position(|s| s.scope == scope) {
            Some(i) => i,
            None => {
                rl.scope_logs.push(ScopeLogs {
                    scope,
                    ..ScopeLogs::default()
                });
                rl.scope_logs.len() - 1
            }
        };
        rl.scope_logs[s].log_records.push(lr);
    }

    pub fn finish(self) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: self.resources.into_iter().map(|(_, rl)| rl).collect(),
        }
    }
}

fn scope_of(v: Value) -> Option<InstrumentationScope> {
    let Value::Map(fields) = v else {
        return None;
    };
    let mut s = InstrumentationScope::default();
    for (k, v) in fields {
        match k.as_str().unwrap_or("") {
            "name" => s.name = text(v),
            "version" => s.version = text(v),
            "attributes" => s.attributes = kvs(v),
            _ => {}
        }
    }
    Some(s)
}

fn text(v: Value) -> String {
    match v {
        Value::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Value::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
        other => other.to_string(),
    }
}

fn key_text(k: Value) -> String {
    match k {
        Value::String(_) | Value::Binary(_) => text(k),
        other => other.to_string(),
    }
}

fn kv(key: String, v: Value) -> KeyValue {
    KeyValue {
        key,
        value: Some(any(v)),
        ..KeyValue::default()
    }
}

/// A map as attributes (anything else as none).
fn kvs(v: Value) -> Vec<KeyValue> {
    match v {
        Value::Map(m) => m.into_iter().map(|(k, v)| kv(key_text(k), v)).collect(),
        _ => Vec::new(),
    }
}

fn any(v: Value) -> AnyValue {
    let value = match v {
        Value::Nil => None,
        Value::Boolean(b) => Some(Any::BoolValue(b)),
        Value::Integer(i) => Some(match i.as_i64() {
            Some(n) => Any::IntValue(n),
            None => Any::DoubleValue(i.as_f64().unwrap_or(0.0)),
        }),
        Value::F32(f) => Some(Any::DoubleValue(f as f64)),
        Value::F64(f) => Some(Any::DoubleValue(f)),
        // Invalid UTF-8 (msgpack allows it) is replaced with U+FFFD.
        Value::String(s) => Some(Any::StringValue(
            String::from_utf8_lossy(s.as_bytes()).into_owned(),
        )),
        Value::Binary(b) => Some(Any::BytesValue(b)),
        Value::Array(a) => Some(Any::ArrayValue(ArrayValue {
            values: a.into_iter().map(any).collect(),
        })),
        Value::Map(m) => Some(Any::KvlistValue(KeyValueList {
            values: m.into_iter().map(|(k, v)| kv(key_text(k), v)).collect(),
        })),
        Value::Ext(_, data) => Some(Any::BytesValue(data)),
    };
    AnyValue { value }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ExportLogsServiceRequest {
        let s = |v: &str| AnyValue {
            value: Some(Any::StringValue(v.into())),
        };
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource {
                    attributes: vec![kv("service.name".into(), Value::from("shop"))],
                    ..Resource::default()
                }),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: "checkout".into(),
                        version: "1.2".into(),
                        ..InstrumentationScope::default()
                    }),
                    log_records: vec![
                        LogRecord {
                            time_unix_nano: 1_700_000_000_123_456_789,
                            severity_number: 17,
                            severity_text: "ERROR".into(),
                            body: Some(s("payment failed")),
                            attributes: vec![kv("order".into(), Value::from(42))],
                            trace_id: vec![0xab; 16],
                            span_id: vec![0xcd; 8],
                            flags: 1,
                            ..LogRecord::default()
                        },
                        LogRecord {
                            observed_time_unix_nano: 1_700_000_001_000_000_000,
                            body: Some(AnyValue {
                                value: Some(Any::KvlistValue(KeyValueList {
                                    values: vec![kv("k".into(), Value::from(true))],
                                })),
                            }),
                            ..LogRecord::default()
                        },
                    ],
                    ..ScopeLogs::default()
                }],
                ..ResourceLogs::default()
            }],
        }
    }

    #[test]
    fn log_records_become_events_in_the_layout() {
        let mut out = Vec::new();
        assert_eq!(write_entries(&sample(), EventTime::new(1, 0), &mut out), 2);
        let events: Vec<_> = nagare_core::record::entries(&out)
            .map(|(t, rec, _)| {
                let mut j = Vec::new();
                nagare_core::json::write_value(&mut j, rec);
                (t, serde_json::from_slice::<serde_json::Value>(&j).unwrap())
            })
            .collect();
        assert_eq!(events[0].0, EventTime::new(1_700_000_000, 123_456_789));
        assert_eq!(
            events[0].1,
            serde_json::json!({
                "body": "payment failed", "severity_text": "ERROR", "severity_number": 17,
                "attributes": {"order": 42}, "trace_id": "ab".repeat(16), "span_id": "cd".repeat(8),
                "flags": 1, "resource": {"service.name": "shop"},
                "scope": {"name": "checkout", "version": "1.2"}
            })
        );
        assert_eq!(events[1].0, EventTime::new(1_700_000_001, 0));
        assert_eq!(events[1].1["body"], serde_json::json!({"k": true}));
    }

    #[test]
    fn events_go_back_to_the_same_log_records() {
        let req = sample();
        let mut out = Vec::new();
        write_entries(&req, EventTime::new(1, 0), &mut out);
        let mut b = RequestBuilder::default();
        b.add_entries(&out);
        let back = b.finish();
        let mut want = req;
        // The second record had only an observed time: it became its time.
        let lr = &mut want.resource_logs[0].scope_logs[0].log_records[1];
        lr.time_unix_nano = lr.observed_time_unix_nano;
        assert_eq!(back, want);
    }

    #[test]
    fn plain_records_become_map_bodies() {
        let mut entries = Vec::new();
        let rec = [0x81, 0xa3, b'm', b's', b'g', 0xa2, b'h', b'i'];
        nagare_forward::write_entry(&mut entries, EventTime::new(2, 0), &rec);
        let mut b = RequestBuilder::default();
        b.add_entries(&entries);
        let req = b.finish();
        let lr = &req.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(lr.time_unix_nano, 2_000_000_000);
        assert_eq!(req.resource_logs[0].resource, None);
        assert_eq!(
            lr.body,
            Some(AnyValue {
                value: Some(Any::KvlistValue(KeyValueList {
                    values: vec![kv("msg".into(), Value::from("hi"))]
                }))
            })
        );
    }
}
