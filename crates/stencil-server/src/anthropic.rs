//! `POST /v1/messages` and `POST /v1/messages/count_tokens`: the Anthropic Messages API over
//! the engine.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use stencil_anthropic::request::{messages_request, ValidMessages};
use stencil_anthropic::response::message;
use stencil_anthropic::stream::EventWriter;
use stencil_openai::ApiError;

use crate::errors::Api;
use crate::framing::{frames, named, sse};
use crate::handlers::{
    admit, outcome, read_body, served, submit_error, unique_id, Admitted, ErrorResponse,
};
use crate::worker::JobEvent;
use crate::{api_error, AppState};

async fn check(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<ValidMessages, ApiError> {
    let valid = messages_request(&read_body(state, body)?)?;
    served(state, &valid.model)?;
    Ok(valid)
}

pub(crate) async fn messages(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let valid = match check(&state, body).await {
        Ok(v) => v,
        Err(e) => return ErrorResponse(Api::Anthropic, e).into_response(),
    };
    let fields = valid.error_fields();
    let Admitted {
        events,
        prompt_tokens,
    } = match admit(&state, valid.request, fields).await {
        Ok(a) => a,
        Err(e) => return ErrorResponse(Api::Anthropic, e).into_response(),
    };
    let id = unique_id("msg_");
    if !valid.stream {
        return match outcome(events, fields).await {
            Ok(o) => axum::Json(message(&id, &state.model_id, &o)).into_response(),
            Err(e) => ErrorResponse(Api::Anthropic, e).into_response(),
        };
    }
    let writer = EventWriter::new(&id, &state.model_id, prompt_tokens);
    let first = writer.start().iter().map(|(n, d)| named(n, d)).collect();
    let rest = frames(events, writer, move |w, event| {
        let (out, end) = match event {
            Some(JobEvent::Started) => (Vec::new(), false),
            Some(JobEvent::Event(e)) => (w.event(e), false),
            Some(JobEvent::Done(Ok(o))) => (w.finish(&o), true),
            Some(JobEvent::Done(Err(e))) => {
                (vec![EventWriter::error(&api_error(&e, fields))], true)
            }
            None => (
                vec![EventWriter::error(&ApiError::internal(
                    "generation stopped unexpectedly",
                ))],
                true,
            ),
        };
        (out.iter().map(|(n, d)| named(n, d)).collect(), end)
    });
    sse(&state, first, rest)
}

/// `POST /v1/messages/count_tokens`: the prompt's length in tokens, as the model sees it (chat
/// template and tool definitions included); nothing is generated.
pub(crate) async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let counted = async {
        let mut value = read_body(&state, body)?;
        // The same body as a message, without `max_tokens`.
        if let Some(o) = value.as_object_mut() {
            o.entry("max_tokens").or_insert(1.into());
        }
        let valid = messages_request(&value)?;
        served(&state, &valid.model)?;
        let fields = valid.error_fields();
        let prepared = state
            .workers
            .prepare(valid.request)
            .await
            .map_err(submit_error)?
            .map_err(|e| api_error(&e, fields))?;
        Ok::<_, ApiError>(prepared.prompt.tokens.len())
    };
    match counted.await {
        Ok(n) => axum::Json(serde_json::json!({ "input_tokens": n })).into_response(),
        Err(e) => ErrorResponse(Api::Anthropic, e).into_response(),
    }
}
