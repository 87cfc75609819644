//! `redis`: reads events from Redis lists, pub/sub channels or streams, as
//! Logstash's redis input does, without losing what it took.
//!
//! - `data_type = "list"`: each consumer (`threads`) pops up to
//!   `batch_count` elements at a time (BLMPOP: at once when the list has
//!   some, blocking up to a second when it is empty). What was popped and
//!   not yet buffered is lost if nagare is killed (at most once), unless
//!   `reliable = true`: then each batch is moved, in one atomic script, to
//!   the consumer's own processing list and removed from there only once
//!   it is in every matched output's buffer; at start the processing list
//!   is read first. A kill -9 loses nothing; a batch buffered just before
//!   the kill is read again (at least once). Lists are read over a
//!   connection of our own (`proto::redis::resp`) that takes the popped elements
//!   from its read buffer without a copy per element.
//! - `data_type = "channel"` / `"pattern_channel"`: SUBSCRIBE / PSUBSCRIBE.
//!   Redis keeps nothing for a subscriber: what is published while nagare
//!   is not connected, or was received but not yet buffered when it dies,
//!   is lost (at most once).
//! - `data_type = "stream"`: a consumer group (XREADGROUP), each entry
//!   acknowledged (XACK) once its batch is buffered; at start a consumer
//!   reads its own pending entries first, and entries another consumer left
//!   pending for `claim_idle` are taken over (XAUTOCLAIM). At least once.
//!
//! Each element becomes one event: parsed as JSON (Logstash's layout,
//! `@timestamp` is the event time), msgpack, or text through
//! `[input.parser]`. An element that does not parse is kept, with a
//! `parse_error` field. A Redis error (the server down, a key of another
//! type) is logged and the consumer tries again with backoff; it never stops.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::MultiplexedConnection;
use ::redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use ::redis::{AsyncConnectionConfig, RedisError, Value};
use anyhow::Context as _;
use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::units::Dur;
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::inputs::common::append::append_batch;
use crate::inputs::common::queue::Backoff;
use crate::inputs::common::queue::{decode_element, record_field, InputFormat};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsClient;
use crate::parsers::{Parser, ParserConfig, ParserType};
use crate::proto::redis::conn::{redis_options, Server};
use crate::proto::redis::resp::RespConn;
use crate::router::LiveRouter;

/// Where the events are read from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DataType {
    /// A list, popped from its head (the end RPUSH does not write to).
    #[default]
    List,
    /// A pub/sub channel (SUBSCRIBE); at most once.
    Channel,
    /// The channels matching a pattern (PSUBSCRIBE); at most once.
    PatternChannel,
    /// A stream, read in a consumer group (XREADGROUP); at least once.
    Stream,
}

redis_options!(
    RedisInputConfig {
        /// "list" (default), "channel", "pattern_channel" or "stream".
        #[serde(default)]
        data_type: DataType,
        /// The list, channel, channel pattern or stream to read. Required.
        key: String,
        /// The tag of the events (default: the name of the list, channel
        /// or stream each came from).
        #[serde(default)]
        tag: Option<String>,
        /// Take the tag from this field of each record when it holds a
        /// string (the field stays in the record); else `tag` applies.
        #[serde(default)]
        tag_key: Option<String>,
        /// "json" (default), "msgpack" or "text".
        #[serde(default)]
        format: InputFormat,
        /// Format "text": how a text becomes a record (default type "none").
        #[serde(default)]
        parser: Option<Box<ParserConfig>>,
        /// Elements read per command, and the largest batch (default 125, as Logstash).
        #[serde_inline_default(125)]
        batch_count: usize,
        /// Lists and streams: parallel consumers, each with its own connection (default 1).
        #[serde_inline_default(1)]
        threads: usize,
        /// Lists: move each element to the consumer's processing list and
        /// remove it only once buffered, so a crash loses nothing (default false).
        #[serde(default)]
        reliable: bool,
        /// Reliable lists and streams: this consumer's name; thread N is
        /// "<consumer>-N", its processing list "<key>:processing:<consumer>-N".
        /// Keep it stable across restarts (default: the host name).
        #[serde(default)]
        consumer: Option<String>,
        /// Streams: the consumer group, created at the stream's start if missing (default "nagare").
        #[serde_inline_default("nagare".into())]
        group: String,
        /// Streams: the entry field holding the event (default "message");
        /// an entry without it becomes a record of all its fields.
        #[serde_inline_default(crate::proto::redis::DEFAULT_STREAM_FIELD.into())]
        stream_field: String,
        /// Streams: take over entries another consumer of the group left
        /// unacknowledged this long (XAUTOCLAIM) (default "1m").
        #[serde_inline_default(Dur::mins(1))]
        claim_idle: Dur,
    }
);

/// How long a blocking read waits before the consumer looks at shutdown again.
const BLOCK: Duration = Duration::from_secs(1);
/// BLOCK in seconds, as the blocking list commands take it.
const BLOCK_SECS: &[u8] = b"1";

/// The reliable list's move of a batch, KEYS[1] → KEYS[2], at most ARGV[1]
/// elements, in one atomic step (a script runs whole or not at all); the
/// moved elements are its reply. One round trip per batch where LMOVE took
/// one command per element. RPUSH takes them 1000 at a time: Lua's unpack
/// has a limit on the values it returns.
const MOVE_BATCH: &str = "local v = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #v > 0 then
  redis.call('LTRIM', KEYS[1], #v, -1)
  for i = 1, #v, 1000 do
    redis.call('RPUSH', KEYS[2], unpack(v, i, math.min(i + 999, #v)))
  end
end
return v";

impl InputPlugin for RedisInputConfig {
    const TYPE: &'static str = "redis";
    const DOC: &'static str = "Reads events from Redis lists (optionally reliable: nothing lost on a crash), pub/sub channels (at most once) or streams in a consumer group (at least once) (see [Queues](queues.md)).";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        if self.key.is_empty() {
            return Err(OptionError::new(
                "key",
                "must name a list, channel or stream",
            ));
        }
        if !self.addresses.is_empty() {
            return Err(OptionError::new(
                "addresses",
                "the redis input reads one server (`address` or `path`); Redis Cluster is supported by the output only",
            ));
        }
        if self.batch_count == 0 {
            return Err(OptionError::new("batch_count", "must be at least 1"));
        }
        if self.threads == 0 {
            return Err(OptionError::new("threads", "must be at least 1"));
        }
        if self.reliable && self.data_type != DataType::List {
            return Err(OptionError::new(
                "reliable",
                "is for lists; streams are always read reliably and pub/sub cannot be",
            ));
        }
        if self.parser.is_some() && self.format != InputFormat::Text {
            return Err(OptionError::new("parser", "is for format = \"text\""));
        }
        crate::parsers::check_options("parser", &self.parser_config())?;
        if self.connection().sentinel()?.is_none() {
            self.connection().client()?;
        }
        Ok(Box::new(self))
    }
}

impl RedisInputConfig {
    fn parser_config(&self) -> ParserConfig {
        match self.format {
            InputFormat::Json => ParserConfig {
                kind: ParserType::Json,
                time_key: Some("@timestamp".into()),
                ..ParserConfig::default()
            },
            _ => self.parser.as_deref().cloned().unwrap_or_default(),
        }
    }
}

/// What every consumer task of one input shares.
struct Shared {
    cfg: RedisInputConfig,
    name: String,
    /// The server: `address`/`path`, or the master the sentinels name.
    server: Server,
    /// Lists: TLS for the connection of our own (the crate's client holds its own).
    tls: Option<Arc<TlsClient>>,
    parser: Parser,
    router: LiveRouter,
    stats: Arc<PluginStats>,
}

#[async_trait::async_trait]
impl Input for RedisInputConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let server = self
            .connection()
            .server()
            .map_err(|e| anyhow::anyhow!("{}: {e}", cx.name))?;
        let tls = self
            .connection()
            .tls_client(&cx.name)
            .map_err(|e| anyhow::anyhow!("{}: {e}", cx.name))?;
        let parser = Parser::new(&self.parser_config())
            .map_err(|e| anyhow::anyhow!("{}: [input.parser]: {e}", cx.name))?;
        let consumer = self
            .consumer
            .clone()
            .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned());
        let threads = match self.data_type {
            DataType::Channel | DataType::PatternChannel => 1,
            _ => self.threads,
        };
        let shared = Arc::new(Shared {
            cfg: *self,
            name: cx.name,
            server,
            tls,
            parser,
            router: cx.router,
            stats: cx.stats,
        });
        tracing::info!(input = %shared.name, key = %shared.cfg.key, data_type = ?shared.cfg.data_type, threads, "redis input started");
        Ok((0..threads)
            .map(|i| {
                let consumer = format!("{consumer}-{i}");
                tokio::spawn(consume(shared.clone(), consumer, cx.shutdown.clone()))
            })
            .collect())
    }
}

/// One consumer: connects, reads until an error, and starts again after a
/// backoff, until shutdown.
async fn consume(s: Arc<Shared>, consumer: String, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = Backoff::default();
    let mut reader = Reader::new(&s, consumer);
    while !*shutdown.borrow() {
        let result = match s.cfg.data_type {
            DataType::Channel | DataType::PatternChannel => {
                subscribe(&s, &mut shutdown, &mut backoff)
                    .await
                    .map_err(anyhow::Error::from)
            }
            _ => match reader.connect().await {
                Ok(()) => reader.run(&mut shutdown, &mut backoff).await,
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            PluginStats::add(&s.stats.errors, 1);
            let wait = backoff.next_wait();
            tracing::warn!(input = %s.name, key = %s.cfg.key, error = %format_args!("{e:#}"), retry_in = ?wait,
                "redis input: cannot read; trying again");
            reader.con = None;
            reader.resp = None;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait_for(|v| *v) => {}
            }
        }
    }
}

/// A list or stream consumer and its connection.
struct Reader {
    s: Arc<Shared>,
    consumer: String,
    /// The reliable list's processing list.
    processing: String,
    /// Streams: the redis crate's connection.
    con: Option<MultiplexedConnection>,
    /// Lists: our own, which reads the popped elements in place.
    resp: Option<RespConn>,
    /// Reliable lists: the processing list was found empty on this
    /// connection, so only this consumer's own moves fill it.
    recovered: bool,
    /// The stream's group exists (created once per run).
    group_ready: bool,
    /// The consumer's own pending stream entries were read again.
    pending_done: bool,
    last_claim: Option<tokio::time::Instant>,
}

impl Reader {
    fn new(s: &Arc<Shared>, consumer: String) -> Reader {
        Reader {
            processing: format!("{}:processing:{consumer}", s.cfg.key),
            s: s.clone(),
            consumer,
            con: None,
            resp: None,
            recovered: false,
            group_ready: false,
            pending_done: false,
            last_claim: None,
        }
    }

    async fn connect(&mut self) -> anyhow::Result<()> {
        if self.s.cfg.data_type == DataType::List {
            if self.resp.is_none() {
                let client = self
                    .s
                    .server
                    .client()
                    .await
                    .with_context(|| self.s.server.name())?;
                let con = RespConn::connect(
                    client.get_connection_info(),
                    self.s.tls.as_ref(),
                    Duration::from_secs(5),
                    BLOCK + Duration::from_secs(10),
                )
                .await?;
                self.resp = Some(con);
                // What an earlier connection moved and did not finish.
                self.recovered = false;
            }
            return Ok(());
        }
        if self.con.is_none() {
            // Blocking reads wait up to BLOCK: the reply timeout is longer.
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(5)))
                .set_response_timeout(Some(BLOCK + Duration::from_secs(10)));
            let client = self
                .s
                .server
                .client()
                .await
                .with_context(|| self.s.server.name())?;
            self.con = Some(
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?,
            );
            // A restarted server may have lost the group; a new connection
            // checks. Entries whose XACK was lost with the old connection are
            // still pending for this consumer: read them again.
            self.group_ready = false;
            self.pending_done = false;
        }
        Ok(())
    }

    fn con(&mut self) -> &mut MultiplexedConnection {
        self.con.as_mut().expect("connected")
    }

    async fn run(
        &mut self,
        shutdown: &mut watch::Receiver<bool>,
        backoff: &mut Backoff,
    ) -> anyhow::Result<()> {
        while !*shutdown.borrow() {
            match self.s.cfg.data_type {
                DataType::List if self.s.cfg.reliable => self.reliable_list().await?,
                DataType::List => self.list().await?,
                _ => self.stream().await?,
            }
            backoff.reset();
        }
        Ok(())
    }

    /// Pops a batch (BLMPOP) and appends it; at most once.
    async fn list(&mut self) -> anyhow::Result<()> {
        let s = self.s.clone();
        let key = &s.cfg.key;
        let con = self.resp.as_mut().expect("connected");
        let count = itoa::Buffer::new().format(s.cfg.batch_count).to_string();
        con.call(&[
            b"BLMPOP",
            BLOCK_SECS,
            b"1",
            key.as_bytes(),
            b"LEFT",
            b"COUNT",
            count.as_bytes(),
        ])
        .await?;
        // [key, [element, …]], or nil when the list stayed empty.
        if con.reply_len() > 1 {
            s.dispatch(key, con.bulks(1)).await;
        }
        Ok(())
    }

    /// Moves a batch to the processing list (one atomic script: the
    /// elements are in one list or the other whatever happens to nagare),
    /// appends it durably, then removes it from the processing list. What
    /// the processing list holds at start (a batch of an earlier run) goes
    /// first.
    async fn reliable_list(&mut self) -> anyhow::Result<()> {
        let s = self.s.clone();
        let (key, processing) = (s.cfg.key.as_bytes(), self.processing.as_bytes());
        let count = itoa::Buffer::new().format(s.cfg.batch_count).to_string();
        let con = self.resp.as_mut().expect("connected");
        let mut got = 0;
        if !self.recovered {
            let last = itoa::Buffer::new()
                .format(s.cfg.batch_count - 1)
                .to_string();
            con.call(&[b"LRANGE", processing, b"0", last.as_bytes()])
                .await?;
            got = con.reply_len();
            if got > 0 {
                tracing::info!(input = %s.name, list = %self.processing, events = got,
                    "redis input: reading again what an earlier run took but did not finish");
            } else {
                self.recovered = true;
            }
        }
        if got == 0 {
            con.call(&[
                b"EVAL",
                MOVE_BATCH.as_bytes(),
                b"2",
                key,
                processing,
                count.as_bytes(),
            ])
            .await?;
            got = con.reply_len();
        }
        if got == 0 {
            // Empty: wait for one element, then take the rest at once next round.
            con.call(&[b"BLMOVE", key, processing, b"LEFT", b"RIGHT", BLOCK_SECS])
                .await?;
            got = con.bulks(0).count();
        }
        if got == 0 {
            return Ok(());
        }
        if s.dispatch(&s.cfg.key, con.bulks(0)).await {
            let n = itoa::Buffer::new().format(got).to_string();
            con.call(&[b"LTRIM", processing, n.as_bytes(), b"-1"])
                .await?;
        } else {
            // Not buffered: the batch stays in the processing list, read
            // again first.
            self.recovered = false;
        }
        Ok(())
    }

    /// Reads a batch in the consumer group and acknowledges it once appended.
    async fn stream(&mut self) -> Result<(), RedisError> {
        let c = self.s.cfg.clone();
        if !self.group_ready {
            let created: Result<(), RedisError> = ::redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&c.key)
                .arg(&c.group)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(self.con())
                .await;
            match created {
                Err(e) if e.code() != Some("BUSYGROUP") => return Err(e),
                _ => self.group_ready = true,
            }
        }
        let entries = if !self.pending_done {
            // Entries this consumer read in an earlier run and did not acknowledge.
            let r = self.read_group("0", None).await?;
            self.pending_done = r.is_empty();
            r
        } else if self
            .last_claim
            .is_none_or(|t| t.elapsed() >= c.claim_idle.0 / 2)
        {
            self.last_claim = Some(tokio::time::Instant::now());
            let claimed: StreamAutoClaimReply = ::redis::cmd("XAUTOCLAIM")
                .arg(&c.key)
                .arg(&c.group)
                .arg(&self.consumer)
                .arg(c.claim_idle.0.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(c.batch_count)
                .query_async(self.con())
                .await?;
            if !claimed.claimed.is_empty() {
                tracing::info!(input = %self.s.name, stream = %c.key, events = claimed.claimed.len(),
                    "redis input: took over entries another consumer left unacknowledged");
                // More may be waiting: claim again next round.
                self.last_claim = None;
            }
            claimed.claimed
        } else {
            self.read_group(">", Some(BLOCK)).await?
        };
        if entries.is_empty() {
            return Ok(());
        }
        let values: Vec<Vec<u8>> = entries
            .iter()
            .map(|e| entry_value(e, &c.stream_field))
            .collect();
        if self
            .s
            .dispatch(&c.key, values.iter().map(Vec::as_slice))
            .await
        {
            let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
            ::redis::cmd("XACK")
                .arg(&c.key)
                .arg(&c.group)
                .arg(ids)
                .query_async::<()>(self.con())
                .await?;
        }
        Ok(())
    }

    async fn read_group(
        &mut self,
        from: &str,
        block: Option<Duration>,
    ) -> Result<Vec<StreamId>, RedisError> {
        let c = &self.s.cfg;
        let mut cmd = ::redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&c.group)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(c.batch_count);
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(&c.key).arg(from);
        let reply: Option<StreamReadReply> = cmd.query_async(self.con()).await?;
        Ok(reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            // An entry deleted while pending comes back without fields.
            .filter(|e| !e.map.is_empty())
            .collect())
    }
}

/// The event text of a stream entry: its `field`, or (an entry written by
/// something else) a JSON object of all its fields.
fn entry_value(e: &StreamId, field: &str) -> Vec<u8> {
    if let Some(Value::BulkString(v)) = e.map.get(field) {
        return v.clone();
    }
    let mut fields: Vec<(&String, String)> = e
        .map
        .iter()
        .map(|(k, v)| {
            let text = match v {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                other => format!("{other:?}"),
            };
            (k, text)
        })
        .collect();
    fields.sort();
    let object: serde_json::Map<String, serde_json::Value> = fields
        .into_iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v)))
        .collect();
    serde_json::to_vec(&object).unwrap_or_default()
}

/// Subscribes and appends what arrives, in batches of what is there at once.
async fn subscribe(
    s: &Shared,
    shutdown: &mut watch::Receiver<bool>,
    backoff: &mut Backoff,
) -> Result<(), RedisError> {
    let mut pubsub = s.server.client().await?.get_async_pubsub().await?;
    match s.cfg.data_type {
        DataType::PatternChannel => pubsub.psubscribe(&s.cfg.key).await?,
        _ => pubsub.subscribe(&s.cfg.key).await?,
    }
    tracing::info!(input = %s.name, channel = %s.cfg.key, "redis input subscribed");
    backoff.reset();
    let mut messages = pubsub.into_on_message();
    loop {
        let first = tokio::select! {
            m = messages.next() => m,
            _ = shutdown.wait_for(|v| *v) => return Ok(()),
        };
        let Some(first) = first else {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the subscription's connection closed",
            )));
        };
        let mut batch = vec![first];
        while batch.len() < s.cfg.batch_count {
            match messages.next().now_or_never() {
                Some(Some(m)) => batch.push(m),
                _ => break,
            }
        }
        // Consecutive messages of one channel form one batch.
        let mut i = 0;
        while i < batch.len() {
            let channel = batch[i].get_channel_name().to_string();
            let j = i + batch[i..]
                .iter()
                .take_while(|m| m.get_channel_name() == channel)
                .count();
            s.dispatch(&channel, batch[i..j].iter().map(|m| m.get_payload_bytes()))
                .await;
            i = j;
        }
    }
}

impl Shared {
    /// Turns elements read from `source` into events and appends them,
    /// durably, to the outputs their tags route to. False when an output
    /// refused them (shutting down): they must not be removed from Redis.
    async fn dispatch<'a>(
        &self,
        source: &str,
        values: impl Iterator<Item = &'a [u8]> + Clone,
    ) -> bool {
        let now = EventTime::now();
        // Room for the entries at once: an entry is its element plus a few
        // bytes (array header, time; a JSON text shrinks as msgpack).
        let room = values.clone().map(|v| v.len() + 16).sum();
        let default_tag = self.cfg.tag.as_deref().unwrap_or(source);
        // Runs of events with one tag: (tag, entries, count). Each element
        // is decoded at the end of the current run's entries; one whose tag
        // differs starts the next run.
        let mut runs: Vec<(String, Vec<u8>, u32)> = Vec::new();
        let (mut tag, mut entries, mut count) = (String::new(), Vec::with_capacity(room), 0u32);
        for v in values {
            let start = entries.len();
            if !self.decode(v, now, &mut entries) {
                PluginStats::add(&self.stats.bad_input, 1);
            }
            let this = self
                .cfg
                .tag_key
                .as_ref()
                .and_then(|k| record_field(&entries[start..], k))
                .unwrap_or(default_tag);
            let new_tag = (count == 0 || this != tag).then(|| this.to_string());
            if let Some(new_tag) = new_tag {
                if count > 0 {
                    let next = entries.split_off(start);
                    let done = std::mem::replace(&mut entries, next);
                    runs.push((std::mem::take(&mut tag), done, count));
                    count = 0;
                }
                tag = new_tag;
            }
            count += 1;
        }
        if count > 0 {
            runs.push((tag, entries, count));
        }
        for (tag, entries, n) in runs {
            let entries = Bytes::from(entries);
            if !append_batch(
                &self.name,
                &self.router,
                &self.stats,
                &tag,
                entries,
                n,
                true,
            )
            .await
            {
                return false;
            }
        }
        true
    }

    /// Appends the entry `[time, record]` of one element; false when it did
    /// not parse (the record then holds it and a `parse_error`).
    fn decode(&self, v: &[u8], now: EventTime, out: &mut Vec<u8>) -> bool {
        decode_element(self.cfg.format, &self.parser, v, now, out)
    }
}
