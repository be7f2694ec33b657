//! A small blocking client for OpenAI-compatible servers, streaming through
//! [`SseDecoder`] and [`ChatAccumulator`]. `stencil chat --url` uses it.

use std::io::Read;

use serde_json::Value;

use crate::accumulate::{ChatAccumulator, StreamError};
use crate::error::{ErrorBody, ErrorObject};
use crate::response::ChatCompletion;
use crate::sse::SseDecoder;

/// What can go wrong talking to a server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("HTTP {status}: {}", error.as_ref().map_or(body.as_str(), |e| e.message.as_str()))]
    Http {
        status: u16,
        error: Option<Box<ErrorObject>>,
        body: String,
    },
    #[error("cannot reach the server: {0}")]
    Transport(String),
    #[error("reading the response: {0}")]
    Io(#[from] std::io::Error),
    #[error("the response is not a chat completion: {0}")]
    BadBody(String),
    #[error(transparent)]
    Stream(#[from] StreamError),
}

/// A client for one server (`http://host:port`, with or without `/v1`).
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    api_key: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    pub fn new(url: &str, api_key: Option<String>) -> Self {
        let trimmed = url.trim_end_matches('/');
        let base = if trimmed.ends_with("/v1") {
            trimmed.to_string()
        } else {
            format!("{trimmed}/v1")
        };
        Self {
            base,
            api_key,
            agent: ureq::AgentBuilder::new().build(),
        }
    }

    fn post(&self, path: &str, body: &Value) -> Result<ureq::Response, ClientError> {
        let mut req = self
            .agent
            .post(&format!("{}{path}", self.base))
            .set("Content-Type", "application/json");
        if let Some(k) = &self.api_key {
            req = req.set("Authorization", &format!("Bearer {k}"));
        }
        match req.send_string(&body.to_string()) {
            Ok(r) => Ok(r),
            Err(ureq::Error::Status(status, r)) => {
                let body = r.into_string().unwrap_or_default();
                let error = serde_json::from_str::<ErrorBody>(&body)
                    .ok()
                    .map(|b| Box::new(b.error));
                Err(ClientError::Http {
                    status,
                    error,
                    body,
                })
            }
            Err(e) => Err(ClientError::Transport(e.to_string())),
        }
    }

    /// A non-streamed chat completion.
    pub fn chat(&self, body: &Value) -> Result<ChatCompletion, ClientError> {
        let mut body = body.clone();
        body["stream"] = false.into();
        let r = self.post("/chat/completions", &body)?;
        let text = r.into_string()?;
        serde_json::from_str(&text).map_err(|e| ClientError::BadBody(e.to_string()))
    }

    /// A streamed chat completion; `on_text` gets content as it arrives. The returned
    /// accumulator holds the whole message ([`ChatAccumulator::tool_calls`] checks the end).
    pub fn chat_stream(
        &self,
        body: &Value,
        mut on_text: impl FnMut(&str),
    ) -> Result<ChatAccumulator, ClientError> {
        let mut body = body.clone();
        body["stream"] = true.into();
        let r = self.post("/chat/completions", &body)?;
        let mut reader = r.into_reader();
        let mut decoder = SseDecoder::new();
        let mut acc = ChatAccumulator::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = reader.read(&mut buf)?;
            if n == 0 {
                break;
            }
            for event in decoder.push(&buf[..n]) {
                let text = acc.push_event(&event)?;
                if !text.is_empty() {
                    on_text(&text);
                }
            }
        }
        decoder.finish();
        Ok(acc)
    }
}
