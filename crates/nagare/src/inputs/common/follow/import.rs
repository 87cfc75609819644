//! Positions left by another collector, imported at the first start so a
//! switch to nagare neither re-ships nor skips lines: Fluentd's in_tail
//! `pos_file` and Fluent Bit's tail `DB` (an SQLite file). A file resumes
//! at the imported offset only when its path and inode both still match
//! (positions.rs: `Positions::import`).

use std::path::{Path, PathBuf};

/// One imported position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    pub path: PathBuf,
    pub inode: u64,
    pub offset: u64,
}

/// Fluentd's `pos_file`: one line per file, `path<TAB>offset<TAB>inode`,
/// both numbers as 16 hex digits. An offset of all ones marks a file
/// in_tail stopped watching: left out. Lines that do not read are reported
/// with their number.
pub fn fluentd_pos_file(path: &Path) -> Result<(Vec<Imported>, Vec<String>), String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut parts = line.rsplitn(3, |&b| b == b'\t');
        let (inode, offset, file) = (parts.next(), parts.next(), parts.next());
        let hex = |b: Option<&[u8]>| {
            std::str::from_utf8(b?)
                .ok()
                .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
        };
        match (file, hex(offset), hex(inode)) {
            (Some(file), Some(offset), Some(inode)) if !file.is_empty() => {
                if offset == u64::MAX {
                    continue;
                }
                use std::os::unix::ffi::OsStrExt;
                found.push(Imported {
                    path: PathBuf::from(std::ffi::OsStr::from_bytes(file)),
                    inode,
                    offset,
                });
            }
            _ => skipped.push(format!(
                "{}:{}: not `path<TAB>offset<TAB>inode`",
                path.display(),
                i + 1
            )),
        }
    }
    Ok((found, skipped))
}

/// Fluent Bit's tail `DB`: the rows of its `in_tail_files` table (name,
/// offset, inode), opened read-only.
pub fn fluent_bit_db(path: &Path) -> Result<Vec<Imported>, String> {
    let what = |e: rusqlite::Error| format!("{}: {e}", path.display());
    let db = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(what)?;
    let mut q = db
        .prepare("SELECT name, offset, inode FROM in_tail_files")
        .map_err(what)?;
    let rows = q
        .query_map([], |r| {
            Ok(Imported {
                path: PathBuf::from(r.get::<_, String>(0)?),
                offset: r.get::<_, i64>(1)? as u64,
                inode: r.get::<_, i64>(2)? as u64,
            })
        })
        .map_err(what)?;
    rows.collect::<Result<_, _>>().map_err(what)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The state the real Fluentd 1.16 and Fluent Bit 4.2 wrote
    /// (tests/samples/tail-state, copied from the shared fixtures; its README gives these values).
    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/samples/tail-state")
            .join(rel)
    }

    #[test]
    fn reads_the_state_the_real_programs_wrote() {
        let (found, skipped) = fluentd_pos_file(&fixture("fluentd-1.16/app.log.pos")).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let want = |inode| Imported {
            path: "/var/log/app/app.log".into(),
            inode,
            offset: 19_893,
        };
        assert_eq!(found, vec![want(10_649_609)]);
        let found = fluent_bit_db(&fixture("fluent-bit-4.2/tail.db")).unwrap();
        assert_eq!(found, vec![want(10_649_610)]);
    }

    #[test]
    fn fluentd_lines_that_do_not_read_are_named_and_unwatched_ones_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pos");
        std::fs::write(
            &p,
            "/a b\t0000000000000010\t0000000000000003\n/gone\tffffffffffffffff\t0000000000000004\nbroken line\n",
        )
        .unwrap();
        let (found, skipped) = fluentd_pos_file(&p).unwrap();
        assert_eq!(
            found,
            vec![Imported {
                path: "/a b".into(),
                inode: 3,
                offset: 16
            }]
        );
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].ends_with("x.pos:3: not `path<TAB>offset<TAB>inode`"));
    }
}
