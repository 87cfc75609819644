//! Tag routing: Fluentd's match patterns and a per-tag route cache.
//!
//! Patterns (`nagare_core::pattern`): an event goes to the first output
//! whose pattern matches (a `copy` output fans out inside itself), after the
//! filters whose patterns match, in file order.
//!
//! Labels (Fluentd's `@label`): an input with `label = "NAME"` sends its
//! events only to the filters and outputs with that label; sections without
//! a label see only unlabelled events. Each label has its own rules, filters
//! and per-tag cache; an input holds a `Router` that is a view of its label,
//! so the lookup of an unlabelled tag costs what it cost without labels.
//! Events a filter failed on (`Filtered::failed`) go to the error label
//! (`[system] error_label`), through its filters, to its outputs.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_core::pattern::Pattern;

use crate::buffer::Buffer;

mod live;
mod stage;
pub mod tap_hub;
pub use live::{LiveRouter, RouteSwitch};
pub use stage::Stage;

/// An output as the router sees it: the buffer in front of it.
pub type OutputHandle = Arc<Buffer>;

/// The outputs a batch is appended to (more than one for copy).
pub type Outputs = Arc<[OutputHandle]>;

/// Where a tag's events go: the filters whose `match` selects the tag, in
/// file order, then the outputs of the first output rule that matches.
pub struct Routed {
    pub filters: Vec<Arc<Stage>>,
    pub outputs: Outputs,
    /// The label the route belongs to (an index into `Tables::labels`): a
    /// filter that retags an event keeps it in its label.
    label: usize,
}

pub type Route = Arc<Routed>;

/// A batch after the filter chain: its (possibly new) tag, the route of that
/// tag (whose `outputs` get the batch), and its entries.
pub struct Batch {
    pub tag: String,
    pub route: Route,
    pub parts: Vec<Bytes>,
    pub count: u32,
}

/// Routing rules in config order: an output's patterns and its outputs.
pub type Rules = Vec<(Vec<Pattern>, Outputs)>;

/// A view of the route tables for one label: inputs route through it.
#[derive(Clone)]
pub struct Router {
    tables: Arc<Tables>,
    /// The label this view routes events in (0: events without a label).
    label: usize,
}

/// The routes of every label, shared by the views.
struct Tables {
    /// Index 0 holds the sections without a label.
    labels: Vec<LabelTable>,
    /// The label that receives the events filters failed on.
    error: Option<usize>,
}

/// The outputs and filters of one label, and its per-tag route cache.
struct LabelTable {
    name: Option<String>,
    rules: Rules,
    filters: Vec<Arc<Stage>>,
    cache: RwLock<HashMap<Arc<str>, Route>>,
}

impl LabelTable {
    fn new(name: Option<String>) -> LabelTable {
        LabelTable {
            name,
            rules: Vec::new(),
            filters: Vec::new(),
            cache: RwLock::new(HashMap::new()),
        }
    }
}

/// Bound on distinct cached tags, so a peer inventing tags cannot grow memory.
const CACHE_LIMIT: usize = 65_536;

impl Router {
    /// A router without labels. `rules`: the outputs' patterns in config
    /// order; `filters`: every filter in file order.
    #[cfg(test)]
    pub fn new(rules: Rules, filters: Vec<Arc<Stage>>) -> Router {
        let rules = rules.into_iter().map(|(p, o)| (None, p, o)).collect();
        let filters = filters.into_iter().map(|f| (None, f)).collect();
        Router::with_labels(rules, filters, None)
    }

    /// A router with labels: each output rule and filter with its label
    /// (None: unlabelled), in config order; `error_label` receives the
    /// events filters failed on. Returns the view of unlabelled events (see
    /// `in_label`).
    pub fn with_labels(
        rules: Vec<(Option<String>, Vec<Pattern>, Outputs)>,
        filters: Vec<(Option<String>, Arc<Stage>)>,
        error_label: Option<&str>,
    ) -> Router {
        let mut labels = vec![LabelTable::new(None)];
        let index = |labels: &mut Vec<LabelTable>, name: Option<String>| match labels
            .iter()
            .position(|l| l.name == name)
        {
            Some(i) => i,
            None => {
                labels.push(LabelTable::new(name));
                labels.len() - 1
            }
        };
        for (label, patterns, outputs) in rules {
            let i = index(&mut labels, label);
            labels[i].rules.push((patterns, outputs));
        }
        for (label, stage) in filters {
            let i = index(&mut labels, label);
            labels[i].filters.push(stage);
        }
        let error = error_label.map(|e| index(&mut labels, Some(e.to_string())));
        Router {
            tables: Arc::new(Tables { labels, error }),
            label: 0,
        }
    }

    /// The view that routes events of `label` (None: unlabelled events).
    /// A label no output or filter has gets an empty route table: its events
    /// match no output (the config loader refuses such a label).
    pub fn in_label(&self, label: Option<&str>) -> Router {
        let i = self
            .tables
            .labels
            .iter()
            .position(|l| l.name.as_deref() == label);
        match i {
            Some(label) => Router {
                tables: self.tables.clone(),
                label,
            },
            None => Router {
                tables: Arc::new(Tables {
                    labels: vec![LabelTable::new(label.map(String::from))],
                    error: None,
                }),
                label: 0,
            },
        }
    }

    /// How many views (and the batches routed through them) hold this
    /// table: 1 when only the caller does (see `RouteSwitch::swap`).
    pub fn users(&self) -> usize {
        Arc::strong_count(&self.tables)
    }

    /// The route for `tag` in this view's label: cached after the first lookup.
    pub fn route(&self, tag: &str) -> Route {
        self.route_in(self.label, tag)
    }

    fn route_in(&self, label: usize, tag: &str) -> Route {
        let table = &self.tables.labels[label];
        if let Some(r) = table.cache.read().expect("route cache").get(tag) {
            return r.clone();
        }
        let outputs = table
            .rules
            .iter()
            .find(|(ps, _)| ps.iter().any(|p| p.matches(tag)))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| Arc::from(Vec::new()));
        let filters = table
            .filters
            .iter()
            .filter(|f| f.matches(tag))
            .cloned()
            .collect();
        let route = Arc::new(Routed {
            filters,
            outputs,
            label,
        });
        let mut cache = table.cache.write().expect("route cache");
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(Arc::from(tag), route.clone());
        route
    }

    /// Runs the filters of `route` (the route of `tag`) over a batch.
    /// Returns `None` when the route has no filters: the batch goes to
    /// `route.outputs` as it is, and nothing was copied or allocated.
    /// Otherwise returns the batches the chain made (several when a filter
    /// gave events new tags one by one); a batch may hold 0 events.
    ///
    /// A filter that changes the tag of a batch, or of some of its events
    /// (`Filtered::moved`), sends them on through the filters of the new
    /// tag's route that come after it in file order (so a chain cannot
    /// loop), then to the new tag's outputs.
    pub fn filter(
        &self,
        route: &Route,
        tag: &str,
        parts: &[Bytes],
        count: u32,
    ) -> Option<Vec<Batch>> {
        if route.filters.is_empty() {
            return None;
        }
        let first = Batch {
            tag: tag.to_string(),
            route: route.clone(),
            parts: parts.to_vec(),
            count,
        };
        let mut done = Vec::with_capacity(1);
        // Batches still in the chain, with the first filter index they may meet.
        let mut todo = vec![(first, 0usize)];
        while let Some((b, next)) = todo.pop() {
            self.chain(b, next, &mut todo, &mut done);
        }
        Some(done)
    }

    /// Runs `b` through the filters of its route from index `next` on;
    /// pushes the batches filters moved events to onto `todo`, and `b`, at
    /// the end of its chain, onto `done`.
    fn chain(
        &self,
        mut b: Batch,
        mut next: usize,
        todo: &mut Vec<(Batch, usize)>,
        done: &mut Vec<Batch>,
    ) {
        let mut i = 0usize;
        while i < b.route.filters.len() && b.count > 0 {
            let stage = b.route.filters[i].clone();
            i += 1;
            if stage.index < next {
                continue;
            }
            next = stage.index + 1;
            let st = &stage.stats;
            PluginStats::add(&st.events_in, b.count as u64);
            PluginStats::add(&st.bytes_in, b.parts.iter().map(|p| p.len() as u64).sum());
            let out = stage.filter.filter(&b.tag, &b.parts, b.count);
            let before = b.count;
            if let Some((entries, n)) = out.batch {
                b.parts = vec![entries];
                b.count = n;
                if n == 0 {
                    b.parts.clear();
                }
            }
            let moved: u32 = out.moved.iter().map(|(_, _, n)| n).sum();
            let moved_bytes: u64 = out.moved.iter().map(|(_, e, _)| e.len() as u64).sum();
            let (failed, failed_bytes) = out
                .failed
                .as_ref()
                .map_or((0, 0), |(e, n)| (*n, e.len() as u64));
            let out_events = b.count + moved + failed;
            PluginStats::add(&st.dropped, u64::from(before.saturating_sub(out_events)));
            PluginStats::add(&st.events_out, u64::from(out_events));
            PluginStats::add(
                &st.bytes_out,
                b.parts.iter().map(|p| p.len() as u64).sum::<u64>() + moved_bytes + failed_bytes,
            );
            PluginStats::add(&st.retries, out.retries);
            if out.errors > 0 {
                PluginStats::add(&st.errors, out.errors);
                tracing::debug!(filter = %stage.name, tag = %b.tag, events = out.errors,
                    "events the filter could not treat were kept, marked");
            }
            if let Some((entries, count)) = out.failed.filter(|(_, n)| *n > 0) {
                self.fail(&mut b, entries, count, todo);
            }
            PluginStats::add(&st.throttled, out.throttled);
            for (tag, entries, count) in out.moved {
                let route = self.route_in(b.route.label, &tag);
                let parts = vec![entries];
                todo.push((
                    Batch {
                        tag,
                        route,
                        parts,
                        count,
                    },
                    next,
                ));
            }
            if let Some(t) = out.tag {
                b.route = self.route_in(b.route.label, &t);
                b.tag = t;
                i = 0;
            }
        }
        done.push(b);
    }

    /// Sends the events a filter failed on to the error label, from its
    /// first filter on, with their tag. Without an error label (or failed
    /// in the error label itself, which would loop) they stay in `b`.
    fn fail(&self, b: &mut Batch, entries: Bytes, count: u32, todo: &mut Vec<(Batch, usize)>) {
        match self.tables.error {
            Some(error) if error != b.route.label => {
                let route = self.route_in(error, &b.tag);
                let failed = Batch {
                    tag: b.tag.clone(),
                    route,
                    parts: vec![entries],
                    count,
                };
                todo.push((failed, 0));
            }
            _ => {
                b.parts.push(entries);
                b.count += count;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test filter: appends its mark to every entry's bytes (so the test
    /// can see which filters ran, in order) and may retag or drop.
    struct Mark {
        mark: u8,
        retag: Option<&'static str>,
        drop: bool,
    }

    impl nagare_core::filter::Filter for Mark {
        fn filter(&self, _tag: &str, parts: &[Bytes], count: u32) -> nagare_core::filter::Filtered {
            let mut v: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            v.push(self.mark);
            nagare_core::filter::Filtered {
                batch: Some((Bytes::from(v), if self.drop { 0 } else { count })),
                tag: self.retag.map(String::from),
                errors: u64::from(self.mark == b'e'),
                ..Default::default()
            }
        }
    }

    fn router(filters: &[(&str, u8, Option<&'static str>, bool)]) -> (Router, Vec<Arc<Stage>>) {
        let reg = nagare_core::metrics::Registry::default();
        let stages: Vec<Arc<Stage>> = filters
            .iter()
            .enumerate()
            .map(|(index, (p, mark, retag, drop))| {
                Arc::new(Stage {
                    index,
                    name: format!("mark#{index}"),
                    patterns: Pattern::parse_list(p).unwrap(),
                    filter: Box::new(Mark {
                        mark: *mark,
                        retag: *retag,
                        drop: *drop,
                    }),
                    stats: reg.register("filter", "mark", "mark"),
                })
            })
            .collect();
        (Router::new(Vec::new(), stages.clone()), stages)
    }

    fn run(r: &Router, tag: &str) -> Option<(String, Vec<u8>, u32)> {
        let route = r.route(tag);
        r.filter(&route, tag, &[Bytes::from_static(b">")], 3)
            .map(|mut bs| {
                assert_eq!(bs.len(), 1, "one batch");
                let b = bs.remove(0);
                let bytes = b.parts.iter().flat_map(|p| p.iter().copied()).collect();
                (b.tag, bytes, b.count)
            })
    }

    #[test]
    fn filters_run_in_file_order_for_matching_tags_only() {
        let (r, stages) = router(&[
            ("app.**", b'a', None, false),
            ("web.*", b'w', None, false),
            ("**", b'e', None, false),
        ]);
        // No filter matches: nothing runs, the batch goes on as is.
        let (r2, _) = router(&[("app.**", b'a', None, false)]);
        assert!(r2.route("db").filters.is_empty());
        assert!(run(&r2, "db").is_none());
        assert_eq!(run(&r, "app.x"), Some(("app.x".into(), b">ae".to_vec(), 3)));
        assert_eq!(run(&r, "web.y"), Some(("web.y".into(), b">we".to_vec(), 3)));
        use nagare_core::metrics::PluginStats as S;
        assert_eq!(S::get(&stages[0].stats.events_in), 3);
        assert_eq!(S::get(&stages[1].stats.events_in), 3);
        assert_eq!(S::get(&stages[2].stats.errors), 2);
        assert_eq!(S::get(&stages[2].stats.events_out), 6);
    }

    #[test]
    fn a_retagged_batch_goes_on_with_the_later_filters_of_its_new_tag() {
        let (r, _) = router(&[
            ("in", b'1', Some("moved"), false),
            ("in moved", b'2', None, false),
            ("moved", b'3', None, false),
            // Would loop back if earlier filters ran again.
            ("moved", b'4', Some("in"), false),
            ("in", b'5', None, false),
        ]);
        assert_eq!(run(&r, "in"), Some(("in".into(), b">12345".to_vec(), 3)));
        // A dropped batch stops the chain; the caller appends nothing.
        let (r, stages) = router(&[("**", b'd', None, true), ("**", b'x', None, false)]);
        assert_eq!(run(&r, "t").map(|(_, _, n)| n), Some(0));
        assert_eq!(
            nagare_core::metrics::PluginStats::get(&stages[1].stats.events_in),
            0
        );
    }

    /// A test filter that moves every event to the tag `to` (as rewrite_tag
    /// does event by event), marking the bytes.
    struct Move {
        to: &'static str,
    }

    impl nagare_core::filter::Filter for Move {
        fn filter(&self, _tag: &str, parts: &[Bytes], count: u32) -> nagare_core::filter::Filtered {
            let mut v: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            v.push(b'm');
            nagare_core::filter::Filtered {
                batch: Some((Bytes::new(), 0)),
                moved: vec![(self.to.to_string(), Bytes::from(v), count)],
                ..Default::default()
            }
        }
    }

    #[test]
    fn events_moved_to_other_tags_go_on_with_later_filters_only() {
        let reg = nagare_core::metrics::Registry::default();
        let mark = |m: u8| -> Box<dyn nagare_core::filter::Filter> {
            Box::new(Mark {
                mark: m,
                retag: None,
                drop: false,
            })
        };
        let filters: Vec<(&str, Box<dyn nagare_core::filter::Filter>)> = vec![
            ("in", Box::new(Move { to: "moved" })),
            ("in moved", mark(b'2')),
            // Would loop back to the first filter if earlier filters ran again.
            ("moved", Box::new(Move { to: "in" })),
            ("in", mark(b'4')),
        ];
        let stages: Vec<Arc<Stage>> = filters
            .into_iter()
            .enumerate()
            .map(|(index, (p, filter))| {
                Arc::new(Stage {
                    index,
                    name: format!("f#{index}"),
                    patterns: Pattern::parse_list(p).unwrap(),
                    filter,
                    stats: reg.register("filter", &format!("f#{index}"), "f"),
                })
            })
            .collect();
        let r = Router::new(Vec::new(), stages.clone());
        let route = r.route("in");
        let got: Vec<(String, Vec<u8>, u32)> = r
            .filter(&route, "in", &[Bytes::from_static(b">")], 3)
            .unwrap()
            .into_iter()
            .map(|b| {
                let bytes = b.parts.iter().flat_map(|p| p.iter().copied()).collect();
                (b.tag, bytes, b.count)
            })
            .collect();
        // The batches the moves emptied, then the events, moved twice and
        // marked by the later filters of each tag only.
        assert_eq!(
            got,
            [
                ("in".to_string(), vec![], 0),
                ("moved".to_string(), vec![], 0),
                ("in".to_string(), b">m2m4".to_vec(), 3)
            ]
        );
        use nagare_core::metrics::PluginStats as S;
        for st in &stages {
            assert_eq!(S::get(&st.stats.events_in), 3, "{}", st.name);
            assert_eq!(S::get(&st.stats.events_out), 3, "{}", st.name);
            assert_eq!(S::get(&st.stats.dropped), 0, "{}", st.name);
        }
    }

    /// An output handle the tests can tell apart (by pointer).
    fn handle(name: &str) -> OutputHandle {
        struct Nowhere;
        #[async_trait::async_trait]
        impl nagare_core::output::Output for Nowhere {
            async fn write(
                &self,
                _: &crate::buffer::Chunk,
            ) -> Result<(), nagare_core::output::FlushError> {
                Ok(())
            }
        }
        let reg = nagare_core::metrics::Registry::default();
        crate::buffer::Buffer::new(
            name,
            crate::buffer::BufferConfig::default(),
            reg.register("output", name, "test"),
            Arc::new(Nowhere),
            None,
            None,
        )
    }

    /// A filter that fails on every event: it moves them all to `failed`,
    /// marked with its mark.
    struct FailAll;

    impl nagare_core::filter::Filter for FailAll {
        fn filter(&self, _tag: &str, parts: &[Bytes], count: u32) -> nagare_core::filter::Filtered {
            let mut v: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            v.push(b'!');
            nagare_core::filter::Filtered {
                batch: Some((Bytes::new(), 0)),
                errors: u64::from(count),
                failed: Some((Bytes::from(v), count)),
                ..Default::default()
            }
        }
    }

    #[test]
    fn labels_keep_their_events_apart_and_failures_go_to_the_error_label() {
        let reg = nagare_core::metrics::Registry::default();
        let (plain, audit, errors) = (handle("plain"), handle("audit"), handle("errors"));
        let rule = |p: &str, h: &OutputHandle| {
            (
                Pattern::parse_list(p).unwrap(),
                Outputs::from(vec![h.clone()]),
            )
        };
        let stage = |index: usize, p: &str, filter: Box<dyn nagare_core::filter::Filter>| {
            Arc::new(Stage {
                index,
                name: format!("f#{index}"),
                patterns: Pattern::parse_list(p).unwrap(),
                filter,
                stats: reg.register("filter", &format!("f#{index}"), "f"),
            })
        };
        let mark = |m: u8| -> Box<dyn nagare_core::filter::Filter> {
            Box::new(Mark {
                mark: m,
                retag: None,
                drop: false,
            })
        };
        let label = |s: &str| Some(s.to_string());
        let r = Router::with_labels(
            vec![
                (label("audit"), rule("**", &audit).0, rule("**", &audit).1),
                (None, rule("**", &plain).0, rule("**", &plain).1),
                (
                    label("errors"),
                    rule("**", &errors).0,
                    rule("**", &errors).1,
                ),
            ],
            vec![
                (None, stage(0, "app", mark(b'p'))),
                (label("audit"), stage(1, "app", mark(b'a'))),
                (label("audit"), stage(2, "bad", Box::new(FailAll))),
                // Later in the file than the failing filter: the error
                // label's chain starts at its own first filter.
                (label("errors"), stage(3, "**", mark(b'e'))),
                (label("errors"), stage(4, "bad", Box::new(FailAll))),
            ],
            Some("errors"),
        );
        let same = |a: &Outputs, b: &OutputHandle| a.len() == 1 && Arc::ptr_eq(&a[0], b);
        // Unlabelled events: the unlabelled output and filter only.
        assert!(same(&r.route("app").outputs, &plain));
        assert_eq!(r.route("app").filters.len(), 1);
        let audit_view = r.in_label(Some("audit"));
        assert!(same(&audit_view.route("app").outputs, &audit));
        let got = |view: &Router, tag: &str| -> Vec<(String, Vec<u8>, u32, bool)> {
            let route = view.route(tag);
            view.filter(&route, tag, &[Bytes::from_static(b">")], 2)
                .unwrap()
                .into_iter()
                .map(|b| {
                    let bytes = b.parts.iter().flat_map(|p| p.iter().copied()).collect();
                    (b.tag, bytes, b.count, same(&b.route.outputs, &errors))
                })
                .collect()
        };
        assert_eq!(got(&r, "app"), [("app".into(), b">p".to_vec(), 2, false)]);
        assert_eq!(
            got(&audit_view, "app"),
            [("app".into(), b">a".to_vec(), 2, false)]
        );
        // Failed in the audit label: to the error label, through its
        // filters; a failure there stays in the batch (no loop).
        assert_eq!(
            got(&audit_view, "bad"),
            [
                ("bad".into(), vec![], 0, false),
                ("bad".into(), b">!e!".to_vec(), 2, true)
            ]
        );
        // A label without sections routes nowhere.
        assert!(r.in_label(Some("nope")).route("app").outputs.is_empty());
        // Without an error label, failures stay in the batch.
        let r = Router::with_labels(
            vec![(None, rule("**", &plain).0, rule("**", &plain).1)],
            vec![(None, stage(5, "**", Box::new(FailAll)))],
            None,
        );
        assert_eq!(got(&r, "x"), [("x".into(), b">!".to_vec(), 2, false)]);
    }
}
