//! Loading a PJRT plugin and the crate-internal plumbing every call goes
//! through: function lookup in the plugin's API table, error conversion and
//! event handling.
//!
//! A plugin is loaded once per canonical path and stays loaded for the rest
//! of the process; see [`Plugin::load`] for why it is never unloaded.

use std::collections::HashMap;
use std::ffi::c_char;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::error::{Error, ErrorCode, Result};
use crate::sys;

/// Looks up a function in the plugin's API table by its C name, after
/// checking that the plugin's table is large enough to hold that field (an
/// older plugin has a shorter table). Evaluates to `Result<fn pointer>`.
macro_rules! api_fn {
    ($api:expr, $name:ident) => {{
        let api: &$crate::plugin::Api = $api;
        api.check_field(
            ::std::mem::offset_of!($crate::sys::PJRT_Api, $name),
            ::std::mem::size_of::<$crate::sys::$name>(),
            stringify!($name),
        )
        .and_then(|()| {
            // SAFETY: `check_field` verified that the plugin's table (which
            // lives as long as the process, the plugin is never unloaded)
            // extends past this field, so the read stays inside it. The read
            // goes through a raw pointer because the table may be shorter than
            // our `PJRT_Api`, so no reference to the whole struct is formed.
            let f = unsafe { ::std::ptr::addr_of!((*api.raw_ptr()).$name).read() };
            f.ok_or($crate::Error::Unsupported { function: stringify!($name) })
        })
    }};
}
pub(crate) use api_fn;

/// Argument structs of the C API: built zeroed (every optional field unset)
/// with `struct_size` set from the 0.81 header's `*_STRUCT_SIZE` constant.
/// That constant tells the plugin which fields we know; a newer plugin
/// treats everything past it as unset.
pub(crate) trait Args: Default {
    /// A zeroed struct with its `struct_size` set.
    fn sized() -> Self;
}

macro_rules! args_structs {
    ($($ty:ident => $size:ident),* $(,)?) => {
        $(
            impl Args for sys::$ty {
                fn sized() -> Self {
                    Self { struct_size: sys::$size as usize, ..Default::default() }
                }
            }
        )*
    };
}

args_structs! {
    PJRT_Error_Destroy_Args => PJRT_Error_Destroy_Args_STRUCT_SIZE,
    PJRT_Error_Message_Args => PJRT_Error_Message_Args_STRUCT_SIZE,
    PJRT_Error_GetCode_Args => PJRT_Error_GetCode_Args_STRUCT_SIZE,
    PJRT_Plugin_Initialize_Args => PJRT_Plugin_Initialize_Args_STRUCT_SIZE,
    PJRT_Plugin_Attributes_Args => PJRT_Plugin_Attributes_Args_STRUCT_SIZE,
    PJRT_NamedValue => PJRT_NamedValue_STRUCT_SIZE,
    PJRT_Event_Destroy_Args => PJRT_Event_Destroy_Args_STRUCT_SIZE,
    PJRT_Event_Await_Args => PJRT_Event_Await_Args_STRUCT_SIZE,
    PJRT_Client_Create_Args => PJRT_Client_Create_Args_STRUCT_SIZE,
    PJRT_Client_Destroy_Args => PJRT_Client_Destroy_Args_STRUCT_SIZE,
    PJRT_Client_PlatformName_Args => PJRT_Client_PlatformName_Args_STRUCT_SIZE,
    PJRT_Client_PlatformVersion_Args => PJRT_Client_PlatformVersion_Args_STRUCT_SIZE,
    PJRT_Client_Devices_Args => PJRT_Client_Devices_Args_STRUCT_SIZE,
    PJRT_Client_AddressableDevices_Args => PJRT_Client_AddressableDevices_Args_STRUCT_SIZE,
    PJRT_Program => PJRT_Program_STRUCT_SIZE,
    PJRT_Client_Compile_Args => PJRT_Client_Compile_Args_STRUCT_SIZE,
    PJRT_Client_BufferFromHostBuffer_Args => PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE,
    PJRT_Device_GetDescription_Args => PJRT_Device_GetDescription_Args_STRUCT_SIZE,
    PJRT_DeviceDescription_Id_Args => PJRT_DeviceDescription_Id_Args_STRUCT_SIZE,
    PJRT_DeviceDescription_Kind_Args => PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE,
    PJRT_Executable_Destroy_Args => PJRT_Executable_Destroy_Args_STRUCT_SIZE,
    PJRT_Executable_NumOutputs_Args => PJRT_Executable_NumOutputs_Args_STRUCT_SIZE,
    PJRT_Executable_Serialize_Args => PJRT_Executable_Serialize_Args_STRUCT_SIZE,
    PJRT_Executable_GetCostAnalysis_Args => PJRT_Executable_GetCostAnalysis_Args_STRUCT_SIZE,
    PJRT_Executable_DeserializeAndLoad_Args => PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE,
    PJRT_LoadedExecutable_Destroy_Args => PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
    PJRT_LoadedExecutable_GetExecutable_Args => PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE,
    PJRT_ExecuteOptions => PJRT_ExecuteOptions_STRUCT_SIZE,
    PJRT_LoadedExecutable_Execute_Args => PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE,
    PJRT_Buffer_Destroy_Args => PJRT_Buffer_Destroy_Args_STRUCT_SIZE,
    PJRT_Buffer_ElementType_Args => PJRT_Buffer_ElementType_Args_STRUCT_SIZE,
    PJRT_Buffer_Dimensions_Args => PJRT_Buffer_Dimensions_Args_STRUCT_SIZE,
    PJRT_Buffer_OnDeviceSizeInBytes_Args => PJRT_Buffer_OnDeviceSizeInBytes_Args_STRUCT_SIZE,
    PJRT_Buffer_GetMemoryLayout_Args => PJRT_Buffer_GetMemoryLayout_Args_STRUCT_SIZE,
    PJRT_Buffer_MemoryLayout => PJRT_Buffer_MemoryLayout_STRUCT_SIZE,
    PJRT_Buffer_MemoryLayout_Tiled => PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE,
    PJRT_Buffer_ToHostBuffer_Args => PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE,
    PJRT_Buffer_IsOnCpu_Args => PJRT_Buffer_IsOnCpu_Args_STRUCT_SIZE,
    PJRT_Buffer_ReadyEvent_Args => PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE,
    PJRT_Buffer_UnsafePointer_Args => PJRT_Buffer_UnsafePointer_Args_STRUCT_SIZE,
    PJRT_Buffer_IsDeleted_Args => PJRT_Buffer_IsDeleted_Args_STRUCT_SIZE,
    PJRT_Buffer_Device_Args => PJRT_Buffer_Device_Args_STRUCT_SIZE,
    PJRT_LoadedExecutable_AddressableDevices_Args => PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE,
    PJRT_Client_ProcessIndex_Args => PJRT_Client_ProcessIndex_Args_STRUCT_SIZE,
    PJRT_DeviceDescription_ProcessIndex_Args => PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE,
    PJRT_KeyValueGetCallback_Args => PJRT_KeyValueGetCallback_Args_STRUCT_SIZE,
    PJRT_KeyValueTryGetCallback_Args => PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE,
    PJRT_KeyValuePutCallback_Args => PJRT_KeyValuePutCallback_Args_STRUCT_SIZE,
}

/// Signature shared by nearly every C API function.
pub(crate) type RawFn<A> = unsafe extern "C" fn(*mut A) -> *mut sys::PJRT_Error;

/// The API table of one loaded plugin. Leaked on purpose (see
/// [`Plugin::load`]), so every handle simply holds `&'static Api`.
pub(crate) struct Api {
    /// The plugin's table. Only read field by field through `api_fn!`: a
    /// plugin older than our header may have a shorter table.
    raw: NonNull<sys::PJRT_Api>,
    /// `struct_size` of the plugin's table, read once at load.
    struct_size: usize,
    path: PathBuf,
    version: (i32, i32),
}

// SAFETY: the table is immutable static data of a plugin that is never
// unloaded, and the PJRT C API is specified to be thread-safe: its functions
// may be called from any thread, concurrently.
unsafe impl Send for Api {}
// SAFETY: see `Send` above; `Api` itself has no interior mutability.
unsafe impl Sync for Api {}

impl Api {
    pub(crate) fn raw_ptr(&self) -> *const sys::PJRT_Api {
        self.raw.as_ptr()
    }

    /// Whether the plugin's table holds a field of `size` bytes at `offset`.
    pub(crate) fn check_field(&self, offset: usize, size: usize, name: &'static str) -> Result<()> {
        if offset + size <= self.struct_size { Ok(()) } else { Err(Error::Unsupported { function: name }) }
    }

    /// Calls `f` and turns a returned `PJRT_Error` into [`Error::Plugin`].
    ///
    /// # Safety
    /// Every pointer in `args` must satisfy what the C API documents for `f`
    /// (valid, alive for the call, owned by the right client).
    pub(crate) unsafe fn call<A>(&'static self, f: RawFn<A>, args: &mut A) -> Result<()> {
        // SAFETY: `args` is a valid, exclusive pointer for the call; the
        // validity of the pointers inside it is the caller's obligation.
        let err = unsafe { f(args) };
        self.check(err)
    }

    /// Converts a returned `PJRT_Error*` (null means success), destroying it.
    pub(crate) fn check(&'static self, err: *mut sys::PJRT_Error) -> Result<()> {
        match NonNull::new(err) {
            None => Ok(()),
            Some(raw) => Err(OwnedError { api: self, raw }.to_error()),
        }
    }

    /// Logs an error that cannot be returned (from a `Drop`) and destroys it.
    pub(crate) fn log_error(&'static self, what: &str, err: *mut sys::PJRT_Error) {
        if let Err(e) = self.check(err) {
            tracing::warn!(error = %e, "{what} failed");
        }
    }
}

/// Copies a `(char*, size)` pair returned by the plugin into a `String`.
///
/// # Safety
/// `ptr` must be null or point to `len` readable bytes.
pub(crate) unsafe fn string_from_raw(ptr: *const c_char, len: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    // SAFETY: non-null and `len` readable bytes, guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}

/// A `PJRT_Error` we own; destroyed exactly once, on drop.
struct OwnedError {
    api: &'static Api,
    raw: NonNull<sys::PJRT_Error>,
}

impl OwnedError {
    fn to_error(&self) -> Error {
        Error::Plugin { code: self.code(), message: self.message() }
    }

    fn message(&self) -> String {
        let Ok(f) = api_fn!(self.api, PJRT_Error_Message) else {
            return "(plugin offers no PJRT_Error_Message)".to_owned();
        };
        let mut args = sys::PJRT_Error_Message_Args::sized();
        args.error = self.raw.as_ptr();
        // SAFETY: `args.error` is a live error owned by `self`; the call only
        // fills the out fields.
        unsafe { f(&mut args) };
        // SAFETY: the message buffer lives as long as the error, which `self`
        // keeps alive for this borrow.
        unsafe { string_from_raw(args.message, args.message_size) }
    }

    fn code(&self) -> ErrorCode {
        let Ok(f) = api_fn!(self.api, PJRT_Error_GetCode) else {
            return ErrorCode::Unknown;
        };
        let mut args = sys::PJRT_Error_GetCode_Args::sized();
        args.error = self.raw.as_ptr();
        // SAFETY: `args.error` is a live error owned by `self`.
        let err = unsafe { f(&mut args) };
        match NonNull::new(err) {
            None => ErrorCode::from_raw(args.code),
            Some(raw) => {
                // Asking for the code failed; release that second error too.
                drop(OwnedError { api: self.api, raw });
                ErrorCode::Unknown
            }
        }
    }
}

impl Drop for OwnedError {
    fn drop(&mut self) {
        match api_fn!(self.api, PJRT_Error_Destroy) {
            Ok(f) => {
                let mut args = sys::PJRT_Error_Destroy_Args::sized();
                args.error = self.raw.as_ptr();
                // SAFETY: we own this error and destroy it exactly once, here.
                unsafe { f(&mut args) };
            }
            Err(_) => tracing::warn!("plugin offers no PJRT_Error_Destroy; leaking an error"),
        }
    }
}

/// A `PJRT_Event` we own; destroyed exactly once, on drop.
pub(crate) struct Event {
    api: &'static Api,
    raw: NonNull<sys::PJRT_Event>,
}

impl Event {
    /// Takes ownership of an event returned by the plugin (null: none).
    pub(crate) fn from_raw(api: &'static Api, raw: *mut sys::PJRT_Event) -> Option<Self> {
        NonNull::new(raw).map(|raw| Self { api, raw })
    }

    /// Blocks until the event is ready and returns its error status.
    pub(crate) fn wait(self) -> Result<()> {
        let f = api_fn!(self.api, PJRT_Event_Await)?;
        let mut args = sys::PJRT_Event_Await_Args::sized();
        args.event = self.raw.as_ptr();
        // SAFETY: `args.event` is a live event owned by `self`.
        unsafe { self.api.call(f, &mut args) }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        match api_fn!(self.api, PJRT_Event_Destroy) {
            Ok(f) => {
                let mut args = sys::PJRT_Event_Destroy_Args::sized();
                args.event = self.raw.as_ptr();
                // SAFETY: we own this event and destroy it exactly once, here.
                let err = unsafe { f(&mut args) };
                self.api.log_error("PJRT_Event_Destroy", err);
            }
            Err(e) => tracing::warn!(error = %e, "leaking a pjrt event"),
        }
    }
}

/// A value of a plugin attribute or a client create option
/// (`PJRT_NamedValue`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum NamedValue {
    /// A string.
    String(String),
    /// A 64-bit integer.
    Int64(i64),
    /// A list of 64-bit integers.
    Int64List(Vec<i64>),
    /// A float.
    Float(f32),
    /// A boolean.
    Bool(bool),
}

/// `(name, value)` pairs encoded as `PJRT_NamedValue`s for a call.
///
/// The encoded structs point into the names and values they were built
/// from (names are passed with their length, not NUL-terminated); the
/// lifetime keeps those borrowed for as long as the structs exist, so they
/// stay valid for the call they are passed to.
pub(crate) struct RawNamedValues<'a> {
    values: Vec<sys::PJRT_NamedValue>,
    _borrow: PhantomData<&'a [(&'a str, NamedValue)]>,
}

impl<'a> RawNamedValues<'a> {
    pub(crate) fn new(options: &'a [(&'a str, NamedValue)]) -> Self {
        let values = options
            .iter()
            .map(|(name, value)| {
                let mut raw = sys::PJRT_NamedValue::sized();
                raw.name = name.as_ptr().cast();
                raw.name_size = name.len();
                // `value_size` counts elements of a string or list and is 1
                // for a scalar.
                let (type_, union, value_size) = match value {
                    NamedValue::String(v) => (
                        sys::PJRT_NamedValue_kString,
                        sys::PJRT_NamedValue__bindgen_ty_1 { string_value: v.as_ptr().cast() },
                        v.len(),
                    ),
                    NamedValue::Int64(v) => {
                        (sys::PJRT_NamedValue_kInt64, sys::PJRT_NamedValue__bindgen_ty_1 { int64_value: *v }, 1)
                    }
                    NamedValue::Int64List(v) => (
                        sys::PJRT_NamedValue_kInt64List,
                        sys::PJRT_NamedValue__bindgen_ty_1 { int64_array_value: v.as_ptr() },
                        v.len(),
                    ),
                    NamedValue::Float(v) => {
                        (sys::PJRT_NamedValue_kFloat, sys::PJRT_NamedValue__bindgen_ty_1 { float_value: *v }, 1)
                    }
                    NamedValue::Bool(v) => {
                        (sys::PJRT_NamedValue_kBool, sys::PJRT_NamedValue__bindgen_ty_1 { bool_value: *v }, 1)
                    }
                };
                raw.type_ = type_;
                raw.__bindgen_anon_1 = union;
                raw.value_size = value_size;
                raw
            })
            .collect();
        Self { values, _borrow: PhantomData }
    }

    /// Pointer to the first value; null when there are none (the "unset"
    /// state of an optional list in the C API).
    pub(crate) fn as_ptr(&self) -> *const sys::PJRT_NamedValue {
        if self.values.is_empty() { std::ptr::null() } else { self.values.as_ptr() }
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

/// A loaded, initialized PJRT plugin. Cheap to clone; all clones share one
/// library that stays loaded until the process exits.
#[derive(Clone)]
pub struct Plugin {
    api: &'static Api,
}

/// Plugins loaded so far, by canonical path: loading the same file twice
/// yields the same table, and `PJRT_Plugin_Initialize` must run only once.
static LOADED: OnceLock<Mutex<HashMap<PathBuf, &'static Api>>> = OnceLock::new();

impl Plugin {
    /// Loads the plugin at `path`, checks its API version and initializes it.
    ///
    /// The library is deliberately never unloaded: XLA plugins start thread
    /// pools and register process-exit handlers that would run unmapped code
    /// after `dlclose`, and every client, buffer and executable calls through
    /// the plugin's table. Loading the same file again returns the plugin
    /// loaded the first time.
    pub fn load(path: impl AsRef<Path>) -> Result<Plugin> {
        let path = path.as_ref();
        let load_error = |message: String| Error::Load { path: path.to_owned(), message };
        match path.try_exists() {
            Ok(true) => {}
            Ok(false) => return Err(load_error("file not found".to_owned())),
            Err(e) => return Err(load_error(e.to_string())),
        }
        let canonical = path.canonicalize().map_err(|e| load_error(e.to_string()))?;

        let registry = LOADED.get_or_init(Default::default);
        // A panic while loading cannot leave the map inconsistent (it is
        // only inserted into after success), so a poisoned lock is usable.
        let mut loaded = registry.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(api) = loaded.get(&canonical) {
            return Ok(Plugin { api });
        }
        let api = Self::open(path, &canonical)?;
        loaded.insert(canonical, api);
        Ok(Plugin { api })
    }

    fn open(path: &Path, canonical: &Path) -> Result<&'static Api> {
        let load_error = |message: String| Error::Load { path: path.to_owned(), message };

        // SAFETY: loading a library runs its static initializers; a PJRT
        // plugin is a self-contained shared object built for exactly this.
        let library = unsafe { libloading::Library::new(canonical) }.map_err(|e| load_error(e.to_string()))?;
        type GetPjrtApi = unsafe extern "C" fn() -> *const sys::PJRT_Api;
        // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin
        // (`const PJRT_Api* GetPjrtApi(void)`).
        let get_api = unsafe { library.get::<GetPjrtApi>(b"GetPjrtApi\0") }
            .map_err(|e| load_error(format!("not a pjrt plugin: {e}")))?;
        // SAFETY: takes no arguments; returns a pointer to a static table.
        let raw = unsafe { get_api() };
        // Leak the library from here on, whatever happens next: the plugin
        // has now run code and may hold threads (see `load`).
        std::mem::forget(library);
        let raw = NonNull::new(raw.cast_mut()).ok_or_else(|| load_error("GetPjrtApi returned null".to_owned()))?;

        // SAFETY: `struct_size` is the first field of every PJRT_Api version
        // and the table is static data of the loaded library.
        let struct_size = unsafe { std::ptr::addr_of!((*raw.as_ptr()).struct_size).read() };
        let version_end = offset_of!(sys::PJRT_Api, pjrt_api_version) + size_of::<sys::PJRT_Api_Version>();
        if struct_size < version_end {
            return Err(load_error(format!("PJRT_Api is only {struct_size} bytes, too small to hold a version")));
        }
        // SAFETY: the check above shows the table contains the version field.
        let version = unsafe { std::ptr::addr_of!((*raw.as_ptr()).pjrt_api_version).read() };
        let (major, minor) = (version.major_version, version.minor_version);
        if i64::from(major) != i64::from(sys::PJRT_API_MAJOR) {
            return Err(Error::IncompatibleVersion { major, minor });
        }
        if i64::from(minor) < i64::from(sys::PJRT_API_MINOR) {
            tracing::warn!(
                path = %path.display(),
                "pjrt plugin api {major}.{minor} is older than the 0.{} header; newer calls will report unsupported",
                sys::PJRT_API_MINOR
            );
        }

        let api: &'static Api =
            Box::leak(Box::new(Api { raw, struct_size, path: canonical.to_owned(), version: (major, minor) }));
        // Plugins from before PJRT_Plugin_Initialize existed need no set-up.
        if let Ok(init) = api_fn!(api, PJRT_Plugin_Initialize) {
            let mut args = sys::PJRT_Plugin_Initialize_Args::sized();
            // SAFETY: the args struct has no pointers besides the null
            // extension chain; initialization runs once per library (guarded
            // by the registry lock in `load`).
            unsafe { api.call(init, &mut args) }?;
        }
        tracing::debug!(path = %path.display(), major, minor, "loaded pjrt plugin");
        Ok(api)
    }

    /// The `(major, minor)` API version the plugin reports.
    pub fn api_version(&self) -> (i32, i32) {
        self.api.version
    }

    /// Canonical path the plugin was loaded from.
    pub fn path(&self) -> &Path {
        &self.api.path
    }

    /// The plugin's attributes (`PJRT_Plugin_Attributes`), e.g.
    /// `xla_version` or `stablehlo_current_version`.
    pub fn attributes(&self) -> Result<Vec<(String, NamedValue)>> {
        let f = api_fn!(self.api, PJRT_Plugin_Attributes)?;
        let mut args = sys::PJRT_Plugin_Attributes_Args::sized();
        // SAFETY: only out fields are written.
        unsafe { self.api.call(f, &mut args) }?;
        if args.attributes.is_null() || args.num_attributes == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returned `num_attributes` values living for the
        // whole process.
        let values = unsafe { std::slice::from_raw_parts(args.attributes, args.num_attributes) };
        // SAFETY: each value comes from the plugin and follows the contract
        // `named_value` relies on.
        Ok(values.iter().filter_map(|v| unsafe { named_value(v) }).collect())
    }

    pub(crate) fn api(&self) -> &'static Api {
        self.api
    }

    /// The type ids (`PJRT_Extension_Type`) of the extensions the plugin exports, in chain order;
    /// ids past the 0.81 header's list are reported as they are.
    pub fn extension_types(&self) -> Vec<u32> {
        let api = self.api;
        let field = std::mem::offset_of!(sys::PJRT_Api, extension_start);
        if api.check_field(field, std::mem::size_of::<usize>(), "extension_start").is_err() {
            return Vec::new();
        }
        // SAFETY: the check above shows the table holds the field.
        let mut next = unsafe { std::ptr::addr_of!((*api.raw_ptr()).extension_start).read() };
        let mut res = Vec::new();
        // A longer chain is corrupt: stop rather than loop.
        while let Some(base) = NonNull::new(next).filter(|_| res.len() < 64) {
            // SAFETY: every extension starts with a `PJRT_Extension_Base` and lives as long as
            // the plugin.
            let header = unsafe { base.as_ptr().read() };
            res.push(header.type_);
            next = header.next;
        }
        res
    }

    /// Whether the plugin exports the PJRT profiler extension (`PJRT_Extension_Type_Profiler`),
    /// through which a profiler collects the device's own events.
    pub fn has_profiler_extension(&self) -> bool {
        self.extension_types().contains(&sys::PJRT_Extension_Type_Profiler)
    }
}

/// Decodes one `PJRT_NamedValue`; `None` for a type this header lacks.
///
/// # Safety
/// `value` must come from the plugin: its name and the union member chosen
/// by `type_` must be valid for `name_size` / `value_size`.
pub(crate) unsafe fn named_value(value: &sys::PJRT_NamedValue) -> Option<(String, NamedValue)> {
    // SAFETY: name/name_size describe the attribute name (caller's contract).
    let name = unsafe { string_from_raw(value.name, value.name_size) };
    let union = &value.__bindgen_anon_1;
    // In every arm below, `type_` names the union member that is live, and
    // pointers with `value_size` are valid per the caller's contract.
    let decoded = match value.type_ {
        sys::PJRT_NamedValue_kString => {
            // SAFETY: see above; a string of `value_size` bytes.
            NamedValue::String(unsafe { string_from_raw(union.string_value, value.value_size) })
        }
        // SAFETY: see above.
        sys::PJRT_NamedValue_kInt64 => NamedValue::Int64(unsafe { union.int64_value }),
        sys::PJRT_NamedValue_kInt64List => {
            // SAFETY: see above.
            let ptr = unsafe { union.int64_array_value };
            if ptr.is_null() || value.value_size == 0 {
                NamedValue::Int64List(Vec::new())
            } else {
                // SAFETY: see above; `value_size` readable integers.
                NamedValue::Int64List(unsafe { std::slice::from_raw_parts(ptr, value.value_size) }.to_vec())
            }
        }
        // SAFETY: see above.
        sys::PJRT_NamedValue_kFloat => NamedValue::Float(unsafe { union.float_value }),
        // SAFETY: see above.
        sys::PJRT_NamedValue_kBool => NamedValue::Bool(unsafe { union.bool_value }),
        _ => return None,
    };
    Some((name, decoded))
}

impl fmt::Debug for Plugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugin").field("path", &self.api.path).field("api_version", &self.api.version).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_values_encode_every_variant_and_decode_back() {
        let options = [
            ("a_string", NamedValue::String("hello".to_owned())),
            ("empty_string", NamedValue::String(String::new())),
            ("an_int", NamedValue::Int64(-42)),
            ("a_list", NamedValue::Int64List(vec![1, -2, i64::MAX])),
            ("empty_list", NamedValue::Int64List(Vec::new())),
            ("a_float", NamedValue::Float(0.25)),
            ("yes", NamedValue::Bool(true)),
            ("no", NamedValue::Bool(false)),
        ];
        let raw = RawNamedValues::new(&options);
        assert_eq!(raw.len(), options.len());
        // SAFETY: `raw` holds `len()` encoded values, alive for this borrow.
        let values = unsafe { std::slice::from_raw_parts(raw.as_ptr(), raw.len()) };
        let scalar_sizes: Vec<usize> = values.iter().map(|v| v.value_size).collect();
        assert_eq!(scalar_sizes, [5, 0, 1, 3, 0, 1, 1, 1]);
        // SAFETY: encoded from `options`, which outlive `raw` and `values`.
        let decoded: Vec<(String, NamedValue)> = values.iter().filter_map(|v| unsafe { named_value(v) }).collect();
        let expected: Vec<(String, NamedValue)> =
            options.iter().map(|(name, value)| ((*name).to_owned(), value.clone())).collect();
        assert_eq!(decoded, expected);
        assert!(RawNamedValues::new(&[]).as_ptr().is_null());
    }
}
