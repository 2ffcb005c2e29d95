//! The command line's side of jobs over several processes: `ttpu launch -n N -- COMMAND...`, and
//! the place a `ttpu run|parity|bench|train` process takes in its job, read from the environment
//! its launcher set (`TTPU_*`, JAX's `JAX_*` or torchrun's variables; see `ttpu_dist::Launch`).
//!
//! Under a job, `--devices N` and `--mesh` count the devices of the whole job and each process
//! uses an equal share of its own; the mesh spans every process's devices in process order. Only
//! process 0 writes output files (outputs, trained weights, logs and checkpoints): every process
//! computes the same replicated outputs.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use miette::Report;
use ttpu::{Runtime, RuntimeOptions};
use ttpu_dist::Launch;

/// `ttpu launch`: start N local processes of one job, meeting in a fresh `file://` store.
#[derive(clap::Args)]
pub struct LaunchArgs {
    /// Processes to start (each gets `TTPU_PROCESS_ID`, `TTPU_NUM_PROCESSES` and
    /// `TTPU_COORDINATOR`).
    #[arg(short = 'n', long = "processes", value_parser = clap::value_parser!(u32).range(1..=1024))]
    processes: u32,
    /// The command every process runs, after `--`, like `ttpu train model.fx ... --mesh dp=2`; a
    /// program named `ttpu` is this binary.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Runs `ttpu launch`; exits with the first failing process's code.
pub fn run(args: &LaunchArgs) -> Result<ExitCode, Report> {
    let mut command = args.command.clone();
    if command.first().is_some_and(|program| program == "ttpu")
        && let Ok(this) = std::env::current_exe()
    {
        command[0] = this.into_os_string();
    }
    let outcome = ttpu_dist::launch(args.processes as usize, &command).map_err(|error| miette::miette!("{error}"))?;
    match outcome.first_failure {
        None => Ok(ExitCode::SUCCESS),
        Some(index) => {
            eprintln!(
                "process {index} of {} failed ({}); the others were stopped",
                args.processes, outcome.statuses[index]
            );
            Ok(ExitCode::from(u8::try_from(outcome.code()).unwrap_or(1)))
        }
    }
}

/// The runtime of this process: alone, or its share of a job's devices when the environment
/// places it in one (`devices` then counts the whole job's devices). In a job, says on standard
/// error where the process stands once its peers are found.
pub fn runtime(plugin: Option<&Path>, devices: Option<usize>) -> Result<Runtime, Report> {
    let launch = Launch::from_env().map_err(|error| miette::miette!("{error}"))?;
    let Some(launch) = launch else {
        return Runtime::from_plugin_or_default(plugin, &RuntimeOptions { devices, ..RuntimeOptions::default() })
            .map_err(|error| miette::miette!("{error}"));
    };
    let processes = launch.process_count;
    let devices = match devices {
        Some(total) if total % processes != 0 => {
            return Err(miette::miette!(
                "the job's {total} devices (--devices or --mesh) do not split evenly over its {processes} processes"
            ));
        }
        Some(total) => Some(total / processes),
        None => None,
    };
    let distributed = launch.distributed().map_err(|error| miette::miette!("{error}"))?;
    let options = RuntimeOptions { devices, distributed: Some(distributed), ..RuntimeOptions::default() };
    let runtime = Runtime::from_plugin_or_default(plugin, &options).map_err(|error| miette::miette!("{error}"))?;
    let ids = runtime.device_ids();
    let own: Vec<i32> = runtime.local_devices().iter().map(|&index| ids[index]).collect();
    eprintln!(
        "process {} of {} ({}): devices {own:?} of the job's {ids:?}",
        launch.process_index, processes, launch.convention
    );
    Ok(runtime)
}

/// Whether this process writes output files: alone, or as process 0 of its job.
pub fn writes_files() -> bool {
    Launch::from_env().ok().flatten().is_none_or(|launch| launch.process_index == 0)
}
