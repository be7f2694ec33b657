//! Stream framing shared by every API: a job's events through an API's writer, out as SSE
//! (OpenAI, Anthropic, Responses; with keep-alive comments while a request waits) or as
//! newline-delimited JSON (Ollama). Dropping the response (client gone) drops the event
//! receiver, which cancels the generation.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::worker::JobEvent;
use crate::AppState;

/// Runs `rx` through `step`, which turns each job event (or `None`: the job vanished without a
/// result) into frames and says whether the stream ends after them.
pub(crate) fn frames<W, T, F>(
    rx: mpsc::Receiver<JobEvent>,
    writer: W,
    step: F,
) -> impl Stream<Item = T> + Send
where
    W: Send + 'static,
    T: Send + 'static,
    F: FnMut(&mut W, Option<JobEvent>) -> (Vec<T>, bool) + Send + 'static,
{
    futures_util::stream::unfold(Some((rx, writer, step)), |st| async move {
        let (mut rx, mut writer, mut step) = st?;
        let event = rx.recv().await;
        let (out, end) = step(&mut writer, event);
        Some((out, (!end).then_some((rx, writer, step))))
    })
    .flat_map(futures_util::stream::iter)
}

/// An SSE event with a name (`event: message_start`) and JSON data.
pub(crate) fn named(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// An SSE event with JSON data only.
pub(crate) fn data(v: &Value) -> Event {
    Event::default().data(v.to_string())
}

/// `first` then `rest` as server-sent events, with keep-alive comments.
pub(crate) fn sse(
    state: &Arc<AppState>,
    first: Vec<Event>,
    rest: impl Stream<Item = Event> + Send + 'static,
) -> Response {
    let all = futures_util::stream::iter(first)
        .chain(rest)
        .map(Ok::<_, Infallible>);
    Sse::new(all)
        .keep_alive(
            KeepAlive::new()
                .interval(state.config.keep_alive)
                .text("keep-alive"),
        )
        .into_response()
}

/// `lines` as `application/x-ndjson`, one JSON value per line.
pub(crate) fn ndjson(lines: impl Stream<Item = Value> + Send + 'static) -> Response {
    let body = Body::from_stream(lines.map(|v| {
        let mut s = v.to_string();
        s.push('\n');
        Ok::<_, Infallible>(Bytes::from(s))
    }));
    ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
}
