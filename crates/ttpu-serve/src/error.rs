//! The serving library's errors: what went wrong loading an exported model, checking a request
//! or running a step. A request's own mistakes ([`Error::Invalid`], [`Error::ContextLength`],
//! [`Error::QueueFull`]) name the request field at fault, so the HTTP layer turns them into
//! OpenAI-style error objects without parsing messages.

use std::path::PathBuf;

/// Errors of the serving library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file of the exported model could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `serve.json` is missing a field, has one of the wrong type, or disagrees with itself.
    #[error("{path}: {message}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `tokenizer.json` could not be loaded, or a text could not be encoded or decoded.
    #[error("tokenizer: {message}")]
    Tokenizer {
        /// The tokenizer library's message.
        message: String,
    },
    /// The chat template failed to parse or to render.
    #[error("chat template: {message}")]
    Template {
        /// The template engine's message.
        message: String,
    },
    /// A request parameter is invalid; `param` names the field.
    #[error("`{param}`: {message}")]
    Invalid {
        /// The request field at fault.
        param: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The prompt and the tokens asked for do not fit the context.
    #[error(
        "this model's maximum context length is {max_seq_len} tokens, but {prompt_tokens} prompt tokens \
         and {max_tokens} completion tokens were requested"
    )]
    ContextLength {
        /// The request field to change (`prompt`, `messages` or `max_tokens`).
        param: &'static str,
        /// The model's context.
        max_seq_len: usize,
        /// Tokens in the prompt.
        prompt_tokens: usize,
        /// Tokens asked for.
        max_tokens: usize,
    },
    /// Every slot is busy and the queue is full.
    #[error("the server is at capacity: {running} requests running and {queued} queued (the limit); retry later")]
    QueueFull {
        /// Requests holding slots.
        running: usize,
        /// Requests waiting for one.
        queued: usize,
    },
    /// The engine's worker has stopped (after a device error, or at shutdown).
    #[error("the engine has stopped: {reason}")]
    Stopped {
        /// Why.
        reason: String,
    },
    /// The compiler or the device failed.
    #[error(transparent)]
    Model(#[from] ttpu::Error),
    /// The step program returned something the manifest does not allow (a token id outside the
    /// vocabulary, a wrong shape): refused rather than streamed.
    #[error("the step program returned {message}; the export and the engine disagree")]
    BadOutput {
        /// What was returned.
        message: String,
    },
}

/// Results of the serving library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The request field an error is about, for errors caused by a request.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            Error::Invalid { param, .. } | Error::ContextLength { param, .. } => Some(param),
            _ => None,
        }
    }

    pub(crate) fn invalid(param: &'static str, message: impl Into<String>) -> Error {
        Error::Invalid { param, message: message.into() }
    }
}
