//! A hand-written HTTP/1.1 server for the error paths of the HTTP outputs:
//! each request is recorded (path, headers, body) and answered by the
//! test's script, which may also answer with bytes that are not HTTP.
//! Used where a real server cannot be made to give the answer (a Loki
//! 400 for entries out of order, Splunk's error codes, a 413).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request as it came.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the script answers: a status with a body (keep-alive), or raw
/// bytes after which the connection is closed.
pub enum Reply {
    Status(u16, String),
    Raw(Vec<u8>),
}

type Script = dyn Fn(usize, &Request) -> Reply + Send + Sync;

pub struct ScriptedHttp {
    pub port: u16,
    pub requests: Arc<Mutex<Vec<Request>>>,
}

impl ScriptedHttp {
    /// Listens on a free loopback port; `script(n, request)` answers the
    /// `n`th request (from 0).
    pub fn start(
        script: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
    ) -> ScriptedHttp {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let script: Arc<Script> = Arc::new(script);
        let seen = requests.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(conn) = conn else { return };
                let (seen, script) = (seen.clone(), script.clone());
                std::thread::spawn(move || serve(conn, &seen, &*script));
            }
        });
        ScriptedHttp { port, requests }
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

fn serve(conn: TcpStream, seen: &Mutex<Vec<Request>>, script: &Script) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split(' ').nth(1).unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let req = Request {
            path,
            headers,
            body,
        };
        let n = {
            let mut s = seen.lock().unwrap();
            s.push(req.clone());
            s.len() - 1
        };
        match script(n, &req) {
            Reply::Status(code, text) => {
                let resp = format!(
                    "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                if w.write_all(resp.as_bytes()).is_err() {
                    return;
                }
            }
            Reply::Raw(bytes) => {
                let _ = w.write_all(&bytes);
                return;
            }
        }
    }
}
