//! `redis`: writes events to Redis lists (RPUSH or LPUSH), pub/sub
//! channels (PUBLISH) or streams (XADD), as Logstash's redis output does, so
//! nagare can feed Logstash indexers and the other way round.
//!
//! A chunk goes in one round trip: a list gets one RPUSH with every event
//! of the chunk, a channel or a stream one pipeline of PUBLISH or XADD
//! commands. The chunk is committed in the buffer only when Redis answered
//! every command. A reply that refuses the command (WRONGTYPE: the key
//! holds another type) is permanent: the chunk goes to the secondary output
//! at once. A lost connection or a timeout is retried by the buffer; a
//! retried chunk may have been written before the connection broke, so
//! delivery is at least once (see docs/queues.md).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use ::redis::AsyncConnectionConfig;
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use async_trait::async_trait;
use nagare_forward::msgpack::{read_map_len, read_str_or_bin, skip_value};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::sync::Mutex;

use super::{FlushError, Output};
use crate::buffer::Chunk;
use crate::config::units::Dur;
use crate::formats::{self, json};
use crate::plugin::{BuildContext, OptionError, OutputPlugin};
use crate::redis_conn::{is_permanent, redis_options, Sentinel};

/// What the events are written to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DataType {
    /// A list: each event is one element (RPUSH, or LPUSH with `push = "lpush"`).
    #[default]
    List,
    /// A pub/sub channel: each event is one PUBLISH message.
    Channel,
    /// A stream: each event is one entry (XADD), its text in `stream_field`.
    Stream,
}

/// Which end of a list events are pushed to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Push {
    /// The tail (RPUSH): a consumer popping the head reads events in order.
    #[default]
    Rpush,
    /// The head (LPUSH).
    Lpush,
}

/// How each event is written.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RedisFormat {
    /// Logstash's layout: `{"@timestamp":"<RFC 3339, UTC>", <the record's fields>}`.
    #[default]
    Json,
    /// The msgpack entry `[time, record]` (time as forward EventTime).
    Msgpack,
    /// One field of the record (`message_key`), as it is.
    SingleValue,
}

redis_options!(
    RedisOutputConfig {
        /// "list" (default), "channel" or "stream".
        #[serde(default)]
        data_type: DataType,
        /// The list, channel or stream name; `${tag}` is replaced by the
        /// events' tag, e.g. "logs:${tag}". Required.
        key: String,
        /// Lists: "rpush" (default) or "lpush".
        #[serde(default)]
        push: Push,
        /// Streams: keep about this many entries (XADD MAXLEN ~); none by default.
        #[serde(default)]
        maxlen: Option<u64>,
        /// Streams: the entry field that holds the event (default "message").
        #[serde(default = "default_stream_field")]
        stream_field: String,
        /// "json" (default, Logstash's layout), "msgpack" or "single_value".
        #[serde(default)]
        format: RedisFormat,
        /// Format "single_value": the field written (default "message").
        #[serde(default = "super::stdout::default_message_key")]
        message_key: String,
        /// Format "json": also write the event's tag in this field (none by
        /// default), so a `redis` input can route by it (`tag_key`).
        #[serde(default)]
        tag_key: Option<String>,
        /// Connections to Redis; the buffer's flush workers share them (default 1).
        #[serde(default = "one")]
        workers: usize,
        /// Commit a chunk only when this many replicas confirmed it too (WAIT
        /// after the writes; 0, the default, does not wait). Redis replicates
        /// after it answers, so a failover can lose writes the old master
        /// acknowledged; with 1 or more, such a chunk is retried instead.
        /// Not with `addresses` (Redis Cluster).
        #[serde(default)]
        wait_replicas: u32,
        /// A chunk that Redis has not answered within this time is retried (default "10s").
        #[serde(default = "default_timeout")]
        timeout: Dur,
    }
);

fn default_stream_field() -> String {
    "message".into()
}

fn one() -> usize {
    1
}

fn default_timeout() -> Dur {
    Dur(Duration::from_secs(10))
}

pub struct RedisOutput {
    cfg: RedisOutputConfig,
    client: Client,
    /// One connection per worker, opened on the first write; each
    /// reconnects by itself after it was lost (a Sentinel connection is
    /// dropped instead, so the next write asks the sentinels again).
    connections: Vec<Mutex<Option<Connection>>>,
    next: AtomicUsize,
}

/// One server (`address` or `path`) or a Redis Cluster (`addresses`).
// One per output, made once: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Client {
    One(::redis::Client),
    Cluster(ClusterClient),
    Sentinel(Sentinel),
}

#[derive(Clone)]
enum Connection {
    One(ConnectionManager),
    /// Sends each command to the node that holds its key, follows MOVED
    /// and ASK, and reconnects.
    Cluster(ClusterConnection),
    /// To the master the sentinels named; dropped after an error.
    Sentinel(MultiplexedConnection),
}

impl Connection {
    /// Runs the pipeline; its replies are those of the commands not
    /// ignored (WAIT's, when there is one).
    async fn run(mut self, pipe: &::redis::Pipeline) -> ::redis::RedisResult<Vec<i64>> {
        match &mut self {
            Connection::One(c) => pipe.query_async(c).await,
            Connection::Cluster(c) => pipe.query_async(c).await,
            Connection::Sentinel(c) => pipe.query_async(c).await,
        }
    }
}

impl OutputPlugin for RedisOutputConfig {
    const TYPE: &'static str = "redis";
    const DOC: &'static str = "Writes events to Redis lists (RPUSH/LPUSH), pub/sub channels (PUBLISH) or streams (XADD), one round trip per chunk (see [Queues](queues.md)).";

    fn build(self, _cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        if self.key.trim().is_empty() {
            return Err(OptionError::new("key", "must name a list, channel or stream"));
        }
        if self.workers == 0 {
            return Err(OptionError::new("workers", "must be at least 1"));
        }
        if self.maxlen.is_some() && self.data_type != DataType::Stream {
            return Err(OptionError::new("maxlen", "is for data_type = \"stream\""));
        }
        if self.wait_replicas > 0 && !self.addresses.is_empty() {
            return Err(OptionError::new(
                "wait_replicas",
                "is not for a Redis Cluster (`addresses`): WAIT has no key to route by",
            ));
        }
        let client = match (
            self.connection().cluster_client(self.timeout.0)?,
            self.connection().sentinel()?,
        ) {
            (Some(cluster), _) => Client::Cluster(cluster),
            (None, Some(sentinel)) => Client::Sentinel(sentinel),
            (None, None) => Client::One(self.connection().client()?),
        };
        Ok(Arc::new(RedisOutput {
            connections: (0..self.workers).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            client,
            cfg: self,
        }))
    }
}

impl RedisOutput {
    /// A worker's connection (its index and a handle), opened when first needed.
    async fn connection(&self) -> Result<(usize, Connection), FlushError> {
        let i = self.next.fetch_add(1, Relaxed) % self.connections.len();
        let timeout = self.cfg.timeout.0;
        let mut slot = self.connections[i].lock().await;
        if let Some(c) = &*slot {
            return Ok((i, c.clone()));
        }
        let opened = match &self.client {
            Client::One(c) => {
                let config = ConnectionManagerConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(timeout))
                    // Reconnects are the buffer's retries; the manager tries once.
                    .set_number_of_retries(1);
                c.get_connection_manager_with_config(config)
                    .await
                    .map(Connection::One)
            }
            Client::Cluster(c) => c.get_async_connection().await.map(Connection::Cluster),
            Client::Sentinel(s) => {
                let config = AsyncConnectionConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_connection_timeout(Some(timeout));
                match s.master().await {
                    Ok(master) => master
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map(Connection::Sentinel),
                    Err(e) => Err(e),
                }
            }
        };
        let c = opened
            .map_err(|e| FlushError::Retry(format!("connecting to redis {}: {e}", self.target())))?;
        *slot = Some(c.clone());
        Ok((i, c))
    }

    fn target(&self) -> String {
        match (&self.cfg.path, self.cfg.addresses.as_slice(), &self.client) {
            (_, _, Client::Sentinel(s)) => s.name.clone(),
            (Some(path), _, _) => path.clone(),
            (None, [], _) => self.cfg.address.clone(),
            (None, nodes, _) => format!("cluster {}", nodes.join(",")),
        }
    }

    /// Calls `f` with the element of each event of the chunk, in order. A
    /// msgpack element is the entry as it sits in the chunk; the others are
    /// written into one reused buffer (the command copies each anyway).
    fn for_each_element(&self, chunk: &Chunk, mut f: impl FnMut(&[u8])) {
        let mut text = Vec::new();
        for (time, record, entry) in chunk.entries() {
            match self.cfg.format {
                RedisFormat::Msgpack => f(entry),
                RedisFormat::Json => {
                    text.clear();
                    write_logstash_json(&mut text, time, record, self.tag_field(&chunk.tag));
                    f(&text)
                }
                RedisFormat::SingleValue => {
                    f(formats::field(record, self.cfg.message_key.as_bytes()).unwrap_or_default())
                }
            }
        }
    }

    fn tag_field<'a>(&'a self, tag: &'a str) -> Option<(&'a str, &'a str)> {
        self.cfg.tag_key.as_deref().map(|k| (k, tag))
    }

    /// The commands that write the chunk, in one pipeline.
    fn commands(&self, chunk: &Chunk) -> ::redis::Pipeline {
        let key = self.cfg.key.replace("${tag}", &chunk.tag);
        let mut pipe = ::redis::pipe();
        match self.cfg.data_type {
            DataType::List => {
                // Sized once: growing the command's buffer by doubling
                // while a 512 KiB chunk is copied in moved it again and again.
                let room = key.len() + 5 + chunk.len;
                let mut push = ::redis::Cmd::with_capacity(chunk.count as usize + 2, room);
                push.arg(match self.cfg.push {
                    Push::Rpush => "RPUSH",
                    Push::Lpush => "LPUSH",
                });
                push.arg(&key);
                self.for_each_element(chunk, |v| {
                    push.arg(v);
                });
                pipe.add_command(push).ignore();
            }
            DataType::Channel => self.for_each_element(chunk, |v| {
                pipe.cmd("PUBLISH").arg(&key).arg(v).ignore();
            }),
            DataType::Stream => self.for_each_element(chunk, |v| {
                let add = pipe.cmd("XADD").arg(&key);
                if let Some(n) = self.cfg.maxlen {
                    add.arg("MAXLEN").arg("~").arg(n);
                }
                add.arg("*").arg(&self.cfg.stream_field).arg(v).ignore();
            }),
        }
        if self.cfg.wait_replicas > 0 {
            // Within the response timeout, so a missing replica reads as
            // "too few" rather than as a timeout.
            let wait = (self.cfg.timeout.0 / 2).as_millis().max(1) as u64;
            pipe.cmd("WAIT").arg(self.cfg.wait_replicas).arg(wait);
        }
        pipe
    }
}

#[async_trait]
impl Output for RedisOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        if chunk.count == 0 {
            return Ok(());
        }
        let pipe = self.commands(chunk);
        let (i, con) = self.connection().await?;
        let sentinel = matches!(con, Connection::Sentinel(_));
        let replies = con.run(&pipe).await.map_err(|e| {
            let msg = format!("redis {}: {e}", self.target());
            if is_permanent(&e) {
                FlushError::Permanent(msg)
            } else {
                FlushError::Retry(msg)
            }
        });
        let result = replies.and_then(|r| match r.first() {
            Some(&n) if n < i64::from(self.cfg.wait_replicas) => Err(FlushError::Retry(format!(
                "redis {}: {n} of {} replicas confirmed the chunk (wait_replicas)",
                self.target(),
                self.cfg.wait_replicas
            ))),
            _ => Ok(()),
        });
        if sentinel && matches!(result, Err(FlushError::Retry(_))) {
            // A lost master, one demoted to a replica (READONLY), or one whose
            // replica was just promoted away from it (WAIT falls short): the
            // next write asks the sentinels where the master is now.
            *self.connections[i].lock().await = None;
        }
        result
    }
}

/// Writes one event in Logstash's JSON layout: `@timestamp` first (RFC
/// 3339, UTC, milliseconds when the time has no finer part, else
/// nanoseconds), then the record's fields as they are (a `tags` field, when
/// the record has one, is one of them), and `tag_field` when given.
pub fn write_logstash_json(
    out: &mut Vec<u8>,
    time: EventTime,
    record: &[u8],
    tag_field: Option<(&str, &str)>,
) {
    out.extend_from_slice(b"{\"@timestamp\":\"");
    write_timestamp(out, time);
    out.push(b'"');
    // Records are maps (checked on the way in); anything else is kept whole.
    let Ok((n, mut p)) = read_map_len(record, 0) else {
        out.extend_from_slice(b",\"message\":");
        json::write_value(out, record);
        return out.push(b'}');
    };
    for _ in 0..n {
        let Ok(kend) = skip_value(record, p) else { break };
        let Ok(vend) = skip_value(record, kend) else { break };
        let key = match read_str_or_bin(record, p) {
            Ok(Some((s, e))) => Some(&record[s..e]),
            _ => None,
        };
        // The event's time is written above; a field of the same name would
        // make a second key.
        let skip = key.is_some_and(|k| k == b"@timestamp" || tag_field.is_some_and(|(t, _)| t.as_bytes() == k));
        if !skip {
            out.push(b',');
            match key {
                Some(k) => json::write_string(out, k),
                None => {
                    // JSON keys are strings: quote the key's JSON text.
                    let mut k = Vec::new();
                    json::write_value(&mut k, &record[p..kend]);
                    json::write_string(out, &k);
                }
            }
            out.push(b':');
            json::write_value(out, &record[kend..vend]);
        }
        p = vend;
    }
    if let Some((k, tag)) = tag_field {
        out.push(b',');
        json::write_string(out, k.as_bytes());
        out.push(b':');
        json::write_string(out, tag.as_bytes());
    }
    out.push(b'}');
}

/// RFC 3339 in UTC; milliseconds unless the time has a finer part.
fn write_timestamp(out: &mut Vec<u8>, time: EventTime) {
    formats::write_rfc3339(out, time);
    if time.nanos.is_multiple_of(1_000_000) {
        // "…:SS.mmm000000Z" → "…:SS.mmmZ"
        let z = out.len() - 1;
        out.drain(z - 6..z);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Vec<u8> {
        let v = rmpv::Value::Map(vec![
            ("message".into(), "hi \"there\"".into()),
            ("tags".into(), rmpv::Value::Array(vec!["a".into()])),
            ("@timestamp".into(), "stale".into()),
            ("n".into(), 3.into()),
        ]);
        let mut b = Vec::new();
        rmpv::encode::write_value(&mut b, &v).unwrap();
        b
    }

    #[test]
    fn logstash_layout() {
        let mut out = Vec::new();
        write_logstash_json(&mut out, EventTime::new(1_700_000_000, 123_000_000), &record(), None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"@timestamp":"2023-11-14T22:13:20.123Z","message":"hi \"there\"","tags":["a"],"n":3}"#
        );
        let mut out = Vec::new();
        write_logstash_json(&mut out, EventTime::new(1_700_000_000, 5), &[0x80], Some(("tag", "app.web")));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"@timestamp":"2023-11-14T22:13:20.000000005Z","tag":"app.web"}"#
        );
    }
}
