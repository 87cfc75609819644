//! A real single-node Kafka broker (KRaft mode: broker and controller in one
//! JVM) for the kafka tests, from the Maven Central jars that
//! tests/kafka/fetch.sh keeps in a cache outside the repository. Started on
//! free loopback ports in a temporary folder (storage formatted with a random
//! cluster id), killed on drop. It takes several seconds and a few hundred
//! MB to start: one for the test binary, shared by the kafka tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use super::{free_port, skip_unless, wait_until};

/// The longest a broker may take to start (a loaded CI machine with a cold JVM).
const START: Duration = Duration::from_secs(90);

pub struct KafkaBroker {
    pub port: u16,
    /// A SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-256, user "nagare",
    /// password "kafka-secret").
    pub sasl_port: u16,
    /// An SSL listener, its certificate for 127.0.0.1 signed by `ca`.
    pub ssl_port: u16,
    /// The CA certificate (PEM) the SSL listener's certificate chains to.
    pub ca: PathBuf,
    /// The SSL listener's key and certificate, one PEM file.
    ssl_pem: PathBuf,
    controller_port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    /// The file's shared broker: its pid is kept for the kill at exit.
    shared: bool,
}

/// The pid of the shared broker's current process, killed at exit.
static SHARED_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

const FETCH_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/kafka/fetch.sh");
const BROKER_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/kafka/broker.sh");

/// Fetches the broker's jars once (tests/kafka/fetch.sh; scripts/test-all.sh
/// runs it in its set-up, a test run alone runs it here). Err says why no
/// broker can run here.
fn fetch_kafka() -> Result<(), String> {
    let java = Command::new("java")
        .arg("-version")
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !java {
        return Err("java is not installed (apt-get install default-jre-headless)".into());
    }
    let script = FETCH_SH;
    let status = Command::new("bash")
        .arg(script)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("{script}: {e}"))?;
    if !status.success() {
        return Err(format!(
            "{script} could not fetch the Kafka jars (needs mvn)"
        ));
    }
    Ok(())
}

/// Skips the calling test when no broker can be started here.
pub fn skip_without_kafka() -> bool {
    match fetch_kafka() {
        Ok(()) => false,
        Err(reason) => skip_unless(false, &reason),
    }
}

impl KafkaBroker {
    /// A broker on a new storage in `dir/kafka` (tests/kafka/broker.sh
    /// formats it), not started yet: see `restart`.
    fn new(dir: &Path) -> KafkaBroker {
        let dir = dir.join("kafka");
        std::fs::create_dir_all(&dir).unwrap();
        let ca = super::tls::Ca::new(&dir, "kafka");
        let pair = ca.issue("broker", &["127.0.0.1", "localhost"]);
        let ssl_pem = dir.join("broker-keystore.pem");
        let pem = std::fs::read_to_string(&pair.key).unwrap()
            + &std::fs::read_to_string(&pair.cert).unwrap();
        std::fs::write(&ssl_pem, pem).unwrap();
        KafkaBroker {
            port: free_port(),
            sasl_port: free_port(),
            ssl_port: free_port(),
            ca: ca.path.clone(),
            ssl_pem,
            controller_port: free_port(),
            dir,
            child: None,
            shared: false,
        }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the broker (again, on the same ports and storage) and waits
    /// until it answers a metadata request.
    pub fn restart(&mut self) {
        self.stop();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("broker.log"))
            .unwrap();
        // Topics are created by the tests (partitions 0: none on first use);
        // a SASL listener for the SASL test, an SSL one for the TLS test.
        let child = Command::new("bash")
            .arg(BROKER_SH)
            .arg(&self.dir)
            .args(
                [
                    self.port,
                    self.controller_port,
                    0,
                    self.sasl_port,
                    self.ssl_port,
                ]
                .map(|p| p.to_string()),
            )
            .arg(&self.ssl_pem)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the Kafka broker (java kafka.Kafka)");
        if self.shared {
            SHARED_PID.store(child.id(), std::sync::atomic::Ordering::SeqCst);
        }
        self.child = Some(child);
        let consumer: BaseConsumer = self.client().create().unwrap();
        let start = std::time::Instant::now();
        loop {
            let last = match consumer.fetch_metadata(None, Duration::from_secs(2)) {
                Ok(m) if !m.brokers().is_empty() => return,
                Ok(_) => "no brokers in the metadata".to_string(),
                Err(e) => e.to_string(),
            };
            if let Some(st) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("the Kafka broker exited ({st}):\n{}", self.log());
            }
            if start.elapsed() > START {
                panic!(
                    "the Kafka broker did not answer within {START:?} ({last}):\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default()
    }

    /// Kills the broker (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A client configuration for this broker.
    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap());
        c
    }

    /// Creates a topic with `partitions` partitions and waits until it is usable.
    pub fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().unwrap();
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let result = rt
            .block_on(admin.create_topics([&topic], &AdminOptions::new()))
            .expect("create_topics");
        for r in result {
            r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
        }
        let consumer: BaseConsumer = self.client().create().unwrap();
        wait_until(
            START,
            &format!("topic {name} to have {partitions} partitions with leaders"),
            || {
                consumer
                    .fetch_metadata(Some(name), Duration::from_secs(2))
                    .ok()
                    .and_then(|m| {
                        m.topics().first().map(|t| {
                            t.partitions().len() == partitions as usize
                                && t.partitions()
                                    .iter()
                                    .all(|p| p.leader() >= 0 && p.error().is_none())
                        })
                    })
                    .unwrap_or(false)
            },
        );
    }

    /// Writes `(key, payload)` messages to `topic` and waits until every one
    /// is stored.
    pub fn produce(&self, topic: &str, messages: &[(Option<String>, Vec<u8>)]) {
        let producer: ThreadedProducer<DefaultProducerContext> = self
            .client()
            .set("acks", "all")
            .set("partitioner", "murmur2_random")
            .create()
            .unwrap();
        for (key, payload) in messages {
            let mut rec = BaseRecord::<str, [u8]>::to(topic).payload(payload);
            if let Some(k) = key {
                rec = rec.key(k);
            }
            let mut rec = rec;
            loop {
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        rec = back;
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        producer
            .flush(Duration::from_secs(30))
            .expect("every message stored");
        assert_eq!(producer.in_flight_count(), 0);
    }

    /// Writes `key:value` lines to `topic` with Kafka's own console producer
    /// (the Java client, as kafka-console-producer.sh runs it), acks=all.
    pub fn console_produce(&self, topic: &str, lines: &[String]) {
        let libs = Command::new("bash")
            .arg(FETCH_SH)
            .output()
            .expect("tests/kafka/fetch.sh");
        let libs = format!("{}/libs/*", String::from_utf8_lossy(&libs.stdout).trim());
        let mut child = Command::new("java")
            .args([
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                "-Dlog4j.configuration=file:/dev/null",
                "-cp",
                &libs,
            ])
            .arg("kafka.tools.ConsoleProducer")
            .args(["--bootstrap-server", &self.bootstrap(), "--topic", topic])
            .args(["--producer-property", "acks=all"])
            .args([
                "--property",
                "parse.key=true",
                "--property",
                "key.separator=:",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("java kafka.tools.ConsoleProducer");
        let mut stdin = child.stdin.take().unwrap();
        std::io::Write::write_all(&mut stdin, (lines.join("\n") + "\n").as_bytes()).unwrap();
        drop(stdin);
        // It sends what it read, then exits at the end of its input.
        let st = child.wait().unwrap();
        assert!(st.success(), "kafka.tools.ConsoleProducer: {st}");
    }

    /// Every message of `topic`, read from the start until `n` arrived.
    pub fn read_all(&self, topic: &str, n: usize) -> Vec<Received> {
        let consumer: BaseConsumer = self
            .client()
            .set("group.id", "nagare-tests-reader")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let meta = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in meta.topics()[0].partitions() {
            tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        let mut got = Vec::new();
        let start = std::time::Instant::now();
        while got.len() < n {
            assert!(
                start.elapsed() < super::WAIT,
                "read {} of {n} messages of {topic}",
                got.len()
            );
            if let Some(m) = consumer.poll(Duration::from_millis(200)) {
                let m = m.expect("read a message");
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                            .collect()
                    })
                    .unwrap_or_default();
                got.push(Received {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    payload: m.payload().unwrap_or_default().to_vec(),
                    headers,
                });
            }
        }
        got
    }

    /// The offset after the last message of each partition of `topic`.
    pub fn end_offsets(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let consumer: BaseConsumer = self.client().create().unwrap();
        (0..partitions)
            .map(|p| {
                consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .expect("watermarks")
                    .1
            })
            .collect()
    }

    /// The offsets `group` committed in each partition of `topic`.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> Vec<i64> {
        let consumer: BaseConsumer = self.client().set("group.id", group).create().unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let c = consumer
            .committed_offsets(tpl, Duration::from_secs(10))
            .expect("committed offsets");
        (0..partitions)
            .map(|p| match c.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => -1,
            })
            .collect()
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One message as the test read it.
#[derive(Debug, Clone)]
pub struct Received {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

/// The test binary's one broker, started by the first test that asks (None:
/// the test skips). Tests read it in parallel; a test that restarts it takes
/// it for writing. A static is never dropped, so the broker is killed and
/// its folder removed when the test process exits (atexit).
pub fn shared_broker() -> Option<&'static std::sync::RwLock<KafkaBroker>> {
    use std::sync::{OnceLock, RwLock};
    static BROKER: OnceLock<Option<RwLock<KafkaBroker>>> = OnceLock::new();
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn kill_broker() {
        let pid = SHARED_PID.load(std::sync::atomic::Ordering::SeqCst);
        if pid != 0 {
            // SAFETY: kill(2) on the broker this process started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    BROKER
        .get_or_init(|| {
            if skip_without_kafka() {
                return None;
            }
            let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap().keep());
            // SAFETY: registers a plain function with no state of its own.
            unsafe { libc::atexit(kill_broker) };
            let mut broker = KafkaBroker::new(dir);
            broker.shared = true;
            broker.restart();
            Some(RwLock::new(broker))
        })
        .as_ref()
}
