//! `ttpu generate` and `ttpu serve`: run the `ttpu-serve` binary with the same arguments, as
//! cargo runs `cargo-<name>`. Serving brings tokio, axum and tokenizers, and `ttpu-serve`
//! depends on this crate's library; keeping the commands in their own binary keeps those
//! dependencies out of the compiler, the CLI and the Python package.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use miette::Report;

/// Every argument after the command, passed on unchanged (`--help` included).
#[derive(clap::Args)]
pub struct Forwarded {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "ARGS")]
    args: Vec<OsString>,
}

/// The `ttpu-serve` binary: beside this executable, else on `PATH`.
fn serve_binary() -> PathBuf {
    let name = format!("ttpu-serve{}", std::env::consts::EXE_SUFFIX);
    std::env::current_exe()
        .ok()
        .map(|exe| exe.with_file_name(&name))
        .filter(|beside| beside.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Runs `ttpu-serve COMMAND ARGS...` and exits as it does.
pub fn forward(command: &str, forwarded: Forwarded) -> Result<ExitCode, Report> {
    let binary = serve_binary();
    let mut child = Command::new(&binary);
    child.arg(command).args(&forwarded.args);
    let missing = |error: std::io::Error| {
        miette::miette!(
            help = "build it with `cargo build -p ttpu-serve` (or install it with `cargo install --path crates/ttpu-serve`)",
            "`ttpu {command}` runs the `ttpu-serve` binary, which is neither beside this executable nor on PATH ({error})"
        )
    };
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // `exec` only returns on failure; on success the process becomes `ttpu-serve`.
        Err(missing(child.exec()))
    }
    #[cfg(not(unix))]
    {
        let status = child.status().map_err(missing)?;
        Ok(status.code().and_then(|code| u8::try_from(code).ok()).map_or(ExitCode::FAILURE, ExitCode::from))
    }
}
