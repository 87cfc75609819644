//! `redis`: writes events to Redis lists (RPUSH or LPUSH), pub/sub
//! channels (PUBLISH) or streams (XADD), as Logstash's redis output does, so
//! nagare can feed Logstash indexers and the other way round.
//!
//! A chunk goes in one round trip: a list gets one RPUSH with every event
//! of the chunk, a channel or a stream one pipeline of PUBLISH or XADD
//! commands. To one server (or Sentinel's master) the commands are
//! written as RESP straight from the chunk's events into the connection's
//! reused write buffer (`proto::redis::resp`); to a Redis Cluster through the
//! redis crate, which routes each key to its node. The chunk is committed in the buffer only when Redis answered
//! every command. A reply that refuses the command (WRONGTYPE: the key
//! holds another type) is permanent: the chunk goes to the secondary output
//! at once. A lost connection or a timeout is retried by the buffer; a
//! retried chunk may have been written before the connection broke, so
//! delivery is at least once (see docs/queues.md).

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use async_trait::async_trait;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record::field_text;
use nagare_core::units::Dur;
use serde::Deserialize;
use tokio::sync::{Mutex, MutexGuard};

use crate::buffer::Chunk;
use crate::formats::logstash::{write_logstash_json, QueueFormat};
use crate::net::tls::TlsClient;
use crate::proto::redis::conn::{is_permanent, is_permanent_code, redis_options, Server};
use crate::proto::redis::resp::{self as resp, RespConn};

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
        #[serde_inline_default(crate::proto::redis::DEFAULT_STREAM_FIELD.into())]
        stream_field: String,
        /// "json" (default, Logstash's layout), "msgpack" or "single_value".
        #[serde(default)]
        format: QueueFormat,
        /// Format "single_value": the field written (default "message").
        #[serde_inline_default(crate::formats::DEFAULT_MESSAGE_KEY.into())]
        message_key: String,
        /// Format "json": also write the event's tag in this field (none by
        /// default), so a `redis` input can route by it (`tag_key`).
        #[serde(default)]
        tag_key: Option<String>,
        /// Connections to Redis; the buffer's flush workers share them (default 1).
        #[serde_inline_default(1)]
        workers: usize,
        /// Commit a chunk only when this many replicas confirmed it too (WAIT
        /// after the writes; 0, the default, does not wait). Redis replicates
        /// after it answers, so a failover can lose writes the old master
        /// acknowledged; with 1 or more, such a chunk is retried instead.
        /// Not with `addresses` (Redis Cluster).
        #[serde(default)]
        wait_replicas: u32,
        /// A chunk that Redis has not answered within this time is retried (default "10s").
        #[serde_inline_default(Dur::secs(10))]
        timeout: Dur,
    }
);

pub struct RedisOutput {
    cfg: RedisOutputConfig,
    client: Client,
    /// TLS of the connections of our own (the `tls` table, or rediss://).
    tls: Option<Arc<TlsClient>>,
    /// One connection per worker, opened on the first write. A connection
    /// of our own is held by one flush at a time and dropped after a lost
    /// connection or a timeout (the next write opens a new one; with
    /// Sentinel, after any retried error, so it asks the sentinels again).
    connections: Vec<Mutex<Option<Connection>>>,
    next: AtomicUsize,
}

/// One server (`address` or `path`), a Redis Cluster (`addresses`), or
/// the master Redis Sentinel names (`sentinels`).
// One per output, made once: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
enum Client {
    /// One server, or the master the sentinels name.
    Server(Server),
    Cluster(ClusterClient),
}

enum Connection {
    /// To one server: the commands are written straight from the chunk's
    /// events into the connection's write buffer (`proto::redis::resp`).
    Resp(RespConn),
    /// The redis crate's: sends each command to the node that holds its
    /// key, follows MOVED and ASK, and reconnects.
    Cluster(ClusterConnection),
}

impl OutputPlugin for RedisOutputConfig {
    const TYPE: &'static str = "redis";
    const DOC: &'static str = "Writes events to Redis lists (RPUSH/LPUSH), pub/sub channels (PUBLISH) or streams (XADD), one round trip per chunk (see [Queues](queues.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        if self.key.trim().is_empty() {
            return Err(OptionError::new(
                "key",
                "must name a list, channel or stream",
            ));
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
        let client = match self.connection().cluster_client(self.timeout.0)? {
            // `sentinels` beside `addresses` is refused by `server`.
            Some(cluster) if self.sentinels.is_empty() => Client::Cluster(cluster),
            _ => Client::Server(self.connection().server()?),
        };
        let tls = match client {
            Client::Cluster(_) => None,
            _ => self.connection().tls_client(&cx.name)?,
        };
        Ok(Arc::new(RedisOutput {
            connections: (0..self.workers).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            client,
            tls,
            cfg: self,
        }))
    }
}

impl RedisOutput {
    /// A worker's connection slot: a free one if there is, else the next
    /// in turn once its flush is done.
    async fn slot(&self) -> MutexGuard<'_, Option<Connection>> {
        let n = self.connections.len();
        let i = self.next.fetch_add(1, Relaxed);
        for k in 0..n {
            if let Ok(slot) = self.connections[(i + k) % n].try_lock() {
                return slot;
            }
        }
        self.connections[i % n].lock().await
    }

    /// Opens a connection to the server (or the cluster).
    async fn open(&self) -> Result<Connection, FlushError> {
        let timeout = self.cfg.timeout.0;
        let retry =
            |e: String| FlushError::Retry(format!("connecting to redis {}: {e}", self.target()));
        let info = match &self.client {
            Client::Cluster(c) => {
                return c
                    .get_async_connection()
                    .await
                    .map(Connection::Cluster)
                    .map_err(|e| retry(e.to_string()))
            }
            Client::Server(s) => s
                .client()
                .await
                .map_err(|e| retry(e.to_string()))?
                .get_connection_info()
                .clone(),
        };
        RespConn::connect(&info, self.tls.as_ref(), timeout, timeout)
            .await
            .map(Connection::Resp)
            .map_err(|e| retry(format!("{e:#}")))
    }

    fn target(&self) -> String {
        match (&self.cfg.path, self.cfg.addresses.as_slice(), &self.client) {
            (_, _, Client::Server(Server::Sentinel(s))) => s.name.clone(),
            (Some(path), _, _) => path.clone(),
            (None, [], _) => self.cfg.address.clone(),
            (None, nodes, _) => format!("cluster {}", nodes.join(",")),
        }
    }

    /// Calls `f` with the element of each event of the chunk, in order. A
    /// msgpack element is the entry as it sits in the chunk; the others are
    /// written into one reused buffer.
    fn for_each_element(&self, chunk: &Chunk, mut f: impl FnMut(&[u8])) {
        if self.cfg.format == QueueFormat::Msgpack {
            chunk.raw_entries().for_each(f);
            return;
        }
        let mut text = Vec::new();
        for (time, record, _) in chunk.entries() {
            match self.cfg.format {
                QueueFormat::Json => {
                    text.clear();
                    write_logstash_json(&mut text, time, record, self.tag_field(&chunk.tag));
                    f(&text)
                }
                // Any value as text: an integer field is its digits.
                _ => f(&field_text(record, self.cfg.message_key.as_bytes()).unwrap_or_default()),
            }
        }
    }

    fn tag_field<'a>(&'a self, tag: &'a str) -> Option<(&'a str, &'a str)> {
        self.cfg.tag_key.as_deref().map(|k| (k, tag))
    }

    fn key(&self, chunk: &Chunk) -> String {
        self.cfg.key.replace("${tag}", &chunk.tag)
    }

    /// WAIT's arguments: the replicas and the wait in milliseconds, within
    /// the response timeout, so a missing replica reads as "too few"
    /// rather than as a timeout.
    fn wait_args(&self) -> Option<(u32, u64)> {
        (self.cfg.wait_replicas > 0).then(|| {
            let ms = (self.cfg.timeout.0 / 2).as_millis().max(1) as u64;
            (self.cfg.wait_replicas, ms)
        })
    }

    /// Writes the commands that store the chunk into `out`, as RESP,
    /// straight from its events; returns how many replies they get.
    fn encode(&self, chunk: &Chunk, out: &mut Vec<u8>) -> usize {
        let key = self.key(chunk);
        let mut replies = 0;
        match self.cfg.data_type {
            DataType::List => {
                // Sized once: the elements are the entries (msgpack) or
                // near them; a JSON text may grow it once or twice.
                out.reserve(64 + key.len() + chunk.len + chunk.count as usize * resp::bulk_room(0));
                let head = out.len();
                resp::array(out, chunk.count as usize + 2);
                let head_end = out.len();
                resp::bulk(
                    out,
                    match self.cfg.push {
                        Push::Rpush => b"RPUSH",
                        Push::Lpush => b"LPUSH",
                    },
                );
                resp::bulk(out, key.as_bytes());
                let mut n = 0;
                self.for_each_element(chunk, |v| {
                    resp::bulk(out, v);
                    n += 1;
                });
                if n != chunk.count as usize {
                    // The count disagrees with the entries (it should not):
                    // Redis would wait for the missing arguments.
                    let mut fixed = Vec::new();
                    resp::array(&mut fixed, n + 2);
                    out.splice(head..head_end, fixed);
                }
                replies += 1;
            }
            DataType::Channel => self.for_each_element(chunk, |v| {
                resp::array(out, 3);
                resp::bulk(out, b"PUBLISH");
                resp::bulk(out, key.as_bytes());
                resp::bulk(out, v);
                replies += 1;
            }),
            DataType::Stream => {
                let maxlen = self
                    .cfg
                    .maxlen
                    .map(|n| itoa::Buffer::new().format(n).to_string());
                self.for_each_element(chunk, |v| {
                    resp::array(out, if maxlen.is_some() { 8 } else { 5 });
                    resp::bulk(out, b"XADD");
                    resp::bulk(out, key.as_bytes());
                    if let Some(n) = &maxlen {
                        resp::bulk(out, b"MAXLEN");
                        resp::bulk(out, b"~");
                        resp::bulk(out, n.as_bytes());
                    }
                    resp::bulk(out, b"*");
                    resp::bulk(out, self.cfg.stream_field.as_bytes());
                    resp::bulk(out, v);
                    replies += 1;
                })
            }
        }
        if let Some((n, ms)) = self.wait_args() {
            resp::array(out, 3);
            resp::bulk(out, b"WAIT");
            resp::bulk(out, itoa::Buffer::new().format(n).as_bytes());
            resp::bulk(out, itoa::Buffer::new().format(ms).as_bytes());
            replies += 1;
        }
        replies
    }

    /// The commands that write the chunk, in one pipeline of the redis
    /// crate (Redis Cluster routes each by its key).
    fn pipeline(&self, chunk: &Chunk) -> ::redis::Pipeline {
        let key = self.key(chunk);
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
        pipe
    }

    /// The chunk's fate from the replicas WAIT counted.
    fn replicas(&self, confirmed: Option<i64>) -> Result<(), FlushError> {
        match confirmed {
            Some(n) if self.cfg.wait_replicas > 0 && n < i64::from(self.cfg.wait_replicas) => {
                Err(FlushError::Retry(format!(
                    "redis {}: {n} of {} replicas confirmed the chunk (wait_replicas)",
                    self.target(),
                    self.cfg.wait_replicas
                )))
            }
            _ => Ok(()),
        }
    }

    async fn write_cluster(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let pipe = self.pipeline(chunk);
        let mut con = {
            let mut slot = self.slot().await;
            match &*slot {
                Some(Connection::Cluster(c)) => c.clone(),
                _ => {
                    let Connection::Cluster(c) = self.open().await? else {
                        unreachable!("a cluster client opens cluster connections")
                    };
                    *slot = Some(Connection::Cluster(c.clone()));
                    c
                }
            }
        };
        pipe.query_async::<Vec<i64>>(&mut con)
            .await
            .map(drop)
            .map_err(|e| {
                let msg = format!("redis {}: {e}", self.target());
                if is_permanent(&e) {
                    FlushError::Permanent(msg)
                } else {
                    FlushError::Retry(msg)
                }
            })
    }
}

#[async_trait]
impl Output for RedisOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        if chunk.count == 0 {
            return Ok(());
        }
        if matches!(self.client, Client::Cluster(_)) {
            return self.write_cluster(chunk).await;
        }
        let mut slot = self.slot().await;
        if slot.is_none() {
            *slot = Some(self.open().await?);
        }
        let Some(Connection::Resp(con)) = slot.as_mut() else {
            unreachable!("one server or sentinel: connections of our own")
        };
        let replies = self.encode(chunk, con.command());
        let result = match con.exchange(replies).await {
            // Lost, timed out or out of step: the next write reconnects.
            Err(e) => {
                *slot = None;
                return Err(FlushError::Retry(format!("redis {}: {e:#}", self.target())));
            }
            Ok(()) => match con.error() {
                Some(e) => {
                    let msg = format!("redis {}: {e}", self.target());
                    if is_permanent_code(e.code()) {
                        Err(FlushError::Permanent(msg))
                    } else {
                        Err(FlushError::Retry(msg))
                    }
                }
                None => self.replicas(con.last_int()),
            },
        };
        if matches!(self.client, Client::Server(Server::Sentinel(_)))
            && matches!(result, Err(FlushError::Retry(_)))
        {
            // A master demoted to a replica (READONLY), or one whose
            // replica was just promoted away from it (WAIT falls short):
            // the next write asks the sentinels where the master is now.
            *slot = None;
        }
        result
    }
}
