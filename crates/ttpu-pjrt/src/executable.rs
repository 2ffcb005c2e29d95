//! Compiled executables: running them, and serializing them for an on-disk
//! cache.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use crate::buffer::Buffer;
use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::plugin::{Api, Args, Event, api_fn};
use crate::sys;

/// A compiled program loaded on the client's devices (an owned
/// `PJRT_LoadedExecutable`). `Send + Sync`.
pub struct LoadedExecutable {
    client: Arc<ClientInner>,
    raw: NonNull<sys::PJRT_LoadedExecutable>,
    /// Outputs per device, asked once: every `execute` needs it to size the
    /// output list.
    num_outputs: usize,
}

// SAFETY: the PJRT C API is thread-safe; an executable may be executed from
// several threads at once. Destruction needs ownership, so it cannot race.
unsafe impl Send for LoadedExecutable {}
// SAFETY: see `Send` above.
unsafe impl Sync for LoadedExecutable {}

impl LoadedExecutable {
    /// Takes ownership of an executable loaded through `client`.
    pub(crate) fn from_raw(client: Arc<ClientInner>, raw: NonNull<sys::PJRT_LoadedExecutable>) -> Result<Self> {
        let mut executable = Self { client, raw, num_outputs: 0 };
        executable.num_outputs = executable.executable()?.num_outputs()?;
        Ok(executable)
    }

    fn api(&self) -> &'static Api {
        self.client.api
    }

    /// The `PJRT_Executable` view (needed for outputs and serialization).
    fn executable(&self) -> Result<Executable> {
        let f = api_fn!(self.api(), PJRT_LoadedExecutable_GetExecutable)?;
        let mut args = sys::PJRT_LoadedExecutable_GetExecutable_Args::sized();
        args.loaded_executable = self.raw.as_ptr();
        // SAFETY: the loaded executable is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        let raw = NonNull::new(args.executable)
            .ok_or_else(|| Error::Contract("PJRT_LoadedExecutable_GetExecutable returned null".into()))?;
        Ok(Executable { api: self.api(), raw })
    }

    /// Number of output buffers one execution produces. A function
    /// returning several values yields one buffer per value.
    pub fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    /// Runs the executable once on its single device and waits for it to
    /// finish. The arguments are never donated: they stay valid afterwards.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        for (index, buffer) in args.iter().enumerate() {
            if !Arc::ptr_eq(buffer.client(), &self.client) {
                return Err(Error::ForeignBuffer { index });
            }
        }
        let f = api_fn!(self.api(), PJRT_LoadedExecutable_Execute)?;

        let arg_ptrs: Vec<*mut sys::PJRT_Buffer> = args.iter().map(|b| b.raw()).collect();
        let arg_lists = [arg_ptrs.as_ptr()];
        let mut outputs: Vec<*mut sys::PJRT_Buffer> = vec![std::ptr::null_mut(); self.num_outputs];
        let output_lists = [outputs.as_mut_ptr()];
        let mut complete: [*mut sys::PJRT_Event; 1] = [std::ptr::null_mut()];
        // The caller keeps its `&Buffer`s, so none may be donated to outputs
        // even if the module declares input/output aliasing.
        let non_donatable: Vec<i64> = (0..args.len() as i64).collect();

        let mut options = sys::PJRT_ExecuteOptions::sized();
        options.non_donatable_input_indices = non_donatable.as_ptr();
        options.num_non_donatable_input_indices = non_donatable.len();

        let mut exec_args = sys::PJRT_LoadedExecutable_Execute_Args::sized();
        exec_args.executable = self.raw.as_ptr();
        exec_args.options = &mut options;
        exec_args.argument_lists = arg_lists.as_ptr();
        exec_args.num_devices = 1;
        exec_args.num_args = args.len();
        exec_args.output_lists = output_lists.as_ptr();
        exec_args.device_complete_events = complete.as_mut_ptr();

        let start = Instant::now();
        // SAFETY: one device: `arg_lists`/`output_lists` each hold one list;
        // the argument list holds `num_args` live buffers of this client
        // (checked above, borrowed for the call); the output list has room
        // for `num_outputs` pointers, as PJRT_Executable_NumOutputs said;
        // `complete` has room for one event; `options` and `non_donatable`
        // outlive the call.
        unsafe { self.api().call(f, &mut exec_args) }?;
        // Own everything the plugin handed back before anything can fail.
        let done = Event::from_raw(self.api(), complete[0]);
        let results: Vec<Buffer> = outputs
            .iter()
            .filter_map(|&raw| NonNull::new(raw))
            .map(|raw| Buffer::from_raw(Arc::clone(&self.client), raw))
            .collect();
        if let Some(done) = done {
            done.wait()?;
        }
        if results.len() != self.num_outputs {
            return Err(Error::Contract(format!("execute produced {} of {} outputs", results.len(), self.num_outputs)));
        }
        tracing::debug!(
            elapsed_us = start.elapsed().as_secs_f64() * 1e6,
            args = args.len(),
            outputs = results.len(),
            "executed"
        );
        Ok(results)
    }

    /// Serializes the compiled executable (`PJRT_Executable_Serialize`). The
    /// bytes load again only with the same plugin build, through
    /// [`Client::deserialize_executable`](crate::Client::deserialize_executable).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        self.executable()?.serialize()
    }
}

impl Drop for LoadedExecutable {
    fn drop(&mut self) {
        match api_fn!(self.api(), PJRT_LoadedExecutable_Destroy) {
            Ok(f) => {
                let mut args = sys::PJRT_LoadedExecutable_Destroy_Args::sized();
                args.executable = self.raw.as_ptr();
                // SAFETY: we own the executable and destroy it exactly once,
                // here; its client is still alive (we hold an `Arc` to it).
                let err = unsafe { f(&mut args) };
                self.api().log_error("PJRT_LoadedExecutable_Destroy", err);
            }
            Err(e) => tracing::warn!(error = %e, "leaking a pjrt executable"),
        }
    }
}

impl fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedExecutable").field("num_outputs", &self.num_outputs).finish_non_exhaustive()
    }
}

/// An owned `PJRT_Executable` (the device-independent view of a loaded
/// executable), alive only inside the methods that need it.
struct Executable {
    api: &'static Api,
    raw: NonNull<sys::PJRT_Executable>,
}

impl Executable {
    fn num_outputs(&self) -> Result<usize> {
        let f = api_fn!(self.api, PJRT_Executable_NumOutputs)?;
        let mut args = sys::PJRT_Executable_NumOutputs_Args::sized();
        args.executable = self.raw.as_ptr();
        // SAFETY: the executable is alive (owned by `self`).
        unsafe { self.api.call(f, &mut args) }?;
        Ok(args.num_outputs)
    }

    fn serialize(&self) -> Result<Vec<u8>> {
        let f = api_fn!(self.api, PJRT_Executable_Serialize)?;
        let mut args = sys::PJRT_Executable_Serialize_Args::sized();
        args.executable = self.raw.as_ptr();
        // SAFETY: the executable is alive (owned by `self`); only out fields
        // are written.
        unsafe { self.api.call(f, &mut args) }?;
        let bytes = if args.serialized_bytes.is_null() || args.serialized_bytes_size == 0 {
            Vec::new()
        } else {
            // SAFETY: the bytes are backed by `serialized_executable`, which
            // is freed only below, after this copy.
            unsafe { std::slice::from_raw_parts(args.serialized_bytes.cast::<u8>(), args.serialized_bytes_size) }
                .to_vec()
        };
        if let (Some(deleter), false) = (args.serialized_executable_deleter, args.serialized_executable.is_null()) {
            // SAFETY: the plugin documents this deleter as the one call that
            // frees the backing object; it is called exactly once.
            unsafe { deleter(args.serialized_executable) };
        }
        Ok(bytes)
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        match api_fn!(self.api, PJRT_Executable_Destroy) {
            Ok(f) => {
                let mut args = sys::PJRT_Executable_Destroy_Args::sized();
                args.executable = self.raw.as_ptr();
                // SAFETY: we own this view (from GetExecutable) and destroy
                // it exactly once, here.
                let err = unsafe { f(&mut args) };
                self.api.log_error("PJRT_Executable_Destroy", err);
            }
            Err(e) => tracing::warn!(error = %e, "leaking a pjrt executable view"),
        }
    }
}
