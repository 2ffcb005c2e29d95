//! Host kernels through XLA's FFI: Rust functions that a program calls with
//! `stablehlo.custom_call` and the typed FFI API (`api_version = 4`).
//!
//! One C handler ([`host_kernel_handler`]) is registered with a plugin
//! through the PJRT FFI extension ([`Plugin::register_host_kernels`]), under
//! one target name; each call names its kernel in a string attribute
//! (`kernel`), and the handler runs the Rust function registered under that
//! name in this process ([`register_host_kernel`]). So kernels can be
//! closures, and a new kernel never needs another C symbol.
//!
//! The FFI structs are XLA's `xla/ffi/api/c_api.h` (API 0.1) and the PJRT
//! FFI extension's `pjrt_c_api_ffi_extension.h` (version 2, with
//! `register_handler` for typed handlers, as the 0.115 CPU plugin has it),
//! declared here by hand: few fields are read, and the
//! layout tests below pin every offset used. The handler never unwinds into
//! XLA (a panic becomes an FFI error) and answers XLA's metadata query (the
//! API version it was built for) before any call.

use std::collections::HashMap;
use std::ffi::{CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use crate::buffer::ElementType;
use crate::error::{Error, Result};
use crate::plugin::{Api, Plugin};
use crate::sys;

/// A host kernel's input: its element type, dims and bytes (row-major).
#[derive(Debug)]
pub struct FfiBuffer<'a> {
    /// The element type.
    pub element_type: ElementType,
    /// The dims.
    pub dims: &'a [i64],
    /// The elements, little-endian, row-major.
    pub data: &'a [u8],
}

/// A host kernel's result, written in place.
#[derive(Debug)]
pub struct FfiBufferMut<'a> {
    /// The element type.
    pub element_type: ElementType,
    /// The dims.
    pub dims: &'a [i64],
    /// The elements to write, little-endian, row-major.
    pub data: &'a mut [u8],
}

/// The Rust function of a host kernel: reads its inputs and writes every
/// result, or says why it cannot (the message becomes the run's error).
pub type HostKernelFn =
    dyn Fn(&[FfiBuffer<'_>], &mut [FfiBufferMut<'_>]) -> std::result::Result<(), String> + Send + Sync;

/// Host kernels of this process, by name.
static HOST_KERNELS: OnceLock<RwLock<HashMap<String, Arc<HostKernelFn>>>> = OnceLock::new();

fn host_kernels() -> &'static RwLock<HashMap<String, Arc<HostKernelFn>>> {
    HOST_KERNELS.get_or_init(Default::default)
}

/// Registers `function` as the host kernel `name` for every plugin of this
/// process. A name registered twice is [`Error::HostKernel`]: a program
/// compiled against one function must never run another.
pub fn register_host_kernel(name: &str, function: Arc<HostKernelFn>) -> Result<()> {
    let mut kernels = host_kernels().write().unwrap_or_else(PoisonError::into_inner);
    if kernels.contains_key(name) {
        return Err(Error::HostKernel(format!("host kernel `{name}` is already registered")));
    }
    kernels.insert(name.to_owned(), function);
    Ok(())
}

/// Whether a host kernel `name` is registered in this process.
pub fn host_kernel_registered(name: &str) -> bool {
    host_kernels().read().unwrap_or_else(PoisonError::into_inner).contains_key(name)
}

// XLA FFI C API, the fields this file reads or writes.

/// `XLA_FFI_Extension_Base`.
#[repr(C)]
struct XlaExtensionBase {
    struct_size: usize,
    ty: i32,
    next: *mut XlaExtensionBase,
}

/// `XLA_FFI_Extension_Metadata`.
const XLA_EXTENSION_METADATA: i32 = 1;
/// `XLA_FFI_ExecutionStage_EXECUTE`.
const XLA_STAGE_EXECUTE: i32 = 3;
/// `XLA_FFI_ArgType_BUFFER` and `XLA_FFI_RetType_BUFFER`.
const XLA_BUFFER: i32 = 1;
/// `XLA_FFI_AttrType_STRING`.
const XLA_ATTR_STRING: i32 = 4;
/// `XLA_FFI_Error_Code_INVALID_ARGUMENT` and `_INTERNAL`.
const XLA_INVALID_ARGUMENT: i32 = 3;
const XLA_INTERNAL: i32 = 13;
/// The FFI API version the handler is written against (`XLA_FFI_API_MAJOR`/`MINOR`).
const XLA_FFI_API_VERSION: (i32, i32) = (0, 1);

/// `XLA_FFI_Api_Version`.
#[repr(C)]
struct XlaApiVersion {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    major_version: i32,
    minor_version: i32,
}

/// `XLA_FFI_Metadata`.
#[repr(C)]
struct XlaMetadata {
    struct_size: usize,
    api_version: XlaApiVersion,
    traits: u32,
}

/// `XLA_FFI_Metadata_Extension`.
#[repr(C)]
struct XlaMetadataExtension {
    extension_base: XlaExtensionBase,
    metadata: *mut XlaMetadata,
}

/// `XLA_FFI_Error_Create_Args`.
#[repr(C)]
struct XlaErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    message: *const c_char,
    errc: i32,
}

/// The opaque `XLA_FFI_Error`.
#[repr(C)]
pub(crate) struct XlaError {
    _private: [u8; 0],
}

type XlaErrorCreate = unsafe extern "C" fn(*mut XlaErrorCreateArgs) -> *mut XlaError;

/// The head of `XLA_FFI_Api`, up to `XLA_FFI_Error_Create`.
#[repr(C)]
struct XlaApi {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    api_version: XlaApiVersion,
    internal_api: *mut c_void,
    error_create: Option<XlaErrorCreate>,
}

/// `XLA_FFI_Buffer`.
#[repr(C)]
struct XlaBuffer {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    dtype: i32,
    data: *mut c_void,
    rank: i64,
    dims: *const i64,
}

/// `XLA_FFI_Args`, and `XLA_FFI_Rets` (the same layout).
#[repr(C)]
struct XlaValues {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    size: i64,
    types: *const i32,
    values: *const *mut c_void,
}

/// `XLA_FFI_ByteSpan`.
#[repr(C)]
struct XlaByteSpan {
    ptr: *const c_char,
    len: usize,
}

/// `XLA_FFI_Attrs`.
#[repr(C)]
struct XlaAttrs {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    size: i64,
    types: *const i32,
    names: *const *const XlaByteSpan,
    attrs: *const *const c_void,
}

/// `XLA_FFI_CallFrame`.
#[repr(C)]
pub(crate) struct XlaCallFrame {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    api: *const XlaApi,
    ctx: *mut c_void,
    stage: i32,
    args: XlaValues,
    rets: XlaValues,
    attrs: XlaAttrs,
    future: *mut c_void,
}

// The PJRT FFI extension.

/// `PJRT_FFI_Register_Handler_Args`, typed handlers only. An earlier layout had an `int
/// api_version` before `handler`; a plugin built with it needs a larger struct and refuses this
/// one by its size, rather than misreading it.
#[repr(C)]
struct RegisterHandlerArgs {
    struct_size: usize,
    target_name: *const c_char,
    target_name_size: usize,
    handler: *mut c_void,
    platform_name: *const c_char,
    platform_name_size: usize,
    traits: u32,
}

/// `PJRT_FFI_Register_Handler_Args_STRUCT_SIZE`: up to and including `traits`.
const REGISTER_HANDLER_ARGS_SIZE: usize = std::mem::offset_of!(RegisterHandlerArgs, traits) + 4;

type RegisterHandler = unsafe extern "C" fn(*mut RegisterHandlerArgs) -> *mut sys::PJRT_Error;

/// `PJRT_FFI_Extension` (version 2).
#[repr(C)]
struct FfiExtension {
    base: sys::PJRT_Extension_Base,
    type_id_register: *const c_void,
    user_data_add: *const c_void,
    register_handler: Option<RegisterHandler>,
}

/// The element type of an `XLA_FFI_DataType`, for the types the compiler emits.
fn element_type(dtype: i32) -> Option<ElementType> {
    Some(match dtype {
        1 => ElementType::Pred,
        2 => ElementType::S8,
        3 => ElementType::S16,
        4 => ElementType::S32,
        5 => ElementType::S64,
        6 => ElementType::U8,
        7 => ElementType::U16,
        8 => ElementType::U32,
        9 => ElementType::U64,
        10 => ElementType::F16,
        11 => ElementType::F32,
        12 => ElementType::F64,
        16 => ElementType::BF16,
        15 => ElementType::C64,
        18 => ElementType::C128,
        _ => return None,
    })
}

impl Plugin {
    /// The plugin's FFI extension's `register_handler`, if it has one.
    fn ffi_register_handler(&self) -> Option<RegisterHandler> {
        let api: &'static Api = self.api();
        api.check_field(
            std::mem::offset_of!(sys::PJRT_Api, extension_start),
            std::mem::size_of::<*mut sys::PJRT_Extension_Base>(),
            "extension_start",
        )
        .ok()?;
        // SAFETY: the check above shows the table holds the field; the table
        // is static data of a plugin that is never unloaded.
        let mut next = unsafe { std::ptr::addr_of!((*api.raw_ptr()).extension_start).read() };
        // A chain longer than this is corrupt; stop instead of looping.
        for _ in 0..64 {
            let base = NonNull::new(next)?;
            // SAFETY: every extension in the chain starts with a
            // `PJRT_Extension_Base` and lives as long as the plugin.
            let header = unsafe { base.as_ptr().read() };
            if header.type_ == sys::PJRT_Extension_Type_FFI {
                let needed = std::mem::offset_of!(FfiExtension, register_handler) + std::mem::size_of::<usize>();
                if header.struct_size < needed {
                    return None;
                }
                // SAFETY: the extension says it is at least as large as the
                // field read, and an FFI extension has this layout.
                let extension = unsafe { base.cast::<FfiExtension>().as_ptr().read() };
                return extension.register_handler;
            }
            next = header.next;
        }
        None
    }

    /// Whether the plugin can run host kernels (it exports the PJRT FFI
    /// extension with `register_handler`).
    pub fn supports_host_kernels(&self) -> bool {
        self.ffi_register_handler().is_some()
    }

    /// Registers the host-kernel handler under `target` for `platform` (the
    /// client's platform name, `cpu`), once per plugin and target: later
    /// calls return the first call's result. A plugin without the FFI
    /// extension is [`Error::HostKernel`], naming it.
    pub fn register_host_kernels(&self, target: &str, platform: &str) -> Result<()> {
        // XLA keeps one handler per target and platform for the life of the process: register
        // once, and answer later calls with the first outcome (its message, when it failed).
        type Outcomes = HashMap<(std::path::PathBuf, String), Option<String>>;
        static DONE: OnceLock<std::sync::Mutex<Outcomes>> = OnceLock::new();
        let done = DONE.get_or_init(Default::default);
        let mut done = done.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (self.path().to_owned(), target.to_owned());
        if let Some(outcome) = done.get(&key) {
            return outcome.clone().map_or(Ok(()), |message| Err(Error::HostKernel(message)));
        }
        let result = self.register_handler_now(target, platform);
        done.insert(key, result.as_ref().err().map(ToString::to_string));
        result
    }

    fn register_handler_now(&self, target: &str, platform: &str) -> Result<()> {
        let Some(register) = self.ffi_register_handler() else {
            return Err(Error::HostKernel(format!(
                "the plugin {} has no PJRT FFI extension with handler registration, so it cannot run host kernels",
                self.path().display()
            )));
        };
        let mut args = RegisterHandlerArgs {
            struct_size: REGISTER_HANDLER_ARGS_SIZE,
            target_name: target.as_ptr().cast(),
            target_name_size: target.len(),
            handler: host_kernel_handler as *mut c_void,
            platform_name: platform.as_ptr().cast(),
            platform_name_size: platform.len(),
            traits: 0,
        };
        // SAFETY: the names point at live strings of the given lengths for
        // the call (XLA copies them), and the handler is a static function
        // with the `XLA_FFI_Handler` signature.
        let err = unsafe { register(&mut args) };
        self.api().check(err)
    }
}

/// Builds an XLA FFI error through the call frame's API, or null when the
/// frame carries no API to build one with.
///
/// # Safety
/// `api` must be null or point to XLA's FFI API table.
unsafe fn xla_error(api: *const XlaApi, code: i32, message: &str) -> *mut XlaError {
    // SAFETY: caller's contract.
    let Some(api) = (unsafe { api.as_ref() }) else { return std::ptr::null_mut() };
    if api.struct_size < std::mem::offset_of!(XlaApi, error_create) + std::mem::size_of::<usize>() {
        return std::ptr::null_mut();
    }
    let Some(create) = api.error_create else { return std::ptr::null_mut() };
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = XlaErrorCreateArgs {
        struct_size: std::mem::offset_of!(XlaErrorCreateArgs, errc) + 4,
        extension_start: std::ptr::null_mut(),
        message: message.as_ptr(),
        errc: code,
    };
    // SAFETY: the args are valid for the call; XLA copies the message.
    unsafe { create(&mut args) }
}

/// The C handler of every host kernel (an `XLA_FFI_Handler`).
///
/// # Safety
/// Called by XLA with a valid call frame.
unsafe extern "C" fn host_kernel_handler(frame: *mut XlaCallFrame) -> *mut XlaError {
    // SAFETY: XLA passes a valid frame (or null, refused here).
    let Some(frame) = (unsafe { frame.as_ref() }) else { return std::ptr::null_mut() };
    // SAFETY: a non-null extension starts with an extension base.
    if let Some(extension) = unsafe { frame.extension_start.as_ref() }
        && extension.ty == XLA_EXTENSION_METADATA
    {
        // XLA asks which API version the handler speaks before it calls it.
        let extension = frame.extension_start.cast::<XlaMetadataExtension>();
        // SAFETY: a metadata extension has this layout and points at
        // metadata XLA owns for the call.
        if let Some(metadata) = unsafe { (*extension).metadata.as_mut() } {
            metadata.api_version.major_version = XLA_FFI_API_VERSION.0;
            metadata.api_version.minor_version = XLA_FFI_API_VERSION.1;
            metadata.traits = 0;
        }
        return std::ptr::null_mut();
    }
    if frame.stage != XLA_STAGE_EXECUTE {
        return std::ptr::null_mut();
    }
    // SAFETY: the frame is XLA's, valid for the call.
    let outcome = catch_unwind(AssertUnwindSafe(|| unsafe { run_host_kernel(frame) }));
    let (code, message) = match outcome {
        Ok(Ok(())) => return std::ptr::null_mut(),
        Ok(Err((code, message))) => (code, message),
        Err(_) => (XLA_INTERNAL, "a host kernel panicked".to_owned()),
    };
    // SAFETY: the frame's API pointer is XLA's table (or null).
    unsafe { xla_error(frame.api, code, &message) }
}

/// Reads the frame, runs the kernel it names and reports why not.
///
/// # Safety
/// `frame` must be a valid call frame of the execute stage.
unsafe fn run_host_kernel(frame: &XlaCallFrame) -> std::result::Result<(), (i32, String)> {
    let invalid = |message: String| (XLA_INVALID_ARGUMENT, message);
    // SAFETY: caller's contract: the attrs arrays hold `size` entries.
    let name = unsafe { string_attr(&frame.attrs, "kernel") }
        .ok_or_else(|| invalid("a host-kernel call has no string attribute `kernel`".into()))?;
    let function = host_kernels()
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&name)
        .cloned()
        .ok_or_else(|| invalid(format!("no host kernel `{name}` is registered in this process")))?;
    // SAFETY: caller's contract: args and rets are XLA's buffers for the call.
    let inputs = unsafe { buffers(&frame.args) }.map_err(|message| invalid(format!("`{name}`: {message}")))?;
    // SAFETY: as above.
    let outputs = unsafe { buffers(&frame.rets) }.map_err(|message| invalid(format!("`{name}`: {message}")))?;
    let inputs: Vec<FfiBuffer<'_>> = inputs
        .iter()
        .map(|(element_type, dims, data, len)| FfiBuffer {
            element_type: *element_type,
            dims,
            // SAFETY: XLA's argument buffer holds `len` bytes, alive and
            // unwritten for the call.
            data: if *len == 0 { &[] } else { unsafe { std::slice::from_raw_parts(data.cast::<u8>(), *len) } },
        })
        .collect();
    let mut outputs: Vec<FfiBufferMut<'_>> = outputs
        .iter()
        .map(|(element_type, dims, data, len)| FfiBufferMut {
            element_type: *element_type,
            dims,
            // SAFETY: XLA's result buffer holds `len` bytes for the call and
            // nothing else reads or writes it meanwhile.
            data: if *len == 0 { &mut [] } else { unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), *len) } },
        })
        .collect();
    function(&inputs, &mut outputs).map_err(|message| (XLA_INTERNAL, format!("host kernel `{name}`: {message}")))
}

/// The buffers of `values`: element type, dims, data pointer and byte length each.
///
/// # Safety
/// `values` must be XLA's args or rets of a valid call frame.
#[allow(clippy::type_complexity)]
unsafe fn buffers(values: &XlaValues) -> std::result::Result<Vec<(ElementType, &[i64], *mut c_void, usize)>, String> {
    let count = usize::try_from(values.size).map_err(|_| format!("{} buffers", values.size))?;
    let mut res = Vec::with_capacity(count);
    for index in 0..count {
        // SAFETY: `types` and `values` hold `size` entries (caller's contract).
        let (ty, raw) = unsafe { (*values.types.add(index), *values.values.add(index)) };
        if ty != XLA_BUFFER {
            return Err(format!("operand {index} is not a buffer"));
        }
        // SAFETY: a buffer entry points at an `XLA_FFI_Buffer`.
        let buffer = unsafe { &*raw.cast::<XlaBuffer>() };
        let element_type =
            element_type(buffer.dtype).ok_or_else(|| format!("operand {index} has dtype {}", buffer.dtype))?;
        let rank = usize::try_from(buffer.rank).map_err(|_| format!("operand {index} has rank {}", buffer.rank))?;
        let dims: &[i64] = if rank == 0 {
            &[]
        } else {
            // SAFETY: `dims` holds `rank` sizes for the call.
            unsafe { std::slice::from_raw_parts(buffer.dims, rank) }
        };
        let len = dims
            .iter()
            .try_fold(element_type.byte_size(), |acc, &dim| {
                usize::try_from(dim).ok().and_then(|dim| acc.checked_mul(dim))
            })
            .ok_or_else(|| format!("operand {index} has dims {dims:?}"))?;
        if len > 0 && buffer.data.is_null() {
            return Err(format!("operand {index} has no data"));
        }
        res.push((element_type, dims, buffer.data, len));
    }
    Ok(res)
}

/// The string attribute `name` of `attrs`.
///
/// # Safety
/// `attrs` must be XLA's attributes of a valid call frame.
unsafe fn string_attr(attrs: &XlaAttrs, name: &str) -> Option<String> {
    let count = usize::try_from(attrs.size).ok()?;
    for index in 0..count {
        // SAFETY: the arrays hold `size` entries (caller's contract).
        let (ty, key, value) = unsafe { (*attrs.types.add(index), *attrs.names.add(index), *attrs.attrs.add(index)) };
        // SAFETY: a name is a byte span of the attribute's name.
        let key = unsafe { span_str(&*key) };
        if key.as_deref() == Some(name) && ty == XLA_ATTR_STRING {
            // SAFETY: a string attribute's value is a byte span.
            return unsafe { span_str(&*value.cast::<XlaByteSpan>()) };
        }
    }
    None
}

/// The UTF-8 text of a byte span.
///
/// # Safety
/// `span` must describe `len` readable bytes (or be empty).
unsafe fn span_str(span: &XlaByteSpan) -> Option<String> {
    if span.len == 0 {
        return Some(String::new());
    }
    if span.ptr.is_null() {
        return None;
    }
    // SAFETY: caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(span.ptr.cast::<u8>(), span.len) };
    std::str::from_utf8(bytes).ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// The offsets of `c_api.h` and `pjrt_c_api_ffi_extension.h` on a 64-bit host.
    #[test]
    fn layouts_match_the_c_headers() {
        assert_eq!(offset_of!(XlaCallFrame, api), 16);
        assert_eq!(offset_of!(XlaCallFrame, stage), 32);
        assert_eq!(offset_of!(XlaCallFrame, args), 40);
        assert_eq!(offset_of!(XlaCallFrame, rets), 80);
        assert_eq!(offset_of!(XlaCallFrame, attrs), 120);
        assert_eq!(offset_of!(XlaCallFrame, future), 168);
        assert_eq!(offset_of!(XlaBuffer, dtype), 16);
        assert_eq!(offset_of!(XlaBuffer, data), 24);
        assert_eq!(offset_of!(XlaBuffer, dims), 40);
        assert_eq!(offset_of!(XlaApi, error_create), 48);
        assert_eq!(offset_of!(XlaMetadata, traits), 32);
        assert_eq!(size_of::<XlaMetadataExtension>(), 32);
        assert_eq!(REGISTER_HANDLER_ARGS_SIZE, 52);
        assert_eq!(size_of::<FfiExtension>(), 48);
    }

    #[test]
    fn a_kernel_name_is_registered_once() {
        let kernel: Arc<HostKernelFn> = Arc::new(|_, _| Ok(()));
        register_host_kernel("ffi_test::once", kernel.clone()).unwrap();
        assert!(host_kernel_registered("ffi_test::once"));
        assert_eq!(
            register_host_kernel("ffi_test::once", kernel).unwrap_err().to_string(),
            "host kernel `ffi_test::once` is already registered"
        );
    }
}
