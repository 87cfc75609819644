//! Regex tests on field values for the filters that have them (grep,
//! sample, rewrite_tag): a regex-automata regex that takes its search cache
//! as an argument (with a quick test for anchored patterns), and a pool of
//! those caches that a batch takes once.
//!
//! Why not `regex::bytes::Regex::is_match`: it takes a cache from the
//! regex's own pool per test, and for every thread but the first to use the
//! regex that is a mutex taken and released per test (rules times events).

use std::sync::Mutex;

use memchr::memmem;
use regex_automata::util::syntax;
use regex_automata::{meta, Input};
use regex_syntax::hir::literal::{ExtractKind, Extractor};
use regex_syntax::hir::{Hir, HirKind, Literal, Look};

/// A rule's pattern: the regex, and for a pattern anchored at the start
/// (`^FATAL`, common in rewrite_tag and grep rules) the literals a match
/// must start with, tested before the regex is searched. The regex would
/// fail at the first bytes too, but only after ~10 ns of search set-up,
/// paid by every event that does not match.
///
/// A pattern that is one literal (`panic`) is looked for with memchr's
/// `memmem`, without the regex's search set-up at all.
pub(crate) struct Pattern {
    regex: meta::Regex,
    quick: Quick,
}

/// What is known of a pattern's matches without searching its regex.
enum Quick {
    /// The pattern is this literal: it matches where these bytes occur.
    Literal(Box<memmem::Finder<'static>>),
    /// Every match starts at the text's start with one of these.
    Starts(Vec<Vec<u8>>),
    /// Nothing: the regex is searched.
    None,
}

impl Pattern {
    /// `pattern` as `regex::bytes::Regex::new` reads it (regex's builder,
    /// builders.rs). Its errors read as `regex::Error`'s do (regex's
    /// error.rs, `from_meta_build_error`).
    pub(crate) fn new(pattern: &str) -> Result<Pattern, String> {
        let config = meta::Config::new()
            .nfa_size_limit(Some(10 * (1 << 20)))
            .hybrid_cache_capacity(2 * (1 << 20))
            .match_kind(regex_automata::MatchKind::LeftmostFirst)
            .utf8_empty(false);
        let syntax = syntax::Config::new().utf8(false);
        let regex = meta::Builder::new()
            .configure(config)
            .syntax(syntax)
            .build(pattern)
            .map_err(|e| match (e.size_limit(), e.syntax_error()) {
                (Some(limit), _) => format!("Compiled regex exceeds size limit of {limit} bytes."),
                (None, Some(syntax)) => syntax.to_string(),
                (None, None) => e.to_string(),
            })?;
        // It parsed above, with the same syntax.
        let quick = match syntax::parse_with(pattern, &syntax) {
            Ok(hir) => match hir.kind() {
                HirKind::Literal(Literal(bytes)) => {
                    Quick::Literal(Box::new(memmem::Finder::new(bytes).into_owned()))
                }
                _ => anchored_starts(&hir).map_or(Quick::None, Quick::Starts),
            },
            Err(_) => Quick::None,
        };
        Ok(Pattern { regex, quick })
    }

    /// Whether the pattern matches anywhere in `text` (`Regex::is_match`,
    /// with the caller's cache).
    #[inline]
    pub(crate) fn is_match(&self, cache: &mut meta::Cache, text: &[u8]) -> bool {
        match &self.quick {
            Quick::Literal(literal) => return literal.find(text).is_some(),
            Quick::Starts(starts) if !starts.iter().any(|s| text.starts_with(s)) => return false,
            _ => {}
        }
        self.regex
            .search_half_with(cache, &Input::new(text).earliest(true))
            .is_some()
    }

    pub(crate) fn regex(&self) -> &meta::Regex {
        &self.regex
    }
}

/// For a pattern whose every match starts at the start of the text (`^…`,
/// not multi-line), the literals such a match starts with, when they are
/// a short finite list (the prefixes regex's own prefilter would use).
fn anchored_starts(hir: &Hir) -> Option<Vec<Vec<u8>>> {
    if !hir.properties().look_set_prefix().contains(Look::Start) {
        return None;
    }
    let seq = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    let literals = seq.literals()?;
    let starts: Vec<Vec<u8>> = literals.iter().map(|l| l.as_bytes().to_vec()).collect();
    // An empty literal admits every text: nothing to test.
    (!starts.is_empty() && starts.len() <= 8 && starts.iter().all(|s| !s.is_empty()))
        .then_some(starts)
}

/// Search state (a filter's caches, one per rule) for as many batches as
/// run at once: a batch takes a set and puts it back, two locks per batch.
pub(crate) struct CachePool<T> {
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
    pub(crate) fn with<R>(&self, make: impl FnOnce() -> T, f: impl FnOnce(&mut T) -> R) -> R {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_patterns_are_found_as_regex_finds_them() {
        let texts: [&[u8]; 7] = [
            b"",
            b"panic",
            b"a panic!",
            b"pani",
            b"PANIC",
            b"\xffpanic\xff",
            b"x\xe9y",
        ];
        // (pattern, whether it is searched as a literal)
        let patterns = [
            ("panic", true),
            ("é", true),
            ("p\\.nic", true),
            ("(?i)panic", false),
            ("panic|x", false),
            ("", false),
            ("^panic", false),
            ("panic$", false),
        ];
        for (pattern, literal) in patterns {
            let ours = Pattern::new(pattern).unwrap();
            assert_eq!(
                matches!(ours.quick, Quick::Literal(_)),
                literal,
                "{pattern}"
            );
            agrees_with_regex(&ours, pattern, &texts);
        }
    }

    /// `ours` (made of `pattern`) matches each of `texts` as regex does.
    fn agrees_with_regex(ours: &Pattern, pattern: &str, texts: &[&[u8]]) {
        let theirs = regex::bytes::Regex::new(pattern).unwrap();
        let mut cache = ours.regex().create_cache();
        for text in texts {
            assert_eq!(
                ours.is_match(&mut cache, text),
                theirs.is_match(text),
                "{pattern} on {:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn anchored_patterns_test_their_start_and_match_as_regex_does() {
        let texts: [&[u8]; 9] = [
            b"",
            b"FATAL disk",
            b"FATAL",
            b"xFATAL disk",
            b"fatal disk",
            b"ab",
            b"line\nFATAL disk",
            b"Abc",
            b"\xffFATAL",
        ];
        // (pattern, whether it gets a start test)
        let patterns = [
            ("^FATAL (\\w+)", true),
            ("^(?:FATAL|ERROR) ", true),
            ("(?i)^ab", true),
            ("^F|x", false),
            ("(?m)^FATAL", false),
            ("^$", false),
            ("^\\w+", false),
            ("FATAL", false),
            (".", false),
        ];
        for (pattern, tested) in patterns {
            let ours = Pattern::new(pattern).unwrap();
            assert_eq!(matches!(ours.quick, Quick::Starts(_)), tested, "{pattern}");
            agrees_with_regex(&ours, pattern, &texts);
        }
        // A bad pattern's error reads as regex's own (a variable: clippy
        // refuses an invalid regex literal).
        let bad = String::from("(x");
        let theirs = regex::bytes::Regex::new(&bad).unwrap_err().to_string();
        assert_eq!(Pattern::new(&bad).err().unwrap(), theirs);
    }
}
