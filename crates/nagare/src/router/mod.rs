//! Tag routing: Fluentd's match patterns and a per-tag route cache.
//!
//! Patterns: `*` matches one tag part, `**` zero or more parts (`a.**` matches
//! `a` and `a.b.c`), `{x,y}` either alternative; a `match` string holds
//! several patterns separated by spaces. An event goes to the first output
//! whose pattern matches (a `copy` output fans out inside itself), after the
//! filters whose patterns match, in file order.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use regex::Regex;

use crate::filters::Stage;
use crate::outputs::OutputHandle;
use crate::stats::PluginStats;

#[derive(Debug, Clone)]
pub struct Pattern {
    re: Regex,
}

impl Pattern {
    pub fn parse(p: &str) -> Result<Pattern, String> {
        // (?s): `**` matches any character, newlines included (a tail tag
        // made from a file name may hold one).
        let mut re = String::from("(?s)^");
        let chars: Vec<char> = p.chars().collect();
        let mut i = 0;
        let mut depth = 0usize;
        while i < chars.len() {
            let c = chars[i];
            match c {
                '*' if chars.get(i + 1) == Some(&'*') => {
                    let dot_after = chars.get(i + 2) == Some(&'.');
                    let dot_before = re.ends_with("\\.");
                    if dot_before && !dot_after {
                        // "a.**": the dot and the rest are optional
                        re.truncate(re.len() - 2);
                        re.push_str("(?:\\..*)?");
                        i += 2;
                    } else if dot_after {
                        // "**.b": any prefix ending in a dot, or none
                        re.push_str("(?:.*\\.)?");
                        i += 3;
                    } else {
                        re.push_str(".*");
                        i += 2;
                    }
                    continue;
                }
                '*' => re.push_str("[^.]*"),
                '{' => {
                    depth += 1;
                    re.push_str("(?:");
                }
                '}' if depth > 0 => {
                    depth -= 1;
                    re.push(')');
                }
                ',' if depth > 0 => re.push('|'),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
            i += 1;
        }
        if depth != 0 {
            return Err(format!("unbalanced braces in tag pattern {p:?}"));
        }
        re.push('$');
        Regex::new(&re)
            .map(|re| Pattern { re })
            .map_err(|e| format!("bad tag pattern {p:?}: {e}"))
    }

    /// Parses a space-separated list of patterns.
    pub fn parse_list(s: &str) -> Result<Vec<Pattern>, String> {
        let v: Result<Vec<_>, _> = s.split_whitespace().map(Pattern::parse).collect();
        let v = v?;
        if v.is_empty() {
            return Err("empty match".into());
        }
        Ok(v)
    }

    pub fn matches(&self, tag: &str) -> bool {
        self.re.is_match(tag)
    }
}

/// The outputs a batch is appended to (more than one for copy).
pub type Outputs = Arc<[OutputHandle]>;

/// Where a tag's events go: the filters whose `match` selects the tag, in
/// file order, then the outputs of the first output rule that matches.
pub struct Routed {
    pub filters: Vec<Arc<Stage>>,
    pub outputs: Outputs,
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

pub struct Router {
    rules: Vec<(Vec<Pattern>, Outputs)>,
    filters: Vec<Arc<Stage>>,
    cache: RwLock<HashMap<Arc<str>, Route>>,
    unmatched: Outputs,
}

/// Bound on distinct cached tags, so a peer inventing tags cannot grow memory.
const CACHE_LIMIT: usize = 65_536;

impl Router {
    /// `rules`: the outputs' patterns in config order; `filters`: every
    /// filter in file order.
    pub fn new(rules: Vec<(Vec<Pattern>, Outputs)>, filters: Vec<Arc<Stage>>) -> Router {
        Router {
            rules,
            filters,
            cache: RwLock::new(HashMap::new()),
            unmatched: Arc::from(Vec::new()),
        }
    }

    /// The route for `tag`: cached after the first lookup.
    pub fn route(&self, tag: &str) -> Route {
        if let Some(r) = self.cache.read().expect("route cache").get(tag) {
            return r.clone();
        }
        let outputs = self
            .rules
            .iter()
            .find(|(ps, _)| ps.iter().any(|p| p.matches(tag)))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| self.unmatched.clone());
        let filters = self
            .filters
            .iter()
            .filter(|f| f.matches(tag))
            .cloned()
            .collect();
        let route = Arc::new(Routed { filters, outputs });
        let mut cache = self.cache.write().expect("route cache");
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
            let out_events = b.count + moved;
            PluginStats::add(&st.dropped, u64::from(before.saturating_sub(out_events)));
            PluginStats::add(&st.events_out, u64::from(out_events));
            PluginStats::add(
                &st.bytes_out,
                b.parts.iter().map(|p| p.len() as u64).sum::<u64>() + moved_bytes,
            );
            PluginStats::add(&st.retries, out.retries);
            if out.errors > 0 {
                PluginStats::add(&st.errors, out.errors);
                tracing::debug!(filter = %stage.name, tag = %b.tag, events = out.errors,
                    "events the filter could not treat were kept, marked");
            }
            for (tag, entries, count) in out.moved {
                let route = self.route(&tag);
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
                b.route = self.route(&t);
                b.tag = t;
                i = 0;
            }
        }
        done.push(b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, tag: &str) -> bool {
        Pattern::parse_list(p)
            .unwrap()
            .iter()
            .any(|x| x.matches(tag))
    }

    #[test]
    fn fluentd_patterns() {
        assert!(m("a.*", "a.b"));
        assert!(!m("a.*", "a.b.c"));
        assert!(!m("a.*", "a"));
        assert!(m("a.**", "a"));
        assert!(m("a.**", "a.b.c"));
        assert!(!m("a.**", "ab"));
        assert!(m("**", "anything.at.all"));
        assert!(m("**.z", "z"));
        assert!(m("**.z", "x.y.z"));
        assert!(!m("**.z", "xz"));
        assert!(m("a.**.z", "a.z"));
        assert!(m("a.**.z", "a.b.c.z"));
        assert!(m("{web,db}.log", "db.log"));
        assert!(!m("{web,db}.log", "app.log"));
        assert!(m("x.* y.**", "y.q.r"));
        assert!(m("a.{b,c.*}", "a.c.d"));
        assert!(Pattern::parse("a.{b").is_err());
        // Tags from file names with a tab or a newline in them.
        assert!(m("app.**", "app.logs.tab\tand\nnewline.log"));
        assert!(m("app.*.log", "app.new\nline.log"));
    }

    /// A test filter: appends its mark to every entry's bytes (so the test
    /// can see which filters ran, in order) and may retag or drop.
    struct Mark {
        mark: u8,
        retag: Option<&'static str>,
        drop: bool,
    }

    impl crate::filters::Filter for Mark {
        fn filter(&self, _tag: &str, parts: &[Bytes], count: u32) -> crate::filters::Filtered {
            let mut v: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            v.push(self.mark);
            crate::filters::Filtered {
                batch: Some((Bytes::from(v), if self.drop { 0 } else { count })),
                tag: self.retag.map(String::from),
                errors: u64::from(self.mark == b'e'),
                moved: Vec::new(),
                retries: 0,
            }
        }
    }

    fn router(filters: &[(&str, u8, Option<&'static str>, bool)]) -> (Router, Vec<Arc<Stage>>) {
        let reg = crate::stats::Registry::default();
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
        use crate::stats::PluginStats as S;
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
            crate::stats::PluginStats::get(&stages[1].stats.events_in),
            0
        );
    }

    /// A test filter that moves every event to the tag `to` (as rewrite_tag
    /// does event by event), marking the bytes.
    struct Move {
        to: &'static str,
    }

    impl crate::filters::Filter for Move {
        fn filter(&self, _tag: &str, parts: &[Bytes], count: u32) -> crate::filters::Filtered {
            let mut v: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            v.push(b'm');
            crate::filters::Filtered {
                batch: Some((Bytes::new(), 0)),
                moved: vec![(self.to.to_string(), Bytes::from(v), count)],
                ..Default::default()
            }
        }
    }

    #[test]
    fn events_moved_to_other_tags_go_on_with_later_filters_only() {
        let reg = crate::stats::Registry::default();
        let mark = |m: u8| -> Box<dyn crate::filters::Filter> {
            Box::new(Mark {
                mark: m,
                retag: None,
                drop: false,
            })
        };
        let filters: Vec<(&str, Box<dyn crate::filters::Filter>)> = vec![
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
        use crate::stats::PluginStats as S;
        for st in &stages {
            assert_eq!(S::get(&st.stats.events_in), 3, "{}", st.name);
            assert_eq!(S::get(&st.stats.events_out), 3, "{}", st.name);
            assert_eq!(S::get(&st.stats.dropped), 0, "{}", st.name);
        }
    }
}
