//! What the server tests share: the real default model (fetched by the script a user runs),
//! a server on a free loopback port, and plain HTTP helpers.

#![allow(dead_code)] // each test binary uses its own subset

#[path = "../../../stencil-runtime/tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde_json::{json, Value};
use stencil_runtime::engine::ChatEngine;
use stencil_runtime::hub::ModelFiles;
use stencil_runtime::loader::{load, LoadOptions};
use stencil_server::{serve, ServerConfig};

pub fn repo() -> PathBuf {
    common::repo_root()
}

pub fn engine() -> Arc<ChatEngine> {
    static E: OnceLock<Arc<ChatEngine>> = OnceLock::new();
    E.get_or_init(|| {
        // The same script a user runs fetches the default model.
        let path = common::default_model().to_path_buf();
        Arc::new(ChatEngine::new(
            load(&ModelFiles::Gguf(path), &LoadOptions::default(), |_, _| {}).unwrap(),
        ))
    })
    .clone()
}

/// Starts a server on a free loopback port; returns its base URL.
pub fn start(config: ServerConfig) -> String {
    start_with(engine(), config)
}

/// [`start`] with another engine.
pub fn start_with(engine: Arc<dyn stencil_server::Engine>, config: ServerConfig) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            serve(l, engine, config, std::future::pending())
                .await
                .unwrap();
        });
    });
    format!("http://{}", rx.recv().unwrap())
}

pub fn main_server() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| start(ServerConfig::default()))
}

/// POSTs `body` (raw text) and returns the status and the JSON body.
pub fn post(url: &str, path: &str, body: &str, key: Option<&str>) -> (u16, Value) {
    let mut req = ureq::post(&format!("{url}{path}")).set("Content-Type", "application/json");
    if let Some(k) = key {
        req = req.set("Authorization", &format!("Bearer {k}"));
    }
    let (status, text) = match req.send_string(body) {
        Ok(r) => (r.status(), r.into_string().unwrap()),
        Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap()),
        Err(e) => panic!("{e}"),
    };
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, v)
}

pub fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

/// A raw HTTP/1.1 request with exactly these headers (plus `Host` unless given, and a JSON
/// content type for bodies unless one is given); returns status, header block and body.
pub fn raw(
    url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::Write;
    let addr = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    if !has("host") {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    if !body.is_empty() && !has("content-type") {
        req.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).unwrap();
    let (head, rest) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), rest.to_string())
}
