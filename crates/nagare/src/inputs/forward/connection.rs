//! A forward connection: TLS and the shared-key handshake, then reading
//! big blocks, grouping consecutive frames of one tag into one batch,
//! dropping resent chunks already stored (acking them again), and handing
//! each batch to the outputs its tag routes to before acking it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_forward::{encode_ack, EventTime};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::framing::{next_frame, Next, RecvBuf};
use super::Ctx;
use crate::buffer::Origin;
use crate::inputs::common::listeners::stopped;
use crate::inputs::common::AckMode;
use crate::net::tls;
use crate::proto::forward_io;
use crate::router::Route;

pub(super) fn spawn_conn<S>(s: S, peer: String, ctx: &Arc<Ctx>, shutdown: &watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(slot) = ctx.slots.clone().try_acquire_owned() else {
        PluginStats::add(&ctx.stats.errors, 1);
        let reason = format!("max_connections ({}) reached", ctx.cfg.max_connections);
        tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
        return;
    };
    PluginStats::add(&ctx.stats.connections, 1);
    let ctx = ctx.clone();
    let live = ctx.live.clone();
    let sd = shutdown.clone();
    tokio::spawn(async move {
        let (_live, _slot) = (live, slot);
        // A failed TLS handshake has been logged with its peer and reason.
        let Some(s) = tls::accept(&ctx.tls, s, &peer).await else {
            PluginStats::add(&ctx.stats.bad_input, 1);
            return;
        };
        if let Err(reason) = serve(s, &peer, &ctx, sd).await {
            PluginStats::add(&ctx.stats.bad_input, 1);
            tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
        }
    });
}

/// A connection's last route, valid for its tag in one table generation.
struct Cached {
    generation: u64,
    tag: String,
    route: Route,
}

/// Frames of one tag waiting to be appended together.
struct Pending {
    tag: String,
    parts: Vec<Bytes>,
    /// Bytes in `parts`.
    len: usize,
    count: u32,
    acks: Vec<Bytes>,
}

/// Consecutive frames of one tag are grouped into one batch up to about this
/// size. Filters that rewrite records (modify, lua, ...) make a batch bigger,
/// and an output's buffer cuts a batch larger than its `chunk_limit_size`
/// entry by entry, which costs a walk over every event (a fifth of the CPU of
/// a modify relay with 512 KiB chunks, when whole 512 KiB reads were one
/// batch). A quarter of a MiB keeps filtered batches whole in chunks of
/// 512 KiB and more, and is still hundreds of events per batch.
const MAX_BATCH_BYTES: usize = 256 * 1024;

async fn serve<S>(
    mut s: S,
    peer: &str,
    ctx: &Ctx,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut rb = RecvBuf::default();
    if let Some(auth) = &ctx.auth {
        let wait = ctx.cfg.idle_timeout.0.min(Duration::from_secs(30));
        forward_io::serve_handshake(&mut s, &mut rb.buf, &auth.start(), wait).await?;
    }
    let mut cached: Option<Cached> = None;
    let mut acks_out = Vec::new();
    let mut closing = false;
    loop {
        // Cut every complete frame out of the buffer.
        let mut pending: Option<Pending> = None;
        let now = EventTime::now();
        let mut bad = None;
        loop {
            let frame = match next_frame(&mut rb, ctx, now, peer) {
                Ok(Next::Frame(f)) => f,
                Ok(Next::Skipped) => continue,
                Ok(Next::NeedMore) => break,
                Err(e) => {
                    // Frames before the bad one are still delivered and acked.
                    bad = Some(e);
                    break;
                }
            };
            PluginStats::add(&ctx.stats.bytes_in, frame.entries.len() as u64);
            if let Some(id) = frame.chunk.as_ref().filter(|id| ctx.recent.contains(id)) {
                // A resend of a chunk already stored: ack it again, store nothing.
                PluginStats::add(&ctx.stats.duplicates, frame.count as u64);
                tracing::debug!(input = %ctx.name, peer = %peer, events = frame.count,
                    "resent chunk already stored; acked without storing it again");
                match &mut pending {
                    // (With keep_chunks a batch carries one sender's ack.)
                    Some(p) if !ctx.keep => p.acks.push(id.clone()),
                    _ => {
                        acks_out.clear();
                        encode_ack(&mut acks_out, id);
                        s.write_all(&acks_out)
                            .await
                            .map_err(|e| format!("writing ack: {e}"))?;
                    }
                }
                continue;
            }
            // keep_chunks: a sender's chunk is a batch of its own (its
            // events are kept together, apart from any other's).
            let alone = ctx.keep && frame.chunk.is_some();
            match &mut pending {
                Some(p)
                    if p.tag == frame.tag
                        && p.len < MAX_BATCH_BYTES
                        && !alone
                        && (!ctx.keep || p.acks.is_empty()) =>
                {
                    p.len += frame.entries.len();
                    p.parts.push(frame.entries);
                    p.count += frame.count;
                    p.acks.extend(frame.chunk);
                }
                _ => {
                    if let Some(p) = pending.take() {
                        dispatch(p, ctx, &mut cached, &mut s, &mut acks_out).await?;
                    }
                    pending = Some(Pending {
                        tag: frame.tag,
                        len: frame.entries.len(),
                        parts: vec![frame.entries],
                        count: frame.count,
                        acks: frame.chunk.into_iter().collect(),
                    });
                }
            }
        }
        if let Some(p) = pending.take() {
            dispatch(p, ctx, &mut cached, &mut s, &mut acks_out).await?;
        }
        if let Some(e) = bad {
            return Err(e);
        }
        if closing {
            return Ok(());
        }
        rb.make_room();
        let buf = &mut rb.buf;
        let read = tokio::select! {
            r = tokio::time::timeout(ctx.cfg.idle_timeout.0, s.read_buf(buf)) => r,
            _ = stopped(&mut shutdown) => {
                // Take what the peer already sent, then stop.
                closing = true;
                match tokio::time::timeout(Duration::from_millis(50), s.read_buf(buf)).await {
                    Ok(r) => Ok(r),
                    Err(_) => continue,
                }
            }
        };
        match read {
            Err(_) => return Err(format!("idle for {}", ctx.cfg.idle_timeout)),
            Ok(Err(e)) => return Err(format!("read error: {e}")),
            Ok(Ok(0)) => {
                if buf.is_empty() {
                    return Ok(());
                }
                return Err(format!(
                    "connection closed inside a frame ({} bytes unread)",
                    buf.len()
                ));
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// Appends a batch to every output its tag routes to, then sends the acks.
async fn dispatch<S>(
    p: Pending,
    ctx: &Ctx,
    cached: &mut Option<Cached>,
    s: &mut S,
    acks_out: &mut Vec<u8>,
) -> Result<(), String>
where
    S: AsyncWrite + Unpin,
{
    PluginStats::add(&ctx.stats.events_in, p.count as u64);
    // One table routes the whole batch, even if a reload swaps it meanwhile;
    // it is let go before waiting for deliveries (a reload waits for the
    // batches that hold the old table).
    let (generation, router) = ctx.router.load();
    let route = match cached {
        Some(c) if c.generation == generation && c.tag == p.tag => c.route.clone(),
        _ => {
            let r = router.route(&p.tag);
            *cached = Some(Cached {
                generation,
                tag: p.tag.clone(),
                route: r.clone(),
            });
            r
        }
    };
    // The filter chain (none for most tags: then the batch goes on as is).
    // Acks stay those of the batch as received, even when filters dropped
    // or rewrote every event.
    let filtered = router.filter(&route, &p.tag, &p.parts, p.count);
    // The batches the filters made (several when events got tags one by
    // one), or the batch as received.
    let batches = filtered
        .iter()
        .flatten()
        .map(|b| (b.tag.as_str(), &b.route.outputs, &b.parts[..], b.count))
        .chain(filtered.is_none().then_some((
            p.tag.as_str(),
            &route.outputs,
            &p.parts[..],
            p.count,
        )));
    let wants_ack = !p.acks.is_empty();
    let delivery = wants_ack && ctx.cfg.ack == AckMode::Delivered;
    // keep_chunks: the batch is one sender's chunk (see `serve`).
    let kept = match p.acks.as_slice() {
        [one] if ctx.keep => Some(one),
        _ => None,
    };
    let mut deliveries = Vec::new();
    for (i, (tag, outputs, parts, count)) in batches.enumerate() {
        if outputs.is_empty() && count > 0 {
            PluginStats::add(&ctx.stats.errors, 1);
            tracing::warn!(input = %ctx.name, tag = %tag, events = count, "no output matches this tag; events discarded");
        }
        crate::router::tap_hub::offer(tag, parts, count);
        for out in outputs.iter().filter(|_| count > 0) {
            let appended = match kept {
                // The filter chain's batches come in the same order from the
                // same events, so `i` names this batch the same way on every
                // nagare of the same configuration.
                Some(id) => {
                    let origin = Origin {
                        id,
                        batch: i as u32,
                    };
                    out.append_kept(tag, parts, count, delivery, origin).await
                }
                None => {
                    out.append(tag, parts, count, wants_ack, delivery, &p.acks)
                        .await
                }
            };
            let rx = appended.map_err(|e| format!("{e}; {} events not acknowledged", p.count))?;
            deliveries.extend(rx);
        }
    }
    drop(filtered);
    drop(route);
    drop(router);
    // ack = "delivered": hold the ack until every output delivered the batch.
    for rx in deliveries {
        if rx.await != Ok(true) {
            return Err(format!(
                "{} events were not delivered downstream (the output gave up on them); not acknowledged",
                p.count
            ));
        }
    }
    PluginStats::add(&ctx.stats.events_out, p.count as u64);
    if !p.acks.is_empty() {
        ctx.recent.insert_all(&p.acks);
        acks_out.clear();
        for id in &p.acks {
            encode_ack(acks_out, id);
        }
        s.write_all(acks_out)
            .await
            .map_err(|e| format!("writing ack: {e}"))?;
    }
    Ok(())
}
