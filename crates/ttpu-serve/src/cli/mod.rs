//! The binary's commands, one module each, and the options they share.

pub mod generate;
pub mod serve;

use std::path::PathBuf;

/// Where the model is and how it is loaded.
#[derive(clap::Args)]
pub struct ModelArgs {
    /// The folder `ttpu.export_llm` wrote (serve.json, model.fx, weights, tokenizer).
    pub model: PathBuf,
    /// The PJRT plugin; defaults to $TTPU_PJRT_PLUGIN, then the one `cargo xtask setup` installed.
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    /// Neither read nor write the compile cache on disk ($TTPU_CACHE_DIR, by default
    /// $XDG_CACHE_HOME/ttpu/compiled).
    #[arg(long)]
    pub no_cache: bool,
}
