//! Handing a batch an input read to the router: filters, then every
//! matched output's buffer. Shared by the inputs that read files and queues
//! (the forward input has its own, with acks and chunk ids).

use bytes::Bytes;
use nagare_core::metrics::PluginStats;

use crate::router::LiveRouter;

/// Appends a batch of `count` entries, through the filters its tag
/// selects, to every output it routes to (counted in the input's stats).
/// False when an output refused it (closed: shutting down), so the caller
/// can keep what it read. With `durable`, it returns only once the batch is
/// in every matched output's buffer durably (fsync'd for file buffers), as a
/// forward input's ack does, so a queue input may then remove what it read.
pub(crate) async fn append_batch(
    name: &str,
    router: &LiveRouter,
    stats: &PluginStats,
    tag: &str,
    entries: Bytes,
    count: u32,
    durable: bool,
) -> bool {
    PluginStats::add(&stats.events_in, count as u64);
    PluginStats::add(&stats.bytes_in, entries.len() as u64);
    // The batch is routed by one table from start to end, even if a reload
    // swaps the table meanwhile.
    let (_, router) = router.load();
    let route = router.route(tag);
    let parts = [entries];
    // The filter chain (none for most tags: then the batch goes on as is).
    let filtered = router.filter(&route, tag, &parts, count);
    // The batches the filters made, or the batch as read.
    let batches = filtered
        .iter()
        .flatten()
        .map(|b| (b.tag.as_str(), &b.route.outputs, &b.parts[..], b.count))
        .chain(
            filtered
                .is_none()
                .then_some((tag, &route.outputs, &parts[..], count)),
        );
    for (tag, outputs, parts, n) in batches {
        if outputs.is_empty() && n > 0 {
            PluginStats::add(&stats.errors, 1);
            tracing::warn!(input = %name, tag, events = n, "no output matches this tag; events discarded");
        }
        crate::router::tap_hub::offer(tag, parts, n);
        for out in outputs.iter().filter(|_| n > 0) {
            if let Err(e) = out.append(tag, parts, n, durable, false, &[]).await {
                tracing::warn!(input = %name, error = %e, "cannot append");
                return false;
            }
        }
    }
    PluginStats::add(&stats.events_out, count as u64);
    true
}
