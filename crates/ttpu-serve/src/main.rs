//! The `ttpu-serve` binary: `generate` (one prompt, text streamed to stdout) and `serve` (the
//! OpenAI-compatible HTTP server) over a model exported with `ttpu.export_llm`. `ttpu generate`
//! and `ttpu serve` run it, as cargo runs `cargo-<name>`: the `ttpu` CLI stays free of the
//! serving dependencies (tokio, axum, tokenizers).

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ttpu-serve", version, about = "Serve language models exported with ttpu.export_llm")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a completion of one prompt, streaming the text to standard output.
    Generate(cli::generate::Args),
    /// Serve the model over HTTP with OpenAI's API (completions, chat completions, models),
    /// plus /health and /metrics.
    Serve(cli::serve::Args),
}

// `std::env::set_var` is `unsafe` since edition 2024 (other threads may read the environment).
#[allow(unsafe_code)]
fn main() -> ExitCode {
    // XLA plugins log at INFO to stderr through their own logger; keep their warnings only,
    // unless the user asks for more (as the `ttpu` CLI does).
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        // SAFETY: first thing in `main`, before any other thread exists or the plugin is loaded.
        unsafe { std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1") };
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TTPU_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(args) => cli::generate::run(args),
        Command::Serve(args) => cli::serve::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
