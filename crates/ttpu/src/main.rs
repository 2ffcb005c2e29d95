//! The `ttpu` command line: `lower`, `run`, `parity`, `bench` and `train` over `.fx` models, and
//! `launch` for jobs of several processes (`cli/launch.rs`).
//! `generate` and `serve` over language models (run by the `ttpu-serve` binary, see `cli::llm`).
//!
//! Outside tools depend on these forms; see the README. Errors are printed as `miette` reports:
//! frontend errors show the offending source line with a label.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

mod cli;

use clap::{Parser, Subcommand, ValueEnum};
use miette::{LabeledSpan, NamedSource, Report};
use ttpu::{
    CacheSource, CompileOptions, Compiler, HostTensor, LoadedModel, Mesh, Parallelism, Plan, PlanFile, Session,
    TensorMap, read_safetensors, write_safetensors,
};

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
        #[command(flatten)]
        parallel: ParallelArgs,
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
    /// Time a model: import, compile (or cache hit), first run and warm runs with resident
    /// weights, with transfers in and out measured apart.
    Bench {
        /// The `.fx` file.
        model: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        /// Warm runs measured.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        runs: u32,
        /// Warm runs before measuring.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=100_000))]
        warmup: u32,
        /// Also time the one-shot path that uploads the weights with every run.
        #[arg(long)]
        one_shot: bool,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Train a joint forward-backward graph (`_export_forward_backward`) with SGD or AdamW.
    Train(Box<TrainArgs>),
    /// Generate text with a language model exported by `ttpu.export_llm` (`ttpu generate --help`).
    #[command(disable_help_flag = true)]
    Generate(cli::llm::Forwarded),
    /// Serve a language model exported by `ttpu.export_llm` over HTTP with OpenAI's API
    /// (`ttpu serve --help`).
    #[command(disable_help_flag = true)]
    Serve(cli::llm::Forwarded),
    /// Run a model and compare its outputs with expected ones; exits 0 only if all match. With
    /// `--bisect`, find the first node whose value departs from an f64 evaluation of the graph.
    Parity {
        /// The `.fx` file.
        model: PathBuf,
        #[command(flatten)]
        data: DataArgs,
        /// Expected outputs (safetensors, same keys as `run` writes).
        #[arg(long, required_unless_present = "bisect")]
        expected: Option<PathBuf>,
        /// Compare every node's value, in program order, between the optimized program and an
        /// unfused f64 evaluation of the same graph on the plugin, and print the first that departs.
        #[arg(long)]
        bisect: bool,
        /// With `--bisect`: PyTorch's values of the nodes, by node name (safetensors, as
        /// `ttpu.capture_intermediates` writes them), compared too.
        #[arg(long, requires = "bisect")]
        intermediates: Option<PathBuf>,
        /// Relative tolerance (default 1e-4; 1e-3 with `--bisect`, whose values deep in a model
        /// carry every earlier node's rounding).
        #[arg(long)]
        rtol: Option<f64>,
        /// Absolute tolerance (default 1e-5; 1e-4 with `--bisect`).
        #[arg(long)]
        atol: Option<f64>,
    },
    /// Start N local processes of one job (a `file://` store in a fresh directory), each running
    /// COMMAND: `ttpu launch -n 2 -- ttpu train ... --mesh dp=2,tp=4 --parallel ddp`.
    Launch(cli::launch::LaunchArgs),
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
    /// Run weight-only work (kernel layout changes, converts, arithmetic on weights) on every call
    /// instead of once when the weights are loaded.
    #[arg(long)]
    no_weight_prep: bool,
    /// Set an XLA option (a field of XLA's `DebugOptions`) for every compile, like
    /// `--xla-option xla_cpu_use_thunk_runtime=false` (repeatable; the last value of a name wins).
    /// VALUE is a bool (`true`, `false`), an integer, a float (`0.5`, `1e-3`; write `1.0` for a
    /// float option) or a string; quote it (`"12"`) to pass digits as a string. The plugin
    /// rejects names and values it does not know. `lower` compiles nothing, so there it only
    /// checks the form.
    #[arg(long = "xla-option", value_name = "NAME=VALUE", value_parser = parse_xla_option)]
    xla_options: Vec<(String, ttpu::OptionValue)>,
    /// A folder of user kernels: each `NAMESPACE.OP.mlir` is a StableHLO module (generic op form,
    /// public `@main`) that implements the custom op `torch.ops.NAMESPACE.OP.default`.
    #[arg(long, value_name = "DIR")]
    kernels: Option<PathBuf>,
}

impl FuseArgs {
    fn options(&self) -> Option<ttpu_fuse::FuseOptions> {
        (!self.no_fuse).then(|| ttpu_fuse::FuseOptions { fast_math: self.fast_math, ..Default::default() })
    }

    /// Registers the kernels of `--kernels` with `compiler`.
    fn register_kernels(&self, compiler: &mut Compiler, source: &str) -> Result<(), Report> {
        match &self.kernels {
            Some(dir) => compiler.register_kernel_dir(dir).map_err(|error| report(error, source)),
            None => Ok(()),
        }
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
    /// Neither read nor write the compile cache on disk ($TTPU_CACHE_DIR, by default
    /// $XDG_CACHE_HOME/ttpu/compiled).
    #[arg(long)]
    no_cache: bool,
    /// Write a Chrome trace (Perfetto, chrome://tracing) of every stage to this file.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    #[command(flatten)]
    fuse: FuseArgs,
    #[command(flatten)]
    parallel: ParallelArgs,
}

#[derive(clap::Args)]
struct TrainArgs {
    /// The joint graph's `.fx` file.
    model: PathBuf,
    /// Initial parameters and buffers, keyed by target.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Every user input of the graph with a leading step dim (`x: f32[S, batch, ...]`); step i
    /// uses slice `i mod S`.
    #[arg(long)]
    data: PathBuf,
    /// Steps to run in all (a resumed run continues up to this many).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// The optimizer, as torch.optim computes it.
    #[arg(long, value_enum)]
    optimizer: OptimizerKind,
    /// Learning rate (default 1e-3, torch.optim's).
    #[arg(long)]
    lr: Option<f64>,
    /// SGD momentum (default 0).
    #[arg(long)]
    momentum: Option<f64>,
    /// SGD dampening (default 0).
    #[arg(long)]
    dampening: Option<f64>,
    /// SGD Nesterov momentum.
    #[arg(long)]
    nesterov: bool,
    /// AdamW betas as `B1,B2` (default 0.9,0.999).
    #[arg(long, value_parser = parse_betas)]
    betas: Option<(f64, f64)>,
    /// AdamW epsilon (default 1e-8).
    #[arg(long)]
    eps: Option<f64>,
    /// Weight decay (SGD default 0, AdamW default 1e-2).
    #[arg(long)]
    weight_decay: Option<f64>,
    /// AdamW's amsgrad variant.
    #[arg(long)]
    amsgrad: bool,
    /// Maximize the objective instead.
    #[arg(long)]
    maximize: bool,
    /// Where to write the final parameters and buffers, keyed by target.
    #[arg(short, long)]
    output: PathBuf,
    /// Append one JSON line per step (`{"step": i, "loss": ...}`) to this file.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Write a checkpoint every K steps (and after the last) into `--checkpoint-dir`.
    #[arg(long, requires = "checkpoint_dir", value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: Option<u64>,
    /// The checkpoint folder.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Continue from the newest checkpoint in this folder.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// The PJRT plugin.
    #[arg(long)]
    plugin: Option<PathBuf>,
    /// Neither read nor write the compile cache on disk.
    #[arg(long)]
    no_cache: bool,
    /// Write a Chrome trace of every stage and training step to this file.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    #[command(flatten)]
    parallel: ParallelArgs,
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum OptimizerKind {
    /// torch.optim.SGD.
    Sgd,
    /// torch.optim.AdamW.
    Adamw,
}

fn parse_betas(text: &str) -> Result<(f64, f64), String> {
    let (first, second) = text.split_once(',').ok_or_else(|| format!("expected B1,B2, found `{text}`"))?;
    let parse = |value: &str| value.trim().parse::<f64>().map_err(|_| format!("expected a number, found `{value}`"));
    Ok((parse(first)?, parse(second)?))
}

impl TrainArgs {
    fn optimizer(&self) -> ttpu::Optimizer {
        match self.optimizer {
            OptimizerKind::Sgd => {
                let defaults = ttpu::Sgd::default();
                ttpu::Optimizer::Sgd(ttpu::Sgd {
                    lr: self.lr.unwrap_or(defaults.lr),
                    momentum: self.momentum.unwrap_or(defaults.momentum),
                    dampening: self.dampening.unwrap_or(defaults.dampening),
                    weight_decay: self.weight_decay.unwrap_or(defaults.weight_decay),
                    nesterov: self.nesterov,
                    maximize: self.maximize,
                })
            }
            OptimizerKind::Adamw => {
                let defaults = ttpu::AdamW::default();
                ttpu::Optimizer::AdamW(ttpu::AdamW {
                    lr: self.lr.unwrap_or(defaults.lr),
                    betas: self.betas.unwrap_or(defaults.betas),
                    eps: self.eps.unwrap_or(defaults.eps),
                    weight_decay: self.weight_decay.unwrap_or(defaults.weight_decay),
                    amsgrad: self.amsgrad,
                    maximize: self.maximize,
                })
            }
        }
    }
}

#[derive(clap::Args)]
struct ParallelArgs {
    /// Devices to use. With `--parallel` or `--plan`, a 1-D mesh of this many devices; alone,
    /// `bench` runs one replica per device on the same inputs.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    devices: Option<u32>,
    /// The device mesh, like `dp=2,tp=4` (its size is the device count).
    #[arg(long)]
    mesh: Option<String>,
    /// A built-in plan: `ddp` (inputs split along the batch, weights replicated) or `fsdp`
    /// (inputs as ddp, every weight split along one dim).
    #[arg(long, value_enum)]
    parallel: Option<ParallelKind>,
    /// Placements by name pattern from a TOML file (see the README).
    #[arg(long, conflicts_with = "parallel")]
    plan: Option<PathBuf>,
}

#[derive(Copy, Clone, PartialEq, Eq, ValueEnum)]
enum ParallelKind {
    /// Data parallel.
    Ddp,
    /// Fully sharded data parallel (ZeRO-3).
    Fsdp,
}

impl ParallelArgs {
    /// The plan asked for, if any.
    fn parallelism(&self, source: &str) -> Result<Option<Parallelism>, Report> {
        let plan = match (&self.parallel, &self.plan) {
            (Some(ParallelKind::Ddp), _) => Plan::Ddp,
            (Some(ParallelKind::Fsdp), _) => Plan::Fsdp,
            (None, Some(file)) => Plan::Explicit(PlanFile::read(file).map_err(|error| report(error, source))?),
            (None, None) if self.mesh.is_some() => {
                return Err(miette::miette!("--mesh needs a plan: --parallel ddp|fsdp or --plan FILE"));
            }
            (None, None) => return Ok(None),
        };
        let mesh =
            self.mesh.as_deref().map(Mesh::parse).transpose().map_err(|error| miette::miette!("--mesh: {error}"))?;
        let devices = self.devices.map(|devices| devices as usize);
        Parallelism::new(mesh, devices, plan).map(Some).map_err(|error| report(error, source))
    }

    /// Devices the runtime needs.
    fn device_count(&self, parallelism: Option<&Parallelism>) -> Option<usize> {
        match parallelism {
            Some(parallelism) => Some(parallelism.mesh.device_count()),
            None => self.devices.map(|devices| devices as usize),
        }
    }
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

// `std::env::set_var` is `unsafe` since edition 2024 (other threads may read the environment).
#[allow(unsafe_code)]
fn main() -> ExitCode {
    // XLA plugins log at INFO to stderr through their own logger (the CPU plugin announces each
    // client option it was given). Our logs go through `tracing`; keep the plugin's warnings and
    // errors, and its INFO lines unless the user asks for them.
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        // SAFETY: first thing in `main`, before any other thread exists or the plugin is loaded.
        unsafe { std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1") };
    }
    let cli = Cli::parse();
    let trace = cli.command.trace().map(|path| (path.to_owned(), ttpu::TraceRecorder::new()));
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        let filter = tracing_subscriber::EnvFilter::try_from_env("TTPU_LOG").unwrap_or_else(|_| "warn".into());
        let print = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let registry = tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(print, filter));
        match &trace {
            Some((_, recorder)) => {
                TRACE.get_or_init(|| recorder.clone());
                registry.with(recorder.layer()).init();
            }
            None => registry.init(),
        }
    }
    // Long messages carry file:line:col and keys that tools grep for: never wrap them.
    miette::set_hook(Box::new(|_| Box::new(miette::MietteHandlerOpts::new().wrap_lines(false).build())))
        .expect("the hook is set once, first thing in main");
    let result = run(cli);
    // A failed run's trace shows how far it got: write it either way.
    if let Some((path, recorder)) = &trace
        && cli::launch::writes_files()
    {
        match recorder.write(path) {
            Ok(()) => eprintln!("wrote a trace of {} spans to {}", recorder.event_count(), path.display()),
            Err(error) => eprintln!("could not write the trace {}: {error}", path.display()),
        }
    }
    match result {
        Ok(code) => code,
        Err(report) => {
            eprintln!("{report:?}");
            ExitCode::FAILURE
        }
    }
}

/// The recorder of `--trace`, for the code that knows the plugin (to note what it can trace).
static TRACE: std::sync::OnceLock<ttpu::TraceRecorder> = std::sync::OnceLock::new();

impl Command {
    /// The `--trace` file of the command, if it takes one and it was given.
    fn trace(&self) -> Option<&Path> {
        match self {
            Command::Run { data, .. } | Command::Bench { data, .. } | Command::Parity { data, .. } => {
                data.trace.as_deref()
            }
            Command::Train(args) => args.trace.as_deref(),
            Command::Lower { .. } | Command::Launch(_) | Command::Generate(_) | Command::Serve(_) => None,
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, Report> {
    match cli.command {
        Command::Generate(args) => cli::llm::forward("generate", args),
        Command::Serve(args) => cli::llm::forward("serve", args),
        Command::Lower { model, emit, output, symbols, explain_dynamic, dynamic, fuse, parallel } => {
            let (source, path) = read_model(&model)?;
            let parallelism = parallel.parallelism(&source)?;
            if parallelism.is_some() && (dynamic || explain_dynamic || emit != Emit::Stablehlo) {
                return Err(miette::miette!(
                    "--parallel and --plan lay out StableHLO over a mesh: drop --dynamic, --explain-dynamic and --emit"
                ));
            }
            if !fuse.xla_options.is_empty() {
                eprintln!(
                    "note: --xla-option applies to XLA's compiles; `lower` prints the program before XLA sees it"
                );
            }
            let mut compiler = Compiler::new();
            fuse.register_kernels(&mut compiler, &source)?;
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
                    ..CompileOptions::default()
                };
                let (module, fuse_report) =
                    compiler.import_with_report(&program, &options).map_err(|error| report(error, &source))?;
                if !module.pending.is_empty() {
                    let sizes: Vec<String> = module.pending.iter().map(|size| format!("  {size}")).collect();
                    let flags: Vec<String> =
                        module.pending.iter().map(|size| format!("--sym {}=N", size.symbol)).collect();
                    if dynamic {
                        return Err(miette::miette!(
                            help = format!("give the sizes values to print the rest: {}", flags.join(" ")),
                            "the data decides sizes of this model, so it is split there and compiled per size \
                             at run time:\n{}\nkeeping them symbolic would need dims whose size a value computed \
                             inside the program sets (bounded dynamic dims), which the PJRT plugins do not compile",
                            sizes.join("\n")
                        ));
                    }
                    eprintln!(
                        "note: the data decides sizes of this model, so the program is split where they are \
                         decided. This is its size program, which computes:\n{}\n`ttpu run` runs it, reads the \
                         sizes back and runs the rest compiled for them; print the rest with {}",
                        sizes.join("\n"),
                        flags.join(" ")
                    );
                }
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
                    Emit::Stablehlo => match &parallelism {
                        Some(parallelism) => {
                            compiler.lower_sharded(&module, parallelism).map_err(|error| report(error, &source))?
                        }
                        None => compiler.lower(&module).map_err(|error| report(error, &source))?,
                    },
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
            if cli::launch::writes_files() {
                write_safetensors(&output, &outputs).map_err(|error| report(error.into(), ""))?;
                println!("wrote {} outputs to {}", outputs.len(), output.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench { model, data, runs, warmup, one_shot, json } => {
            let options = BenchOptions { runs, warmup, one_shot };
            let results = bench(&model, &data, &options)?;
            if json {
                println!("{}", results.to_json());
            } else {
                print!("{}", results.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Train(args) => {
            train(&args)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Launch(args) => cli::launch::run(&args),
        Command::Parity { model, data, bisect: true, intermediates, rtol, atol, .. } => {
            run_bisect(&model, &data, intermediates.as_deref(), rtol, atol)
        }
        Command::Parity { model, data, expected, rtol, atol, .. } => {
            let expected = expected.ok_or_else(|| miette::miette!("--expected is required without --bisect"))?;
            let (rtol, atol) = (rtol.unwrap_or(1e-4), atol.unwrap_or(1e-5));
            let (source, outputs) = execute(&model, &data)?;
            let expected = read_safetensors(&expected).map_err(|error| report(error.into(), &source))?;
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

/// `ttpu parity --bisect`: the first node that departs from the f64 reference (and from
/// PyTorch's values, when given), with its source line; exits 0 only when none does.
fn run_bisect(
    model: &Path,
    data: &DataArgs,
    intermediates: Option<&Path>,
    rtol: Option<f64>,
    atol: Option<f64>,
) -> Result<ExitCode, Report> {
    let (source, path) = read_model(model)?;
    if data.parallel.parallelism(&source)?.is_some() || data.parallel.devices.is_some_and(|devices| devices > 1) {
        return Err(miette::miette!("--bisect runs on one device: drop --devices, --mesh, --parallel and --plan"));
    }
    let session = session(data, None, &source)?;
    let weights = read_weights(data, &source)?;
    let inputs = read_safetensors(&data.inputs).map_err(|error| report(error.into(), &source))?;
    let intermediates =
        intermediates.map(|file| read_safetensors(file).map_err(|error| report(error.into(), &source))).transpose()?;
    let defaults = ttpu::bisect::BisectOptions::default();
    let options = ttpu::bisect::BisectOptions {
        rtol: rtol.unwrap_or(defaults.rtol),
        atol: atol.unwrap_or(defaults.atol),
        compile: CompileOptions { fuse: data.fuse.options(), seed: data.fuse.seed, ..CompileOptions::default() },
        intermediates,
        transform: None,
    };
    let found = ttpu::bisect::bisect(&session, &source, &path, &weights, &inputs, &options)
        .map_err(|error| report(error, &source))?;
    let describe = |reference: &str, departure: &Option<ttpu::bisect::Departure>| {
        let Some(departure) = departure else {
            println!("  no node departs from {reference}");
            return;
        };
        let parity = &departure.parity;
        let worst = parity.worst_index.as_ref().map_or(String::new(), |index| format!(", worst at {index:?}"));
        println!(
            "  first node departing from {reference}: `{}` ({})
    max abs {:.3e}  max rel {:.3e}  mismatched {}/{}{worst}",
            departure.node, departure.origin, parity.max_abs, parity.max_rel, parity.mismatched, parity.total
        );
        if let Some(text) = departure.line.and_then(|line| source.lines().nth((line as usize).saturating_sub(1))) {
            println!("    {}", text.trim());
        }
    };
    println!(
        "bisect (rtol {:e}, atol {:e}): {} nodes of the {} program compared with an unfused f64 evaluation",
        options.rtol,
        options.atol,
        found.compared,
        if options.compile.fuse.is_some() { "optimized" } else { "unfused" }
    );
    describe("the f64 evaluation", &found.first);
    if options.intermediates.is_some() {
        println!("  {} nodes compared with PyTorch's values", found.compared_with_pytorch);
        describe("PyTorch's values", &found.first_from_pytorch);
    }
    let clean = found.first.is_none() && found.first_from_pytorch.is_none();
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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

fn parse_xla_option(text: &str) -> Result<(String, ttpu::OptionValue), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("expected NAME=VALUE, found `{text}`"))?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("an XLA option name is letters, digits and `_`, found `{name}`"));
    }
    Ok((name.to_owned(), ttpu::OptionValue::parse(value)))
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

/// A session for `data`'s plugin on `devices` devices, with the disk compile cache unless
/// `--no-cache`.
fn session(data: &DataArgs, devices: Option<usize>, source: &str) -> Result<Session, Report> {
    // One device is the plugin's default set: no need to ask a plugin for a count.
    let devices = devices.filter(|&devices| devices > 1);
    let runtime = cli::launch::runtime(data.plugin.as_deref(), devices)?;
    if let Some(recorder) = TRACE.get() {
        let plugin = runtime.client().plugin();
        recorder.set_metadata("platform", serde_json::json!(runtime.platform()));
        recorder.set_metadata("plugin", serde_json::json!(plugin.path().display().to_string()));
        // Per-HLO-op device events need the plugin's PJRT profiler extension.
        let device_events = if plugin.has_profiler_extension() {
            "the plugin has a PJRT profiler extension, which ttpu does not read yet".to_owned()
        } else {
            format!(
                "none: the plugin exports no PJRT profiler extension (its extensions: {:?})",
                plugin.extension_types()
            )
        };
        recorder.set_metadata("device_events", serde_json::json!(device_events));
    }
    if !data.no_cache {
        match ttpu_runtime::default_disk_cache_dir() {
            Some(dir) => runtime.set_disk_cache(&dir).map_err(|error| report(error.into(), source))?,
            None => tracing::warn!("no compile cache on disk: neither TTPU_CACHE_DIR, XDG_CACHE_HOME nor HOME is set"),
        }
    }
    let mut session = Session::with_runtime(runtime);
    data.fuse.register_kernels(session.compiler_mut(), source)?;
    session.set_compile_options(CompileOptions {
        fuse: data.fuse.options(),
        seed: data.fuse.seed,
        prepare_weights: !data.fuse.no_weight_prep,
        xla_options: data.fuse.xla_options.clone(),
        ..CompileOptions::default()
    });
    Ok(session)
}

fn read_weights(data: &DataArgs, source: &str) -> Result<TensorMap, Report> {
    match &data.weights {
        Some(file) => read_safetensors(file).map_err(|error| report(error.into(), source)),
        None => Ok(TensorMap::new()),
    }
}

fn execute(model: &Path, data: &DataArgs) -> Result<(String, TensorMap), Report> {
    let (source, path) = read_model(model)?;
    let parallelism = data.parallel.parallelism(&source)?;
    if parallelism.is_none() && data.parallel.devices.is_some_and(|devices| devices > 1) {
        return Err(miette::miette!(
            "--devices runs a model over several devices with a plan: add --parallel ddp|fsdp or --plan FILE"
        ));
    }
    let session = session(data, data.parallel.device_count(parallelism.as_ref()), &source)?;
    let weights = read_weights(data, &source)?;
    let inputs = read_safetensors(&data.inputs).map_err(|error| report(error.into(), &source))?;
    let model = session.load_model(&source, &path).map_err(|error| report(error, &source))?;
    let loaded = match &parallelism {
        Some(parallelism) => session.shard(&model, &weights, parallelism),
        None => session.place(&model, &weights, 1),
    }
    .map_err(|error| report(error, &source))?;
    let outputs = loaded.run(&inputs).map_err(|error| report(error, &source))?;
    Ok((source, outputs))
}

struct BenchOptions {
    runs: u32,
    warmup: u32,
    one_shot: bool,
}

/// What `ttpu bench` measured; times in seconds.
struct BenchResults {
    model: String,
    platform: String,
    devices: usize,
    layout: String,
    resident_bytes_per_device: usize,
    import_s: f64,
    lower_s: f64,
    compile_s: f64,
    cache: CacheSource,
    weights_in_s: f64,
    weight_bytes: usize,
    first_run_s: f64,
    /// XLA's cost analysis of the program, or ttpu's estimate where the plugin has none.
    cost: serde_json::Value,
    warm: Vec<f64>,
    transfer_in: Vec<f64>,
    execute: Vec<f64>,
    transfer_out: Vec<f64>,
    one_shot: Vec<f64>,
}

fn bench(model: &Path, data: &DataArgs, options: &BenchOptions) -> Result<BenchResults, Report> {
    let (source, path) = read_model(model)?;
    let parallelism = data.parallel.parallelism(&source)?;
    let devices = data.parallel.device_count(parallelism.as_ref()).unwrap_or(1);
    let session = session(data, Some(devices), &source)?;
    let fail = |error: ttpu::Error| report(error, &source);
    let weights = read_weights(data, &source)?;
    let inputs = read_safetensors(&data.inputs).map_err(|error| report(error.into(), &source))?;

    let start = Instant::now();
    let model = session.load_model(&source, &path).map_err(fail)?;
    let import_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let loaded = match &parallelism {
        Some(parallelism) => session.shard(&model, &weights, parallelism),
        None => session.place(&model, &weights, devices),
    }
    .map_err(fail)?;
    let weights_in_s = start.elapsed().as_secs_f64();
    let weight_bytes = weights.values().map(|tensor| tensor.data.len()).sum::<usize>();
    let replicated: Vec<&TensorMap> = vec![&inputs; loaded.input_sets()];
    let layout = match &parallelism {
        Some(parallelism) => format!(
            "{} over mesh {}",
            match &parallelism.plan {
                Plan::Ddp => "ddp",
                Plan::Fsdp => "fsdp",
                Plan::Explicit(_) => "plan file",
            },
            parallelism.mesh
        ),
        None if devices > 1 => format!("{devices} replicas"),
        None => "one device".to_owned(),
    };

    // The first run compiles (or loads from the cache); its compile time is reported apart.
    let start = Instant::now();
    let prepared = loaded.prepare(&replicated).map_err(fail)?;
    let info = prepared.compile_info().ok_or_else(|| miette::miette!("the first run found its program compiled"))?;
    let cost = program_cost(&prepared);
    loaded.execute(prepared).map_err(fail)?.to_host().map_err(fail)?;
    let first_run_s = start.elapsed().as_secs_f64() - info.lower_s - info.compile_s;

    let time_runs = |count: u32, record: bool, results: &mut BenchResults| -> Result<(), Report> {
        for _ in 0..count {
            let (outputs, phases) = timed_run(&loaded, &replicated).map_err(fail)?;
            drop(outputs);
            if record {
                results.transfer_in.push(phases[0]);
                results.execute.push(phases[1]);
                results.transfer_out.push(phases[2]);
                results.warm.push(phases.iter().sum());
            }
        }
        Ok(())
    };
    let mut results = BenchResults {
        model: path.clone(),
        platform: session.runtime().platform(),
        devices,
        layout,
        resident_bytes_per_device: loaded.resident_bytes_per_device().map_err(fail)?,
        import_s,
        lower_s: info.lower_s,
        compile_s: info.compile_s,
        cache: info.source,
        weights_in_s,
        weight_bytes,
        first_run_s: first_run_s.max(0.0),
        cost,
        warm: Vec::new(),
        transfer_in: Vec::new(),
        execute: Vec::new(),
        transfer_out: Vec::new(),
        one_shot: Vec::new(),
    };
    time_runs(options.warmup, false, &mut results)?;
    time_runs(options.runs, true, &mut results)?;
    if options.one_shot {
        if devices > 1 {
            return Err(miette::miette!("--one-shot times one device; drop --devices"));
        }
        for round in 0..options.warmup + options.runs {
            let start = Instant::now();
            session.run(&model, &weights, &inputs).map_err(fail)?;
            if round >= options.warmup {
                results.one_shot.push(start.elapsed().as_secs_f64());
            }
        }
    }
    Ok(results)
}

/// The cost of the program `prepared` runs: XLA's analysis (`flops`, `bytes accessed`) where the
/// plugin gives one, else ttpu's estimate from the IR at these sizes, saying which it is.
fn program_cost(prepared: &ttpu::Prepared) -> serde_json::Value {
    let xla = prepared.cost_analysis().ok().and_then(|values| {
        let number = |name: &str| {
            values.iter().find(|(key, _)| key == name).and_then(|(_, value)| match value {
                ttpu_runtime::NamedValue::Float(value) => Some(f64::from(*value)),
                ttpu_runtime::NamedValue::Int64(value) => Some(*value as f64),
                _ => None,
            })
        };
        Some(serde_json::json!({"source": "xla", "flops": number("flops")?, "bytes_accessed": number("bytes accessed")?}))
    });
    xla.unwrap_or_else(|| {
        let work = ttpu::estimate_work(prepared.program());
        serde_json::json!({
            "source": "ttpu (the plugin has no cost analysis): each op counted alone, before XLA's fusion",
            "flops": work.flops,
            "bytes_accessed": work.bytes_accessed,
        })
    })
}

/// One run with resident weights: seconds spent uploading inputs, executing, and reading outputs.
fn timed_run(loaded: &LoadedModel, inputs: &[&TensorMap]) -> ttpu::Result<(Vec<TensorMap>, [f64; 3])> {
    let start = Instant::now();
    let prepared = loaded.prepare(inputs)?;
    let uploaded = Instant::now();
    let outputs = loaded.execute(prepared)?;
    let executed = Instant::now();
    let host = outputs.to_host()?;
    let done = Instant::now();
    let phases =
        [(uploaded - start).as_secs_f64(), (executed - uploaded).as_secs_f64(), (done - executed).as_secs_f64()];
    Ok((host, phases))
}

/// The `q`-quantile (0..=1) of `values`, by the nearest rank; 0 for none.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

impl BenchResults {
    fn cache_hit(&self) -> bool {
        self.cache != CacheSource::Compiled
    }

    fn to_json(&self) -> String {
        let ms = |seconds: f64| seconds * 1e3;
        let stats = |values: &[f64]| {
            serde_json::json!({
                "median": ms(quantile(values, 0.5)),
                "p10": ms(quantile(values, 0.1)),
                "p90": ms(quantile(values, 0.9)),
                "runs": values.len(),
            })
        };
        let mut object = serde_json::json!({
            "model": self.model,
            "platform": self.platform,
            "devices": self.devices,
            "layout": self.layout,
            "resident_bytes_per_device": self.resident_bytes_per_device,
            "import_s": self.import_s,
            "lower_s": self.lower_s,
            "compile_s": self.compile_s,
            "cache_hit": self.cache_hit(),
            "cache": match self.cache {
                CacheSource::Memory => "memory",
                CacheSource::Disk => "disk",
                CacheSource::Compiled => "none",
            },
            "weights_in_ms": ms(self.weights_in_s),
            "weight_bytes": self.weight_bytes,
            "first_run_ms": ms(self.first_run_s),
            "cost": self.cost,
            "warm_ms": stats(&self.warm),
            "transfer_in_ms": ms(quantile(&self.transfer_in, 0.5)),
            "execute_ms": ms(quantile(&self.execute, 0.5)),
            "transfer_out_ms": ms(quantile(&self.transfer_out, 0.5)),
        });
        if !self.one_shot.is_empty() {
            object["one_shot_ms"] = stats(&self.one_shot);
        }
        object.to_string()
    }

    fn table(&self) -> String {
        let ms = |seconds: f64| format!("{:.3} ms", seconds * 1e3);
        let compile = match self.cache {
            CacheSource::Compiled => format!("{} (XLA compile)", ms(self.compile_s)),
            CacheSource::Disk => format!("cache hit (disk), {} to load", ms(self.compile_s)),
            CacheSource::Memory => "cache hit (memory)".to_owned(),
        };
        let mut lines = vec![
            format!("model          {}", self.model),
            format!(
                "plugin         {} ({} device{})",
                self.platform,
                self.devices,
                if self.devices == 1 { "" } else { "s" }
            ),
            format!("layout         {}", self.layout),
            format!("import         {}", ms(self.import_s)),
            format!("lower          {}", ms(self.lower_s)),
            format!("compile        {compile}"),
            format!(
                "weights in     {} ({} bytes, once; {} bytes resident per device)",
                ms(self.weights_in_s),
                self.weight_bytes,
                self.resident_bytes_per_device
            ),
            format!("first run      {}", ms(self.first_run_s)),
            format!(
                "warm run       median {}  p10 {}  p90 {}  ({} runs, weights resident)",
                ms(quantile(&self.warm, 0.5)),
                ms(quantile(&self.warm, 0.1)),
                ms(quantile(&self.warm, 0.9)),
                self.warm.len()
            ),
            format!("  transfer in  median {}", ms(quantile(&self.transfer_in, 0.5))),
            format!("  execute      median {}", ms(quantile(&self.execute, 0.5))),
            format!("  transfer out median {}", ms(quantile(&self.transfer_out, 0.5))),
        ];
        if !self.one_shot.is_empty() {
            lines.push(format!(
                "one-shot run   median {}  p10 {}  p90 {}  (weights uploaded every run)",
                ms(quantile(&self.one_shot, 0.5)),
                ms(quantile(&self.one_shot, 0.1)),
                ms(quantile(&self.one_shot, 0.9))
            ));
        }
        lines.join("\n") + "\n"
    }
}

/// `ttpu train`: the loop, its log and checkpoints.
fn train(args: &TrainArgs) -> Result<(), Report> {
    use std::io::Write;
    let (source, path) = read_model(&args.model)?;
    let fail = |error: ttpu::Error| report(error, &source);
    let parallelism = args.parallel.parallelism(&source)?;
    let data_args = DataArgs {
        weights: args.weights.clone(),
        inputs: args.data.clone(),
        plugin: args.plugin.clone(),
        no_cache: args.no_cache,
        trace: None,
        fuse: FuseArgs {
            no_fuse: false,
            fast_math: false,
            seed: 0,
            no_weight_prep: false,
            xla_options: Vec::new(),
            kernels: None,
        },
        parallel: ParallelArgs { devices: None, mesh: None, parallel: None, plan: None },
    };
    let session = session(&data_args, args.parallel.device_count(parallelism.as_ref()), &source)?;
    let model = session.load_model(&source, &path).map_err(fail)?;
    let data = read_safetensors(&args.data).map_err(|error| report(error.into(), &source))?;
    let data = ttpu::train::StepData::new(data).map_err(fail)?;
    let optimizer = args.optimizer();
    let trainer = match &args.resume {
        Some(dir) => {
            let checkpoint = latest_checkpoint(dir)?;
            eprintln!("resuming from {}", checkpoint.display());
            ttpu::Trainer::resume(&session, &model, &checkpoint, optimizer, parallelism.as_ref()).map_err(fail)?
        }
        None => {
            let weights = read_weights(&data_args, &source)?;
            ttpu::Trainer::new(&session, &model, &weights, optimizer, parallelism.as_ref()).map_err(fail)?
        }
    };
    let first = trainer.steps_done().map_err(fail)?;
    // In a job, process 0 writes the files; every process holds the same replicated state.
    let writes = cli::launch::writes_files();
    let mut log = match args.log.as_ref().filter(|_| writes) {
        Some(file) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(file)
                .map_err(|error| miette::miette!("{}: {error}", file.display()))?,
        ),
        None => None,
    };
    if let Some(dir) = &args.checkpoint_dir {
        std::fs::create_dir_all(dir).map_err(|error| miette::miette!("{}: {error}", dir.display()))?;
    }
    let bar = indicatif::ProgressBar::new(args.steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} step {pos}/{len}  {msg}  {per_sec}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_position(first.min(args.steps));
    let checkpoint = |step: u64| -> Result<(), Report> {
        if let Some(dir) = args.checkpoint_dir.as_ref().filter(|_| writes) {
            trainer.save_checkpoint(&dir.join(format!("step-{step:08}.safetensors"))).map_err(fail)?;
        }
        Ok(())
    };
    // The first step compiles (or loads from the cache); steady-state time is measured after it.
    let mut first_step_s = 0.0;
    let mut steady = None;
    for step in first..args.steps {
        let start = Instant::now();
        let loss = trainer.step(&data.batch(step)).map_err(fail)?;
        if step == first {
            first_step_s = start.elapsed().as_secs_f64();
            steady = Some((Instant::now(), 0u64));
        } else if let Some((_, count)) = &mut steady {
            *count += 1;
        }
        if let Some(log) = &mut log {
            writeln!(log, "{}", serde_json::json!({"step": step, "loss": loss}))
                .map_err(|error| miette::miette!("writing the log: {error}"))?;
        }
        bar.set_message(format!("loss {loss:.6}"));
        bar.inc(1);
        if args.checkpoint_every.is_some_and(|every| (step + 1) % every == 0) {
            checkpoint(step + 1)?;
        }
    }
    bar.finish();
    if args.checkpoint_every.is_some_and(|every| !args.steps.is_multiple_of(every)) {
        checkpoint(args.steps)?;
    }
    let weights = trainer.weights().map_err(fail)?;
    if writes {
        write_safetensors(&args.output, &weights).map_err(|error| report(error.into(), &source))?;
        println!("trained {} steps; wrote {} tensors to {}", args.steps, weights.len(), args.output.display());
    }
    if let Some((start, count)) = steady
        && count > 0
    {
        let per_step_ms = start.elapsed().as_secs_f64() * 1e3 / count as f64;
        println!(
            "first step {:.3} s (compile included); then {per_step_ms:.3} ms/step over {count} steps",
            first_step_s
        );
    }
    Ok(())
}

/// The checkpoint of the most steps in `dir` (`step-NNNNNNNN.safetensors`).
fn latest_checkpoint(dir: &Path) -> Result<PathBuf, Report> {
    let entries = std::fs::read_dir(dir).map_err(|error| miette::miette!("--resume {}: {error}", dir.display()))?;
    entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let step = name.strip_prefix("step-")?.strip_suffix(".safetensors")?.parse::<u64>().ok()?;
            Some((step, path))
        })
        .max()
        .map(|(_, path)| path)
        .ok_or_else(|| miette::miette!("--resume {}: no checkpoint `step-N.safetensors` in it", dir.display()))
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
