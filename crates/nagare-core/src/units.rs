//! Durations ("500ms", "1s", "5m") and sizes ("512KiB", "8MiB") as written in
//! the config file.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A duration written as a string such as "500ms", "1s" or "5m".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl Dur {
    /// `Dur::millis(100)`: "100ms", for defaults written as literals.
    pub const fn millis(n: u64) -> Dur {
        Dur(Duration::from_millis(n))
    }
    /// `Dur::secs(10)`: "10s".
    pub const fn secs(n: u64) -> Dur {
        Dur(Duration::from_secs(n))
    }
    /// `Dur::mins(5)`: "5m".
    pub const fn mins(n: u64) -> Dur {
        Dur(Duration::from_secs(n * 60))
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration such as \"500ms\", \"1s\" or \"5m\"")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Dur, E> {
                parse_duration(s).map(Dur).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Dur, E> {
                Err(E::custom(format!(
                    "expected a duration such as \"{n}s\" or \"{n}ms\" (a number needs a unit, in quotes), found {n}"
                )))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Dur, E> {
                self.visit_i64(n as i64)
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Dur, E> {
                Err(E::custom(format!(
                    "expected a duration such as \"{n}s\" (a number needs a unit, in quotes), found {n}"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|_| {
        format!("expected a duration such as \"500ms\", \"1s\" or \"5m\", found {s:?}")
    })
}

impl serde::Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl schemars::JsonSchema for Dur {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "duration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "duration" })
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

/// A size in bytes written as a string such as "512KiB", "8MiB" or "1000".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl Size {
    /// `Size::kib(64)`: "64KiB", for defaults written as literals.
    pub const fn kib(n: u64) -> Size {
        Size(n << 10)
    }
    /// `Size::mib(32)`: "32MiB".
    pub const fn mib(n: u64) -> Size {
        Size(n << 20)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a size such as \"8MiB\" or a number of bytes")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Size, E> {
                parse_size(s).map(Size).map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Size, E> {
                Ok(Size(n))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Size, E> {
                u64::try_from(n).map(Size).map_err(|_| {
                    E::custom(format!(
                        "expected a size such as \"8MiB\" or a number of bytes, found {n}"
                    ))
                })
            }
        }
        d.deserialize_any(V)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
            if n >= m && n.is_multiple_of(m) {
                return write!(f, "{}{unit}", n / m);
            }
        }
        write!(f, "{n}")
    }
}

impl serde::Serialize for Size {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl schemars::JsonSchema for Size {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "size".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "size" })
    }
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let err = || format!("expected a size such as \"512KiB\" or \"8MiB\", found {s:?}");
    let n: f64 = num.parse().map_err(|_| err())?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "kib" => 1 << 10,
        "m" | "mb" => 1_000_000,
        "mib" => 1 << 20,
        "g" | "gb" => 1_000_000_000,
        "gib" => 1 << 30,
        _ => return Err(err()),
    };
    Ok((n * mult as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("8MiB"), Ok(8 << 20));
        assert_eq!(parse_size("1.5k"), Ok(1500));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("8 parsecs").is_err());
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert!(parse_duration("soon").is_err());
    }
}
