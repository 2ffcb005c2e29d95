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
        let mut results = self.execute_replicated(&[args], &[])?;
        results.pop().ok_or_else(|| Error::Contract("execute produced no output list".into()))
    }

    /// Ids of the devices the executable runs on, in the order
    /// [`execute_replicated`](Self::execute_replicated) takes argument lists
    /// (`PJRT_LoadedExecutable_AddressableDevices`).
    pub fn device_ids(&self) -> Result<Vec<i32>> {
        let f = api_fn!(self.api(), PJRT_LoadedExecutable_AddressableDevices)?;
        let mut args = sys::PJRT_LoadedExecutable_AddressableDevices_Args::sized();
        args.executable = self.raw.as_ptr();
        // SAFETY: the loaded executable is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        if args.addressable_devices.is_null() || args.num_addressable_devices == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returned `num_addressable_devices` device
        // pointers owned by the executable, alive while `self` is.
        let raws = unsafe { std::slice::from_raw_parts(args.addressable_devices, args.num_addressable_devices) };
        raws.iter()
            .map(|&raw| {
                let raw = NonNull::new(raw)
                    .ok_or_else(|| Error::Contract("an addressable device of an executable is null".into()))?;
                crate::client::Device::from_parts(Arc::clone(&self.client), raw).id()
            })
            .collect()
    }

    /// Runs the executable once on each of its devices, with one argument
    /// list per device in [`device_ids`](Self::device_ids) order, waits for
    /// all of them, and returns one output list per device.
    ///
    /// The arguments at the positions in `donated` may be donated: when the
    /// module aliases them to outputs (`tf.aliasing_output`), the plugin
    /// reuses their memory for those outputs and the argument buffers are
    /// deleted ([`Buffer::is_deleted`]; reading one is [`Error::Donated`]).
    /// Every other argument stays valid.
    pub fn execute_replicated(&self, arg_lists: &[&[&Buffer]], donated: &[usize]) -> Result<Vec<Vec<Buffer>>> {
        let num_devices = arg_lists.len();
        let num_args = arg_lists.first().map_or(0, |list| list.len());
        if num_devices == 0 {
            return Err(Error::ArgumentLists("no argument list given".into()));
        }
        if let Some(list) = arg_lists.iter().find(|list| list.len() != num_args) {
            return Err(Error::ArgumentLists(format!(
                "argument lists of different lengths ({num_args} and {})",
                list.len()
            )));
        }
        if num_devices > 1 {
            let devices = self.device_ids()?.len();
            if devices != num_devices {
                return Err(Error::ArgumentLists(format!(
                    "{num_devices} argument lists for an executable on {devices} devices"
                )));
            }
        }
        for list in arg_lists {
            for (index, buffer) in list.iter().enumerate() {
                if !Arc::ptr_eq(buffer.client(), &self.client) {
                    return Err(Error::ForeignBuffer { index });
                }
                if buffer.is_deleted()? {
                    return Err(Error::Donated);
                }
            }
        }
        let f = api_fn!(self.api(), PJRT_LoadedExecutable_Execute)?;

        let arg_ptrs: Vec<Vec<*mut sys::PJRT_Buffer>> =
            arg_lists.iter().map(|list| list.iter().map(|buffer| buffer.raw()).collect()).collect();
        let arg_list_ptrs: Vec<*const *mut sys::PJRT_Buffer> = arg_ptrs.iter().map(|list| list.as_ptr()).collect();
        let mut outputs: Vec<Vec<*mut sys::PJRT_Buffer>> =
            (0..num_devices).map(|_| vec![std::ptr::null_mut(); self.num_outputs]).collect();
        let output_list_ptrs: Vec<*mut *mut sys::PJRT_Buffer> =
            outputs.iter_mut().map(|list| list.as_mut_ptr()).collect();
        let mut complete: Vec<*mut sys::PJRT_Event> = vec![std::ptr::null_mut(); num_devices];
        // Callers keep their `&Buffer`s, so only the positions they offer
        // may be donated, even where the module declares aliasing.
        let non_donatable: Vec<i64> =
            (0..num_args).filter(|index| !donated.contains(index)).map(|index| index as i64).collect();

        let mut options = sys::PJRT_ExecuteOptions::sized();
        options.non_donatable_input_indices = non_donatable.as_ptr();
        options.num_non_donatable_input_indices = non_donatable.len();

        let mut exec_args = sys::PJRT_LoadedExecutable_Execute_Args::sized();
        exec_args.executable = self.raw.as_ptr();
        exec_args.options = &mut options;
        exec_args.argument_lists = arg_list_ptrs.as_ptr();
        exec_args.num_devices = num_devices;
        exec_args.num_args = num_args;
        exec_args.output_lists = output_list_ptrs.as_ptr();
        exec_args.device_complete_events = complete.as_mut_ptr();

        let start = Instant::now();
        // SAFETY: `arg_list_ptrs` and `output_list_ptrs` each hold
        // `num_devices` lists; every argument list holds `num_args` live
        // buffers of this client (checked above, borrowed for the call);
        // every output list has room for `num_outputs` pointers, as
        // PJRT_Executable_NumOutputs said; `complete` has room for one event
        // per device; `options` and `non_donatable` outlive the call.
        unsafe { self.api().call(f, &mut exec_args) }?;
        // Own everything the plugin handed back before anything can fail.
        let done: Vec<Event> = complete.iter().filter_map(|&event| Event::from_raw(self.api(), event)).collect();
        let results: Vec<Vec<Buffer>> = outputs
            .iter()
            .map(|list| {
                list.iter()
                    .filter_map(|&raw| NonNull::new(raw))
                    .map(|raw| Buffer::from_raw(Arc::clone(&self.client), raw))
                    .collect()
            })
            .collect();
        for event in done {
            event.wait()?;
        }
        if let Some(list) = results.iter().find(|list| list.len() != self.num_outputs) {
            return Err(Error::Contract(format!("execute produced {} of {} outputs", list.len(), self.num_outputs)));
        }
        tracing::debug!(
            elapsed_us = start.elapsed().as_secs_f64() * 1e6,
            devices = num_devices,
            args = num_args,
            outputs = self.num_outputs,
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

    /// XLA's cost analysis of the compiled program (`PJRT_Executable_GetCostAnalysis`): named
    /// estimates such as `flops`, `bytes accessed` and `transcendentals`, as the plugin reports
    /// them (the names and their set vary between plugins).
    pub fn cost_analysis(&self) -> Result<Vec<(String, crate::NamedValue)>> {
        self.executable()?.cost_analysis()
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

    fn cost_analysis(&self) -> Result<Vec<(String, crate::NamedValue)>> {
        let f = api_fn!(self.api, PJRT_Executable_GetCostAnalysis)?;
        let mut args = sys::PJRT_Executable_GetCostAnalysis_Args::sized();
        args.executable = self.raw.as_ptr();
        // SAFETY: the executable is alive (owned by `self`); only out fields are written.
        unsafe { self.api.call(f, &mut args) }?;
        if args.properties.is_null() || args.num_properties == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returned `num_properties` values owned by the executable, alive
        // while `self` is; they are copied out here.
        let values = unsafe { std::slice::from_raw_parts(args.properties, args.num_properties) };
        // SAFETY: each value comes from the plugin and follows the contract `named_value` needs.
        Ok(values.iter().filter_map(|value| unsafe { crate::plugin::named_value(value) }).collect())
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
