//! `serve`: the OpenAI-compatible HTTP server over one exported model.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use ttpu_serve::{Engine, EngineOptions, Generator, GeneratorOptions};

use super::ModelArgs;

/// `serve`'s options.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: std::net::IpAddr,
    /// The port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Requests that run at once (default: the export's max_batch, which is also the most).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_batch: Option<u32>,
    /// Requests that may wait for a slot; more are refused with 429.
    #[arg(long, default_value_t = 256)]
    max_queue: usize,
    /// The model's name in the API (default: the export's).
    #[arg(long)]
    model_name: Option<String>,
    /// Padded tokens one prefill call may hold (default: the context length).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    prefill_token_budget: Option<u32>,
    /// Compile every greedy program before listening, so no request waits for a compile.
    #[arg(long)]
    warm_up: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let options = GeneratorOptions {
        plugin: args.model.plugin.clone(),
        disk_cache: !args.model.no_cache,
        max_batch: args.max_batch.map(|batch| batch as usize),
        prefill_token_budget: args.prefill_token_budget.map(|budget| budget as usize),
    };
    let mut generator = Generator::load(&args.model.model, &options)
        .with_context(|| format!("loading {}", args.model.model.display()))?;
    let info = Arc::clone(generator.info());
    if let Some(batch) = args.max_batch
        && batch as usize > info.manifest.max_batch
    {
        anyhow::bail!("--max-batch {batch} exceeds the export's max_batch {}", info.manifest.max_batch);
    }
    if args.warm_up {
        let started = std::time::Instant::now();
        let calls = generator.warm_up()?;
        eprintln!("warmed up {calls} programs in {:.1} s", started.elapsed().as_secs_f64());
    }
    let model_name = args.model_name.clone().unwrap_or_else(|| info.manifest.model.clone());
    eprintln!(
        "{model_name}: {} slots, context {}, at most {} programs for greedy decoding",
        info.max_batch,
        info.manifest.max_seq_len,
        generator.program_count()
    );
    let engine = Arc::new(Engine::start(generator, EngineOptions { max_queue: args.max_queue }));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let router = ttpu_serve::http::router(Arc::clone(&engine), model_name);
    runtime.block_on(async {
        let listener = ttpu_serve::http::bind(SocketAddr::new(args.host, args.port))
            .await
            .with_context(|| format!("listening on {}:{}", args.host, args.port))?;
        eprintln!("listening on http://{}", listener.local_addr()?);
        ttpu_serve::http::serve(router, listener).await?;
        anyhow::Ok(())
    })?;
    engine.shutdown();
    Ok(())
}
