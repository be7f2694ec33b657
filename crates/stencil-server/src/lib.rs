//! An HTTP server over an [`Engine`] speaking the APIs local apps use: a thin axum layer.
//!
//! Routes: OpenAI `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/responses`,
//! `GET /v1/models`, `GET /v1/models/{id}`; Anthropic `POST /v1/messages`,
//! `POST /v1/messages/count_tokens`; Ollama
//! `POST /api/chat`, `POST /api/generate`, `GET /api/tags`, `POST /api/show`,
//! `GET /api/version`; and `GET /health`.
//!
//! Every request first passes the `guard` module (Host, Origin, Content-Type, API key): a web
//! page the user opens cannot drive the local server. Each API's wire crate checks its bodies
//! (400 naming the field) and writes its shapes (`stencil-openai`, `stencil-anthropic`,
//! `stencil-ollama`); all of them meet in one engine request and one event stream, so
//! admission, queueing and cancellation are shared: a request is prepared on a dedicated thread
//! (constraint compile, prompt), then queued for the generation threads ([`worker`], one per
//! engine slot; a batching engine runs them in one forward pass per step); a full queue is a 429
//! with `Retry-After`, a server shutting down a 503. Streams are SSE (NDJSON for Ollama) with
//! keep-alive comments while a request waits or its prompt is processed; an error after the
//! stream began is one error event or line, after which the stream ends (no `[DONE]`). A client
//! that disconnects cancels its generation. [`api_error`] is the one place runtime errors get a
//! status; errors leave in the shape of the route's API.

mod anthropic;
pub mod engine;
mod errors;
mod framing;
mod guard;
mod handlers;
mod ollama;
mod responses;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

pub use engine::{Engine, ModelFacts};
pub use errors::api_error;
use worker::Workers;

/// Server settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// With a key, every `/v1` and `/api` request needs `Authorization: Bearer <key>` or
    /// `x-api-key: <key>`.
    pub api_key: Option<String>,
    /// Generation jobs that may wait (beyond the running ones) before 429.
    pub queue: usize,
    /// Largest request body (413 beyond).
    pub max_body_bytes: usize,
    /// Wall-clock limit for one generation.
    pub request_timeout: Duration,
    /// Interval of SSE keep-alive comments.
    pub keep_alive: Duration,
    /// Other names requests may use for the model.
    pub model_aliases: Vec<String>,
    /// Host names accepted in the `Host` header besides IP literals and `localhost` (`*`: any).
    pub allowed_hosts: Vec<String>,
    /// Web origins (`http://localhost:3000`) allowed to call the server, with CORS (`*`: any).
    pub cors_origins: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            api_key: None,
            queue: 16,
            max_body_bytes: 4 << 20,
            request_timeout: Duration::from_secs(600),
            keep_alive: Duration::from_secs(10),
            model_aliases: Vec::new(),
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
        }
    }
}

/// Shared state of the handlers.
pub(crate) struct AppState {
    pub config: ServerConfig,
    pub model_id: String,
    pub workers: Workers,
    pub engine: Arc<dyn Engine>,
}

/// The router, with its worker threads started.
pub fn router(engine: Arc<dyn Engine>, config: ServerConfig) -> Router {
    let state = Arc::new(AppState {
        model_id: engine.model_id(),
        workers: Workers::start(engine.clone(), config.queue),
        engine,
        config: config.clone(),
    });
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/models", get(handlers::models))
        .route("/v1/models/{id}", get(handlers::model))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/api/chat", post(ollama::chat))
        .route("/api/generate", post(ollama::generate))
        .route("/api/tags", get(ollama::tags))
        .route("/api/show", post(ollama::show))
        .route("/api/version", get(ollama::version))
        .route("/health", get(handlers::health))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::auth,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .layer(DefaultBodyLimit::max(config.max_body_bytes))
        .with_state(state)
}

/// Serves until `shutdown` resolves, then stops accepting and lets in-flight responses end.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Arc<dyn Engine>,
    config: ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(engine, config);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: no new requests; in-flight responses finish");
}
