//! A streaming reader of journalctl's export format
//! (<https://systemd.io/JOURNAL_EXPORT_FORMATS/>): entries are runs of
//! fields ended by an empty line; a field is `KEY=value\n` when its value is
//! printable UTF-8, else `KEY\n` + its length (64-bit little endian) + the
//! bytes + `\n` (the binary form, also used for a message with a newline).
//!
//! Bytes come in pieces as the pipe gives them (`feed`); `parse` hands out
//! every complete entry and keeps the start of the next one. A value longer
//! than `max_field` is cut to that size and the rest is skipped as it
//! arrives, so one huge field costs bounded memory.

use std::ops::Range;

/// One field of an entry: ranges into the reader's buffer.
#[derive(Debug, Clone)]
struct Field {
    key: Range<usize>,
    value: Range<usize>,
    /// Written in the binary form (its value may be any bytes).
    binary: bool,
}

/// What the bytes fed next belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    No,
    /// The rest of a cut binary value (and its `\n`).
    Bytes(u64),
    /// The rest of a cut text value, up to its `\n`.
    ToNewline,
}

pub struct ExportReader {
    buf: Vec<u8>,
    /// Where the entry being read starts in `buf`.
    entry_start: usize,
    /// The first byte of `buf` not parsed yet.
    pos: usize,
    fields: Vec<Field>,
    skip: Skip,
    max_field: usize,
    /// Values cut to `max_field` (in the current entry: that entry is marked).
    cut_in_entry: bool,
}

/// A complete entry, valid until the next call to the reader.
pub struct Entry<'a> {
    buf: &'a [u8],
    fields: &'a [Field],
    /// A value of it was longer than `max_field` and was cut.
    pub cut: bool,
}

impl<'a> Entry<'a> {
    /// Its fields in order: (key, value, written in binary form).
    pub fn fields(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8], bool)> + '_ {
        let buf = self.buf;
        self.fields
            .iter()
            .map(move |f| (&buf[f.key.clone()], &buf[f.value.clone()], f.binary))
    }

    /// The value of the first field named `key`.
    pub fn get(&self, key: &[u8]) -> Option<&'a [u8]> {
        self.fields().find(|(k, _, _)| *k == key).map(|(_, v, _)| v)
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// The key and value of field `i`.
    pub fn field(&self, i: usize) -> (&'a [u8], &'a [u8], bool) {
        let f = &self.fields[i];
        (
            &self.buf[f.key.clone()],
            &self.buf[f.value.clone()],
            f.binary,
        )
    }
}

/// A key longer than this is not a journal field name (journald allows 64
/// bytes): the stream is not the export format.
const MAX_KEY: usize = 256;

impl ExportReader {
    pub fn new(max_field: usize) -> ExportReader {
        ExportReader {
            buf: Vec::with_capacity(1 << 18),
            entry_start: 0,
            pos: 0,
            fields: Vec::new(),
            skip: Skip::No,
            max_field: max_field.max(1),
            cut_in_entry: false,
        }
    }

    /// Whether the bytes fed so far end between two entries.
    #[cfg(test)]
    pub fn between_entries(&self) -> bool {
        self.buf.len() == self.entry_start && self.skip == Skip::No
    }

    /// Appends bytes read from the stream (what a cut value's rest is skipped).
    pub fn feed(&mut self, mut data: &[u8]) {
        match self.skip {
            Skip::No => {}
            Skip::Bytes(n) => {
                let k = (n as usize).min(data.len());
                data = &data[k..];
                let left = n - k as u64;
                self.skip = if left == 0 {
                    Skip::No
                } else {
                    Skip::Bytes(left)
                };
            }
            Skip::ToNewline => match memchr::memchr(b'\n', data) {
                Some(i) => {
                    data = &data[i + 1..];
                    self.skip = Skip::No;
                }
                None => data = &[],
            },
        }
        if self.skip == Skip::No {
            self.buf.extend_from_slice(data);
        }
    }

    /// Calls `on_entry` with each complete entry fed so far, in order. An
    /// error means the stream is not the export format (the caller stops
    /// reading it).
    pub fn parse(&mut self, mut on_entry: impl FnMut(Entry<'_>)) -> Result<(), String> {
        let r = self.parse_inner(&mut on_entry);
        self.compact();
        r
    }

    fn parse_inner(&mut self, on_entry: &mut impl FnMut(Entry<'_>)) -> Result<(), String> {
        while self.skip == Skip::No && self.pos < self.buf.len() {
            let pos = self.pos;
            if self.buf[pos] == b'\n' {
                // The empty line that ends an entry.
                if !self.fields.is_empty() {
                    on_entry(Entry {
                        buf: &self.buf,
                        fields: &self.fields,
                        cut: self.cut_in_entry,
                    });
                }
                self.fields.clear();
                self.cut_in_entry = false;
                self.pos = pos + 1;
                self.entry_start = self.pos;
                continue;
            }
            let rest = &self.buf[pos..];
            let Some(i) = memchr::memchr2(b'=', b'\n', &rest[..rest.len().min(MAX_KEY + 1)]) else {
                if rest.len() > MAX_KEY {
                    return Err(format!(
                        "a field name longer than {MAX_KEY} bytes: {:?}",
                        String::from_utf8_lossy(&rest[..40])
                    ));
                }
                return Ok(()); // the rest of the name is still to come
            };
            if i == 0 {
                return Err("a field without a name".into());
            }
            let key = pos..pos + i;
            if rest[i] == b'=' {
                let start = pos + i + 1;
                match memchr::memchr(b'\n', &self.buf[start..]) {
                    Some(n) if n <= self.max_field => {
                        self.fields.push(Field {
                            key,
                            value: start..start + n,
                            binary: false,
                        });
                        self.pos = start + n + 1;
                    }
                    found => {
                        let have = self.buf.len() - start;
                        if found.is_none() && have <= self.max_field {
                            return Ok(()); // more of the value to come
                        }
                        // Too long: keep max_field bytes, skip the rest.
                        let end = start + self.max_field;
                        self.fields.push(Field {
                            key,
                            value: start..end,
                            binary: false,
                        });
                        self.cut_in_entry = true;
                        match found {
                            Some(n) => {
                                self.buf.drain(end..start + n + 1);
                            }
                            None => {
                                self.buf.truncate(end);
                                self.skip = Skip::ToNewline;
                            }
                        }
                        self.pos = end;
                    }
                }
            } else {
                // Binary form: KEY\n, u64 LE length, bytes, \n.
                let head = pos + i + 1;
                if self.buf.len() < head + 8 {
                    return Ok(());
                }
                let len = u64::from_le_bytes(self.buf[head..head + 8].try_into().unwrap());
                let start = head + 8;
                let keep = len.min(self.max_field as u64) as usize;
                let have = (self.buf.len() - start) as u64;
                if have > len {
                    if self.buf[start + len as usize] != b'\n' {
                        return Err(format!(
                            "the binary field {:?} of {len} bytes is not followed by a newline",
                            String::from_utf8_lossy(&self.buf[key.clone()])
                        ));
                    }
                    self.fields.push(Field {
                        key,
                        value: start..start + keep,
                        binary: true,
                    });
                    if keep as u64 != len {
                        self.buf.drain(start + keep..start + len as usize + 1);
                        self.cut_in_entry = true;
                        self.pos = start + keep;
                    } else {
                        self.pos = start + keep + 1;
                    }
                } else if keep as u64 != len && have >= keep as u64 {
                    // Too long and not all here: keep the start, skip the
                    // rest (and the newline) as it comes.
                    self.fields.push(Field {
                        key,
                        value: start..start + keep,
                        binary: true,
                    });
                    self.cut_in_entry = true;
                    self.skip = Skip::Bytes((len - have).saturating_add(1));
                    self.buf.truncate(start + keep);
                    self.pos = start + keep;
                } else {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Drops the entries handed out, keeping the one being read.
    fn compact(&mut self) {
        let n = self.entry_start;
        if n == 0 {
            return;
        }
        self.buf.drain(..n);
        for f in &mut self.fields {
            f.key = f.key.start - n..f.key.end - n;
            f.value = f.value.start - n..f.value.end - n;
        }
        self.pos -= n;
        self.entry_start = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every entry of `stream` fed in pieces of `piece` bytes, as
    /// (key, value, binary) strings.
    fn read(stream: &[u8], piece: usize, max: usize) -> Vec<Vec<(String, Vec<u8>, bool)>> {
        let mut r = ExportReader::new(max);
        let mut out = Vec::new();
        for p in stream.chunks(piece) {
            r.feed(p);
            r.parse(|e| {
                out.push(
                    e.fields()
                        .map(|(k, v, b)| (String::from_utf8(k.to_vec()).unwrap(), v.to_vec(), b))
                        .collect(),
                )
            })
            .unwrap();
        }
        assert!(r.between_entries());
        out
    }

    fn binary(key: &str, value: &[u8]) -> Vec<u8> {
        let mut v = key.as_bytes().to_vec();
        v.push(b'\n');
        v.extend_from_slice(&(value.len() as u64).to_le_bytes());
        v.extend_from_slice(value);
        v.push(b'\n');
        v
    }

    fn stream() -> Vec<u8> {
        let mut s =
            b"__CURSOR=s=1;i=1\n__REALTIME_TIMESTAMP=1700000000123456\nMESSAGE=hello\n_PID=42\n\n"
                .to_vec();
        s.extend_from_slice(b"__CURSOR=s=1;i=2\n");
        s.extend(binary("MESSAGE", b"two\nlines\n\nand a blank one"));
        s.extend(binary("BLOB", &[0, 0xff, b'\n', b'=', 7]));
        s.extend_from_slice(b"EMPTY=\n\n");
        s
    }

    #[test]
    fn text_and_binary_fields_in_any_pieces() {
        let whole = read(&stream(), usize::MAX, 1 << 20);
        assert_eq!(whole.len(), 2);
        assert_eq!(
            whole[0][2],
            ("MESSAGE".to_string(), b"hello".to_vec(), false)
        );
        assert_eq!(
            whole[1][1],
            (
                "MESSAGE".to_string(),
                b"two\nlines\n\nand a blank one".to_vec(),
                true
            )
        );
        assert_eq!(
            whole[1][2],
            ("BLOB".to_string(), vec![0, 0xff, b'\n', b'=', 7], true)
        );
        assert_eq!(whole[1][3], ("EMPTY".to_string(), vec![], false));
        for piece in 1..40 {
            assert_eq!(read(&stream(), piece, 1 << 20), whole, "pieces of {piece}");
        }
    }

    #[test]
    fn long_values_are_cut_and_the_stream_goes_on() {
        let mut s = b"A=".to_vec();
        s.extend(std::iter::repeat_n(b'x', 100));
        s.extend_from_slice(b"\n");
        s.extend(binary("B", &[b'y'; 100]));
        s.extend_from_slice(b"C=short\n\nD=next\n\n");
        for piece in [1, 3, 7, 50, 1000] {
            let mut r = ExportReader::new(10);
            let mut out = Vec::new();
            for p in s.chunks(piece) {
                r.feed(p);
                r.parse(|e| {
                    let f: Vec<_> = e
                        .fields()
                        .map(|(k, v, _)| (k.to_vec(), v.to_vec()))
                        .collect();
                    out.push((f, e.cut))
                })
                .unwrap();
            }
            assert_eq!(out.len(), 2, "pieces of {piece}");
            assert_eq!(out[0].0[0], (b"A".to_vec(), vec![b'x'; 10]));
            assert_eq!(out[0].0[1], (b"B".to_vec(), vec![b'y'; 10]));
            assert_eq!(out[0].0[2], (b"C".to_vec(), b"short".to_vec()));
            assert!(out[0].1, "the entry is marked as cut");
            assert_eq!(out[1].0, vec![(b"D".to_vec(), b"next".to_vec())]);
            assert!(!out[1].1);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut r = ExportReader::new(100);
        r.feed(&[b'x'; 1000]);
        assert!(r.parse(|_| {}).is_err());
        let mut r = ExportReader::new(100);
        let mut bad = binary("K", b"abc");
        *bad.last_mut().unwrap() = b'!';
        r.feed(&bad);
        assert!(r.parse(|_| {}).is_err());
        let mut r = ExportReader::new(100);
        r.feed(b"=x\n");
        assert!(r.parse(|_| {}).is_err());
        // A length that would overflow is only waited for, never allocated.
        let mut r = ExportReader::new(100);
        let mut huge = b"K\n".to_vec();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        huge.extend_from_slice(&[b'z'; 200]);
        r.feed(&huge);
        r.parse(|_| panic!("no entry")).unwrap();
        assert!(r.buf.len() <= 200);
    }

    /// Export streams built from pieces (text and binary fields, entry
    /// ends, lengths that lie) or any bytes: fed in any pieces, the reader
    /// never panics, holds at most about one entry, and reads a valid
    /// stream the same whatever the pieces.
    fn exportish() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just(b"\n".to_vec()),
            "[A-Z_]{1,8}=[ -~]{0,30}\n".prop_map(String::into_bytes),
            (proptest::collection::vec(any::<u8>(), 0..40), any::<bool>()).prop_map(|(v, lie)| {
                let mut b = b"BIN\n".to_vec();
                let len = if lie {
                    v.len() as u64 + 3
                } else {
                    v.len() as u64
                };
                b.extend_from_slice(&len.to_le_bytes());
                b.extend_from_slice(&v);
                b.push(b'\n');
                b
            }),
            proptest::collection::vec(any::<u8>(), 0..20),
        ];
        proptest::collection::vec(piece, 0..30).prop_map(|v| v.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        #[test]
        fn any_stream_in_any_pieces(stream in exportish(), cut in 1usize..50, max in 1usize..64) {
            let read = |piece: usize| {
                let mut r = ExportReader::new(max);
                let mut out = Vec::new();
                let mut failed = false;
                for p in stream.chunks(piece) {
                    r.feed(p);
                    let res = r.parse(|e| {
                        out.push(e.fields().map(|(k, v, b)| (k.to_vec(), v.to_vec(), b)).collect::<Vec<_>>())
                    });
                    assert!(r.buf.len() <= stream.len());
                    if res.is_err() {
                        failed = true;
                        break;
                    }
                }
                (out, failed)
            };
            let (whole, whole_failed) = read(stream.len().max(1));
            let (pieces, pieces_failed) = read(cut);
            if !whole_failed && !pieces_failed {
                proptest::prop_assert_eq!(whole, pieces);
            }
        }
    }
}
