//! `generate`: one prompt through the step loop, its text streamed to standard output as the
//! tokens arrive; the parameters are checked as the server checks them.

use std::io::Write;

use anyhow::Context;
use ttpu_serve::api::{ApiRequest, Prompt};
use ttpu_serve::text::Message;
use ttpu_serve::{EventKind, Generator, GeneratorOptions};

use super::ModelArgs;

/// `generate`'s options.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt.
    #[arg(long)]
    prompt: String,
    /// Send the prompt as a user message through the model's chat template.
    #[arg(long)]
    chat: bool,
    /// Tokens to generate at most (default: what the context leaves).
    #[arg(long)]
    max_tokens: Option<usize>,
    /// 0 is greedy (default: the model's generation config, else 1).
    #[arg(long)]
    temperature: Option<f32>,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches this.
    #[arg(long)]
    top_p: Option<f32>,
    /// Keep the K most likely tokens (0: all).
    #[arg(long)]
    top_k: Option<u32>,
    /// The sampling seed (default: a fresh one).
    #[arg(long)]
    seed: Option<u64>,
    /// End the completion where this text appears (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Keep generating past the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
    /// Print the token count, the time and the finish reason to standard error at the end.
    #[arg(long)]
    stats: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let options =
        GeneratorOptions { plugin: args.model.plugin.clone(), disk_cache: !args.model.no_cache, ..Default::default() };
    let mut generator = Generator::load(&args.model.model, &options)
        .with_context(|| format!("loading {}", args.model.model.display()))?;
    let prompt = if args.chat {
        Prompt::Chat(vec![Message { role: "user".into(), content: args.prompt.clone() }])
    } else {
        Prompt::Text(args.prompt.clone())
    };
    let request = ApiRequest {
        model: String::new(),
        prompt,
        max_tokens: args.max_tokens,
        temperature: args.temperature,
        top_p: args.top_p,
        top_k: args.top_k,
        seed: args.seed,
        stop: args.stop.clone(),
        stream: true,
        include_usage: false,
        return_token_ids: false,
        ignore_eos: args.ignore_eos,
    }
    .to_request(generator.info())
    .map_err(|error| match &error {
        ttpu_serve::Error::Invalid { param, message } => anyhow::anyhow!("--{}: {message}", flag(param)),
        ttpu_serve::Error::ContextLength { param, .. } => anyhow::anyhow!("--{}: {error}", flag(param)),
        _ => error.into(),
    })?;
    let started = std::time::Instant::now();
    generator.submit(request)?;
    let mut stdout = std::io::stdout().lock();
    let mut first_token = None;
    while generator.has_work() {
        for event in generator.step()? {
            match event.kind {
                EventKind::Token { text, .. } => {
                    first_token.get_or_insert_with(|| started.elapsed());
                    stdout.write_all(text.as_bytes())?;
                    stdout.flush()?;
                }
                EventKind::Finished { reason, text, prompt_tokens, completion_tokens } => {
                    writeln!(stdout, "{text}")?;
                    stdout.flush()?;
                    if args.stats {
                        let elapsed = started.elapsed().as_secs_f64();
                        let first = first_token.unwrap_or_default().as_secs_f64();
                        eprintln!(
                            "{prompt_tokens} prompt tokens, {completion_tokens} generated in {elapsed:.3} s \
                             (first after {first:.3} s, {:.1} tokens/s after it), finish reason: {}; {} programs compiled",
                            completion_tokens.saturating_sub(1) as f64 / (elapsed - first).max(1e-9),
                            reason.as_str(),
                            generator.compiled()
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// The flag a request field comes from.
fn flag(param: &str) -> String {
    match param {
        "messages" => "prompt".into(),
        other => other.replace('_', "-"),
    }
}
