//! Output sections: `match` and `label` of a top-level `[[output]]`, the
//! `[output.buffer]` table and its checks, a copy output's stores and an
//! `[output.secondary]`, each built as an output section of its own.

use nagare_core::plugin::{read, Built, ChunkShape, SectionError};
use toml::de::DeValue;
use toml::Spanned;

use super::loader::{into_table, Loader, Place};
use super::source::{join, KeySpans};
use super::{ConfigError, OutputSection, OutputTarget};
use crate::buffer::{BufferConfig, BufferType};

impl<'a> Loader<'a> {
    /// An `[[output]]`, an `[output.secondary]` or a copy's `[[output.store]]`:
    /// `prefix` is its key path in the top-level section, `name_prefix` goes
    /// before its name.
    pub(super) fn output(
        &mut self,
        v: Spanned<DeValue<'a>>,
        prefix: &str,
        name_prefix: &str,
        index: usize,
        top: bool,
    ) -> Option<OutputSection> {
        let at = v.span().start;
        let (mut table, span) = into_table(v);
        if top {
            self.keys = KeySpans::of(&table);
        }
        let reg = self.registration(&mut table, at, prefix, "output", self.registries.outputs)?;
        let patterns = match self.patterns(&mut table, prefix).ok()? {
            Some(p) if top => p,
            None if top => {
                self.error_at(
                    at,
                    prefix,
                    format!(
                        "[[output]] of type \"{}\" needs `match`, e.g. match = \"app.**\"",
                        reg.type_name
                    ),
                );
                return None;
            }
            Some(_) => {
                let key = join(prefix, "match");
                let pos = self.keys.find(&key).map_or(at, |s| s.start);
                self.error_at(pos, &key, "only a top-level [[output]] takes `match`; this one receives what its parent gets");
                return None;
            }
            None => Vec::new(),
        };
        let label = if top {
            self.label(&mut table, "output", at).ok()?
        } else if table.contains_key("label") {
            let key = join(prefix, "label");
            let pos = self.keys.find(&key).map_or(at, |s| s.start);
            self.error_at(
                pos,
                &key,
                "only a top-level [[output]] takes `label`; this one receives what its parent gets",
            );
            return None;
        } else {
            None
        };
        let name = format!("{name_prefix}{}#{index}", reg.type_name);
        let mut buffer = match table.remove("buffer") {
            Some(b) => {
                let bprefix = join(prefix, "buffer");
                match read::<BufferConfig>(b) {
                    Ok(b) => b,
                    Err(e) => {
                        self.section_error(at, &bprefix, e);
                        return None;
                    }
                }
            }
            None => BufferConfig::default(),
        };
        let mut ok = self.check_buffer(&buffer, at, prefix, &name);
        let secondary = match table.remove("secondary") {
            Some(s) => {
                let sprefix = join(prefix, "secondary");
                match self.output_secondary(s, &sprefix, &name) {
                    Some(s) => Some(Box::new(s)),
                    None => {
                        ok = false;
                        None
                    }
                }
            }
            None => None,
        };
        let built = self.build(reg, table, span, &name, prefix, buffer_key_hint)?;
        let shape = std::mem::take(&mut self.chunk_shape);
        ok &= self.shape_buffer(&mut buffer, shape, prefix);
        let target = match built {
            Built::One(o) => OutputTarget::One(o),
            Built::Fanout(stores) => OutputTarget::Copy(self.stores(stores, &name)?),
        };
        ok.then(|| OutputSection {
            name,
            type_name: reg.type_name,
            label,
            patterns,
            buffer,
            target,
            secondary,
        })
    }

    /// A copy output's stores (`prefix`, table), each built as an output
    /// section without `match`; none may be a copy itself.
    fn stores(
        &mut self,
        stores: Vec<(String, Spanned<DeValue<'a>>)>,
        parent: &str,
    ) -> Option<Vec<OutputSection>> {
        let mut outs = Vec::new();
        let mut failed = false;
        for (j, (prefix, table)) in stores.into_iter().enumerate() {
            let at = table.span().start;
            match self.output(table, &prefix, &format!("{parent}."), j, false) {
                Some(o) if matches!(o.target, OutputTarget::Copy(_)) => {
                    let key = prefix.rsplit_once('[').map_or(prefix.as_str(), |(k, _)| k);
                    let pos = self.keys.find(key).map_or(at, |s| s.start);
                    self.error_at(pos, key, "a copy output cannot hold another copy");
                    failed = true;
                }
                Some(o) => outs.push(o),
                None => failed = true,
            }
        }
        (!failed).then_some(outs)
    }

    fn output_secondary(
        &mut self,
        v: Spanned<DeValue<'a>>,
        prefix: &str,
        parent: &str,
    ) -> Option<OutputSection> {
        let mut s = self.output(v, prefix, "", 0, false)?;
        if matches!(s.target, OutputTarget::Copy(_)) {
            let pos = self.keys.find(prefix).map_or(0, |s| s.start);
            self.error_at(pos, prefix, "a secondary output cannot be a fan-out (copy)");
            return None;
        }
        s.name = format!("{parent}.secondary");
        Some(s)
    }

    /// Puts in `b` what the output's own options set (`shape`): an option
    /// written in `[output.buffer]` as well is an error naming both; a
    /// `total_limit_size` left out grows to two chunks (one being written
    /// while the next fills).
    fn shape_buffer(&mut self, b: &mut BufferConfig, shape: ChunkShape, prefix: &str) -> bool {
        let bkey = join(prefix, "buffer");
        let mut ok = true;
        let both = |l: &mut Self, option: &str, buffer_key: &str| {
            let k = join(&bkey, buffer_key);
            match l.keys.exact(&k) {
                Some(s) => {
                    let msg = format!(
                        "`{option}` of this output sets the buffer's {buffer_key}: write one of them"
                    );
                    l.error_at(s.start, &k, msg);
                    true
                }
                None => false,
            }
        };
        if let Some((option, size)) = shape.chunk_limit_size {
            if both(self, &option, "chunk_limit_size") {
                ok = false;
            } else {
                b.chunk_limit_size = size;
                let total = join(&bkey, "total_limit_size");
                match self.keys.exact(&total) {
                    Some(s) if b.total_limit_size.0 < size.0 => {
                        let msg =
                            format!("must be at least `{option}` ({size}), the size of one chunk");
                        self.error_at(s.start, &total, msg);
                        ok = false;
                    }
                    Some(_) => {}
                    None => b.total_limit_size.0 = b.total_limit_size.0.max(2 * size.0),
                }
            }
        }
        if let Some((option, every)) = shape.flush_interval {
            if both(self, &option, "flush_interval") {
                ok = false;
            } else {
                b.flush_interval = every;
            }
        }
        ok
    }

    fn check_buffer(&mut self, b: &BufferConfig, at: usize, prefix: &str, name: &str) -> bool {
        let key = join(prefix, "buffer");
        let pos = self.keys.find(&key).map_or(at, |s| s.start);
        match (b.kind, &b.path) {
            (BufferType::File, None) => {
                self.error_at(
                    pos,
                    &join(&key, "path"),
                    "a file buffer needs `path`, the directory of its chunk files, e.g. path = \"/var/lib/nagare/buffer/app\"",
                );
                return false;
            }
            (BufferType::File, Some(p)) => {
                let ppos = self.keys.find(&join(&key, "path")).map_or(pos, |s| s.start);
                self.writes.push((
                    Place {
                        at: ppos,
                        key: join(&key, "path"),
                        plugin: name.to_string(),
                    },
                    p.into(),
                ));
            }
            (BufferType::Memory, Some(_)) => {
                self.warnings.push(ConfigError {
                    file: self.file.to_string(),
                    line: self.lines.line(pos),
                    key: join(&key, "path"),
                    message: "`path` is ignored by a memory buffer (set type = \"file\" to keep chunks on disk)".into(),
                });
            }
            (BufferType::Memory, None) => {}
        }
        let mut ok = true;
        let mut bad = |l: &mut Self, k: &str, m: &str| {
            let k = join(&key, k);
            let p = l.keys.find(&k).map_or(pos, |s| s.start);
            l.error_at(p, &k, m);
            ok = false;
        };
        if b.chunk_limit_size.0 == 0 {
            bad(
                self,
                "chunk_limit_size",
                "must be more than 0, e.g. \"2MiB\"",
            );
        }
        if b.total_limit_size.0 < b.chunk_limit_size.0 {
            bad(
                self,
                "total_limit_size",
                "must be at least chunk_limit_size (one chunk must fit)",
            );
        }
        if b.flush_thread_count == 0 {
            bad(self, "flush_thread_count", "must be at least 1");
        }
        ok
    }
}

/// A buffer option written among an output's own options (Fluentd users
/// write flush_interval there) is pointed to `[output.buffer]`.
fn buffer_key_hint(e: SectionError, prefix: &str) -> SectionError {
    let SectionError::Invalid { key, span, message } = e else {
        return e;
    };
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|r| r.split('`').next())
        .map(str::to_string);
    let schema = schemars::schema_for!(BufferConfig);
    let is_buffer_key = unknown.as_deref().is_some_and(|k| {
        schema
            .as_value()
            .get("properties")
            .and_then(|p| p.get(k))
            .is_some()
    });
    match unknown {
        Some(k) if is_buffer_key => SectionError::Invalid {
            key,
            span,
            message: format!(
                "`{k}` is a buffer option: put it under [{}.buffer]",
                if prefix.is_empty() {
                    "output".to_string()
                } else {
                    format!("output.{prefix}")
                }
            ),
        },
        _ => SectionError::Invalid { key, span, message },
    }
}
