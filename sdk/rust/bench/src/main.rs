//! `nagare-logger-bench <impl> <host:port> <events> [<metrics-url>]`: emits
//! `<events>` records of a 100-byte message plus a seq from one thread, waits
//! until they are delivered, and prints one JSON line of figures. With a
//! nagare monitor's `http://HOST:PORT/metrics`, "delivered" means counted by
//! nagare's null output: it polls the monitor until the count reaches
//! `<events>` and the total time ends then.
//!
//! impl: `nagare` (Logger::emit of a serde struct), `nagare-tracing`
//! (tracing::info! through NagareLayer), `tracing-fluentd` (tracing::info!
//! through tracing-fluentd 0.5's layer), `tracing-noop` (tracing::info!
//! through a layer that does nothing: the floor both layers stand on, i.e.
//! tracing's dispatch and the timer's own clock reads; it sends nothing).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nagare_logger::{Config, Logger, NagareLayer};
use serde::Serialize;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// A layer that only looks at the event: what is left of a `tracing::info!`
/// through a registry when the layer's own work is taken away.
struct Noop;

impl<S: tracing::Subscriber> Layer<S> for Noop {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        std::hint::black_box(event);
    }
}

#[derive(Serialize)]
struct Rec<'a> {
    seq: u64,
    message: &'a str,
}

const SAMPLE_EVERY: u64 = 64;

/// CPU time of the calling thread: on a shared machine the wall time of the
/// emit loop also counts the time the thread waited for a core.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `tracing::info!` `n` times through `sub`, each call timed: the same
/// call for every tracing layer compared.
fn info_through<S>(sub: S, n: u64, timer: &mut Timer, msg: &str)
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    tracing::subscriber::with_default(sub, || {
        for i in 0..n {
            timer.run(i, || tracing::info!(seq = i, "{}", msg));
        }
    });
}

struct Timer {
    samples: Vec<u64>,
}

impl Timer {
    #[inline]
    fn run(&mut self, i: u64, f: impl FnOnce()) {
        if i.is_multiple_of(SAMPLE_EVERY) {
            let t = Instant::now();
            f();
            self.samples.push(t.elapsed().as_nanos() as u64);
        } else {
            f();
        }
    }
    fn pct(&mut self, p: f64) -> u64 {
        self.samples.sort_unstable();
        let i = ((self.samples.len() as f64 - 1.0) * p).round() as usize;
        self.samples[i]
    }
}

/// The monitor's count of events that reached nagare's null output.
const NULL_IN: &str = "nagare_events_in_total{plugin=\"null#0\",kind=\"output\",type=\"null\"} ";

/// GETs a nagare monitor's `http://HOST:PORT/PATH` and returns the null
/// output's event count (None when it does not answer).
fn null_count(url: &str) -> Option<u64> {
    let (host, path) = url.strip_prefix("http://")?.split_once('/')?;
    let mut s = TcpStream::connect(host).ok()?;
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.lines()
        .find_map(|l| l.strip_prefix(NULL_IN)?.trim().parse().ok())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 && args.len() != 5 {
        eprintln!(
            "usage: {} nagare|nagare-tracing|tracing-fluentd|tracing-noop HOST:PORT EVENTS [METRICS_URL]",
            args[0]
        );
        std::process::exit(2);
    }
    let (which, addr, n) = (
        args[1].as_str(),
        args[2].clone(),
        args[3].parse::<u64>().unwrap(),
    );
    // 100 printable bytes, as flowbench's own sender uses.
    let msg: String = (0..100).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let mut timer = Timer {
        samples: Vec::with_capacity((n / SAMPLE_EVERY + 1) as usize),
    };
    let cfg = || {
        Config::new()
            .servers([addr.as_str()])
            .unwrap()
            .buffer_limit(512 << 20)
    };
    let metrics = args.get(4);
    if let Some(url) = metrics {
        // a busy machine may take seconds to have nagare's monitor answer
        let deadline = Instant::now() + Duration::from_secs(30);
        while null_count(url).is_none() {
            assert!(Instant::now() < deadline, "nagare monitor does not answer");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let emitted;
    let emit_cpu;
    let mut dropped = 0;
    match which {
        "nagare" => {
            let log = Logger::new(cfg()).unwrap();
            for i in 0..n {
                timer.run(i, || {
                    log.emit(
                        "bench.rust",
                        &Rec {
                            seq: i,
                            message: &msg,
                        },
                    )
                    .unwrap()
                });
            }
            emitted = t0.elapsed();
            emit_cpu = thread_cpu() - cpu0;
            log.flush(Duration::from_secs(300)).unwrap();
            dropped = log.stats().dropped;
            log.close(Duration::from_secs(5)).unwrap();
        }
        "nagare-tracing" => {
            let log = Logger::new(cfg()).unwrap();
            let sub =
                tracing_subscriber::registry().with(NagareLayer::new(log.clone(), "bench.rust"));
            info_through(sub, n, &mut timer, &msg);
            emitted = t0.elapsed();
            emit_cpu = thread_cpu() - cpu0;
            log.flush(Duration::from_secs(300)).unwrap();
            dropped = log.stats().dropped;
            log.close(Duration::from_secs(5)).unwrap();
        }
        "tracing-fluentd" => {
            let a = addr.clone();
            let (layer, guard) = tracing_fluentd::Builder::new("bench.rust")
                .flatten()
                .with_writer(move || TcpStream::connect(&a))
                .layer_guarded()
                .unwrap();
            let sub = tracing_subscriber::registry().with(layer);
            info_through(sub, n, &mut timer, &msg);
            emitted = t0.elapsed();
            emit_cpu = thread_cpu() - cpu0;
            drop(guard); // flushes and joins the worker
        }
        "tracing-noop" => {
            let sub = tracing_subscriber::registry().with(Noop);
            info_through(sub, n, &mut timer, &msg);
            emitted = t0.elapsed();
            emit_cpu = thread_cpu() - cpu0;
        }
        other => panic!("unknown impl {other}"),
    }
    let mut received = String::new();
    if which == "tracing-noop" {
        received = format!(",\"received\":{n}"); // nothing to deliver
    } else if let Some(url) = metrics {
        let deadline = Instant::now() + Duration::from_secs(60);
        let got = loop {
            let got = null_count(url);
            if got.is_some_and(|c| c >= n) || Instant::now() > deadline {
                break got;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        received = format!(",\"received\":{}", got.map_or(-1, |c| c as i64));
    }
    let total = t0.elapsed();
    println!(
        "{{\"impl\":\"{which}\",\"events\":{n},\"dropped\":{dropped},\"emit_s\":{:.4},\"total_s\":{:.4},\"events_per_s\":{:.0},\"emit_ns_mean\":{:.1},\"emit_cpu_ns\":{:.1},\"emit_ns_p50\":{},\"emit_ns_p99\":{}{received}}}",
        emitted.as_secs_f64(),
        total.as_secs_f64(),
        n as f64 / total.as_secs_f64(),
        emitted.as_nanos() as f64 / n as f64,
        emit_cpu.as_nanos() as f64 / n as f64,
        timer.pct(0.5),
        timer.pct(0.99),
    );
}
