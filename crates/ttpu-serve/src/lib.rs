//! Serving language models exported with `ttpu.export_llm`: continuous batching over a KV cache
//! resident on the device, sampling on the device, and an OpenAI-compatible HTTP server.
//!
//! ```no_run
//! use ttpu_serve::{Generator, GeneratorOptions, Request, Sampling, EventKind};
//! # fn main() -> ttpu_serve::Result<()> {
//! let mut generator = Generator::load("tiny-llama/".as_ref(), &GeneratorOptions::default())?;
//! let prompt = generator.info().codec.encode("Once upon a time", true)?;
//! let id = generator.submit(Request {
//!     prompt,
//!     prompt_field: "prompt",
//!     max_tokens: 32,
//!     sampling: Sampling::GREEDY,
//!     stop: vec!["\n".into()],
//!     ignore_eos: false,
//! })?;
//! while generator.has_work() {
//!     for event in generator.step()? {
//!         if let EventKind::Token { text, .. } = event.kind {
//!             print!("{text}");
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! [`Generator`] is the synchronous step loop (submit, step, cancel); [`Engine`] runs one on a
//! thread of its own for many concurrent callers (each gets a [`Stream`] of events, and
//! dropping it cancels the request); [`http::router`] serves an engine over HTTP in OpenAI's
//! wire format. The exported program, its KV cache layout and its buckets are described in
//! `serve.json` ([`Manifest`]).
//!
//! This crate is at the edge of the project: it depends on the `ttpu` driver (sessions, resident
//! weights, donation) and brings the serving-only dependencies (tokio, axum, tokenizers,
//! minijinja), which no compiler crate ever depends on.

#![warn(missing_docs)]

pub mod api;
mod engine;
mod error;
mod generator;
pub mod http;
mod manifest;
mod metrics;
pub mod sampling;
pub mod scheduler;
pub mod text;

pub use engine::{Engine, EngineOptions, Stream};
pub use error::{Error, Result};
pub use generator::{Event, EventKind, FinishReason, Generator, GeneratorOptions, ModelInfo, Request, RequestId};
pub use manifest::{Manifest, SamplingDefaults};
pub use metrics::{Metrics, Outcome};
pub use sampling::Sampling;
