//! Regex tests on field values for the filters that have them (grep,
//! sample, rewrite_tag): a regex-automata regex that takes its search cache
//! as an argument, and a pool of those caches that a batch takes once.
//!
//! Why not `regex::bytes::Regex::is_match`: it takes a cache from the
//! regex's own pool per test, and for every thread but the first to use the
//! regex that is a mutex taken and released per test (rules times events).

use std::sync::Mutex;

use regex_automata::meta;
use regex_automata::Input;

/// `pattern` as `regex::bytes::Regex::new` reads it (regex's builder,
/// builders.rs). Its errors read as `regex::Error`'s do (regex's error.rs,
/// `from_meta_build_error`).
pub(super) fn bytes_regex(pattern: &str) -> Result<meta::Regex, String> {
    let config = meta::Config::new()
        .nfa_size_limit(Some(10 * (1 << 20)))
        .hybrid_cache_capacity(2 * (1 << 20))
        .match_kind(regex_automata::MatchKind::LeftmostFirst)
        .utf8_empty(false);
    meta::Builder::new()
        .configure(config)
        .syntax(regex_automata::util::syntax::Config::new().utf8(false))
        .build(pattern)
        .map_err(|e| match (e.size_limit(), e.syntax_error()) {
            (Some(limit), _) => format!("Compiled regex exceeds size limit of {limit} bytes."),
            (None, Some(syntax)) => syntax.to_string(),
            (None, None) => e.to_string(),
        })
}

/// Whether `regex` matches anywhere in `text` (`Regex::is_match`, with the
/// caller's cache).
#[inline]
pub(super) fn is_match(regex: &meta::Regex, cache: &mut meta::Cache, text: &[u8]) -> bool {
    regex
        .search_half_with(cache, &Input::new(text).earliest(true))
        .is_some()
}

/// Search state (a filter's caches, one per rule) for as many batches as
/// run at once: a batch takes a set and puts it back, two locks per batch.
pub(super) struct CachePool<T> {
    free: Mutex<Vec<T>>,
}

impl<T> Default for CachePool<T> {
    fn default() -> Self {
        CachePool {
            free: Mutex::new(Vec::new()),
        }
    }
}

impl<T> CachePool<T> {
    /// Runs `f` with a set taken from the pool, or made by `make` when every
    /// set is in use, and puts the set back.
    pub(super) fn with<R>(&self, make: impl FnOnce() -> T, f: impl FnOnce(&mut T) -> R) -> R {
        let taken = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut set = taken.unwrap_or_else(make);
        let result = f(&mut set);
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(set);
        result
    }
}
