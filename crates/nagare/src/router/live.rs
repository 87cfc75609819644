//! The route table inputs read, swapped whole on reload.
//!
//! `RouteSwitch` holds the current root `Router` behind one atomic pointer
//! (arc-swap): a reload builds the new table and stores it in one swap, so a
//! batch is routed either wholly by the old table or wholly by the new one.
//! An input holds a `LiveRouter` (the switch and its label) and loads a
//! snapshot once per batch; the batch finishes on that snapshot, even if a
//! reload swaps the table meanwhile. `RouteSwitch::swap` returns the old
//! table, and `Router::users` tells when no batch holds it any more (then
//! the outputs that were removed can be drained: nothing appends to them).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::Router;

/// A table and its generation (1 for the first, then +1 per reload).
struct Current {
    generation: u64,
    router: Router,
}

/// The one place the running route table lives.
pub struct RouteSwitch {
    current: ArcSwap<Current>,
    generations: AtomicU64,
}

impl RouteSwitch {
    pub fn new(router: Router) -> Arc<RouteSwitch> {
        Arc::new(RouteSwitch {
            current: ArcSwap::from_pointee(Current {
                generation: 1,
                router,
            }),
            generations: AtomicU64::new(1),
        })
    }

    /// Makes `router` the table every input routes by from its next batch
    /// on; returns the table it replaced.
    pub fn swap(&self, router: Router) -> Router {
        let generation = self.generations.fetch_add(1, Relaxed) + 1;
        let old = self.current.swap(Arc::new(Current { generation, router }));
        old.router.clone()
    }

    /// The view of `label` an input routes through.
    pub fn live(self: &Arc<Self>, label: Option<&str>) -> LiveRouter {
        LiveRouter {
            switch: self.clone(),
            label: label.map(String::from),
        }
    }
}

/// An input's router: the current table, seen through its label.
#[derive(Clone)]
pub struct LiveRouter {
    switch: Arc<RouteSwitch>,
    label: Option<String>,
}

impl LiveRouter {
    /// The current table for one batch, and its generation: a route cached
    /// under an older generation must be looked up again.
    pub fn load(&self) -> (u64, Router) {
        let current = self.switch.current.load();
        (
            current.generation,
            current.router.in_label(self.label.as_deref()),
        )
    }

    /// Waits until every output the tags of `wanted` route to has room for
    /// that tag's bytes, or `deadline`. None when all have room; else the
    /// name of the first output that stayed full. For inputs that hold a
    /// caller before answering "try later" (scribe's TRY_LATER, http's 503)
    /// rather than decode or take what the buffers would refuse.
    pub async fn wait_for_room(
        &self,
        wanted: &[(&str, usize)],
        deadline: tokio::time::Instant,
    ) -> Option<String> {
        let mut outputs = Vec::new();
        {
            // Let go of the table before the waits: a reload drains removed
            // outputs once no batch holds the old one.
            let (_, router) = self.load();
            for &(tag, len) in wanted {
                outputs.extend(router.route(tag).outputs.iter().map(|o| (o.clone(), len)));
            }
        }
        for (o, len) in &outputs {
            if !o.wait_room(*len, deadline).await {
                return Some(o.name().to_string());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_is_seen_from_the_next_load_and_old_snapshots_are_counted() {
        let switch = RouteSwitch::new(Router::new(Vec::new(), Vec::new()));
        let live = switch.live(None);
        let (g1, snapshot) = live.load();
        let old = switch.swap(Router::new(Vec::new(), Vec::new()));
        let (g2, _) = live.load();
        assert!(g2 > g1);
        // The switch's old entry is gone: `old` and the input's snapshot hold it.
        assert_eq!(old.users(), 2);
        drop(snapshot);
        assert_eq!(old.users(), 1);
    }
}
