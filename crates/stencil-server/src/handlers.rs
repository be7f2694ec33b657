//! HTTP handlers. Every error leaves through [`ErrorResponse`] as the OpenAI error object.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{json, Value};
use stencil_openai::error::ErrorFields;
use stencil_openai::request::{chat_request, completion_request, ValidRequest};
use stencil_openai::response::{now, stencil_info, ChatCompletion, ModelCard, ModelList};
use stencil_openai::ApiError;
use tokio::sync::mpsc;

use crate::chunks::{ChunkWriter, Endpoint};
use crate::worker::{JobEvent, SubmitError};
use crate::{api_error, AppState};

/// An [`ApiError`] as an HTTP response.
pub(crate) struct ErrorResponse(pub ApiError);

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut r = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            self.0.to_json(),
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
        Err(e) => ErrorResponse(e).into_response(),
    }
}

/// Whether `name` is the served model or one of its aliases (404 `model_not_found` if not).
fn served(state: &AppState, name: &str) -> Result<(), ApiError> {
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
    ErrorResponse(ApiError::not_found(
        format!("no route {method} {}", uri.path()),
        "unknown_route",
    ))
    .into_response()
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let mut e = ApiError::invalid(
        "method",
        format!("{method} is not allowed on {}", uri.path()),
    );
    e.status = 405;
    ErrorResponse(e).into_response()
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

fn read_body(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
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

fn submit_error(e: SubmitError) -> ApiError {
    match e {
        SubmitError::QueueFull => {
            ApiError::overloaded(429, "the server's request queue is full; retry shortly")
        }
        SubmitError::Stopped => ApiError::overloaded(503, "the server is shutting down"),
    }
}

/// Check, prepare and queue a request; returns it and its event channel.
async fn admit(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Result<(ValidRequest, mpsc::Receiver<JobEvent>), ApiError> {
    let value = read_body(state, body)?;
    let mut valid = match endpoint {
        Endpoint::Chat => chat_request(&value)?,
        Endpoint::Completions => completion_request(&value)?,
    };
    if let Some(m) = &valid.model {
        served(state, m)?;
    }
    valid.request.timeout = Some(state.config.request_timeout);
    let prepared = state
        .workers
        .prepare(valid.request.clone())
        .await
        .map_err(submit_error)?
        .map_err(|e| api_error(&e, valid.error_fields()))?;
    let rx = state.workers.run(prepared).map_err(submit_error)?;
    Ok((valid, rx))
}

async fn handle(
    state: Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
    endpoint: Endpoint,
) -> Response {
    let (valid, rx) = match admit(&state, body, endpoint).await {
        Ok(x) => x,
        Err(e) => return ErrorResponse(e).into_response(),
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
    let id = stencil_runtime::tools::new_call_id();
    let suffix = id.trim_start_matches("call_");
    match endpoint {
        Endpoint::Chat => format!("chatcmpl-{suffix}"),
        Endpoint::Completions => format!("cmpl-{suffix}"),
    }
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
                Err(e) => return ErrorResponse(api_error(&e, fields)).into_response(),
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
    ErrorResponse(ApiError::internal("generation ended without a result")).into_response()
}

fn data(v: &Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(v.to_string()))
}

/// A streamed response. Dropping it (client gone) drops `rx`, which cancels generation.
fn stream(
    state: Arc<AppState>,
    writer: ChunkWriter,
    rx: mpsc::Receiver<JobEvent>,
    fields: ErrorFields,
) -> Response {
    let first: Vec<Result<Event, Infallible>> = writer.start().iter().map(data).collect();
    let events = futures_util::stream::unfold(Some((rx, writer)), move |st| async move {
        let (mut rx, writer) = st?;
        let out: Vec<Result<Event, Infallible>> = match rx.recv().await {
            Some(JobEvent::Started) => Vec::new(),
            Some(JobEvent::Event(e)) => writer.event(e).iter().map(data).collect(),
            Some(JobEvent::Done(Ok(o))) => {
                let mut v: Vec<_> = writer.finish(&o).iter().map(data).collect();
                v.push(Ok(Event::default().data("[DONE]")));
                return Some((v, None));
            }
            Some(JobEvent::Done(Err(e))) => {
                let body = api_error(&e, fields).body();
                let v = vec![data(&serde_json::to_value(body).expect("errors serialize"))];
                return Some((v, None));
            }
            None => {
                let body = ApiError::internal("generation stopped unexpectedly").body();
                let v = vec![data(&serde_json::to_value(body).expect("errors serialize"))];
                return Some((v, None));
            }
        };
        Some((out, Some((rx, writer))))
    });
    let all = futures_util::stream::iter(vec![first])
        .chain(events)
        .flat_map(futures_util::stream::iter);
    Sse::new(all)
        .keep_alive(
            KeepAlive::new()
                .interval(state.config.keep_alive)
                .text("keep-alive"),
        )
        .into_response()
}
