//! `cargo xtask`: set-up and the project's two main commands.
//!
//! - `setup` installs Debian's LLVM/MLIR 22 packages if missing (as root directly, otherwise it
//!   prints the exact command) and fetches the CPU PJRT plugin from PyPI with pip into the user
//!   cache, checking the wheel's sha256.
//! - `lower MODEL.fx [ARGS]` and `run MODEL.fx [ARGS]` run set-up if needed, then the `ttpu` binary.
//! - `test` runs set-up, formatting and lint checks, every test, then `check-dynamic` and the Python
//!   package's tests (`--python`: those alone; `--no-python`: all but those).
//! - `check-dynamic` runs every dynamic fixture's shape-polymorphic StableHLO module at each of its
//!   input sets' sizes through JAX's shape refinement and XLA (`fixtures/check_dynamic.py`).
//! - `ops-doc` regenerates `docs/ops.md` from the importer's op table.
//!
//! xtask links no workspace crate: it drives `cargo` and the `ttpu` binary, so it builds in seconds
//! on a machine that has no MLIR yet.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// Debian packages that `melior`/`mlir-sys` need to build and link, and the Redis server the
/// key-value store tests start on a loopback port (`crates/ttpu-dist/tests/stores.rs`).
const APT_PACKAGES: &[&str] = &[
    "libmlir-22-dev",
    "mlir-22-tools",
    "llvm-22-dev",
    "libclang-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "libz3-dev",
    "libxml2-dev",
    "redis-server",
];

/// The default CPU plugin: the fastest one measured (PJRT C API 0.115, XLA of jaxlib 0.11.2).
const PLUGIN_WHEEL: &str = "lammps-jax-pjrt-cpu==0.11.2";
const PLUGIN_WHEEL_FILE: &str = "lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl";
const PLUGIN_WHEEL_SHA256: &str = "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1";
const PLUGIN_MEMBER: &str = "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        print_usage();
        bail!("no command given");
    };
    match command.as_str() {
        "setup" => setup(),
        "lower" => {
            setup()?;
            ttpu(&prefixed("lower", rest))
        }
        "run" => {
            setup()?;
            run_model(rest)
        }
        "test" => {
            setup()?;
            match rest.first().map(String::as_str) {
                None => test(true),
                Some("--no-python") => test(false),
                Some("--python") => python_tests(),
                Some(other) => bail!("unknown option `{other}` of `test` (--python, --no-python)"),
            }
        }
        "ops-doc" => ops_doc(),
        "check-dynamic" => {
            setup()?;
            check_dynamic()
        }
        "help" | "--help" | "-h" => {
            print_usage();
            Ok(())
        }
        other => {
            print_usage();
            bail!("unknown command `{other}`")
        }
    }
}

fn print_usage() {
    eprintln!(
        "usage: cargo xtask <command>\n\n\
         commands:\n  \
         setup              install LLVM/MLIR 22 packages and the CPU PJRT plugin if missing\n  \
         lower MODEL.fx     print the StableHLO of a model (extra args go to `ttpu lower`)\n  \
         run MODEL.fx       run a fixture folder's model on its inputs and check parity with its expected outputs\n  \
         check-dynamic      run every dynamic fixture's polymorphic StableHLO at each input set's sizes (JAX, XLA)\n  \
         test               formatting, lints and every test, the Python package's included\n  \
         test --python      only the Python package's tests (a venv with PyTorch in target/python-venv)\n  \
         test --no-python   every test but the Python package's\n  \
         ops-doc            regenerate docs/ops.md from the importer's op table"
    );
}

fn prefixed(command: &str, rest: &[String]) -> Vec<String> {
    std::iter::once(command.to_owned()).chain(rest.iter().cloned()).collect()
}

fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives one level below the root").to_path_buf()
}

/// Where `setup` puts the CPU plugin; `ttpu` and `ttpu-pjrt` look here when no plugin is named.
fn plugin_path() -> Result<PathBuf> {
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").context("HOME is not set")?).join(".cache"),
    };
    Ok(cache.join("ttpu/plugins/cpu/pjrt_c_api_cpu_plugin.so"))
}

fn setup() -> Result<()> {
    install_packages()?;
    install_plugin()
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0").unwrap_or(false)
}

fn missing_packages() -> Vec<&'static str> {
    APT_PACKAGES
        .iter()
        .copied()
        .filter(|package| {
            let status = Command::new("dpkg-query").args(["-W", "-f=${Status}", package]).output();
            !matches!(status, Ok(out) if String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
        })
        .collect()
}

fn install_packages() -> Result<()> {
    let missing = missing_packages();
    if missing.is_empty() {
        return Ok(());
    }
    let command = format!("apt-get update && apt-get install -y --no-install-recommends {}", missing.join(" "));
    if !is_root() {
        bail!("missing Debian packages: {}\nrun as root:\n  sudo sh -c '{command}'", missing.join(" "));
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    run(Command::new("sh").arg("-c").arg(&command).env("DEBIAN_FRONTEND", "noninteractive"))
}

fn install_plugin() -> Result<()> {
    let target = plugin_path()?;
    if target.is_file() {
        return Ok(());
    }
    let dir = target.parent().expect("the plugin path has a folder");
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    ensure_pip()?;
    let download = dir.join("download");
    eprintln!("xtask: fetching {PLUGIN_WHEEL} from PyPI");
    run(Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"])
        .arg("-d")
        .arg(&download)
        .arg(PLUGIN_WHEEL))?;
    let wheel = download.join(PLUGIN_WHEEL_FILE);
    let bytes = std::fs::read(&wheel).with_context(|| format!("reading {}", wheel.display()))?;
    let digest = format!("{:x}", Sha256::digest(&bytes));
    if digest != PLUGIN_WHEEL_SHA256 {
        bail!("{} has sha256 {digest}, expected {PLUGIN_WHEEL_SHA256}", wheel.display());
    }
    let unpacked = dir.join("unpacked");
    run(Command::new("python3").args(["-m", "zipfile", "-e"]).arg(&wheel).arg(&unpacked))?;
    // Rename into place last, so an interrupted setup never leaves a half-written plugin behind.
    std::fs::rename(unpacked.join(PLUGIN_MEMBER), &target)
        .with_context(|| format!("installing {}", target.display()))?;
    std::fs::remove_dir_all(&unpacked).ok();
    std::fs::remove_dir_all(&download).ok();
    eprintln!("xtask: CPU PJRT plugin installed at {}", target.display());
    Ok(())
}

fn ensure_pip() -> Result<()> {
    let has_pip = Command::new("python3")
        .args(["-m", "pip", "--version"])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false);
    if has_pip {
        return Ok(());
    }
    let command = "apt-get update && apt-get install -y --no-install-recommends python3-pip";
    if !is_root() {
        bail!("pip is missing; run as root:\n  sudo sh -c '{command}'");
    }
    run(Command::new("sh").arg("-c").arg(command).env("DEBIAN_FRONTEND", "noninteractive"))
}

fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(project_root());
    command
}

fn ttpu(args: &[String]) -> Result<()> {
    // Build first with cargo's own progress on standard error (minutes on a fresh machine), then
    // run quietly so the model's output is all that follows.
    run(cargo().args(["build", "--release", "--package", "ttpu", "--bin", "ttpu"]))?;
    run(cargo().args(["run", "--quiet", "--release", "--package", "ttpu", "--bin", "ttpu", "--"]).args(args))
}

/// Runs a fixture folder's model: weights and inputs next to `model.fx`, then parity against
/// `expected.safetensors` when it is there.
fn run_model(args: &[String]) -> Result<()> {
    let Some((model, rest)) = args.split_first() else {
        bail!("usage: cargo xtask run MODEL.fx [ARGS]");
    };
    let model_path = Path::new(model);
    let folder = model_path.parent().unwrap_or(Path::new("."));
    let mut common = vec![model.clone()];
    let weights = folder.join("weights.safetensors");
    if weights.is_file() {
        common.extend(["--weights".into(), weights.display().to_string()]);
    }
    common.extend(["--inputs".into(), folder.join("inputs.safetensors").display().to_string()]);
    common.extend(rest.iter().cloned());
    let out_dir = project_root().join("target/ttpu-out");
    std::fs::create_dir_all(&out_dir)?;
    let name = folder.file_name().map_or("model".into(), |name| name.to_string_lossy().into_owned());
    let out = out_dir.join(format!("{name}.safetensors"));
    let mut run_args = prefixed("run", &common);
    run_args.extend(["-o".into(), out.display().to_string()]);
    ttpu(&run_args)?;
    let expected = folder.join("expected.safetensors");
    if expected.is_file() {
        let mut parity_args = prefixed("parity", &common);
        parity_args.extend(["--expected".into(), expected.display().to_string()]);
        if let Some((rtol, atol)) = tolerances(&folder.join("meta.json")) {
            parity_args.extend(["--rtol".into(), rtol, "--atol".into(), atol]);
        }
        ttpu(&parity_args)?;
    }
    Ok(())
}

/// `rtol`/`atol` from a fixture's meta.json, read without a JSON dependency: the file is ours.
fn tolerances(meta: &Path) -> Option<(String, String)> {
    let text = std::fs::read_to_string(meta).ok()?;
    let field = |name: &str| {
        let start = text.find(&format!("\"{name}\""))? + name.len() + 2;
        let rest = text[start..].trim_start().strip_prefix(':')?.trim_start();
        let end = rest.find([',', '}', '\n']).unwrap_or(rest.len());
        Some(rest[..end].trim().to_owned())
    };
    Some((field("rtol")?, field("atol")?))
}

fn test(with_python: bool) -> Result<()> {
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    let mut command = cargo();
    command.args(["test", "--workspace"]);
    if std::env::var_os("CI").is_some() {
        // A new or changed snapshot must fail in CI rather than be written.
        command.env("INSTA_UPDATE", "no");
    }
    run(&mut command)?;
    check_dynamic()?;
    if with_python { python_tests() } else { Ok(()) }
}

/// What the Python package's tests install, pinned: PyTorch (from PyPI, with its CUDA wheels:
/// about 5 GB, 3 minutes to download and install here), the models the tests compile, the build
/// backend and pytest.
const PYTHON_TEST_PACKAGES: [&str; 8] = [
    "torch==2.15.0",
    "torchvision==0.29.2",
    "transformers==5.24.0",
    "numpy==2.4.6",
    "safetensors==0.8.0",
    "pytest==9.2.0",
    "maturin==1.16.0",
    "pillow==13.0.0",
];

/// Builds the `ttpu` Python package into a virtual environment with PyTorch
/// (`target/python-venv`, made once) and runs its tests (`crates/ttpu-py/tests`):
/// `torch.compile(backend="ttpu")` on real models against eager PyTorch, `ttpu.export` files run by
/// the CLI, `ttpu.load`, and `ttpu.export_llm` models served by `ttpu serve` against Hugging Face. `maturin develop` builds the extension in the dev profile, reusing what the
/// tests built.
fn python_tests() -> Result<()> {
    let root = project_root();
    let venv = root.join("target").join("python-venv");
    let python = venv.join("bin").join("python");
    install_once(&venv, &PYTHON_TEST_PACKAGES, "the Python package's tests", || {
        ensure_venv()?;
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        run(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--only-binary=:all:"])
            .args(PYTHON_TEST_PACKAGES))
    })?;
    run(Command::new(venv.join("bin").join("maturin"))
        .args(["develop", "--quiet", "--manifest-path"])
        .arg(root.join("crates").join("ttpu-py").join("Cargo.toml"))
        .env("VIRTUAL_ENV", &venv)
        .current_dir(&root))?;
    // `ttpu.export`'s files are checked by running them with the CLI, and `ttpu.export_llm`'s by
    // serving them (`ttpu serve` runs the `ttpu-serve` binary beside it).
    run(cargo().args([
        "build",
        "--quiet",
        "--package",
        "ttpu",
        "--package",
        "ttpu-serve",
        "--bin",
        "ttpu",
        "--bin",
        "ttpu-serve",
    ]))?;
    run(Command::new(&python)
        .args(["-m", "pytest", "--quiet", "-p", "no:logging", "-p", "no:cacheprovider"])
        .arg(root.join("crates").join("ttpu-py").join("tests"))
        .env("TTPU_BIN", root.join("target").join("debug").join("ttpu"))
        .current_dir(&root))
}

/// Runs `install` (which fills `dir` with `packages`) unless `dir` already holds exactly that pinned
/// set; another set, or a half-finished install, starts over from an empty folder.
fn install_once(dir: &Path, packages: &[&str], purpose: &str, install: impl FnOnce() -> Result<()>) -> Result<()> {
    let stamp = dir.join(".installed");
    let wanted = packages.join("\n");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(());
    }
    std::fs::remove_dir_all(dir).ok();
    eprintln!("xtask: installing {} for {purpose}", packages.join(" "));
    let started = std::time::Instant::now();
    install()?;
    eprintln!("xtask: installed in {:.0} s", started.elapsed().as_secs_f64());
    std::fs::write(&stamp, &wanted).context("marking the packages installed")
}

/// `python3 -m venv` needs Debian's `python3-venv` where Python is Debian's own.
fn ensure_venv() -> Result<()> {
    let has_venv =
        Command::new("python3").args(["-c", "import ensurepip, venv"]).output().map(|out| out.status.success());
    if has_venv.unwrap_or(false) {
        return Ok(());
    }
    let command = "apt-get update && apt-get install -y --no-install-recommends python3-venv";
    if !is_root() {
        bail!("Python's venv module is missing; run as root:\n  sudo sh -c '{command}'");
    }
    run(Command::new("sh").args(["-c", command]))
}

/// Python packages of the refinement check, pinned: JAX's StableHLO shape refinement and XLA CPU.
const CHECK_DYNAMIC_PACKAGES: [&str; 4] = ["jax==0.10.2", "jaxlib==0.10.2", "numpy==2.4.6", "safetensors==0.8.0"];

/// Runs `fixtures/check_dynamic.py`: every dynamic fixture's one shape-polymorphic module
/// (`ttpu lower --dynamic`) refined to each committed input set's shapes, compiled by XLA and
/// compared with PyTorch's outputs, so those modules are executed, not only printed. The packages
/// go into `target/check-dynamic` (pip `--target`, no virtual environment needed) once.
fn check_dynamic() -> Result<()> {
    let root = project_root();
    let site = root.join("target").join("check-dynamic");
    install_once(&site, &CHECK_DYNAMIC_PACKAGES, "the refinement check", || {
        ensure_pip()?;
        run(Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--only-binary=:all:", "--target"])
            .arg(&site)
            .args(CHECK_DYNAMIC_PACKAGES))
    })?;
    // The tests built the debug binary; lowering needs no optimised build.
    run(cargo().args(["build", "--quiet", "--package", "ttpu", "--bin", "ttpu"]))?;
    run(Command::new("python3")
        .arg(root.join("fixtures").join("check_dynamic.py"))
        .env("PYTHONPATH", &site)
        .env("TTPU_BIN", root.join("target").join("debug").join("ttpu"))
        .env("JAX_PLATFORMS", "cpu"))
}

/// Rewrites `docs/ops.md` through the test that checks it: the data lives in `ttpu-fx`, which
/// xtask does not link.
fn ops_doc() -> Result<()> {
    run(cargo().args(["test", "--quiet", "--package", "ttpu-aten", "--test", "ops_doc"]).env("TTPU_BLESS", "1"))?;
    eprintln!("xtask: wrote docs/ops.md");
    Ok(())
}

fn run(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("starting {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed with {status}");
    }
    Ok(())
}
