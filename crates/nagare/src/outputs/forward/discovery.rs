//! `[output.service_discovery]`: the forward output's servers from a file
//! (read again when it changes) or from DNS records (resolved again every
//! `interval`), so aggregators are added and removed without touching the
//! forwarders. The servers found join the [[output.server]] tables.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Weak;
use std::time::Duration;

use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::RData;
use hickory_resolver::TokioResolver;
use nagare_core::plugin::serde_inline_default;
use nagare_core::units::Dur;
use serde::Deserialize;

use super::pool::Pool;
use super::{check_address, ServerConfig};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DiscoveryType {
    /// A file listing servers, read again when it changes.
    File,
    /// DNS SRV or A/AAAA records of a name, resolved again every interval.
    Dns,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum DnsRecord {
    /// SRV records: each target and port is a server.
    #[default]
    Srv,
    /// A and AAAA records: each address with `port` is a server.
    A,
}

/// Where a forward output finds more servers: `type = "file"` with `path`,
/// or `type = "dns"` with `name`.
#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceDiscovery {
    /// "file" or "dns".
    #[serde(rename = "type")]
    pub kind: DiscoveryType,
    /// type "file": the servers, with the keys of [[output.server]]: a TOML
    /// file of [[server]] tables, or (a name ending in ".json") a JSON array
    /// of objects. Checked every `interval`; a change takes effect without a
    /// restart, a file that became unreadable or invalid keeps the last list.
    #[serde(default)]
    pub path: Option<String>,
    /// type "dns": the name to resolve, e.g. "_forward._tcp.example.com"
    /// (SRV) or "aggregators.example.com" (A).
    #[serde(default)]
    pub name: Option<String>,
    /// type "dns": "srv" (default: each record's target and port; the lowest
    /// priority's records are the primaries, the others standbys; the SRV
    /// weight is the server's weight) or "a" (every A and AAAA address, with
    /// `port`).
    #[serde(default)]
    pub record: DnsRecord,
    /// type "dns" with record = "a": the servers' port (default 24224).
    #[serde_inline_default(24224)]
    pub port: u16,
    /// type "dns": the DNS server to ask, "IP:PORT" (default: the system's,
    /// from /etc/resolv.conf).
    #[serde(default)]
    pub nameserver: Option<String>,
    /// How often the file is checked or the name resolved again (default
    /// "5s" for a file, "30s" for DNS; the records' TTL is not used).
    #[serde(default)]
    pub interval: Option<Dur>,
}

impl ServiceDiscovery {
    /// Checks the options (no I/O); the error is (key, message).
    pub(super) fn check(&self) -> Result<(), (&'static str, String)> {
        match self.kind {
            DiscoveryType::File => {
                if self.path.is_none() {
                    return Err(("path", "type = \"file\" needs `path`".into()));
                }
                for (key, set) in [
                    ("name", self.name.is_some()),
                    ("nameserver", self.nameserver.is_some()),
                ] {
                    if set {
                        return Err((key, format!("`{key}` is for type = \"dns\"")));
                    }
                }
            }
            DiscoveryType::Dns => {
                let Some(name) = &self.name else {
                    return Err((
                        "name",
                        "type = \"dns\" needs `name`, e.g. \"_forward._tcp.example.com\"".into(),
                    ));
                };
                if name.is_empty() {
                    return Err(("name", "is empty".into()));
                }
                if self.path.is_some() {
                    return Err(("path", "`path` is for type = \"file\"".into()));
                }
                if let Some(ns) = &self.nameserver {
                    ns.parse::<SocketAddr>().map_err(|_| {
                        (
                            "nameserver",
                            format!("expected IP:PORT such as \"127.0.0.1:53\", found {ns:?}"),
                        )
                    })?;
                }
            }
        }
        if self.interval.is_some_and(|d| d.0.is_zero()) {
            return Err(("interval", "must be above 0".into()));
        }
        Ok(())
    }

    fn interval(&self) -> Duration {
        self.interval.map_or(
            match self.kind {
                DiscoveryType::File => Duration::from_secs(5),
                DiscoveryType::Dns => Duration::from_secs(30),
            },
            |d| d.0,
        )
    }

    /// The servers of the file now (type "file"), or none yet (type "dns":
    /// resolved once the daemon runs).
    pub(super) fn initial(&self) -> Result<Vec<ServerConfig>, String> {
        match (&self.kind, &self.path) {
            (DiscoveryType::File, Some(p)) => read_file(Path::new(p)).map(|(_, s)| s),
            _ => Ok(Vec::new()),
        }
    }

    /// Starts the task that keeps the pool's list current; it ends with
    /// the output (it holds the pool weakly).
    pub(super) fn start(&self, output: &str, pool: Weak<Pool>) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (sd, output) = (self.clone(), output.to_string());
        handle.spawn(async move {
            let mut last_error: Option<String> = None;
            let mut last_file: Option<Vec<u8>> = None;
            let resolver = match sd.kind {
                DiscoveryType::Dns => match resolver(sd.nameserver.as_deref()) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::error!(output = %output, error = %e,
                            "service_discovery: cannot make a DNS resolver; only the [[output.server]] tables are used");
                        return;
                    }
                },
                DiscoveryType::File => None,
            };
            let mut tick = tokio::time::interval(sd.interval());
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let found = match (&resolver, &sd.path) {
                    (Some(r), _) => resolve(r, &sd).await.map(Some),
                    (None, Some(p)) => {
                        let p = p.clone();
                        let last = last_file.clone();
                        // A small file, read whole: it is checked by content,
                        // so a rename over it or a ConfigMap's symlink swap is
                        // seen as well as a write in place.
                        match tokio::task::spawn_blocking(move || {
                            let bytes = std::fs::read(&p).map_err(|e| format!("{p}: {e}"))?;
                            if last.as_ref() == Some(&bytes) {
                                return Ok((bytes, None));
                            }
                            let servers = parse_file(Path::new(&p), &bytes)?;
                            Ok((bytes, Some(servers)))
                        })
                        .await
                        {
                            Ok(Ok((bytes, servers))) => {
                                last_file = Some(bytes);
                                Ok(servers)
                            }
                            Ok(Err(e)) => Err(e),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                    (None, None) => return,
                };
                let Some(pool) = pool.upgrade() else { return };
                match found {
                    Ok(Some(servers)) => {
                        if last_error.take().is_some() {
                            tracing::info!(output = %output, "service_discovery: servers found again");
                        }
                        pool.set_discovered(&output, servers);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        if last_error.as_ref() != Some(&e) {
                            tracing::warn!(output = %output, error = %e,
                                "service_discovery failed; the last list of servers stays");
                            last_error = Some(e);
                        }
                    }
                }
            }
        });
    }
}

/// Reads and parses a servers file: (its bytes, its servers).
fn read_file(path: &Path) -> Result<(Vec<u8>, Vec<ServerConfig>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let servers = parse_file(path, &bytes)?;
    Ok((bytes, servers))
}

/// The servers of a file: TOML `[[server]]` tables, or a JSON array.
fn parse_file(path: &Path, bytes: &[u8]) -> Result<Vec<ServerConfig>, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct TomlFile {
        #[serde(default)]
        server: Vec<ServerConfig>,
    }
    let p = path.display();
    let text = std::str::from_utf8(bytes).map_err(|e| format!("{p}: not UTF-8: {e}"))?;
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let servers = if json {
        serde_json::from_str::<Vec<ServerConfig>>(text).map_err(|e| {
            format!(
                "{p}: expected a JSON array of servers ({{\"address\": \"HOST:PORT\", ...}}): {e}"
            )
        })?
    } else {
        toml::from_str::<TomlFile>(text)
            .map_err(|e| format!("{p}: expected [[server]] tables with an `address`: {e}"))?
            .server
    };
    for (i, s) in servers.iter().enumerate() {
        check_address(&s.address).map_err(|e| format!("{p}: server {}: {e}", i + 1))?;
    }
    Ok(servers)
}

fn resolver(nameserver: Option<&str>) -> Result<TokioResolver, String> {
    let mut builder = match nameserver {
        Some(ns) => {
            let addr: SocketAddr = ns.parse().map_err(|e| format!("nameserver {ns:?}: {e}"))?;
            let (mut udp, mut tcp) = (ConnectionConfig::udp(), ConnectionConfig::tcp());
            udp.port = addr.port();
            tcp.port = addr.port();
            let server = NameServerConfig::new(addr.ip(), true, vec![udp, tcp]);
            TokioResolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![server]),
                TokioRuntimeProvider::default(),
            )
        }
        None => TokioResolver::builder_tokio().map_err(|e| format!("/etc/resolv.conf: {e}"))?,
    };
    // Every interval asks again: the answer must not come from a cache.
    builder.options_mut().cache_size = 0;
    builder.build().map_err(|e| e.to_string())
}

/// The servers the name's records give now.
async fn resolve(r: &TokioResolver, sd: &ServiceDiscovery) -> Result<Vec<ServerConfig>, String> {
    let name = sd.name.as_deref().unwrap_or_default();
    r.clear_cache();
    let mut found = Vec::new();
    match sd.record {
        DnsRecord::A => {
            let ips = r
                .lookup_ip(name)
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            for ip in ips.iter() {
                found.push(server(SocketAddr::new(ip, sd.port), 60, false));
            }
        }
        DnsRecord::Srv => {
            let srv = r
                .srv_lookup(name)
                .await
                .map_err(|e| format!("{name}: {e}"))?;
            let records: Vec<_> = srv
                .answers()
                .iter()
                .filter_map(|rec| match &rec.data {
                    RData::SRV(s) => Some(s.clone()),
                    _ => None,
                })
                .collect();
            let top = records.iter().map(|s| s.priority).min().unwrap_or(0);
            for s in &records {
                let target = s.target.to_utf8();
                let target = target.trim_end_matches('.');
                // The target's addresses, from the same DNS server.
                let ips = r
                    .lookup_ip(format!("{target}."))
                    .await
                    .map_err(|e| format!("{name}: SRV target {target}: {e}"))?;
                for ip in ips.iter() {
                    found.push(server(
                        SocketAddr::new(ip, s.port),
                        u32::from(s.weight.max(1)),
                        s.priority != top,
                    ));
                }
            }
        }
    }
    if found.is_empty() {
        return Err(format!("{name}: no records"));
    }
    found.sort_by(|a, b| a.address.cmp(&b.address));
    found.dedup_by(|a, b| a.address == b.address);
    Ok(found)
}

fn server(addr: SocketAddr, weight: u32, standby: bool) -> ServerConfig {
    ServerConfig {
        address: addr.to_string(),
        weight,
        standby,
        shared_key: None,
        username: None,
        password: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_in_toml_and_json() {
        let toml = b"[[server]]\naddress = \"10.0.0.1:24224\"\n[[server]]\naddress = \"agg-2:24224\"\nweight = 20\nstandby = true\n";
        let s = parse_file(Path::new("/x/servers.toml"), toml).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[1].weight, s[1].standby), (20, true));
        let json = br#"[{"address": "10.0.0.1:24224", "shared_key": "k"}]"#;
        let s = parse_file(Path::new("/x/servers.json"), json).unwrap();
        assert_eq!(s[0].shared_key.as_deref(), Some("k"));
        let e =
            parse_file(Path::new("/x/s.toml"), b"[[server]]\naddress = \"nope\"\n").unwrap_err();
        assert!(
            e.contains("/x/s.toml: server 1") && e.contains("HOST:PORT"),
            "{e}"
        );
        let e = parse_file(Path::new("/x/s.toml"), b"[[server]]\nadress = \"a:1\"\n").unwrap_err();
        assert!(e.contains("/x/s.toml") && e.contains("adress"), "{e}");
    }
}
