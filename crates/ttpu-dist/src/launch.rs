//! `ttpu launch -n N -- COMMAND...`: N local processes of one job, meeting in a fresh `file://`
//! store.
//!
//! Process `i` gets `TTPU_COORDINATOR=file://<store>`, `TTPU_NUM_PROCESSES=N`,
//! `TTPU_PROCESS_ID=i` and, as torchrun sets it, `LOCAL_RANK=i` (a GPU plugin then gives process
//! `i` the host's GPU `i`; `JAX_LOCAL_DEVICE_IDS` overrides it); its standard output and error are passed on line by line with `[i] `
//! in front. The store is a new directory under the system's temporary directory, removed when
//! the job ends. A process that fails ends the job: the others are stopped (they would otherwise
//! wait for it until their timeout), and the launcher reports the first failure.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use crate::Error;

/// The most processes one launch starts.
pub const MAX_PROCESSES: usize = 1024;

/// How long the launcher still copies output once every process has exited (left-behind
/// children of theirs may hold the pipes open).
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// How a launched job ended.
#[derive(Debug)]
pub struct Outcome {
    /// Each process's exit status, by process index.
    pub statuses: Vec<ExitStatus>,
    /// The process that failed first, if any (the others were stopped after it).
    pub first_failure: Option<usize>,
}

impl Outcome {
    /// The launcher's exit code: 0 when every process succeeded, else the first failure's code
    /// (1 when it was ended by a signal).
    pub fn code(&self) -> i32 {
        match self.first_failure {
            None => 0,
            Some(index) => self.statuses[index].code().filter(|&code| code != 0).unwrap_or(1),
        }
    }
}

/// Runs `command` (program and arguments) as `processes` processes of one job and waits for
/// them all.
pub fn launch(processes: usize, command: &[OsString]) -> Result<Outcome, Error> {
    let fail = |message: String| Error::Launch { message, source: None };
    if processes == 0 || processes > MAX_PROCESSES {
        return Err(fail(format!("a job has 1 to {MAX_PROCESSES} processes, not {processes}")));
    }
    let Some((program, args)) = command.split_first() else {
        return Err(fail("no command to launch".to_owned()));
    };
    let store = fresh_store_dir().map_err(|source| Error::Launch {
        message: "cannot create the job's store directory".to_owned(),
        source: Some(source),
    })?;
    let address = format!("file://{}", store.display());
    tracing::info!(processes, store = %address, "launching");
    let mut children: Vec<Child> = Vec::with_capacity(processes);
    let mut printers: Vec<JoinHandle<()>> = Vec::new();
    for index in 0..processes {
        let spawned = Command::new(program)
            .args(args)
            .env("TTPU_COORDINATOR", &address)
            .env("TTPU_NUM_PROCESSES", processes.to_string())
            .env("TTPU_PROCESS_ID", index.to_string())
            .env("LOCAL_RANK", index.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(source) => {
                stop(&mut children);
                for child in &mut children {
                    let _ = child.wait();
                }
                let _ = std::fs::remove_dir_all(&store);
                return Err(Error::Launch {
                    message: format!("cannot start `{}`", program.to_string_lossy()),
                    source: Some(source),
                });
            }
        };
        if let Some(stdout) = child.stdout.take() {
            printers.push(prefix_lines(stdout, index, false));
        }
        if let Some(stderr) = child.stderr.take() {
            printers.push(prefix_lines(stderr, index, true));
        }
        children.push(child);
    }
    let outcome = wait_all(&mut children);
    // The copies end when every holder of the pipes has closed them: the children, and any
    // process they left behind. Those may live on, so the wait for them is bounded.
    let start = std::time::Instant::now();
    while printers.iter().any(|printer| !printer.is_finished()) && start.elapsed() < OUTPUT_GRACE {
        std::thread::sleep(Duration::from_millis(10));
    }
    for printer in printers {
        if printer.is_finished() {
            let _ = printer.join();
        } else {
            tracing::debug!("a process the job left behind still holds its output");
        }
    }
    if let Err(error) = std::fs::remove_dir_all(&store) {
        tracing::warn!(%error, store = %store.display(), "could not remove the job's store");
    }
    outcome
}

/// A new, empty directory for the job's store.
fn fresh_store_dir() -> std::io::Result<PathBuf> {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |since| since.as_nanos());
    let dir = std::env::temp_dir().join(format!("ttpu-launch-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir)?;
    Ok(dir)
}

/// Copies `stream` to this process's standard output (or error) line by line, each line
/// prefixed with `[index] `.
fn prefix_lines(stream: impl Read + Send + 'static, index: usize, to_stderr: bool) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            let prefix = format!("[{index}] ");
            // A closed standard stream of the launcher only loses the copy.
            let _ = if to_stderr {
                let mut out = std::io::stderr().lock();
                out.write_all(prefix.as_bytes()).and_then(|()| out.write_all(&line))
            } else {
                let mut out = std::io::stdout().lock();
                out.write_all(prefix.as_bytes()).and_then(|()| out.write_all(&line))
            };
        }
    })
}

/// Waits for every child; the first that fails stops the others.
fn wait_all(children: &mut [Child]) -> Result<Outcome, Error> {
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut first_failure = None;
    while statuses.iter().any(Option::is_none) {
        for index in 0..children.len() {
            if statuses[index].is_some() {
                continue;
            }
            let status = children[index].try_wait().map_err(|source| Error::Launch {
                message: format!("cannot wait for process {index}"),
                source: Some(source),
            })?;
            if let Some(status) = status {
                statuses[index] = Some(status);
                if !status.success() && first_failure.is_none() {
                    first_failure = Some(index);
                    tracing::debug!(index, %status, "a process of the job failed; stopping the others");
                    stop(children);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(Outcome { statuses: statuses.into_iter().flatten().collect(), first_failure })
}

/// Stops every child still running (each was started by the launcher, by its own handle).
fn stop(children: &mut [Child]) {
    for child in children.iter_mut() {
        if matches!(child.try_wait(), Ok(None)) {
            let _ = child.kill();
        }
    }
}
