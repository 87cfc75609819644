//! `kafka`: writes events to Kafka topics (librdkafka, built in), one
//! message per event, so a consumer group of nagare aggregators (or anything
//! else that reads Kafka) takes them from there.
//!
//! Every message of a chunk is handed to librdkafka at once; it batches them
//! per partition (`batch_size`, `linger`), compresses and sends them, and
//! reports each message's delivery. The chunk is committed in the buffer only
//! when every report says the message is stored (with `acks = "all"`, on
//! every in-sync replica), so `ack = "delivered"` on a forward input holds
//! through Kafka. A message the brokers refuse for good (too large, a topic
//! name that cannot exist, not authorized) makes the chunk a permanent
//! failure (secondary output at once); anything else (brokers down, a
//! timeout) a retry. Within one chunk librdkafka's idempotent producer sends
//! no duplicates, but a chunk retried after some of its messages were stored
//! stores them again: delivery is at least once (see docs/queues.md).

use std::sync::atomic::{AtomicUsize, Ordering::AcqRel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record::field_text;
use nagare_core::units::{Dur, Size};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext};
use serde::Deserialize;
use tokio::sync::Notify;

use crate::buffer::Chunk;
use crate::formats::logstash::{write_logstash_json, QueueFormat};
use crate::proto::kafka::kafka_options;

/// How many replicas must have a message before the broker confirms it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Acks {
    /// Every in-sync replica (acks=all): a confirmed message survives the
    /// loss of the leader.
    #[default]
    All,
    /// The partition leader only (acks=1).
    Leader,
}

/// Compression of message batches.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    #[default]
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

kafka_options!(
    KafkaOutputConfig {
        /// The topic; `${tag}` is replaced by the events' tag, e.g.
        /// "logs.${tag}". Required. The topic must exist unless the brokers
        /// create topics on first use.
        topic: String,
        /// The message key is this record field's value (a string as it is,
        /// anything else as JSON), so every event with one key goes to one
        /// partition, in order. None by default: events are spread over the
        /// partitions.
        #[serde(default)]
        key_field: Option<String>,
        /// Record fields also sent as message headers (header name = field
        /// name; a string as it is, anything else as JSON); a missing field
        /// sends no header.
        #[serde(default)]
        header_fields: Vec<String>,
        /// "json" (default: `{"@timestamp":…, <the record's fields>}`, as the
        /// `redis` output and Logstash write), "msgpack" (the entry
        /// `[time, record]`) or "single_value" (`message_key`'s value).
        #[serde(default)]
        format: QueueFormat,
        /// Format "single_value": the field written (default "message").
        #[serde_inline_default(crate::formats::DEFAULT_MESSAGE_KEY.into())]
        message_key: String,
        /// Format "json": also write the event's tag in this field (none by
        /// default), so a `kafka` input can route by it (`tag_key`).
        #[serde(default)]
        tag_key: Option<String>,
        /// "all" (default) or "leader".
        #[serde(default)]
        acks: Acks,
        /// The idempotent producer (default true, needs acks = "all"): a
        /// message librdkafka resends after a lost answer is stored once, and
        /// the order within a partition holds across resends.
        #[serde_inline_default(true)]
        idempotence: bool,
        /// "none" (default), "gzip", "snappy", "lz4" or "zstd".
        #[serde(default)]
        compression: Compression,
        /// The most bytes of one partition's message batch (default "1MiB").
        #[serde_inline_default(Size::mib(1))]
        batch_size: Size,
        /// How long librdkafka waits for more messages to fill a batch (default "5ms").
        #[serde_inline_default(Dur::millis(5))]
        linger: Dur,
        /// A chunk whose messages are not all confirmed within this time is
        /// retried (default "30s").
        #[serde_inline_default(Dur::secs(30))]
        timeout: Dur,
    }
);

impl OutputPlugin for KafkaOutputConfig {
    const TYPE: &'static str = "kafka";
    const DOC: &'static str = "Writes events to Kafka topics, one message per event, a chunk committed only when the brokers confirmed every message (see [Queues](queues.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        if self.topic.trim().is_empty() {
            return Err(OptionError::new("topic", "must name a topic"));
        }
        if self.idempotence && self.acks != Acks::All {
            return Err(OptionError::new(
                "idempotence",
                "needs acks = \"all\"; set idempotence = false to use acks = \"leader\"",
            ));
        }
        if self.batch_size.0 == 0 || self.batch_size.0 > i32::MAX as u64 {
            return Err(OptionError::new(
                "batch_size",
                "must be between 1 byte and 2GiB",
            ));
        }
        let config = self.connection().config(&self.settings())?;
        Ok(Arc::new(KafkaOutput {
            name: cx.name.clone(),
            cfg: self,
            config,
            producer: Mutex::new(None),
        }))
    }
}

impl KafkaOutputConfig {
    /// The producer properties these options make.
    fn settings(&self) -> Vec<(&'static str, String)> {
        let ms = |d: Duration| d.as_millis().to_string();
        vec![
            (
                "acks",
                match self.acks {
                    Acks::All => "all",
                    Acks::Leader => "1",
                }
                .into(),
            ),
            ("enable.idempotence", self.idempotence.to_string()),
            (
                "compression.type",
                format!("{:?}", self.compression).to_lowercase(),
            ),
            ("batch.size", self.batch_size.0.to_string()),
            ("linger.ms", ms(self.linger.0)),
            ("message.timeout.ms", ms(self.timeout.0)),
            // The Java client's partitioner: a key goes to the partition a
            // Java producer would send it to.
            ("partitioner", "murmur2_random".into()),
            // librdkafka copies each message until it is confirmed; the
            // buffer holds the chunk anyway, so keep this copy small
            // (default 1 GiB).
            ("queue.buffering.max.kbytes", (64 * 1024).to_string()),
        ]
    }
}

pub struct KafkaOutput {
    name: String,
    cfg: KafkaOutputConfig,
    config: ClientConfig,
    /// Created on the first write (`nagare check` creates none); it
    /// connects and reconnects by itself. Dropped after a fatal error (the
    /// idempotent producer lost its sequence), so the retry makes a new one.
    producer: Mutex<Option<Arc<ThreadedProducer<Deliveries>>>>,
}

/// The delivery reports of one chunk's messages.
struct ChunkDelivery {
    /// Messages not reported yet.
    pending: AtomicUsize,
    /// The first failure reported, if any.
    failed: Mutex<Option<KafkaError>>,
    done: Notify,
}

impl ChunkDelivery {
    fn report(&self, error: Option<KafkaError>) {
        if let Some(e) = error {
            self.failed.lock().unwrap().get_or_insert(e);
        }
        if self.pending.fetch_sub(1, AcqRel) == 1 {
            self.done.notify_one();
        }
    }
}

/// The producer's context: routes each delivery report to its chunk, and
/// librdkafka's logs to ours.
struct Deliveries {
    name: String,
}

impl ClientContext for Deliveries {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, msg: &str) {
        crate::proto::kafka::log(&self.name, level, fac, msg);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(output = %self.name, error = %error, "kafka: {reason}");
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Arc<ChunkDelivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, chunk: Arc<ChunkDelivery>) {
        chunk.report(result.as_ref().err().map(|(e, _)| e.clone()));
    }
}

impl KafkaOutput {
    fn producer(&self) -> Result<Arc<ThreadedProducer<Deliveries>>, FlushError> {
        let mut slot = self.producer.lock().unwrap();
        if let Some(p) = &*slot {
            return Ok(p.clone());
        }
        // Creating a producer only starts librdkafka's threads: no waiting.
        let context = Deliveries {
            name: self.name.clone(),
        };
        let p: ThreadedProducer<Deliveries> = self
            .config
            .create_with_context(context)
            .map_err(|e| FlushError::Permanent(format!("kafka producer: {e}")))?;
        Ok(slot.insert(Arc::new(p)).clone())
    }

    /// The message text of one event.
    fn payload<'a>(
        &self,
        tag: &str,
        time: nagare_forward::EventTime,
        record: &'a [u8],
        entry: &'a [u8],
        text: &'a mut Vec<u8>,
    ) -> &'a [u8] {
        match self.cfg.format {
            QueueFormat::Msgpack => entry,
            QueueFormat::Json => {
                text.clear();
                let tag_field = self.cfg.tag_key.as_deref().map(|k| (k, tag));
                write_logstash_json(text, time, record, tag_field);
                text
            }
            // Any value as text: an integer field is its digits.
            QueueFormat::SingleValue => match field_text(record, self.cfg.message_key.as_bytes()) {
                Some(std::borrow::Cow::Borrowed(b)) => b,
                Some(std::borrow::Cow::Owned(v)) => {
                    *text = v;
                    text
                }
                None => b"",
            },
        }
    }

    fn headers(&self, record: &[u8]) -> Option<OwnedHeaders> {
        if self.cfg.header_fields.is_empty() {
            return None;
        }
        let mut headers = OwnedHeaders::new_with_capacity(self.cfg.header_fields.len());
        for name in &self.cfg.header_fields {
            if let Some(value) = field_text(record, name.as_bytes()) {
                headers = headers.insert(Header {
                    key: name,
                    value: Some(&*value),
                });
            }
        }
        Some(headers)
    }
}

#[async_trait]
impl Output for KafkaOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        if chunk.count == 0 {
            return Ok(());
        }
        let producer = self.producer()?;
        let topic = self.cfg.topic.replace("${tag}", &chunk.tag);
        let delivery = Arc::new(ChunkDelivery {
            // One more than the messages: the sender's own, released once
            // every message is handed over, so an early report cannot see 0.
            pending: AtomicUsize::new(1),
            failed: Mutex::new(None),
            done: Notify::new(),
        });
        let mut text = Vec::new();
        for (time, record, entry) in chunk.entries() {
            let payload = self.payload(&chunk.tag, time, record, entry, &mut text);
            let key =
                (self.cfg.key_field.as_deref()).and_then(|k| field_text(record, k.as_bytes()));
            let mut msg = BaseRecord::with_opaque_to(&topic, delivery.clone())
                .payload(payload)
                .timestamp(time.secs as i64 * 1000 + time.nanos as i64 / 1_000_000);
            if let Some(key) = &key {
                msg = msg.key(&key[..]);
            }
            if let Some(h) = self.headers(record) {
                msg = msg.headers(h);
            }
            delivery.pending.fetch_add(1, AcqRel);
            let mut msg = msg;
            loop {
                match producer.send(msg) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // librdkafka's queue is full: wait for deliveries to make room.
                        msg = back;
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    Err((e, _)) => {
                        // Not queued: no report will come for it.
                        delivery.report(Some(e));
                        break;
                    }
                }
            }
        }
        let done = delivery.done.notified();
        delivery.report(None);
        // librdkafka reports every message by `message.timeout.ms` at the
        // latest (a failure then); the margin covers its report queue.
        let wait = self.cfg.timeout.0 + Duration::from_secs(5);
        if tokio::time::timeout(wait, done).await.is_err() {
            return Err(FlushError::Retry(format!(
                "kafka {topic}: not every message was confirmed within {wait:?}"
            )));
        }
        let failed = delivery.failed.lock().unwrap().take();
        match failed {
            None => Ok(()),
            Some(e) => {
                if let Some((code, reason)) = producer.client().fatal_error() {
                    tracing::error!(output = %self.name, error = %code, "kafka producer failed for good ({reason}); starting a new one");
                    self.producer.lock().unwrap().take();
                }
                Err(flush_error(&topic, e))
            }
        }
    }
}

/// A failure the brokers will repeat for this chunk is permanent; the rest
/// (brokers down, timeouts, leaders moving) may pass.
fn flush_error(topic: &str, e: KafkaError) -> FlushError {
    use RDKafkaErrorCode as C;
    let msg = format!("kafka {topic}: {e}");
    let permanent = matches!(
        e.rdkafka_error_code(),
        Some(
            C::MessageSizeTooLarge
                | C::InvalidMessageSize
                | C::InvalidMessage
                | C::InvalidRecord
                | C::InvalidTopic
                | C::TopicAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::MessageBatchTooLarge
                | C::InvalidArgument
        )
    );
    if permanent {
        FlushError::Permanent(msg)
    } else {
        FlushError::Retry(msg)
    }
}
