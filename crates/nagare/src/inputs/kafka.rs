//! `kafka`: reads Kafka topics in a consumer group (librdkafka, built in),
//! one event per message, without losing what it took.
//!
//! Offsets are committed only for messages whose batch is in every matched
//! output's buffer (fsync'd for file buffers). Batches are handed over one
//! after the other, in the order the messages arrived, so what is done in a
//! partition is always a prefix of what was read from it: the committed
//! offset of a partition is the one after its last buffered message. A
//! crash re-reads from there (at least once: what was buffered after the
//! last commit is read again). When a rebalance takes partitions away, what
//! is done in them is committed before they go; messages of theirs still
//! on the way are buffered but not committed, so the new owner reads them
//! again.
//!
//! Each message becomes one event: JSON (its `@timestamp`, Logstash's and
//! the `kafka` output's, is the event time), msgpack, or text through
//! `[input.parser]`. Without a time of its own an event has the message's
//! timestamp. A message that does not parse is kept, with a `parse_error`
//! field. Kafka errors (brokers down, a topic that does not exist yet) are
//! logged; librdkafka reconnects and the input goes on.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::FutureExt;
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::units::Dur;
use nagare_forward::EventTime;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::inputs::common::append::append_batch;
use crate::inputs::common::queue::Backoff;
use crate::inputs::common::queue::{decode_element, record_field, InputFormat};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::parsers::{Parser, ParserConfig, ParserType};
use crate::proto::kafka::kafka_options;

/// Where a new consumer group starts in a partition it has no offset for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// The oldest message the topic keeps.
    Earliest,
    /// Only messages written after the group joined (Kafka's default).
    #[default]
    Latest,
}

kafka_options!(
    KafkaInputConfig {
        /// The topics to read; a name that starts with "^" is a regular
        /// expression, e.g. "^logs\\..*" (topics created later that match
        /// are read too). Required.
        topics: Vec<String>,
        /// The consumer group (default "nagare"): the group's consumers
        /// share the partitions, each read by one of them.
        #[serde_inline_default("nagare".into())]
        group: String,
        /// The tag of the events; `${topic}` is replaced by the message's
        /// topic (default "${topic}").
        #[serde_inline_default("${topic}".into())]
        tag: String,
        /// Take the tag from this field of each record when it holds a
        /// string (the field stays in the record); else `tag` applies.
        #[serde(default)]
        tag_key: Option<String>,
        /// "json" (default), "msgpack" or "text" (also "raw").
        #[serde(default)]
        format: InputFormat,
        /// Format "text": how a text becomes a record (default type "none":
        /// `{"message": "<text>"}`).
        #[serde(default)]
        parser: Option<Box<ParserConfig>>,
        /// "earliest" or "latest" (default): where the group starts in a
        /// partition it has not committed an offset for.
        #[serde(default)]
        start_from: StartFrom,
        /// The most messages in one batch handed to the outputs (default 1000).
        #[serde_inline_default(1000)]
        batch_count: usize,
        /// How often buffered messages' offsets are committed (default "1s");
        /// also before a rebalance takes partitions away, and at shutdown.
        #[serde_inline_default(Dur::secs(1))]
        commit_interval: Dur,
    }
);

impl InputPlugin for KafkaInputConfig {
    const TYPE: &'static str = "kafka";
    const DOC: &'static str = "Reads Kafka topics in a consumer group; offsets are committed only once the events are in every matched output's buffer, so a crash or a rebalance loses nothing (see [Queues](queues.md)).";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        if self.topics.is_empty() || self.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(OptionError::new(
                "topics",
                "must list at least one topic (or \"^regex\")",
            ));
        }
        for t in self.topics.iter().filter(|t| t.starts_with('^')) {
            regex::Regex::new(t).map_err(|e| OptionError::new("topics", format!("{t}: {e}")))?;
        }
        if self.group.trim().is_empty() {
            return Err(OptionError::new("group", "must name a consumer group"));
        }
        if self.batch_count == 0 {
            return Err(OptionError::new("batch_count", "must be at least 1"));
        }
        if self.parser.is_some() && self.format != InputFormat::Text {
            return Err(OptionError::new("parser", "is for format = \"text\""));
        }
        crate::parsers::check_options("parser", &self.parser_config())?;
        self.connection().config(&self.settings())?;
        Ok(Box::new(self))
    }
}

impl KafkaInputConfig {
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

    fn settings(&self) -> Vec<(&'static str, String)> {
        let start = match self.start_from {
            StartFrom::Earliest => "earliest",
            StartFrom::Latest => "latest",
        };
        vec![
            ("group.id", self.group.clone()),
            ("auto.offset.reset", start.into()),
            // Offsets are committed by the input, once buffered.
            ("enable.auto.commit", "false".into()),
            ("enable.auto.offset.store", "false".into()),
            (
                "client.id",
                gethostname::gethostname().to_string_lossy().into_owned(),
            ),
            // librdkafka prefetches up to 64 MiB by default; 16 MiB still
            // holds thousands of batches (`properties` can raise these).
            ("queued.max.messages.kbytes", "16384".into()),
            // …but what bounded the prefetch of small messages was
            // queued.min.messages, 100,000 per partition by default: with
            // librdkafka's own few hundred bytes per queued message, a
            // consumer of 4 partitions of 131-byte messages stayed at
            // 90–102 MB RSS (issue 12's bar: 64 MB plus buffers). 5,000
            // per partition still peaked at 76 MB in one drain of three;
            // 2,000: 60–63 MB, and still 2 batches of the default
            // batch_count ahead per partition.
            ("queued.min.messages", "2000".into()),
            // Once the queue is full, librdkafka waits this long before
            // it fetches again (default 1 s): the consumer sat idle most
            // of each second and drained a backlog at 150–180 K events/s;
            // with 10 ms, 360–550 K/s (docs/benchmarks/queues.md).
            ("fetch.queue.backoff.ms", "10".into()),
        ]
    }
}

/// What the consumer loop and librdkafka's callbacks share: which
/// partitions are this consumer's, and the offset to commit in each.
struct Offsets {
    name: String,
    state: Mutex<OffsetState>,
    /// The last commit failed: commit again even if nothing moved.
    commit_failed: AtomicBool,
}

#[derive(Default)]
struct OffsetState {
    assigned: HashSet<(String, i32)>,
    /// (topic, partition) → the offset after its last buffered message.
    done: HashMap<(String, i32), i64>,
    /// Something was buffered since the last commit.
    dirty: bool,
}

impl OffsetState {
    fn list(&self, filter: impl Fn(&(String, i32)) -> bool) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for (tp, &next) in self.done.iter().filter(|(tp, _)| filter(tp)) {
            // Only fails for an invalid offset; ours are message offsets + 1.
            let _ = tpl.add_partition_offset(&tp.0, tp.1, Offset::Offset(next));
        }
        tpl
    }
}

impl ClientContext for Offsets {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        crate::proto::kafka::log(&self.name, level, fac, msg);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(input = %self.name, error = %error, "kafka: {reason}");
    }
}

impl ConsumerContext for Offsets {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(revoked) = rebalance else {
            return;
        };
        let gone: HashSet<(String, i32)> = revoked
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        let mut st = self.state.lock().unwrap();
        let tpl = st.list(|tp| gone.contains(tp));
        // What is buffered in them is committed before the partitions go;
        // the next owner starts there.
        if tpl.count() > 0 {
            match consumer.commit(&tpl, CommitMode::Sync) {
                Ok(()) => tracing::info!(input = %self.name, partitions = tpl.count(),
                    "kafka input: committed the buffered offsets of the partitions a rebalance takes away"),
                Err(e) => tracing::warn!(input = %self.name, error = %e,
                    "kafka input: cannot commit before a rebalance; the next owner reads those messages again"),
            }
        }
        st.assigned.retain(|tp| !gone.contains(tp));
        st.done.retain(|tp, _| !gone.contains(tp));
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let mut st = self.state.lock().unwrap();
                for e in tpl.elements() {
                    st.assigned.insert((e.topic().to_string(), e.partition()));
                }
                tracing::info!(input = %self.name, partitions = tpl.count(), assigned = st.assigned.len(),
                    "kafka input: partitions assigned");
            }
            Rebalance::Error(e) => {
                tracing::warn!(input = %self.name, error = %e, "kafka input: rebalance failed")
            }
            Rebalance::Revoke(_) => {}
        }
    }

    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        _offsets: &TopicPartitionList,
    ) {
        if let Err(e) = result {
            self.commit_failed.store(true, Relaxed);
            tracing::warn!(input = %self.name, error = %e, "kafka input: offset commit failed; trying again");
        }
    }
}

#[async_trait::async_trait]
impl Input for KafkaInputConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let parser = Parser::new(&self.parser_config())
            .map_err(|e| anyhow::anyhow!("{}: [input.parser]: {e}", cx.name))?;
        let config = self
            .connection()
            .config(&self.settings())
            .map_err(|e| anyhow::anyhow!("{}: {e}", cx.name))?;
        let offsets = Offsets {
            name: cx.name.clone(),
            state: Mutex::default(),
            commit_failed: AtomicBool::new(false),
        };
        let consumer: StreamConsumer<Offsets> = config
            .create_with_context(offsets)
            .map_err(|e| anyhow::anyhow!("{}: kafka consumer: {e}", cx.name))?;
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| anyhow::anyhow!("{}: subscribing to {topics:?}: {e}", cx.name))?;
        tracing::info!(input = %cx.name, topics = ?self.topics, group = %self.group, "kafka input started");
        let reader = Reader {
            cfg: *self,
            parser,
            name: cx.name,
            router: cx.router,
            stats: cx.stats,
        };
        Ok(vec![tokio::spawn(reader.run(consumer, cx.shutdown))])
    }
}

struct Reader {
    cfg: KafkaInputConfig,
    parser: Parser,
    name: String,
    router: crate::router::LiveRouter,
    stats: Arc<PluginStats>,
}

impl Reader {
    async fn run(self, consumer: StreamConsumer<Offsets>, mut shutdown: watch::Receiver<bool>) {
        let mut backoff = Backoff::default();
        let mut next_commit = tokio::time::Instant::now() + self.cfg.commit_interval.0;
        loop {
            let first = tokio::select! {
                m = consumer.recv() => m,
                _ = tokio::time::sleep_until(next_commit) => {
                    commit(&consumer, CommitMode::Async);
                    next_commit = tokio::time::Instant::now() + self.cfg.commit_interval.0;
                    continue;
                }
                _ = shutdown.wait_for(|v| *v) => break,
            };
            let mut batch = Vec::new();
            match first {
                Ok(m) => batch.push(m),
                Err(e) => {
                    self.error(&e, &mut backoff, &mut shutdown).await;
                    continue;
                }
            }
            // What else is there at once, up to batch_count.
            while batch.len() < self.cfg.batch_count {
                match consumer.recv().now_or_never() {
                    Some(Ok(m)) => batch.push(m),
                    Some(Err(e)) => {
                        tracing::warn!(input = %self.name, error = %e, "kafka input: cannot read");
                        break;
                    }
                    None => break,
                }
            }
            backoff.reset();
            if !self.dispatch(&batch).await {
                // An output refused it (shutting down): not committed, read again next run.
                break;
            }
            self.mark_done(consumer.context(), &batch);
            // While messages keep coming, recv() is always ready: commit here too.
            if tokio::time::Instant::now() >= next_commit {
                commit(&consumer, CommitMode::Async);
                next_commit = tokio::time::Instant::now() + self.cfg.commit_interval.0;
            }
        }
        commit(&consumer, CommitMode::Sync);
        tracing::info!(input = %self.name, "kafka input stopped");
    }

    /// Records the offsets after the batch's last message in each
    /// partition as ready to commit. A partition revoked while its messages
    /// were on the way is skipped: its new owner reads them again.
    fn mark_done(&self, offsets: &Offsets, batch: &[BorrowedMessage<'_>]) {
        // (topic, partition, next offset) of each partition in the batch.
        let mut last: Vec<(&str, i32, i64)> = Vec::new();
        for m in batch {
            let (t, p, next) = (m.topic(), m.partition(), m.offset() + 1);
            match last.iter_mut().find(|(lt, lp, _)| *lp == p && *lt == t) {
                Some(e) => e.2 = e.2.max(next),
                None => last.push((t, p, next)),
            }
        }
        let mut st = offsets.state.lock().unwrap();
        for (t, p, next) in last {
            let tp = (t.to_string(), p);
            if st.assigned.contains(&tp) {
                let done = st.done.entry(tp).or_insert(0);
                *done = (*done).max(next);
                st.dirty = true;
            }
        }
    }

    async fn error(
        &self,
        e: &KafkaError,
        backoff: &mut Backoff,
        shutdown: &mut watch::Receiver<bool>,
    ) {
        PluginStats::add(&self.stats.errors, 1);
        let wait = backoff.next_wait();
        tracing::warn!(input = %self.name, error = %e, retry_in = ?wait, "kafka input: cannot read; trying again");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.wait_for(|v| *v) => {}
        }
    }

    /// Turns messages into events and appends them, durably, to the outputs
    /// their tags route to, in runs of one tag. False when an output refused
    /// them (shutting down).
    async fn dispatch(&self, batch: &[BorrowedMessage<'_>]) -> bool {
        // The current run: its tag, its entries, its count. Each message is
        // decoded at the end of the run's entries; one whose tag differs
        // hands the run over and starts the next.
        let (mut tag, mut entries, mut count) = (String::new(), Vec::new(), 0u32);
        // The tag of the last topic seen (batches are mostly of one topic).
        let mut topic_tag: Option<(&str, String)> = None;
        for m in batch {
            let time = m
                .timestamp()
                .to_millis()
                .filter(|&ms| ms >= 0)
                .map_or_else(EventTime::now, |ms| {
                    EventTime::new((ms / 1000) as u32, (ms % 1000) as u32 * 1_000_000)
                });
            let start = entries.len();
            let payload = m.payload().unwrap_or_default();
            if !decode_element(self.cfg.format, &self.parser, payload, time, &mut entries) {
                PluginStats::add(&self.stats.bad_input, 1);
            }
            let this = match self
                .cfg
                .tag_key
                .as_deref()
                .and_then(|k| record_field(&entries[start..], k))
            {
                Some(t) => t,
                None => {
                    if topic_tag.as_ref().is_none_or(|(t, _)| *t != m.topic()) {
                        topic_tag = Some((m.topic(), self.cfg.tag.replace("${topic}", m.topic())));
                    }
                    topic_tag.as_ref().map_or("", |(_, tag)| tag.as_str())
                }
            };
            let new_tag = (count == 0 || this != tag).then(|| this.to_string());
            if let Some(new_tag) = new_tag {
                if count > 0 {
                    let next = entries.split_off(start);
                    let done = std::mem::replace(&mut entries, next);
                    if !self.append(&tag, done, count).await {
                        return false;
                    }
                    count = 0;
                }
                tag = new_tag;
            }
            count += 1;
        }
        count == 0 || self.append(&tag, entries, count).await
    }

    async fn append(&self, tag: &str, entries: Vec<u8>, n: u32) -> bool {
        append_batch(
            &self.name,
            &self.router,
            &self.stats,
            tag,
            Bytes::from(entries),
            n,
            true,
        )
        .await
    }
}

/// Commits the offset after the last buffered message of each partition,
/// when something moved since the last commit (or it failed).
fn commit(consumer: &StreamConsumer<Offsets>, mode: CommitMode) {
    let ctx = consumer.context();
    let tpl = {
        let mut st = ctx.state.lock().unwrap();
        if !st.dirty && !ctx.commit_failed.swap(false, Relaxed) {
            return;
        }
        st.dirty = false;
        st.list(|_| true)
    };
    if tpl.count() == 0 {
        return;
    }
    if let Err(e) = consumer.commit(&tpl, mode) {
        ctx.commit_failed.store(true, Relaxed);
        tracing::warn!(input = %ctx.name, error = %e, "kafka input: offset commit failed; trying again");
    }
}
