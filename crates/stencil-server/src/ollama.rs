//! The Ollama API over the engine: `POST /api/chat`, `POST /api/generate`, `GET /api/tags`,
//! `POST /api/show`, `GET /api/version`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use stencil_ollama::request::{chat_request, generate_request, ValidOllama};
use stencil_ollama::response::{self as reply, Endpoint, ModelEntry};
use stencil_ollama::stream::LineWriter;
use stencil_openai::ApiError;

use crate::errors::Api;
use crate::framing::{frames, ndjson};
use crate::handlers::{admit, outcome, read_body, served, ErrorResponse};
use crate::worker::JobEvent;
use crate::{api_error, AppState};

pub(crate) async fn chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, body, Endpoint::Chat).await
}

pub(crate) async fn generate(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, body, Endpoint::Generate).await
}

fn check(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Result<ValidOllama, ApiError> {
    let value = read_body(state, body)?;
    let valid = match endpoint {
        Endpoint::Chat => chat_request(&value)?,
        Endpoint::Generate => generate_request(&value)?,
    };
    served(state, &valid.model)?;
    Ok(valid)
}

async fn handle(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Response {
    let valid = match check(&state, body, endpoint) {
        Ok(v) => v,
        Err(e) => return ErrorResponse(Api::Ollama, e).into_response(),
    };
    let fields = valid.error_fields();
    let events = match admit(&state, valid.request, fields).await {
        Ok(a) => a.events,
        Err(e) => return ErrorResponse(Api::Ollama, e).into_response(),
    };
    // Ollama answers with the name the request used.
    let model = valid.model;
    if !valid.stream {
        return match outcome(events, fields).await {
            Ok(o) => axum::Json(reply::whole(endpoint, &model, &o)).into_response(),
            Err(e) => ErrorResponse(Api::Ollama, e).into_response(),
        };
    }
    let writer = LineWriter::new(endpoint, &model);
    ndjson(frames(events, writer, move |w, event| match event {
        Some(JobEvent::Started) => (Vec::new(), false),
        Some(JobEvent::Event(e)) => (w.event(e).into_iter().collect(), false),
        Some(JobEvent::Done(Ok(o))) => (vec![w.finish(&o)], true),
        Some(JobEvent::Done(Err(e))) => (vec![LineWriter::error(&api_error(&e, fields))], true),
        None => (
            vec![LineWriter::error(&ApiError::internal(
                "generation stopped unexpectedly",
            ))],
            true,
        ),
    }))
}

/// The served model under each name requests may use.
fn entries(state: &AppState) -> Vec<ModelEntry> {
    let f = state.engine.model_facts();
    std::iter::once(&state.model_id)
        .chain(&state.config.model_aliases)
        .map(|name| ModelEntry {
            name: name.clone(),
            size: f.size,
            modified_at: f.modified_at,
            format: f.format.clone(),
            family: f.family.clone(),
            quantization_level: f.weights.clone(),
            template: f.template.clone(),
            context_length: f.context_length,
        })
        .collect()
}

pub(crate) async fn tags(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(reply::tags(&entries(&state))).into_response()
}

pub(crate) async fn show(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let name = read_body(&state, body).and_then(|v| {
        // `model` (current clients) or `name` (older ones).
        match v.get("model").or(v.get("name")).and_then(Value::as_str) {
            Some(n) => Ok(n.to_string()),
            None => Err(ApiError::invalid("model", "`model` is required")),
        }
    });
    match name.and_then(|n| served(&state, &n).map(|()| n)) {
        Ok(n) => {
            let entry = entries(&state).into_iter().find(|e| e.name == n);
            axum::Json(reply::show(&entry.unwrap_or_default())).into_response()
        }
        Err(e) => ErrorResponse(Api::Ollama, e).into_response(),
    }
}

pub(crate) async fn version() -> Response {
    axum::Json(json!({"version": env!("CARGO_PKG_VERSION")})).into_response()
}
