//! The OpenAI handlers and what every API's handlers share: reading the body, admission
//! (prepare on the prepare thread, then queue), the model check. Every error leaves through
//! [`ErrorResponse`], in the shape of the API the route speaks.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use stencil_openai::error::ErrorFields;
use stencil_openai::request::{chat_request, completion_request, ValidRequest};
use stencil_openai::response::{now, stencil_info, ChatCompletion, ModelCard, ModelList};
use stencil_openai::ApiError;
use tokio::sync::mpsc;

use crate::errors::Api;
use crate::framing::{data, frames, sse};
use crate::worker::{JobEvent, SubmitError};
use crate::{api_error, AppState};
use stencil_openai::chunks::{ChunkWriter, Endpoint};

/// An [`ApiError`] as an HTTP response, in `Api`'s shape.
pub(crate) struct ErrorResponse(pub Api, pub ApiError);

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.1.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            self.0.error_body(&self.1).to_string(),
        )
            .into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        r
    }
}

pub(crate) async fn health(State(state): State<Arc<AppState>>) -> Response {
    use std::sync::atomic::Ordering::Relaxed;
    let s = &state.workers.stats;
    let mut body = json!({
        "status": "ok",
        "model": state.model_id,
        "running": s.running.load(Relaxed),
        "queued": s.queued.load(Relaxed),
        "generations": {
            "completed": s.completed.load(Relaxed),
            "cancelled": s.cancelled.load(Relaxed),
            "failed": s.failed.load(Relaxed),
            "generated_tokens": s.generated_tokens.load(Relaxed),
        }
    });
    if let Some(b) = state.engine.batch_stats() {
        body["batch"] = json!({
            "max_batch": state.engine.slots(),
            "sequences": b.running,
            "waiting_for_kv_cache": b.waiting,
            "kv_cache_positions": {"reserved": b.kv_reserved, "capacity": b.kv_capacity},
            "steps": b.steps,
            "mean_batch": if b.steps > 0 { ((b.sequence_steps as f64 / b.steps as f64) * 100.0).round() / 100.0 } else { 0.0 },
            "tokens": b.tokens,
            "prefix_cache": {"hits": b.prefix_hits, "tokens": b.prefix_tokens},
            "tokens_per_s": (b.tokens_per_s * 10.0).round() / 10.0,
        });
    }
    axum::Json(body).into_response()
}

fn model_card(id: &str) -> ModelCard {
    ModelCard {
        id: id.to_string(),
        object: "model".into(),
        created: 0,
        owned_by: "stencil".into(),
    }
}

pub(crate) async fn models(State(state): State<Arc<AppState>>) -> Response {
    axum::Json(ModelList {
        object: "list".into(),
        data: vec![model_card(&state.model_id)],
    })
    .into_response()
}

/// `GET /v1/models/{id}` (the SDK's `models.retrieve`): the served model or one of its aliases.
pub(crate) async fn model(
    State(state): State<Arc<AppState>>,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    match served(&state, &id) {
        Ok(()) => axum::Json(model_card(&id)).into_response(),
        Err(e) => ErrorResponse(Api::OpenAi, e).into_response(),
    }
}

/// Whether `name` is the served model or one of its aliases (404 `model_not_found` if not).
pub(crate) fn served(state: &AppState, name: &str) -> Result<(), ApiError> {
    if name == state.model_id || state.config.model_aliases.iter().any(|a| a == name) {
        return Ok(());
    }
    Err(ApiError::not_found(
        format!(
            "model `{name}` is not served here; this server serves `{}`",
            state.model_id
        ),
        "model_not_found",
    ))
}

pub(crate) async fn not_found(method: Method, uri: Uri) -> Response {
    ErrorResponse(
        Api::for_path(uri.path()),
        ApiError::not_found(format!("no route {method} {}", uri.path()), "unknown_route"),
    )
    .into_response()
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let mut e = ApiError::invalid(
        "method",
        format!("{method} is not allowed on {}", uri.path()),
    );
    e.status = 405;
    ErrorResponse(Api::for_path(uri.path()), e).into_response()
}

pub(crate) async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, body, Endpoint::Chat).await
}

pub(crate) async fn completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    handle(state, body, Endpoint::Completions).await
}

pub(crate) fn read_body(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            let mut e = ApiError::invalid(
                "body",
                format!(
                    "the request body is larger than the server's limit of {} bytes",
                    state.config.max_body_bytes
                ),
            )
            .with_code("request_too_large");
            e.status = 413;
            e
        } else {
            ApiError::invalid("body", format!("cannot read the request body: {r}"))
        }
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::invalid("body", format!("the request body is not valid JSON: {e}")))
}

pub(crate) fn submit_error(e: SubmitError) -> ApiError {
    match e {
        SubmitError::QueueFull => {
            ApiError::overloaded(429, "the server's request queue is full; retry shortly")
        }
        SubmitError::Stopped => ApiError::overloaded(503, "the server is shutting down"),
    }
}

/// A queued generation: its events, and the prompt's length in tokens.
pub(crate) struct Admitted {
    pub events: mpsc::Receiver<JobEvent>,
    pub prompt_tokens: usize,
}

/// Prepares (constraint compile, prompt) and queues a checked request of any API; errors are
/// reported against that API's fields.
pub(crate) async fn admit(
    state: &AppState,
    mut request: stencil_types::ChatRequest,
    fields: ErrorFields,
) -> Result<Admitted, ApiError> {
    request.timeout = Some(state.config.request_timeout);
    let prepared = state
        .workers
        .prepare(request)
        .await
        .map_err(submit_error)?
        .map_err(|e| api_error(&e, fields))?;
    let prompt_tokens = prepared.prompt.tokens.len();
    let events = state.workers.run(prepared).map_err(submit_error)?;
    Ok(Admitted {
        events,
        prompt_tokens,
    })
}

/// Checks and queues a Chat Completions or Completions request.
async fn admit_openai(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Result<(ValidRequest, mpsc::Receiver<JobEvent>), ApiError> {
    let value = read_body(state, body)?;
    let valid = match endpoint {
        Endpoint::Chat => chat_request(&value)?,
        Endpoint::Completions => completion_request(&value)?,
    };
    if let Some(m) = &valid.model {
        served(state, m)?;
    }
    let admitted = admit(state, valid.request.clone(), valid.error_fields()).await?;
    Ok((valid, admitted.events))
}

async fn handle(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Response {
    let (valid, rx) = match admit_openai(&state, body, endpoint).await {
        Ok(x) => x,
        Err(e) => return ErrorResponse(Api::OpenAi, e).into_response(),
    };
    let writer = ChunkWriter {
        endpoint,
        id: new_id(endpoint),
        model: state.model_id.clone(),
        created: now(),
        include_usage: valid.include_usage,
    };
    if valid.stream {
        stream(state, writer, rx, valid.error_fields())
    } else {
        whole(writer, rx, valid.error_fields()).await
    }
}

fn new_id(endpoint: Endpoint) -> String {
    match endpoint {
        Endpoint::Chat => unique_id("chatcmpl-"),
        Endpoint::Completions => unique_id("cmpl-"),
    }
}

/// A fresh id with `prefix` (`msg_`, `resp_`, `chatcmpl-`).
pub(crate) fn unique_id(prefix: &str) -> String {
    let id = stencil_runtime::tools::new_call_id();
    format!("{prefix}{}", id.trim_start_matches("call_"))
}

/// A non-streamed response: waits for the outcome.
async fn whole(
    writer: ChunkWriter,
    mut rx: mpsc::Receiver<JobEvent>,
    fields: ErrorFields,
) -> Response {
    while let Some(e) = rx.recv().await {
        if let JobEvent::Done(result) = e {
            let o = match result {
                Ok(o) => o,
                Err(e) => return ErrorResponse(Api::OpenAi, api_error(&e, fields)).into_response(),
            };
            let body = match writer.endpoint {
                Endpoint::Chat => serde_json::to_value(ChatCompletion::from_outcome(
                    &writer.id,
                    &writer.model,
                    writer.created,
                    &o,
                ))
                .expect("responses serialize"),
                Endpoint::Completions => {
                    let mut body = writer.completion(
                        o.content.as_deref().unwrap_or_default(),
                        Some(o.finish_reason.as_str()),
                        Some(o.usage.into()),
                    );
                    body["stencil"] = stencil_info(&o);
                    body
                }
            };
            return axum::Json(body).into_response();
        }
    }
    ErrorResponse(
        Api::OpenAi,
        ApiError::internal("generation ended without a result"),
    )
    .into_response()
}

/// A streamed response.
fn stream(
    state: Arc<AppState>,
    writer: ChunkWriter,
    rx: mpsc::Receiver<JobEvent>,
    fields: ErrorFields,
) -> Response {
    let first: Vec<Event> = writer.start().iter().map(data).collect();
    let rest = frames(rx, writer, move |writer, event| match event {
        Some(JobEvent::Started) => (Vec::new(), false),
        Some(JobEvent::Event(e)) => (writer.event(e).iter().map(data).collect(), false),
        Some(JobEvent::Done(Ok(o))) => {
            let mut v: Vec<_> = writer.finish(&o).iter().map(data).collect();
            v.push(Event::default().data("[DONE]"));
            (v, true)
        }
        Some(JobEvent::Done(Err(e))) => {
            let body = Api::OpenAi.error_body(&api_error(&e, fields));
            (vec![data(&body)], true)
        }
        None => {
            let e = ApiError::internal("generation stopped unexpectedly");
            (vec![data(&Api::OpenAi.error_body(&e))], true)
        }
    });
    sse(&state, first, rest)
}

/// Waits for a job's outcome (a non-streamed answer).
pub(crate) async fn outcome(
    mut rx: mpsc::Receiver<JobEvent>,
    fields: ErrorFields,
) -> Result<stencil_types::ChatOutcome, ApiError> {
    while let Some(e) = rx.recv().await {
        if let JobEvent::Done(result) = e {
            return result.map_err(|e| api_error(&e, fields));
        }
    }
    Err(ApiError::internal("generation ended without a result"))
}
