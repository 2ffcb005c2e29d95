//! The HTTP server: OpenAI's `/v1/completions`, `/v1/chat/completions` (streamed as
//! server-sent events or answered whole) and `/v1/models`, with `/health` and `/metrics`.
//!
//! Each request is parsed, checked and tokenized in its handler; only a request the model can
//! run reaches the engine, so a bad one is a 400 (or a 429 when the queue is full) and never
//! disturbs the others. A client that disconnects drops its handler or its event stream, and
//! with it the engine's [`Stream`], which cancels the request and frees its slot.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::api::{self, ApiError, ApiRequest, Endpoint};
use crate::engine::{Engine, Stream};
use crate::generator::EventKind;
use crate::metrics::Outcome;

/// What the handlers share.
struct AppState {
    engine: Arc<Engine>,
    /// The name `/v1/models` lists and requests must ask for.
    model_name: String,
    created: u64,
    next_id: AtomicU64,
}

/// The router of an engine serving one model under `model_name`.
pub fn router(engine: Arc<Engine>, model_name: String) -> Router {
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs());
    let state = Arc::new(AppState { engine, model_name, created, next_id: AtomicU64::new(0) });
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(|uri: Uri| async move { error_response(&ApiError::not_found(uri.path())) })
        .with_state(state)
}

/// Serves `router` on `address` until Ctrl-C (or SIGTERM), then lets running requests finish.
pub async fn serve(router: Router, listener: tokio::net::TcpListener) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown_signal()).await
}

/// Binds `address`.
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await
}

async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(error.body())).into_response()
}

async fn health(State(state): State<Arc<AppState>>) -> Response {
    match state.engine.stopped() {
        None => (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response(),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"status": "stopped", "reason": reason})))
            .into_response(),
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.engine.metrics().render()).into_response()
}

async fn models(State(state): State<Arc<AppState>>) -> Response {
    let manifest = &state.engine.info().manifest;
    axum::Json(json!({"object": "list", "data": [{
        "id": state.model_name, "object": "model", "created": state.created, "owned_by": "ttpu",
        "max_model_len": manifest.max_seq_len,
    }]}))
    .into_response()
}

async fn completions(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    respond(state, body, Endpoint::Completions).await
}

async fn chat_completions(State(state): State<Arc<AppState>>, body: Bytes) -> Response {
    respond(state, body, Endpoint::Chat).await
}

/// A request checked and handed to the engine.
struct Accepted {
    request: ApiRequest,
    stream: Stream,
    prompt_tokens: Vec<u32>,
    id: String,
}

async fn respond(state: Arc<AppState>, body: Bytes, endpoint: Endpoint) -> Response {
    // Parsing, the chat template and tokenization take time in proportion to the prompt: off the
    // threads that stream other requests' tokens.
    let checking = Arc::clone(&state);
    let accepted =
        tokio::task::spawn_blocking(move || accept(&checking, &body, endpoint)).await.unwrap_or_else(|error| {
            Err(ApiError {
                status: 500,
                message: format!("checking the request failed: {error}"),
                kind: "server_error",
                param: None,
                code: None,
            })
        });
    let accepted = match accepted {
        Ok(accepted) => accepted,
        Err(error) => {
            // A 429 was counted by the engine; a 400 is refused before reaching it.
            if error.status == 400 {
                state.engine.metrics().outcome(Outcome::Invalid);
            }
            return error_response(&error);
        }
    };
    if accepted.request.stream {
        stream_response(state, accepted, endpoint).into_response()
    } else {
        whole_response(state, accepted, endpoint).await
    }
}

fn accept(state: &AppState, body: &[u8], endpoint: Endpoint) -> Result<Accepted, ApiError> {
    let request = api::parse(body, endpoint)?;
    if request.model != state.model_name {
        return Err(ApiError::invalid(
            Some("model"),
            format!("the model `{}` does not exist; this server serves `{}`", request.model, state.model_name),
        ));
    }
    let engine_request = request.to_request(state.engine.info())?;
    let prompt_tokens = engine_request.prompt.clone();
    let stream = state.engine.submit(engine_request)?;
    let prefix = if endpoint == Endpoint::Chat { "chatcmpl" } else { "cmpl" };
    let id = format!("{prefix}-{}", state.next_id.fetch_add(1, Ordering::Relaxed));
    Ok(Accepted { request, stream, prompt_tokens, id })
}

fn usage(prompt: usize, completion: usize) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

async fn whole_response(state: Arc<AppState>, mut accepted: Accepted, endpoint: Endpoint) -> Response {
    let mut text = String::new();
    let mut tokens = Vec::new();
    loop {
        match accepted.stream.next().await {
            Some(Ok(EventKind::Token { token, text: piece })) => {
                tokens.push(token);
                text.push_str(&piece);
            }
            Some(Ok(EventKind::Finished { reason, text: rest, prompt_tokens, completion_tokens })) => {
                text.push_str(&rest);
                let mut choice = match endpoint {
                    Endpoint::Completions => {
                        json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason.as_str()})
                    }
                    Endpoint::Chat => json!({"index": 0, "message": {"role": "assistant", "content": text},
                        "logprobs": null, "finish_reason": reason.as_str()}),
                };
                let object = if endpoint == Endpoint::Chat { "chat.completion" } else { "text_completion" };
                let mut body = json!({"id": accepted.id, "object": object, "created": now(), "model": state.model_name,
                    "choices": [], "usage": usage(prompt_tokens, completion_tokens)});
                if accepted.request.return_token_ids {
                    choice["token_ids"] = json!(tokens);
                    body["prompt_token_ids"] = json!(accepted.prompt_tokens);
                }
                body["choices"] = json!([choice]);
                return axum::Json(body).into_response();
            }
            Some(Err(error)) => return error_response(&ApiError::from(error)),
            None => {
                return error_response(&ApiError::from(crate::Error::Stopped { reason: "the step loop ended".into() }));
            }
        }
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

/// Server-sent events: one chunk per piece of text, a last chunk with the finish reason, the
/// usage when asked for, then `[DONE]`. An engine error mid-stream is sent as an error object.
fn stream_response(
    state: Arc<AppState>,
    accepted: Accepted,
    endpoint: Endpoint,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, std::convert::Infallible>>> {
    let object = if endpoint == Endpoint::Chat { "chat.completion.chunk" } else { "text_completion" };
    let base = json!({"id": accepted.id, "object": object, "created": now(), "model": state.model_name});
    // One chunk: the response's fields, `choices`, and any extra fields.
    let chunk = move |choices: Value, extra: Vec<(&'static str, Value)>| {
        let mut body = base.clone();
        body["choices"] = choices;
        for (key, value) in extra {
            body[key] = value;
        }
        SseEvent::default().data(body.to_string())
    };
    let Accepted { request, stream, prompt_tokens, .. } = accepted;
    // The first chat chunk names the role, as OpenAI's does.
    let mut queue: std::collections::VecDeque<SseEvent> = std::collections::VecDeque::new();
    if endpoint == Endpoint::Chat {
        queue.push_back(chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null}]),
            Vec::new(),
        ));
    }
    let piece_choice = move |text: &str, reason: Option<&str>, token_ids: Option<Vec<u32>>| {
        let mut choice = match endpoint {
            Endpoint::Completions => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": reason}),
            Endpoint::Chat => {
                let delta = if text.is_empty() && reason.is_some() { json!({}) } else { json!({"content": text}) };
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": reason})
            }
        };
        if let Some(token_ids) = token_ids {
            choice["token_ids"] = json!(token_ids);
        }
        choice
    };
    let state_for_stream = (stream, queue, false, request, prompt_tokens);
    let events =
        futures_util::stream::unfold(state_for_stream, move |(mut stream, mut queue, done, request, prompt)| {
            let chunk = chunk.clone();
            async move {
                loop {
                    if let Some(event) = queue.pop_front() {
                        return Some((Ok(event), (stream, queue, done, request, prompt)));
                    }
                    if done {
                        return None;
                    }
                    match stream.next().await {
                        Some(Ok(EventKind::Token { token, text })) => {
                            if !text.is_empty() || request.return_token_ids {
                                let ids = request.return_token_ids.then(|| vec![token]);
                                queue.push_back(chunk(json!([piece_choice(&text, None, ids)]), Vec::new()));
                            }
                        }
                        Some(Ok(EventKind::Finished { reason, text, prompt_tokens, completion_tokens })) => {
                            let extra = if request.return_token_ids {
                                vec![("prompt_token_ids", json!(prompt))]
                            } else {
                                Vec::new()
                            };
                            queue.push_back(chunk(json!([piece_choice(&text, Some(reason.as_str()), None)]), extra));
                            if request.include_usage {
                                queue.push_back(chunk(
                                    json!([]),
                                    vec![("usage", usage(prompt_tokens, completion_tokens))],
                                ));
                            }
                            queue.push_back(SseEvent::default().data("[DONE]"));
                            return queue.pop_front().map(|event| (Ok(event), (stream, queue, true, request, prompt)));
                        }
                        Some(Err(error)) => {
                            queue.push_back(SseEvent::default().data(ApiError::from(error).body().to_string()));
                            return queue.pop_front().map(|event| (Ok(event), (stream, queue, true, request, prompt)));
                        }
                        None => return None,
                    }
                }
            }
        });
    Sse::new(events)
}
