//! Collectives of a job of several processes on the device, as far as the device keeps them:
//! their statistics, and the log of flushes that the job's ranks compare to find where their
//! programs diverged.
//!
//! The collectives themselves are `torch.distributed`'s: the Python package rewrites the
//! process-group ops (`c10d.allreduce_`, ...) to functional collectives and runs each one where
//! the runtime can: today on the host (the pending work runs, the operand is read, the group's
//! CPU backend reduces it, the result is uploaded and the program goes on), since the CPU plugin
//! refuses programs across processes. Every collective is counted here by kind and by where it
//! ran, so a test asserts that a training step's collectives took the recorded path.
//!
//! SPMD discipline: every rank must flush at the same points with the same pending work, or the
//! ranks' programs (and, inside programs, their collectives) stop matching. With the flush log
//! on, every flush is kept as (its number, its reason, how many pending steps it ran), and the
//! ranks compare their logs at each collective (`ttpu.distributed`'s debug mode): the first
//! differing entry names the flush where a rank went its own way.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ttpu_ir::Collective;

use crate::tensor::{self, DeviceTensor, Meta};
use crate::{Backend, Result};

/// One flush of pending work, as the flush log keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushRecord {
    /// Its number among every flush of this process, from 0.
    pub index: u64,
    /// Why it ran (`"optimizer step"`, `"item"`, `"collective all_reduce"`, ...).
    pub reason: String,
    /// How many pending steps it ran.
    pub steps: usize,
}

/// What the device's collectives did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CollectiveStats {
    /// Collectives recorded from `torch.distributed` calls, by kind (`all_reduce`,
    /// `all_gather_into_tensor`, ...).
    pub recorded: BTreeMap<String, u64>,
    /// Of those, how many ran on the host (flush, read, the group's CPU backend, upload).
    pub on_host: u64,
    /// Bytes the host path read from the device and wrote back.
    pub host_bytes: u64,
    /// Calls that reached the `ttpu` process-group backend's own methods (below PyTorch's
    /// Python dispatch, where a device collective never goes).
    pub backend_calls: BTreeMap<String, u64>,
}

/// The device's collective state.
#[derive(Default)]
pub(crate) struct Collectives {
    logging: AtomicBool,
    flushes: AtomicU64,
    log: Mutex<Vec<FlushRecord>>,
    stats: Mutex<CollectiveStats>,
}

impl Collectives {
    /// Notes a flush of `steps` pending steps for `reason`.
    pub(crate) fn flushed(&self, reason: &str, steps: usize) -> Result<()> {
        let index = self.flushes.fetch_add(1, Ordering::Relaxed);
        if self.logging.load(Ordering::Relaxed) {
            self.log.lock()?.push(FlushRecord { index, reason: reason.to_string(), steps });
        }
        Ok(())
    }
}

impl Backend {
    /// Counts a collective of `kind` recorded from a `torch.distributed` call; `host_bytes` is
    /// what its host run moved (`None` when it ran inside a program).
    pub fn count_collective(&self, kind: &str, host_bytes: Option<u64>) -> Result<()> {
        let mut stats = self.collectives().stats.lock()?;
        *stats.recorded.entry(kind.to_string()).or_default() += 1;
        if let Some(bytes) = host_bytes {
            stats.on_host += 1;
            stats.host_bytes += bytes;
        }
        Ok(())
    }

    /// Runs `collective` inside a program across the replicas `devices` (runtime device
    /// indices in replica order; in a job of several processes they include other processes'
    /// devices). `tensors` are this process's members, one on each of its devices among
    /// `devices`, in that order. The pending work of each member's device runs first (the
    /// program is split around the collective, so every rank flushes at the same point), and
    /// the results are fresh tensors on the members' devices: no data crosses the host. Counted
    /// as one collective of `kind` inside a program.
    ///
    /// With `in_step`, the collective is recorded into each member's pending program instead,
    /// which then runs as one replica of `devices` when its values are needed: the step and its
    /// collectives are one program (every rank must record the same and run it at the same
    /// point).
    pub fn collective(
        &self,
        kind: &str,
        tensors: &[DeviceTensor],
        collective: &Collective,
        devices: &[usize],
        in_step: bool,
    ) -> Result<Vec<DeviceTensor>> {
        if in_step {
            let mut results = Vec::with_capacity(tensors.len());
            for member in tensors {
                let state = member.state()?;
                let device = self.device(state.storage.device)?;
                let value = tensor::value_of(device, &state)?.collective_in_program(collective, devices)?;
                let meta = Meta::contiguous(value.dtype(), &value.dims());
                results.push(DeviceTensor::fresh(
                    state.storage.device,
                    meta,
                    value,
                    self.memory(state.storage.device)?,
                ));
            }
            self.count_collective(kind, None)?;
            return Ok(results);
        }
        let reason = format!("collective {kind}");
        let mut values = Vec::with_capacity(tensors.len());
        for member in tensors {
            let state = member.state()?;
            let device = self.device(state.storage.device)?;
            values.push((state.storage.device, tensor::value_of(device, &state)?));
            self.flush(device, &reason)?;
        }
        let operands: Vec<&ttpu_eager::Tensor> = values.iter().map(|(_, value)| value).collect();
        let results = ttpu_eager::Tensor::collective(&operands, collective, devices)?;
        self.count_collective(kind, None)?;
        results
            .into_iter()
            .zip(&values)
            .map(|(result, &(device, _))| {
                let meta = Meta::contiguous(result.dtype(), &result.dims());
                Ok(DeviceTensor::fresh(device, meta, result, self.memory(device)?))
            })
            .collect()
    }

    /// Counts a call that reached the process-group backend's method `method`.
    pub fn count_backend_call(&self, method: &str) -> Result<()> {
        *self.collectives().stats.lock()?.backend_calls.entry(method.to_string()).or_default() += 1;
        Ok(())
    }

    /// The collective statistics so far.
    pub fn collective_stats(&self) -> Result<CollectiveStats> {
        Ok(self.collectives().stats.lock()?.clone())
    }

    /// Turns the flush log on or off (off by default; turning it off empties it).
    pub fn set_flush_log(&self, enabled: bool) -> Result<()> {
        let collectives = self.collectives();
        collectives.logging.store(enabled, Ordering::Relaxed);
        if !enabled {
            collectives.log.lock()?.clear();
        }
        Ok(())
    }

    /// The flushes logged since the last call, oldest first.
    pub fn take_flush_log(&self) -> Result<Vec<FlushRecord>> {
        Ok(std::mem::take(&mut *self.collectives().log.lock()?))
    }
}
