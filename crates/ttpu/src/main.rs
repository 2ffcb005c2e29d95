//! The `ttpu` command line: `lower`, `run` and `parity` over `.fx` models.
//!
//! Outside tools depend on these forms; see the README. Errors are printed as `miette` reports:
//! frontend errors show the offending source line with a label.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use miette::{LabeledSpan, NamedSource, Report};
use ttpu::{CompileOptions, Compiler, HostTensor, Session, TensorMap, read_safetensors, write_safetensors};

#[derive(Parser)]
#[command(
    name = "ttpu",
    version,
    about = "Compile PyTorch programs (torch.export text) to StableHLO and run them on PJRT plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the StableHLO module (default) or the IR of a model.
    Lower {
        /// The `.fx` file: `str(ep)` of an ExportedProgram after `run_decompositions()`.
        model: PathBuf,
        /// What to print.
        #[arg(long, value_enum, default_value_t = Emit::Stablehlo)]
        emit: Emit,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Fix a symbolic dim to a size, like `--sym s77=8` (repeatable); lowering a model with
        /// symbolic dims needs a size for each.
        #[arg(long = "sym", value_name = "SYMBOL=SIZE", value_parser = parse_symbol_size)]
        symbols: Vec<(String, i64)>,
        /// Print, per symbolic dim, whether runs may pad it to a bucket size and why not.
        #[arg(long)]
        explain_dynamic: bool,
        /// Keep symbolic dims: print a shape-polymorphic StableHLO module (`tensor<?x8xf32>`,
        /// sizes computed at run time) instead of needing `--sym` values.
        #[arg(long, conflicts_with_all = ["symbols", "explain_dynamic"])]
        dynamic: bool,
        #[command(flatten)]
        fuse: FuseArgs,
    },
    /// Run a model and write its outputs as safetensors.
    Run {
        /// The `.fx` file.
        model: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        /// Where to write outputs (`output_0`, ... and mutated buffers by target).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Run a model and compare its outputs with expected ones; exits 0 only if all match.
    Parity {
        /// The `.fx` file.
        model: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        /// Expected outputs (safetensors, same keys as `run` writes).
        #[arg(long)]
        expected: PathBuf,
        /// Relative tolerance.
        #[arg(long, default_value_t = 1e-4)]
        rtol: f64,
        /// Absolute tolerance.
        #[arg(long, default_value_t = 1e-5)]
        atol: f64,
    },
}

#[derive(clap::Args)]
struct FuseArgs {
    /// Skip the e-graph optimizer.
    #[arg(long)]
    no_fuse: bool,
    /// Also apply rewrites that are not exact in IEEE arithmetic (reassociation, x/c as x*(1/c)).
    #[arg(long, conflicts_with = "no_fuse")]
    fast_math: bool,
    /// Seed of the model's random ops (rand, randn, dropout in training, ...); fixed at compile time.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl FuseArgs {
    fn options(&self) -> Option<ttpu_fuse::FuseOptions> {
        (!self.no_fuse).then(|| ttpu_fuse::FuseOptions { fast_math: self.fast_math, ..Default::default() })
    }
}

#[derive(clap::Args)]
struct DataArgs {
    /// Parameters, buffers and constants, keyed by signature target.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// User inputs, keyed by placeholder name.
    #[arg(long)]
    inputs: PathBuf,
    /// The PJRT plugin; defaults to $TTPU_PJRT_PLUGIN, then the one `cargo xtask setup` installed.
    #[arg(long)]
    plugin: Option<PathBuf>,
    #[command(flatten)]
    fuse: FuseArgs,
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum Emit {
    /// StableHLO module text.
    Stablehlo,
    /// ttpu IR text as imported, before the optimizer.
    Ir,
    /// ttpu IR text after the e-graph optimizer (its report goes to standard error).
    Fused,
}

fn main() -> ExitCode {
    // XLA plugins log at INFO to stderr through their own logger (the CPU plugin announces each
    // client option it was given). Our logs go through `tracing`; keep the plugin's warnings and
    // errors, and its INFO lines unless the user asks for them.
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        // SAFETY: first thing in `main`, before any other thread exists or the plugin is loaded.
        unsafe { std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1") };
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TTPU_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    // Long messages carry file:line:col and keys that tools grep for: never wrap them.
    miette::set_hook(Box::new(|_| Box::new(miette::MietteHandlerOpts::new().wrap_lines(false).build())))
        .expect("the hook is set once, first thing in main");
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(report) => {
            eprintln!("{report:?}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Report> {
    match cli.command {
        Command::Lower { model, emit, output, symbols, explain_dynamic, dynamic, fuse } => {
            let (source, path) = read_model(&model)?;
            let compiler = Compiler::new();
            let text = if explain_dynamic {
                let program = ttpu_fx::parse(&source, &path).map_err(|error| report(error.into(), &source))?;
                let options = CompileOptions { fuse: fuse.options(), seed: fuse.seed, ..CompileOptions::default() };
                let (module, verdicts) =
                    compiler.import_dynamic(&program, &options).map_err(|error| report(error, &source))?;
                explain(&module.graph, &verdicts)
            } else {
                let program = ttpu_fx::parse(&source, &path).map_err(|error| report(error.into(), &source))?;
                let fuse_options = if emit == Emit::Ir { None } else { fuse.options() };
                let options = CompileOptions {
                    symbol_values: symbols.into_iter().collect(),
                    fuse: fuse_options,
                    seed: fuse.seed,
                };
                let (module, fuse_report) =
                    compiler.import_with_report(&program, &options).map_err(|error| report(error, &source))?;
                match emit {
                    Emit::Ir => ttpu_ir::text::print(&module.graph),
                    Emit::Fused => {
                        if let Some(fuse_report) = fuse_report {
                            eprintln!("{}", fuse_report.to_string().trim_end());
                        }
                        ttpu_ir::text::print(&module.graph)
                    }
                    Emit::Stablehlo if dynamic => {
                        compiler.lower_polymorphic(&module).map_err(|error| report(error, &source))?
                    }
                    Emit::Stablehlo => compiler.lower(&module).map_err(|error| report(error, &source))?,
                }
            };
            match output {
                Some(file) => {
                    std::fs::write(&file, text).map_err(|error| miette::miette!("{}: {error}", file.display()))?
                }
                None => print!("{text}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { model, data, output } => {
            let (_source, outputs) = execute(&model, &data)?;
            for (key, tensor) in &outputs {
                println!("{key}: {}", summary(tensor));
            }
            write_safetensors(&output, &outputs).map_err(|error| report(error, ""))?;
            println!("wrote {} outputs to {}", outputs.len(), output.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Parity { model, data, expected, rtol, atol } => {
            let (source, outputs) = execute(&model, &data)?;
            let expected = read_safetensors(&expected).map_err(|error| report(error, &source))?;
            let reports =
                ttpu::parity::compare(&outputs, &expected, rtol, atol).map_err(|error| report(error, &source))?;
            let mut all_ok = true;
            println!("parity (rtol {rtol:e}, atol {atol:e}):");
            for parity in &reports {
                all_ok &= parity.ok();
                let worst = parity.worst_index.as_ref().map_or(String::new(), |index| format!(" worst at {index:?}"));
                println!(
                    "  {:<16} {:<4} max abs {:.3e}  max rel {:.3e}  mismatched {}/{}{worst}",
                    parity.key,
                    if parity.ok() { "ok" } else { "FAIL" },
                    parity.max_abs,
                    parity.max_rel,
                    parity.mismatched,
                    parity.total
                );
            }
            println!("{}", if all_ok { "all outputs match" } else { "outputs differ" });
            Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
    }
}

/// One line per symbol: its range and whether runs pad it to a power-of-two bucket.
fn explain(graph: &ttpu_ir::Graph, verdicts: &ttpu_ir::PaddingVerdicts) -> String {
    if graph.symbols.is_empty() {
        return "no symbolic dims: every run uses the exported sizes\n".into();
    }
    let mut text = String::new();
    for (symbol, verdict) in verdicts {
        let range = graph.symbols.range(symbol).map_or("?".into(), |range| match range.max {
            Some(max) => format!("[{}, {max}]", range.min),
            None => format!("[{}, inf]", range.min),
        });
        let line = match verdict {
            ttpu_ir::PaddingVerdict::Pad => {
                "padded to the next power of two; outputs are sliced back (no op mixes positions along it)".to_owned()
            }
            ttpu_ir::PaddingVerdict::Exact(reason) => format!("compiled exactly per size: {reason}"),
        };
        text.push_str(&format!("{symbol} in {range}: {line}\n"));
    }
    text
}

fn parse_symbol_size(text: &str) -> Result<(String, i64), String> {
    let (symbol, size) = text.split_once('=').ok_or_else(|| format!("expected SYMBOL=SIZE, found `{text}`"))?;
    let size = size.trim().parse().map_err(|_| format!("expected an integer size, found `{size}`"))?;
    Ok((symbol.trim().to_owned(), size))
}

fn read_model(model: &Path) -> Result<(String, String), Report> {
    let source = std::fs::read_to_string(model).map_err(|error| miette::miette!("{}: {error}", model.display()))?;
    Ok((source, model.display().to_string()))
}

fn execute(model: &Path, data: &DataArgs) -> Result<(String, TensorMap), Report> {
    let (source, path) = read_model(model)?;
    let mut session =
        Session::from_plugin_or_default(data.plugin.as_deref()).map_err(|error| report(error, &source))?;
    session.set_compile_options(CompileOptions {
        fuse: data.fuse.options(),
        seed: data.fuse.seed,
        ..CompileOptions::default()
    });
    let loaded = session.load_model(&source, &path).map_err(|error| report(error, &source))?;
    let weights = match &data.weights {
        Some(file) => read_safetensors(file).map_err(|error| report(error, &source))?,
        None => TensorMap::new(),
    };
    let inputs = read_safetensors(&data.inputs).map_err(|error| report(error, &source))?;
    let outputs = session.run(&loaded, &weights, &inputs).map_err(|error| report(error, &source))?;
    Ok((source, outputs))
}

/// A report that labels the source span of frontend errors.
fn report(error: ttpu::Error, source: &str) -> Report {
    if let ttpu::Error::Frontend(frontend) = &error {
        let at = frontend.location();
        let span = at.span.start.min(source.len())..at.span.end.clamp(at.span.start, source.len());
        let label = LabeledSpan::at(span, "here");
        let named = NamedSource::new(&at.path, source.to_owned());
        return miette::miette!(labels = vec![label], "{error}").with_source_code(named);
    }
    if let ttpu::Error::Lower(ttpu_stablehlo::Error::DynamicDims { .. }) = &error {
        return miette::miette!(
            help =
                "give each symbol a size with `--sym NAME=SIZE`, or print a shape-polymorphic module with `--dynamic`",
            "{error}"
        );
    }
    miette::miette!("{error}")
}

fn summary(tensor: &HostTensor) -> String {
    let shown: Vec<String> = (0..tensor.len().min(6)).map(|index| format!("{}", tensor.get_f64(index))).collect();
    let more = if tensor.len() > 6 { ", ..." } else { "" };
    format!("{} [{}{more}]", tensor.ty(), shown.join(", "))
}
