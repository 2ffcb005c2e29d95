//! The OpenAI wire format: request bodies parsed and checked field by field, and the error
//! object every refusal carries.
//!
//! Parsing goes through `serde_json::Value` rather than derived structs so that each mistake is
//! reported with the field it is in (`param`), as OpenAI's API does; fields this server does not
//! implement are refused by name when they ask for something (`n > 1`, `logprobs`, penalties),
//! never silently ignored. Extensions follow vLLM's names: `top_k`, `ignore_eos`,
//! `return_token_ids`.

use serde_json::{Map, Value, json};

use crate::Error;
use crate::generator::{ModelInfo, Request};
use crate::sampling::Sampling;
use crate::text::Message;

/// Which endpoint a body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

/// The prompt of a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    /// Text, tokenized with the tokenizer's special tokens.
    Text(String),
    /// Token ids as given.
    Tokens(Vec<u32>),
    /// A conversation, rendered with the chat template.
    Chat(Vec<Message>),
}

/// A parsed request body.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiRequest {
    /// The model asked for.
    pub model: String,
    /// The prompt.
    pub prompt: Prompt,
    /// `max_tokens` (or `max_completion_tokens`); `None`: what the context leaves.
    pub max_tokens: Option<usize>,
    /// `temperature`; `None`: the model's default, else 1.
    pub temperature: Option<f32>,
    /// `top_p`; `None`: the model's default, else 1.
    pub top_p: Option<f32>,
    /// `top_k`; `None`: the model's default, else every token.
    pub top_k: Option<u32>,
    /// `seed`; `None`: a fresh one.
    pub seed: Option<u64>,
    /// `stop`.
    pub stop: Vec<String>,
    /// `stream`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// `return_token_ids`: each choice carries `token_ids`, the response `prompt_token_ids`.
    pub return_token_ids: bool,
    /// `ignore_eos`.
    pub ignore_eos: bool,
}

/// An error as the API answers it: an HTTP status and OpenAI's error object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// The message.
    pub message: String,
    /// OpenAI's `type`.
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<&'static str>,
    /// OpenAI's `code`.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: Option<&'static str>, message: impl Into<String>) -> ApiError {
        ApiError { status: 400, message: message.into(), kind: "invalid_request_error", param, code: None }
    }

    /// A 404 for a path this server does not have.
    pub fn not_found(path: &str) -> ApiError {
        ApiError {
            status: 404,
            message: format!(
                "no endpoint `{path}`; this server has /v1/completions, /v1/chat/completions, /v1/models, /health and /metrics"
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("not_found"),
        }
    }

    /// The body: `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        match &error {
            Error::Invalid { .. } | Error::ContextLength { .. } => ApiError::invalid(error.param(), error.to_string()),
            Error::QueueFull { .. } => ApiError {
                status: 429,
                message: error.to_string(),
                kind: "rate_limit_exceeded",
                param: None,
                code: Some("queue_full"),
            },
            Error::Stopped { .. } => {
                ApiError { status: 503, message: error.to_string(), kind: "server_error", param: None, code: None }
            }
            _ => ApiError { status: 500, message: error.to_string(), kind: "server_error", param: None, code: None },
        }
    }
}

type Parsed<T> = Result<T, ApiError>;

/// Parses and checks a request body for `endpoint`.
pub fn parse(body: &[u8], endpoint: Endpoint) -> Parsed<ApiRequest> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| ApiError::invalid(None, format!("the body is not valid JSON: {error}")))?;
    let Value::Object(fields) = value else {
        return Err(ApiError::invalid(None, "the body must be a JSON object"));
    };
    let model = match fields.get("model") {
        Some(Value::String(model)) => model.clone(),
        None | Some(Value::Null) => return Err(ApiError::invalid(Some("model"), "you must provide a model")),
        Some(_) => return Err(ApiError::invalid(Some("model"), "must be a string")),
    };
    let prompt = match endpoint {
        Endpoint::Completions => completion_prompt(fields.get("prompt"))?,
        Endpoint::Chat => Prompt::Chat(messages(fields.get("messages"))?),
    };
    refuse_unsupported(&fields, endpoint)?;
    let max_tokens = match endpoint {
        Endpoint::Chat if present(&fields, "max_completion_tokens") => {
            integer(&fields, "max_completion_tokens", 1, u32::MAX as u64)?
        }
        _ => integer(&fields, "max_tokens", 1, u32::MAX as u64)?,
    };
    let temperature = number(&fields, "temperature")?;
    let top_p = number(&fields, "top_p")?;
    // vLLM's convention: -1 (or 0) keeps every token.
    let top_k = match fields.get("top_k") {
        Some(Value::Number(number)) if number.as_i64() == Some(-1) => Some(0),
        _ => integer(&fields, "top_k", 0, u32::MAX as u64)?.map(|k| k as u32),
    };
    let seed = match fields.get("seed") {
        None | Some(Value::Null) => None,
        Some(Value::Number(number)) => Some(
            number
                .as_u64()
                .or_else(|| number.as_i64().map(|seed| seed as u64))
                .ok_or_else(|| ApiError::invalid(Some("seed"), "must be an integer"))?,
        ),
        Some(_) => return Err(ApiError::invalid(Some("seed"), "must be an integer")),
    };
    let stop = match fields.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(stop)) => vec![stop.clone()],
        Some(Value::Array(stops)) => stops
            .iter()
            .map(|stop| stop.as_str().map(str::to_owned))
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| ApiError::invalid(Some("stop"), "must be a string or an array of strings"))?,
        Some(_) => return Err(ApiError::invalid(Some("stop"), "must be a string or an array of strings")),
    };
    if stop.len() > 16 {
        return Err(ApiError::invalid(Some("stop"), format!("at most 16 stop sequences, got {}", stop.len())));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::invalid(Some("stop"), "stop sequences must not be empty"));
    }
    let include_usage = match fields.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) => boolean(options, "include_usage", "stream_options")?,
        Some(_) => return Err(ApiError::invalid(Some("stream_options"), "must be an object")),
    };
    Ok(ApiRequest {
        model,
        prompt,
        max_tokens: max_tokens.map(|max| max as usize),
        temperature: temperature.map(|value| value as f32),
        top_p: top_p.map(|value| value as f32),
        top_k,
        seed,
        stop,
        stream: boolean(&fields, "stream", "stream")?,
        include_usage,
        return_token_ids: boolean(&fields, "return_token_ids", "return_token_ids")?,
        ignore_eos: boolean(&fields, "ignore_eos", "ignore_eos")?,
    })
}

impl ApiRequest {
    /// The engine's request: the prompt tokenized (chat through the template), defaults from
    /// the model where the request gives none, checked against the model.
    pub fn to_request(&self, info: &ModelInfo) -> Result<Request, Error> {
        let (prompt, prompt_field) = match &self.prompt {
            Prompt::Text(text) => (info.codec.encode(text, true)?, "prompt"),
            Prompt::Tokens(tokens) => (tokens.clone(), "prompt"),
            // The template writes the special tokens itself, as transformers' apply_chat_template.
            Prompt::Chat(messages) => (info.codec.encode(&info.codec.render_chat(messages)?, false)?, "messages"),
        };
        let defaults = &info.manifest.sampling_defaults;
        let sampling = Sampling {
            temperature: self.temperature.or(defaults.temperature).unwrap_or(1.0),
            top_k: self.top_k.or(defaults.top_k).unwrap_or(0),
            top_p: self.top_p.or(defaults.top_p).unwrap_or(1.0),
            seed: self.seed.unwrap_or_else(fresh_seed),
        };
        let max_tokens = match self.max_tokens {
            Some(max) => max,
            None if info.room(prompt.len()) == 0 => 1, // reported as a prompt too long by the check
            None => info.room(prompt.len()),
        };
        let request = Request {
            prompt,
            prompt_field,
            max_tokens,
            sampling,
            stop: self.stop.clone(),
            ignore_eos: self.ignore_eos,
        };
        info.check(&request)?;
        Ok(request)
    }
}

/// A seed no other request is likely to share.
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.finish()
}

fn present(fields: &Map<String, Value>, name: &str) -> bool {
    !matches!(fields.get(name), None | Some(Value::Null))
}

fn completion_prompt(value: Option<&Value>) -> Parsed<Prompt> {
    let wrong =
        || ApiError::invalid(Some("prompt"), "must be a string, an array of token ids, or an array of one string");
    match value {
        None | Some(Value::Null) => Err(ApiError::invalid(Some("prompt"), "you must provide a prompt")),
        Some(Value::String(text)) => Ok(Prompt::Text(text.clone())),
        Some(Value::Array(items)) if items.is_empty() => Err(ApiError::invalid(Some("prompt"), "the prompt is empty")),
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => match items.as_slice() {
            [Value::String(text)] => Ok(Prompt::Text(text.clone())),
            _ => Err(ApiError::invalid(
                Some("prompt"),
                format!("{} prompts in one request; this server takes one prompt per request", items.len()),
            )),
        },
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_u64().and_then(|token| u32::try_from(token).ok()))
            .collect::<Option<Vec<u32>>>()
            .map(Prompt::Tokens)
            .ok_or_else(wrong),
        Some(_) => Err(wrong()),
    }
}

fn messages(value: Option<&Value>) -> Parsed<Vec<Message>> {
    let Some(Value::Array(items)) = value else {
        return Err(ApiError::invalid(Some("messages"), "you must provide messages: a non-empty array"));
    };
    if items.is_empty() {
        return Err(ApiError::invalid(Some("messages"), "you must provide messages: a non-empty array"));
    }
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let wrong = |what: &str| ApiError::invalid(Some("messages"), format!("message {index}: {what}"));
            let Value::Object(message) = item else { return Err(wrong("must be an object")) };
            let role = match message.get("role") {
                Some(Value::String(role)) => role.clone(),
                _ => return Err(wrong("`role` must be a string")),
            };
            let content = match message.get("content") {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Null) | None => String::new(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .map(|part| {
                        match (part.get("type").and_then(Value::as_str), part.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(text)) => Ok(text),
                            _ => Err(wrong(
                                "only text content parts (`{\"type\": \"text\", \"text\": ...}`) are supported",
                            )),
                        }
                    })
                    .collect::<Parsed<Vec<&str>>>()?
                    .concat(),
                Some(_) => return Err(wrong("`content` must be a string or an array of text parts")),
            };
            Ok(Message { role, content })
        })
        .collect()
}

/// Fields that ask for something this server does not do: refused by name.
fn refuse_unsupported(fields: &Map<String, Value>, endpoint: Endpoint) -> Parsed<()> {
    for name in ["n", "best_of"] {
        if let Some(value) = fields.get(name).filter(|value| !value.is_null())
            && value.as_u64() != Some(1)
        {
            return Err(ApiError::invalid(param(name), format!("only 1 is supported, got {value}")));
        }
    }
    for name in ["presence_penalty", "frequency_penalty", "repetition_penalty"] {
        let neutral = if name == "repetition_penalty" { 1.0 } else { 0.0 };
        if let Some(value) = fields.get(name).filter(|value| !value.is_null())
            && value.as_f64() != Some(neutral)
        {
            return Err(ApiError::invalid(param(name), format!("penalties are not supported, got {value}")));
        }
    }
    let mut asks = vec!["logprobs", "top_logprobs", "logit_bias", "tools", "functions", "suffix", "response_format"];
    if endpoint == Endpoint::Completions {
        asks.push("echo");
    }
    for name in asks {
        match fields.get(name) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => {}
            Some(Value::Object(map)) if map.is_empty() => {}
            Some(Value::Array(list)) if list.is_empty() => {}
            Some(Value::Object(map)) if name == "response_format" && map.get("type") == Some(&json!("text")) => {}
            Some(_) => return Err(ApiError::invalid(param(name), format!("`{name}` is not supported by this server"))),
        }
    }
    Ok(())
}

/// The static name of a field (errors carry `&'static str`).
fn param(name: &str) -> Option<&'static str> {
    const NAMES: [&str; 23] = [
        "stream_options",
        "n",
        "best_of",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logprobs",
        "top_logprobs",
        "logit_bias",
        "tools",
        "functions",
        "suffix",
        "response_format",
        "echo",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "top_k",
        "stream",
        "include_usage",
        "return_token_ids",
        "ignore_eos",
    ];
    NAMES.iter().copied().find(|&known| known == name)
}

fn integer(fields: &Map<String, Value>, name: &str, min: u64, max: u64) -> Parsed<Option<u64>> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => match number.as_u64() {
            Some(value) if (min..=max).contains(&value) => Ok(Some(value)),
            _ => Err(ApiError::invalid(param(name), format!("must be an integer in [{min}, {max}], got {number}"))),
        },
        Some(other) => Err(ApiError::invalid(param(name), format!("must be an integer, got {other}"))),
    }
}

fn number(fields: &Map<String, Value>, name: &str) -> Parsed<Option<f64>> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => Ok(number.as_f64()),
        Some(other) => Err(ApiError::invalid(param(name), format!("must be a number, got {other}"))),
    }
}

fn boolean(fields: &Map<String, Value>, name: &str, report_as: &str) -> Parsed<bool> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(value)) => Ok(*value),
        Some(other) => Err(ApiError::invalid(param(report_as), format!("`{name}` must be a boolean, got {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(body: &str, endpoint: Endpoint) -> (Option<&'static str>, String) {
        let error = parse(body.as_bytes(), endpoint).expect_err("refused");
        assert_eq!(error.status, 400);
        (error.param, error.message)
    }

    #[test]
    fn a_completion_request_is_parsed() {
        let body = r#"{"model": "m", "prompt": "hi", "max_tokens": 5, "temperature": 0.5, "top_k": 40,
            "top_p": 0.9, "seed": -3, "stop": ["\n"], "stream": true, "stream_options": {"include_usage": true},
            "n": 1, "user": "anyone", "logprobs": null}"#;
        let request = parse(body.as_bytes(), Endpoint::Completions).expect("valid");
        assert_eq!(request.prompt, Prompt::Text("hi".into()));
        assert_eq!(
            (request.max_tokens, request.temperature, request.top_k, request.top_p),
            (Some(5), Some(0.5), Some(40), Some(0.9))
        );
        assert_eq!(request.seed, Some((-3i64) as u64));
        assert_eq!(request.stop, vec!["\n".to_owned()]);
        assert!(request.stream && request.include_usage && !request.return_token_ids);
        let tokens =
            parse(br#"{"model": "m", "prompt": [1, 2, 3], "top_k": -1}"#, Endpoint::Completions).expect("valid");
        assert_eq!((tokens.prompt, tokens.top_k), (Prompt::Tokens(vec![1, 2, 3]), Some(0)));
    }

    #[test]
    fn a_chat_request_is_parsed() {
        let body = r#"{"model": "m", "messages": [{"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
            "max_completion_tokens": 7, "max_tokens": 100}"#;
        let request = parse(body.as_bytes(), Endpoint::Chat).expect("valid");
        let message = |role: &str, content: &str| Message { role: role.into(), content: content.into() };
        assert_eq!(request.prompt, Prompt::Chat(vec![message("system", "be brief"), message("user", "hi there")]));
        assert_eq!(request.max_tokens, Some(7));
    }

    #[test]
    fn every_malformed_field_is_named() {
        use Endpoint::{Chat, Completions};
        let cases: &[(&str, Endpoint, Option<&str>, &str)] = &[
            ("{", Completions, None, "the body is not valid JSON: EOF while parsing an object at line 1 column 1"),
            ("[1]", Completions, None, "the body must be a JSON object"),
            (r#"{"prompt": "x"}"#, Completions, Some("model"), "you must provide a model"),
            (r#"{"model": 3, "prompt": "x"}"#, Completions, Some("model"), "must be a string"),
            (r#"{"model": "m"}"#, Completions, Some("prompt"), "you must provide a prompt"),
            (
                r#"{"model": "m", "prompt": {}}"#,
                Completions,
                Some("prompt"),
                "must be a string, an array of token ids, or an array of one string",
            ),
            (
                r#"{"model": "m", "prompt": [1, -2]}"#,
                Completions,
                Some("prompt"),
                "must be a string, an array of token ids, or an array of one string",
            ),
            (
                r#"{"model": "m", "prompt": ["a", "b"]}"#,
                Completions,
                Some("prompt"),
                "2 prompts in one request; this server takes one prompt per request",
            ),
            (r#"{"model": "m", "prompt": []}"#, Completions, Some("prompt"), "the prompt is empty"),
            (
                r#"{"model": "m", "prompt": "x", "max_tokens": 0}"#,
                Completions,
                Some("max_tokens"),
                "must be an integer in [1, 4294967295], got 0",
            ),
            (
                r#"{"model": "m", "prompt": "x", "max_tokens": 2.5}"#,
                Completions,
                Some("max_tokens"),
                "must be an integer in [1, 4294967295], got 2.5",
            ),
            (
                r#"{"model": "m", "prompt": "x", "max_tokens": "9"}"#,
                Completions,
                Some("max_tokens"),
                "must be an integer, got \"9\"",
            ),
            (
                r#"{"model": "m", "prompt": "x", "temperature": "hot"}"#,
                Completions,
                Some("temperature"),
                "must be a number, got \"hot\"",
            ),
            (
                r#"{"model": "m", "prompt": "x", "top_k": -5}"#,
                Completions,
                Some("top_k"),
                "must be an integer in [0, 4294967295], got -5",
            ),
            (r#"{"model": "m", "prompt": "x", "seed": 1.5}"#, Completions, Some("seed"), "must be an integer"),
            (
                r#"{"model": "m", "prompt": "x", "stop": [1]}"#,
                Completions,
                Some("stop"),
                "must be a string or an array of strings",
            ),
            (
                r#"{"model": "m", "prompt": "x", "stop": ""}"#,
                Completions,
                Some("stop"),
                "stop sequences must not be empty",
            ),
            (
                r#"{"model": "m", "prompt": "x", "stream": "yes"}"#,
                Completions,
                Some("stream"),
                "`stream` must be a boolean, got \"yes\"",
            ),
            (
                r#"{"model": "m", "prompt": "x", "stream_options": {"include_usage": 1}}"#,
                Completions,
                Some("stream_options"),
                "`include_usage` must be a boolean, got 1",
            ),
            (r#"{"model": "m", "prompt": "x", "n": 2}"#, Completions, Some("n"), "only 1 is supported, got 2"),
            (
                r#"{"model": "m", "prompt": "x", "logprobs": 3}"#,
                Completions,
                Some("logprobs"),
                "`logprobs` is not supported by this server",
            ),
            (
                r#"{"model": "m", "prompt": "x", "echo": true}"#,
                Completions,
                Some("echo"),
                "`echo` is not supported by this server",
            ),
            (
                r#"{"model": "m", "prompt": "x", "presence_penalty": 0.5}"#,
                Completions,
                Some("presence_penalty"),
                "penalties are not supported, got 0.5",
            ),
            (r#"{"model": "m"}"#, Chat, Some("messages"), "you must provide messages: a non-empty array"),
            (
                r#"{"model": "m", "messages": []}"#,
                Chat,
                Some("messages"),
                "you must provide messages: a non-empty array",
            ),
            (
                r#"{"model": "m", "messages": [{"content": "x"}]}"#,
                Chat,
                Some("messages"),
                "message 0: `role` must be a string",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}"#,
                Chat,
                Some("messages"),
                "message 0: only text content parts (`{\"type\": \"text\", \"text\": ...}`) are supported",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1}"#,
                Chat,
                Some("max_completion_tokens"),
                "must be an integer in [1, 4294967295], got -1",
            ),
            (
                r#"{"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}"#,
                Chat,
                Some("tools"),
                "`tools` is not supported by this server",
            ),
        ];
        for &(body, endpoint, param, message) in cases {
            assert_eq!(error(body, endpoint), (param, message.to_owned()), "{body}");
        }
    }

    #[test]
    fn engine_errors_become_api_errors() {
        let full = ApiError::from(Error::QueueFull { running: 4, queued: 8 });
        assert_eq!(full.status, 429);
        assert_eq!(
            full.body(),
            json!({"error": {"message": "the server is at capacity: 4 requests running and 8 queued (the limit); retry later",
                "type": "rate_limit_exceeded", "param": null, "code": "queue_full"}})
        );
        let long =
            ApiError::from(Error::ContextLength { param: "prompt", max_seq_len: 64, prompt_tokens: 70, max_tokens: 1 });
        assert_eq!((long.status, long.param), (400, Some("prompt")));
        let invalid = ApiError::from(Error::invalid("top_p", "must be a number in (0, 1], got 2"));
        assert_eq!(invalid.body()["error"]["message"], "`top_p`: must be a number in (0, 1], got 2");
    }
}
