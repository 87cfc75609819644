//! The floor under the s3 output's throughput: PUTs ready-made objects of
//! JSON lines (the bytes the s3 output makes of the same events) with the
//! same client library (object_store over net/object_http.rs), a fixed
//! number in flight, and nothing else: no forward input, no buffer, no
//! formatting. A `gzip` last argument compresses each object before its
//! PUT, as the output does with `compression = "gzip"`.
//!
//! ```sh
//! cargo run --release -p nagare --example s3_put_floor -- \
//!     http://127.0.0.1:7070 KEY SECRET BUCKET OBJECTS OBJECT_BYTES EVENT_BYTES CONCURRENCY [gzip]
//! ```
//!
//! Prints one JSON line: objects, events, bytes (PUT, after compression),
//! raw (before compression), wall_s and cpu_s (this process, user + system). Used by benches/s3.sh;
//! see docs/benchmarks/s3.md.
//!
//! The floor of the azure_blob output too (benches/azure_blob.sh): an
//! ENDPOINT of `azure+URL` (the account's Blob service URL, e.g.
//! `azure+http://127.0.0.1:10000/ACCOUNT`) puts blobs with object_store's
//! Azure client instead, KEY being the account's name, SECRET its key and
//! BUCKET the container.

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nagare::net::object_http::ObjectConnector;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 8 {
        eprintln!("usage: s3_put_floor ENDPOINT KEY SECRET BUCKET OBJECTS OBJECT_BYTES EVENT_BYTES CONCURRENCY [gzip]");
        std::process::exit(2);
    }
    let num = |i: usize| -> usize { a[i].parse().expect("a number") };
    let (objects, object_bytes, event_bytes, concurrency) = (num(4), num(5), num(6), num(7));
    let gzip = a.get(8).is_some_and(|g| g == "gzip");

    // One object's JSON lines, shaped as the output writes them.
    let mut body = Vec::with_capacity(object_bytes + event_bytes);
    let mut events_per_object = 0;
    while body.len() + event_bytes <= object_bytes.max(event_bytes) {
        let head = format!(
            "{{\"time\":\"2026-11-28T12:00:00.{:09}Z\",\"tag\":\"bench.s3\",\"record\":{{\"message\":\"",
            events_per_object
        );
        body.extend_from_slice(head.as_bytes());
        body.resize(
            body.len() + event_bytes.saturating_sub(head.len() + 4),
            b'x',
        );
        body.extend_from_slice(b"\"}}\n");
        events_per_object += 1;
    }
    let body = bytes::Bytes::from(body);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let connector = ObjectConnector::new(None, Duration::from_secs(30));
    let store: Arc<dyn ObjectStore> = match a[0].strip_prefix("azure+") {
        Some(url) => Arc::new(
            MicrosoftAzureBuilder::new()
                .with_endpoint(url.to_string())
                .with_allow_http(true)
                .with_account(&a[1])
                .with_access_key(&a[2])
                .with_container_name(&a[3])
                .with_http_connector(connector)
                .build()
                .expect("the store"),
        ),
        None => Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(&a[0])
                .with_allow_http(true)
                .with_access_key_id(&a[1])
                .with_secret_access_key(&a[2])
                .with_bucket_name(&a[3])
                .with_region("us-east-1")
                .with_http_connector(connector)
                .build()
                .expect("the store"),
        ),
    };
    let cpu0 = cpu_seconds();
    let start = Instant::now();
    let sent = rt.block_on(async {
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let (store, next, body) = (store.clone(), next.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut bytes = 0usize;
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= objects {
                        return bytes;
                    }
                    let data = if gzip {
                        let mut gz = flate2::write::GzEncoder::new(
                            Vec::with_capacity(body.len() / 4),
                            flate2::Compression::default(),
                        );
                        gz.write_all(&body).unwrap();
                        bytes::Bytes::from(gz.finish().unwrap())
                    } else {
                        body.clone()
                    };
                    bytes += data.len();
                    store
                        .put_opts(
                            &Path::from(format!("floor/{i}.json")),
                            PutPayload::from(data),
                            Default::default(),
                        )
                        .await
                        .expect("PUT");
                }
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    println!(
        "{{\"objects\":{objects},\"events\":{},\"bytes\":{sent},\"raw\":{},\"wall_s\":{wall:.3},\"cpu_s\":{cpu:.3}}}",
        objects * events_per_object,
        objects * body.len()
    );
}
