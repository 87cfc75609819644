//! The client side of the monitor API, for `nagare top` and `nagare tap`:
//! one HTTP/1.1 GET over hyper, and a reader of server-sent events.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// The `--monitor` option shared by `top` and `tap`.
#[derive(clap::Args, Clone)]
pub struct MonitorArgs {
    /// Address of the daemon's monitor (its `[monitor] bind`).
    #[arg(long, value_name = "ADDR", default_value_t = default_monitor())]
    pub monitor: String,
}

/// The monitor address of the embedded default configuration.
pub fn default_monitor() -> String {
    let table: toml::Table = toml::from_str(crate::config::DEFAULT_CONFIG).unwrap_or_default();
    table
        .get("monitor")
        .and_then(|m| m.get("bind"))
        .and_then(|b| b.as_str())
        .unwrap_or("127.0.0.1:24220")
        .to_string()
}

/// Sends `GET path` to the monitor at `addr`; the response's body is read
/// by the caller.
pub async fn get(addr: &str, path: &str) -> Result<Response<Incoming>, String> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("cannot reach the monitor at {addr}: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("monitor at {addr}: {e}"))?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header(hyper::header::HOST, addr)
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("monitor request {path}: {e}"))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| format!("monitor at {addr}: GET {path}: {e}"))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes());
        let text = body.map(|b| String::from_utf8_lossy(&b).into_owned());
        return Err(format!(
            "monitor at {addr}: GET {path}: {status}: {}",
            text.unwrap_or_default().trim()
        ));
    }
    Ok(resp)
}

/// `GET path` and its whole body, parsed as JSON.
pub async fn get_json(addr: &str, path: &str) -> Result<serde_json::Value, String> {
    let body = get(addr, path)
        .await?
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("monitor at {addr}: GET {path}: {e}"))?
        .to_bytes();
    serde_json::from_slice(&body)
        .map_err(|e| format!("monitor at {addr}: GET {path}: bad JSON: {e}"))
}

/// One server-sent event: its `event:` name and its `data:` lines joined by
/// newlines.
#[derive(Debug, PartialEq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Reads server-sent events from a response body.
pub struct SseReader {
    body: Incoming,
    buf: Vec<u8>,
    event: String,
    data: Vec<String>,
}

impl SseReader {
    pub fn new(resp: Response<Incoming>) -> SseReader {
        SseReader {
            body: resp.into_body(),
            buf: Vec::new(),
            event: String::new(),
            data: Vec::new(),
        }
    }

    /// The next event; None when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, String> {
        loop {
            while let Some(nl) = memchr::memchr(b'\n', &self.buf) {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                if let Some(ev) = self.line(&line[..nl]) {
                    return Ok(Some(ev));
                }
            }
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(format!("reading the event stream: {e}")),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// Takes one line of the stream (without its newline); a blank line
    /// ends an event.
    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        let line = String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line));
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            if self.data.is_empty() {
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            let event = if event.is_empty() {
                "message".into()
            } else {
                event
            };
            return Some(SseEvent { event, data });
        }
        if line.starts_with(':') {
            return None; // a comment (keep-alive)
        }
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.event = value.to_string(),
            "data" => self.data.push(value.to_string()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_monitor_is_the_embedded_configs() {
        assert_eq!(super::default_monitor(), "127.0.0.1:24220");
    }
}
