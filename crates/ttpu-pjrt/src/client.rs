//! A PJRT client: the plugin's runtime, owning devices, compiled
//! executables and device buffers.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::buffer::{Buffer, ElementType, HostBuffer, dense_byte_size};
use crate::compile_options::CompileOptions;
use crate::error::{Error, Result};
use crate::executable::LoadedExecutable;
use crate::kv::{KvStore, StoreHandle, kv_get, kv_put, kv_try_get};
use crate::plugin::{Api, Args, Event, NamedValue, Plugin, RawNamedValues, api_fn, string_from_raw};
use crate::sys;

/// The owned `PJRT_Client`, shared by every object created from it so the
/// client outlives them all (PJRT objects keep raw pointers to their client).
pub(crate) struct ClientInner {
    pub(crate) api: &'static Api,
    pub(crate) raw: NonNull<sys::PJRT_Client>,
    /// The key-value store the plugin calls back into, for as long as the client lives (the
    /// CUDA plugin uses it after creation, at a program's first collective). Dropped after the
    /// client is destroyed, since fields drop after `Drop::drop`.
    _store: Option<Box<StoreHandle>>,
}

// SAFETY: the PJRT C API is thread-safe: a client may be used from any thread
// and concurrently, and `ClientInner` has no Rust-side mutable state.
unsafe impl Send for ClientInner {}
// SAFETY: see `Send` above.
unsafe impl Sync for ClientInner {}

impl Drop for ClientInner {
    fn drop(&mut self) {
        match api_fn!(self.api, PJRT_Client_Destroy) {
            Ok(f) => {
                let mut args = sys::PJRT_Client_Destroy_Args::sized();
                args.client = self.raw.as_ptr();
                // SAFETY: we own the client; every buffer and executable holds
                // an `Arc` of this, so none is left when it is destroyed, once.
                let err = unsafe { f(&mut args) };
                self.api.log_error("PJRT_Client_Destroy", err);
            }
            Err(e) => tracing::warn!(error = %e, "leaking a pjrt client"),
        }
    }
}

/// A PJRT client created from a [`Plugin`]. Cheap to clone (shared handle);
/// `Send + Sync`.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
    plugin: Plugin,
}

impl Client {
    /// Creates a client that runs programs synchronously, on the thread
    /// that calls [`LoadedExecutable::execute`].
    ///
    /// XLA's CPU client otherwise dispatches every non-trivial program to a
    /// worker thread and completes an event when it is done. `execute`
    /// always waits for that event, so the asynchrony buys nothing and costs
    /// a thread hand-off there and back on every run: a 1,000-op program
    /// over `f32[64]` took about 53 us per `execute` asynchronously and 9 us
    /// synchronously (2-core machine, 0.115 plugin). So this asks for the
    /// `asynchronous = false` create option, which the CPU plugin knows
    /// (0.115) or ignores (0.81). Plugins that reject it (the GPU ones
    /// validate option names) get a client with no options instead.
    pub fn new(plugin: &Plugin) -> Result<Client> {
        Self::with_options_or_none(plugin, &[("asynchronous", NamedValue::Bool(false))])
    }

    /// [`with_options`](Self::with_options), falling back to no options
    /// when the plugin rejects them.
    fn with_options_or_none(plugin: &Plugin, options: &[(&str, NamedValue)]) -> Result<Client> {
        match Self::with_options(plugin, options) {
            Err(error @ Error::Plugin { .. }) => {
                tracing::debug!(
                    %error,
                    ?options,
                    "pjrt plugin rejected the client options; creating the client without options"
                );
                Self::with_options(plugin, &[])
            }
            created => created,
        }
    }

    /// Creates a client with plugin-specific create options
    /// (`PJRT_Client_Create` with these options and no key-value store),
    /// e.g. `("asynchronous", NamedValue::Bool(false))` for the CPU plugin.
    /// What a plugin does with an option it does not know is up to the
    /// plugin: the 0.81 CPU plugin ignores it, the 0.115 CPU plugin and the
    /// GPU plugins report an [`Error::Plugin`] naming it.
    pub fn with_options(plugin: &Plugin, options: &[(&str, NamedValue)]) -> Result<Client> {
        Self::create(plugin, options, None)
    }

    /// Creates a client of a multi-process job: plugin-specific create options (the process's
    /// place in the job, such as `node_id`/`num_nodes` for the GPU plugins or `process_id` for
    /// the CPU plugin) and the job's key-value store, reached through all three callbacks
    /// (`kv_get`, `kv_try_get`, `kv_put`). The client keeps `store` alive as long as it lives.
    /// A `kv_get` waits at most `max_wait`, whatever timeout the plugin asks for, so a peer that
    /// never comes ends in an error naming the key.
    pub fn with_store(
        plugin: &Plugin,
        options: &[(&str, NamedValue)],
        store: Arc<dyn KvStore>,
        max_wait: Duration,
    ) -> Result<Client> {
        Self::create(plugin, options, Some(Box::new(StoreHandle { store, max_wait })))
    }

    fn create(plugin: &Plugin, options: &[(&str, NamedValue)], store: Option<Box<StoreHandle>>) -> Result<Client> {
        let api = plugin.api();
        let f = api_fn!(api, PJRT_Client_Create)?;
        let raw_options = RawNamedValues::new(options);
        let mut args = sys::PJRT_Client_Create_Args::sized();
        args.create_options = raw_options.as_ptr();
        args.num_options = raw_options.len();
        if let Some(store) = &store {
            let user_arg = std::ptr::from_ref::<StoreHandle>(store).cast_mut().cast();
            args.kv_get_callback = Some(kv_get);
            args.kv_get_user_arg = user_arg;
            args.kv_try_get_callback = Some(kv_try_get);
            args.kv_try_get_user_arg = user_arg;
            args.kv_put_callback = Some(kv_put);
            args.kv_put_user_arg = user_arg;
        }
        // SAFETY: `create_options` is null or points to `num_options` encoded values whose names
        // and values borrow from `options`; both outlive the call. The callbacks' `user_arg` is
        // the boxed store, which the client owns from here on and drops only after the plugin's
        // client is destroyed; the callbacks only read it through `&`. Only `client` is written.
        unsafe { api.call(f, &mut args) }?;
        let raw =
            NonNull::new(args.client).ok_or_else(|| Error::Contract("PJRT_Client_Create returned no client".into()))?;
        Ok(Client { inner: Arc::new(ClientInner { api, raw, _store: store }), plugin: plugin.clone() })
    }

    /// The plugin this client was created from.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    fn api(&self) -> &'static Api {
        self.inner.api
    }

    fn raw(&self) -> *mut sys::PJRT_Client {
        self.inner.raw.as_ptr()
    }

    /// Platform name, e.g. `"cpu"`.
    pub fn platform_name(&self) -> Result<String> {
        let f = api_fn!(self.api(), PJRT_Client_PlatformName)?;
        let mut args = sys::PJRT_Client_PlatformName_Args::sized();
        args.client = self.raw();
        // SAFETY: `client` is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        // SAFETY: the name is owned by the client, alive while `self` is.
        Ok(unsafe { string_from_raw(args.platform_name, args.platform_name_size) })
    }

    /// Platform version string (plugin-specific).
    pub fn platform_version(&self) -> Result<String> {
        let f = api_fn!(self.api(), PJRT_Client_PlatformVersion)?;
        let mut args = sys::PJRT_Client_PlatformVersion_Args::sized();
        args.client = self.raw();
        // SAFETY: `client` is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        // SAFETY: the string is owned by the client, alive while `self` is.
        Ok(unsafe { string_from_raw(args.platform_version, args.platform_version_size) })
    }

    /// The index of this client's process in its job (`PJRT_Client_ProcessIndex`): 0 for a
    /// client of one process.
    pub fn process_index(&self) -> Result<i32> {
        let f = api_fn!(self.api(), PJRT_Client_ProcessIndex)?;
        let mut args = sys::PJRT_Client_ProcessIndex_Args::sized();
        args.client = self.raw();
        // SAFETY: `client` is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        Ok(args.process_index)
    }

    /// All devices visible to the runtime: with a multi-process client, those of other
    /// processes too where the plugin lists them (the GPU plugins do, the CPU plugin lists its
    /// own only).
    pub fn devices(&self) -> Result<Vec<Device>> {
        let f = api_fn!(self.api(), PJRT_Client_Devices)?;
        let mut args = sys::PJRT_Client_Devices_Args::sized();
        args.client = self.raw();
        // SAFETY: `client` is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        // SAFETY: the plugin returned `num_devices` pointers owned by the client.
        Ok(unsafe { self.wrap_devices(args.devices, args.num_devices) })
    }

    /// Devices this process can issue work to.
    pub fn addressable_devices(&self) -> Result<Vec<Device>> {
        let f = api_fn!(self.api(), PJRT_Client_AddressableDevices)?;
        let mut args = sys::PJRT_Client_AddressableDevices_Args::sized();
        args.client = self.raw();
        // SAFETY: `client` is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        // SAFETY: the plugin returned `num_addressable_devices` pointers owned
        // by the client.
        Ok(unsafe { self.wrap_devices(args.addressable_devices, args.num_addressable_devices) })
    }

    /// Number of addressable devices.
    pub fn addressable_device_count(&self) -> Result<usize> {
        Ok(self.addressable_devices()?.len())
    }

    /// # Safety
    /// `ptr` must be null or point to `len` device pointers owned by the client.
    unsafe fn wrap_devices(&self, ptr: *const *mut sys::PJRT_Device, len: usize) -> Vec<Device> {
        if ptr.is_null() || len == 0 {
            return Vec::new();
        }
        // SAFETY: guaranteed by the caller.
        let raws = unsafe { std::slice::from_raw_parts(ptr, len) };
        raws.iter()
            .filter_map(|&raw| NonNull::new(raw))
            .map(|raw| Device { client: Arc::clone(&self.inner), raw })
            .collect()
    }

    fn first_addressable_device(&self) -> Result<Device> {
        self.addressable_devices()?.into_iter().next().ok_or(Error::NoDevice)
    }

    /// Compiles a StableHLO module given as MLIR text (format `"mlir"`) for
    /// one replica and one partition.
    pub fn compile(&self, mlir_text: &str) -> Result<LoadedExecutable> {
        self.compile_with(mlir_text, &CompileOptions::default())
    }

    /// Compiles a StableHLO module given as MLIR text with `options` (the
    /// replicas and the devices they run on).
    pub fn compile_with(&self, mlir_text: &str, options: &CompileOptions) -> Result<LoadedExecutable> {
        let f = api_fn!(self.api(), PJRT_Client_Compile)?;
        // `PJRT_Program::code` is `char*` (in/out in other calls); hand the
        // plugin a private copy so it can never write into caller memory.
        let mut code = mlir_text.as_bytes().to_vec();
        let format = b"mlir";
        let options = options.to_proto_bytes();

        let mut program = sys::PJRT_Program::sized();
        program.code = code.as_mut_ptr().cast();
        program.code_size = code.len();
        program.format = format.as_ptr().cast();
        program.format_size = format.len();

        let mut args = sys::PJRT_Client_Compile_Args::sized();
        args.client = self.raw();
        args.program = &program;
        args.compile_options = options.as_ptr().cast();
        args.compile_options_size = options.len();

        let start = Instant::now();
        // SAFETY: `program`, `code`, `format` and `options` outlive the call
        // and their sizes are exact; `client` is alive.
        unsafe { self.api().call(f, &mut args) }?;
        let raw = NonNull::new(args.executable)
            .ok_or_else(|| Error::Contract("PJRT_Client_Compile returned no executable".into()))?;
        let executable = LoadedExecutable::from_raw(Arc::clone(&self.inner), raw)?;
        tracing::debug!(
            elapsed_ms = start.elapsed().as_secs_f64() * 1e3,
            bytes = mlir_text.len(),
            outputs = executable.num_outputs(),
            "compiled mlir module"
        );
        Ok(executable)
    }

    /// Loads an executable produced by [`LoadedExecutable::serialize`] with
    /// the same plugin build (`PJRT_Executable_DeserializeAndLoad`), keeping
    /// the compile options stored in it.
    pub fn deserialize_executable(&self, bytes: &[u8]) -> Result<LoadedExecutable> {
        let f = api_fn!(self.api(), PJRT_Executable_DeserializeAndLoad)?;
        let mut args = sys::PJRT_Executable_DeserializeAndLoad_Args::sized();
        args.client = self.raw();
        args.serialized_executable = bytes.as_ptr().cast();
        args.serialized_executable_size = bytes.len();
        // SAFETY: `bytes` outlives the call and its size is exact; `client`
        // is alive; no overriding options (null).
        unsafe { self.api().call(f, &mut args) }?;
        let raw = NonNull::new(args.loaded_executable)
            .ok_or_else(|| Error::Contract("PJRT_Executable_DeserializeAndLoad returned no executable".into()))?;
        LoadedExecutable::from_raw(Arc::clone(&self.inner), raw)
    }

    /// Copies dense row-major host data to the first addressable device.
    ///
    /// Waits until the plugin is done reading `data`, so the slice may be
    /// dropped or reused as soon as this returns.
    pub fn buffer_from_host(&self, data: &[u8], element_type: ElementType, dims: &[i64]) -> Result<Buffer> {
        self.buffer_from_host_on(&self.first_addressable_device()?, data, element_type, dims)
    }

    /// Copies dense row-major host data to `device` (one of this client's
    /// addressable devices); waits as [`buffer_from_host`](Self::buffer_from_host) does.
    pub fn buffer_from_host_on(
        &self,
        device: &Device,
        data: &[u8],
        element_type: ElementType,
        dims: &[i64],
    ) -> Result<Buffer> {
        if !Arc::ptr_eq(&device.client, &self.inner) {
            return Err(Error::Contract("a device of another client was given to buffer_from_host_on".into()));
        }
        let expected = dense_byte_size(element_type, dims)?;
        if data.len() != expected {
            return Err(Error::SizeMismatch { expected, actual: data.len() });
        }
        let f = api_fn!(self.api(), PJRT_Client_BufferFromHostBuffer)?;
        let mut args = sys::PJRT_Client_BufferFromHostBuffer_Args::sized();
        args.client = self.raw();
        args.data = data.as_ptr().cast();
        args.type_ = element_type.to_raw();
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        // No byte strides and no device layout: dense, major-to-minor.
        args.host_buffer_semantics = sys::PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
        args.device = device.raw.as_ptr();
        // SAFETY: `data` holds exactly the bytes `dims` × element size need
        // (checked above) and, under kImmutableUntilTransferCompletes, is kept
        // borrowed and unmodified until `done_with_host_buffer` fires, which
        // we await below before returning; `dims`, `client` and `device` are
        // alive for the call.
        unsafe { self.api().call(f, &mut args) }?;
        // Own the buffer and the event first, so both are released on any
        // error below.
        let done = Event::from_raw(self.api(), args.done_with_host_buffer);
        let raw = NonNull::new(args.buffer)
            .ok_or_else(|| Error::Contract("PJRT_Client_BufferFromHostBuffer returned no buffer".into()));
        let buffer = raw.map(|raw| Buffer::from_raw(Arc::clone(&self.inner), raw));
        if let Some(done) = done {
            done.wait()?;
        }
        buffer
    }

    /// [`buffer_from_host`](Self::buffer_from_host) for a [`HostBuffer`].
    pub fn buffer_from_host_buffer(&self, host: &HostBuffer) -> Result<Buffer> {
        self.buffer_from_host(&host.data, host.element_type, &host.dims)
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("plugin", &self.plugin).finish_non_exhaustive()
    }
}

/// A device of a client. Not an owned PJRT object (the client owns its
/// devices), so it needs no destructor; it keeps the client alive.
#[derive(Clone)]
pub struct Device {
    client: Arc<ClientInner>,
    raw: NonNull<sys::PJRT_Device>,
}

// SAFETY: a device is immutable client-owned data and the PJRT C API is
// thread-safe; the `Arc` keeps the client (and so the device) alive.
unsafe impl Send for Device {}
// SAFETY: see `Send` above.
unsafe impl Sync for Device {}

impl Device {
    pub(crate) fn from_parts(client: Arc<ClientInner>, raw: NonNull<sys::PJRT_Device>) -> Device {
        Device { client, raw }
    }

    fn description(&self) -> Result<*mut sys::PJRT_DeviceDescription> {
        let api = self.client.api;
        let f = api_fn!(api, PJRT_Device_GetDescription)?;
        let mut args = sys::PJRT_Device_GetDescription_Args::sized();
        args.device = self.raw.as_ptr();
        // SAFETY: the device is alive as long as its client, which we hold.
        unsafe { api.call(f, &mut args) }?;
        Ok(args.device_description)
    }

    /// The device id (unique among devices of its kind).
    pub fn id(&self) -> Result<i32> {
        let api = self.client.api;
        let f = api_fn!(api, PJRT_DeviceDescription_Id)?;
        let mut args = sys::PJRT_DeviceDescription_Id_Args::sized();
        args.device_description = self.description()?;
        // SAFETY: the description is owned by the device, alive as above.
        unsafe { api.call(f, &mut args) }?;
        Ok(args.id)
    }

    /// The index of the process whose client can issue work to this device
    /// (`PJRT_DeviceDescription_ProcessIndex`).
    pub fn process_index(&self) -> Result<i32> {
        let api = self.client.api;
        let f = api_fn!(api, PJRT_DeviceDescription_ProcessIndex)?;
        let mut args = sys::PJRT_DeviceDescription_ProcessIndex_Args::sized();
        args.device_description = self.description()?;
        // SAFETY: the description is owned by the device, alive as above.
        unsafe { api.call(f, &mut args) }?;
        Ok(args.process_index)
    }

    /// The device kind, e.g. `"cpu"`.
    pub fn kind(&self) -> Result<String> {
        let api = self.client.api;
        let f = api_fn!(api, PJRT_DeviceDescription_Kind)?;
        let mut args = sys::PJRT_DeviceDescription_Kind_Args::sized();
        args.device_description = self.description()?;
        // SAFETY: the description is owned by the device, alive as above.
        unsafe { api.call(f, &mut args) }?;
        // SAFETY: the string is owned by the device, alive as above.
        Ok(unsafe { string_from_raw(args.device_kind, args.device_kind_size) })
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("id", &self.id().ok()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_options_fall_back_to_a_client_without_options() {
        let path = crate::find_plugin().unwrap_or_else(|e| panic!("{e}"));
        let plugin = Plugin::load(path).expect("load");
        // The 0.115 CPU plugin rejects an unknown name (0.81 ignores it);
        // either way a working client comes back.
        let client = Client::with_options_or_none(&plugin, &[("ttpu_no_such_option", NamedValue::Int64(1))])
            .unwrap_or_else(|e| panic!("{e}"));
        let data: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let buffer = client.buffer_from_host(&data, ElementType::F32, &[2]).expect("upload");
        assert_eq!(buffer.to_host().expect("download").data, data);
    }
}
