//! `lb = "consistent_hash"`: rendezvous (highest random weight) hashing of
//! a key (the tag or a record field) over the forward output's servers.
//!
//! Each server scores every key with a hash of (key, server address); the
//! key goes to the server with the highest score. When a server leaves,
//! only the keys it held move (each to its second-highest server), and they
//! come back when it returns; the scores of the others do not change. The
//! hash is XXH3-64 (the `sample` filter's, already a dependency), seeded by
//! the XXH3-64 of the server's address, so every forwarder, on any machine
//! and any version of nagare, maps a key to the same server. Weights scale
//! the scores as in weighted rendezvous hashing (`-w / ln(u)`), so a server
//! of weight 120 holds twice the keys of one of weight 60.

use nagare_core::record::{value_text, FieldPath};
use xxhash_rust::xxh3::{xxh3_128_with_seed, xxh3_64, xxh3_64_with_seed};

/// What an event's key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashKey {
    /// The chunk's tag: a chunk goes whole to one server.
    Tag,
    /// A record field; an event without it has the empty key.
    Field(FieldPath),
}

impl HashKey {
    /// `"tag"` is the tag; anything else is a field path as the filters
    /// write it (`host`, or `$.kubernetes.pod` for a nested field; `$.tag`
    /// for a record field named "tag").
    pub fn parse(s: &str) -> Result<HashKey, String> {
        if s == "tag" {
            return Ok(HashKey::Tag);
        }
        FieldPath::parse(s).map(HashKey::Field)
    }

    /// The key bytes of one record (a msgpack map): the field's text as a
    /// template sees it (a string's bytes, a number as JSON), or empty.
    pub fn of<'a>(path: &FieldPath, record: &'a [u8], scratch: &'a mut Vec<u8>) -> &'a [u8] {
        match path.find(record) {
            Some((a, b)) => value_text(&record[a..b], scratch),
            None => b"",
        }
    }
}

/// The seed a server scores keys with: the hash of its address.
pub fn server_seed(address: &str) -> u64 {
    xxh3_64(address.as_bytes())
}

/// The score of `key` on a server of `seed` and `weight`; higher wins.
pub fn score(key: &[u8], seed: u64, weight: u32) -> f64 {
    let h = xxh3_64_with_seed(key, seed);
    // u in (0, 1) from the top 53 bits; -ln(u) > 0.
    let u = ((h >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    f64::from(weight.max(1)) / -u.ln()
}

/// The index in `servers` (seed, weight) of the server `key` goes to.
pub fn pick(key: &[u8], servers: &[(u64, u32)]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, &(seed, w)) in servers.iter().enumerate() {
        let s = score(key, seed, w);
        if best.is_none_or(|(_, b)| s > b) {
            best = Some((i, s));
        }
    }
    best.map(|(i, _)| i)
}

/// The chunk id of the part of a chunk that goes to one server: derived
/// from the chunk's id, the server's address and the part's bytes, so a
/// resent part (same events to the same server) carries the same id and a
/// receiving nagare drops it, while a different part never shares an id.
pub fn part_id(chunk_id: &[u8; 16], address: &str, part: &[u8]) -> [u8; 16] {
    let mut head = Vec::with_capacity(16 + address.len() + 1);
    head.extend_from_slice(chunk_id);
    head.extend_from_slice(address.as_bytes());
    head.push(0);
    let seed = xxh3_64(&head);
    xxh3_128_with_seed(part, seed).to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(addrs: &[&str]) -> Vec<(u64, u32)> {
        addrs.iter().map(|a| (server_seed(a), 60)).collect()
    }

    /// The figure in docs/forward-output.md: 10,000 keys over 3 servers;
    /// one leaves, then returns.
    #[test]
    fn only_the_keys_of_a_leaving_server_move_and_they_come_back() {
        let all = ["10.0.0.1:24224", "10.0.0.2:24224", "10.0.0.3:24224"];
        let three = servers(&all);
        let two = servers(&[all[0], all[2]]);
        let keys: Vec<String> = (0..10_000).map(|i| format!("host-{i}")).collect();
        let before: Vec<&str> = keys
            .iter()
            .map(|k| all[pick(k.as_bytes(), &three).unwrap()])
            .collect();
        let during: Vec<&str> = keys
            .iter()
            .map(|k| [all[0], all[2]][pick(k.as_bytes(), &two).unwrap()])
            .collect();
        let held = |a: &str| before.iter().filter(|&&s| s == a).count();
        // An even share each (within 5 % of 3,333).
        for a in all {
            assert!((3166..=3500).contains(&held(a)), "{a}: {}", held(a));
        }
        let moved = before.iter().zip(&during).filter(|(b, d)| b != d).count();
        let between_survivors = before
            .iter()
            .zip(&during)
            .filter(|(b, d)| b != d && **b != all[1])
            .count();
        assert_eq!(moved, held(all[1]), "exactly the leaver's keys move");
        assert_eq!(between_survivors, 0);
        eprintln!(
            "10000 keys, 3 servers: {moved} keys ({:.1} %) moved when one left, 0 between the others",
            moved as f64 / 100.0
        );
        // It returns: every key is back where it was.
        let after: Vec<&str> = keys
            .iter()
            .map(|k| all[pick(k.as_bytes(), &three).unwrap()])
            .collect();
        assert_eq!(before, after);
    }

    #[test]
    fn weights_scale_the_share_of_keys() {
        let s = vec![(server_seed("a:1"), 60), (server_seed("b:1"), 120)];
        let n = (0..30_000)
            .filter(|i| pick(format!("k{i}").as_bytes(), &s) == Some(1))
            .count();
        // Two thirds (20,000) within 3 %.
        assert!((19_400..=20_600).contains(&n), "{n}");
    }

    #[test]
    fn hash_key_syntax() {
        assert_eq!(HashKey::parse("tag"), Ok(HashKey::Tag));
        assert_eq!(
            HashKey::parse("$.tag"),
            Ok(HashKey::Field(FieldPath {
                keys: vec![b"tag".to_vec()]
            }))
        );
        assert_eq!(
            HashKey::parse("$.k8s.pod"),
            Ok(HashKey::Field(FieldPath {
                keys: vec![b"k8s".to_vec(), b"pod".to_vec()]
            }))
        );
        assert!(HashKey::parse("$.").is_err());
    }

    #[test]
    fn part_ids_depend_on_chunk_server_and_events() {
        let c = [7u8; 16];
        let a = part_id(&c, "a:1", b"xy");
        assert_eq!(a, part_id(&c, "a:1", b"xy"));
        assert_ne!(a, part_id(&c, "b:1", b"xy"));
        assert_ne!(a, part_id(&c, "a:1", b"xyz"));
        assert_ne!(a, part_id(&[8u8; 16], "a:1", b"xy"));
    }
}
