//! `POST /v1/responses`: OpenAI's Responses API (stateless) over the engine.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use stencil_openai::response::now;
use stencil_openai::responses::output::ResponseWriter;
use stencil_openai::responses::request::{responses_request, ValidResponses};
use stencil_openai::ApiError;

use crate::errors::Api;
use crate::framing::{frames, named, sse};
use crate::handlers::{admit, outcome, read_body, served, unique_id, ErrorResponse};
use crate::worker::JobEvent;
use crate::{api_error, AppState};

fn check(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<ValidResponses, ApiError> {
    let valid = responses_request(&read_body(state, body)?)?;
    if let Some(m) = &valid.model {
        served(state, m)?;
    }
    Ok(valid)
}

pub(crate) async fn responses(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let valid = match check(&state, body) {
        Ok(v) => v,
        Err(e) => return ErrorResponse(Api::OpenAi, e).into_response(),
    };
    let fields = valid.error_fields();
    let events = match admit(&state, valid.request, fields).await {
        Ok(a) => a.events,
        Err(e) => return ErrorResponse(Api::OpenAi, e).into_response(),
    };
    let mut writer = ResponseWriter::new(&unique_id("resp_"), &state.model_id, now(), valid.echo);
    if !valid.stream {
        return match outcome(events, fields).await {
            Ok(o) => axum::Json(writer.whole(&o)).into_response(),
            Err(e) => ErrorResponse(Api::OpenAi, e).into_response(),
        };
    }
    let first = writer.start().iter().map(|(n, d)| named(n, d)).collect();
    let rest = frames(events, writer, move |w, event| {
        let (out, end) = match event {
            Some(JobEvent::Started) => (Vec::new(), false),
            Some(JobEvent::Event(e)) => (w.event(e), false),
            Some(JobEvent::Done(Ok(o))) => (w.finish(&o), true),
            Some(JobEvent::Done(Err(e))) => (vec![w.error(&api_error(&e, fields))], true),
            None => (
                vec![w.error(&ApiError::internal("generation stopped unexpectedly"))],
                true,
            ),
        };
        (out.iter().map(|(n, d)| named(n, d)).collect(), end)
    });
    sse(&state, first, rest)
}
