//! Forward's EventTime: msgpack ext type 0 holding big-endian u32 seconds and
//! u32 nanoseconds.

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EventTime {
    pub secs: u32,
    pub nanos: u32,
}

impl EventTime {
    pub const fn new(secs: u32, nanos: u32) -> Self {
        EventTime { secs, nanos }
    }

    #[inline]
    pub fn now() -> Self {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        EventTime {
            secs: d.as_secs() as u32,
            nanos: d.subsec_nanos(),
        }
    }

    /// The 10 bytes of the canonical fixext8 form (`d7 00 ssss nnnn`).
    #[inline]
    pub fn to_bytes(self) -> [u8; 10] {
        let mut b = [0u8; 10];
        b[0] = 0xd7;
        b[1] = 0x00;
        b[2..6].copy_from_slice(&self.secs.to_be_bytes());
        b[6..10].copy_from_slice(&self.nanos.to_be_bytes());
        b
    }

    /// Reads the 8-byte ext payload.
    pub fn from_payload(p: &[u8]) -> Self {
        EventTime {
            secs: u32::from_be_bytes([p[0], p[1], p[2], p[3]]),
            nanos: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixext8_layout() {
        let t = EventTime::new(0x01020304, 999_999_999);
        let b = t.to_bytes();
        assert_eq!(&b[..6], &[0xd7, 0x00, 1, 2, 3, 4]);
        assert_eq!(EventTime::from_payload(&b[2..]), t);
    }
}
