//! `none`: the whole line goes to `message_key`.

use nagare_forward::msgpack::{write_map_len, write_str};

pub fn write(key: &str, line: &[u8], extra: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    write_map_len(out, 1 + extra.len());
    write_str(out, key.as_bytes());
    write_str(out, line);
    super::write_extra(extra, out);
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn the_line_is_the_message() {
        let p = parser("type = \"none\"\nmessage_key = \"log\"");
        let (v, t, ok) = run(&p, "hello world");
        assert!(ok && t.is_none());
        assert_eq!(keys(&v), ["log"]);
        assert_eq!(s(&v, "log"), "hello world");
    }
}
