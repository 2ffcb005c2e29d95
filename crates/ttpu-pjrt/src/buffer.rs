//! Device buffers, their element types, and host copies of them.
//!
//! Host data is always dense and row-major (major-to-minor), in the
//! machine's native byte order; `bf16`/`f16` are raw 2-byte patterns and
//! `pred` is one byte per element (0 or 1).

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::client::ClientInner;
use crate::error::{Error, Result};
use crate::plugin::{Api, Args, Event, api_fn};
use crate::sys;

/// Element type of a buffer (`PJRT_Buffer_Type`), limited to the types the
/// compiler emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// Boolean, one byte per element.
    Pred,
    /// Signed 8-bit integer.
    S8,
    /// Signed 16-bit integer.
    S16,
    /// Signed 32-bit integer.
    S32,
    /// Signed 64-bit integer.
    S64,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// IEEE half precision.
    F16,
    /// IEEE single precision.
    F32,
    /// IEEE double precision.
    F64,
    /// bfloat16.
    BF16,
    /// Complex of two f32 (real, then imaginary part).
    C64,
    /// Complex of two f64 (real, then imaginary part).
    C128,
}

impl ElementType {
    /// Every element type, in declaration order.
    pub const ALL: [ElementType; 15] = [
        Self::Pred,
        Self::S8,
        Self::S16,
        Self::S32,
        Self::S64,
        Self::U8,
        Self::U16,
        Self::U32,
        Self::U64,
        Self::F16,
        Self::F32,
        Self::F64,
        Self::BF16,
        Self::C64,
        Self::C128,
    ];

    /// Bytes per element in host memory.
    pub const fn byte_size(self) -> usize {
        match self {
            Self::Pred | Self::S8 | Self::U8 => 1,
            Self::S16 | Self::U16 | Self::F16 | Self::BF16 => 2,
            Self::S32 | Self::U32 | Self::F32 => 4,
            Self::S64 | Self::U64 | Self::F64 | Self::C64 => 8,
            Self::C128 => 16,
        }
    }

    pub(crate) fn to_raw(self) -> sys::PJRT_Buffer_Type {
        match self {
            Self::Pred => sys::PJRT_Buffer_Type_PRED,
            Self::S8 => sys::PJRT_Buffer_Type_S8,
            Self::S16 => sys::PJRT_Buffer_Type_S16,
            Self::S32 => sys::PJRT_Buffer_Type_S32,
            Self::S64 => sys::PJRT_Buffer_Type_S64,
            Self::U8 => sys::PJRT_Buffer_Type_U8,
            Self::U16 => sys::PJRT_Buffer_Type_U16,
            Self::U32 => sys::PJRT_Buffer_Type_U32,
            Self::U64 => sys::PJRT_Buffer_Type_U64,
            Self::F16 => sys::PJRT_Buffer_Type_F16,
            Self::F32 => sys::PJRT_Buffer_Type_F32,
            Self::F64 => sys::PJRT_Buffer_Type_F64,
            Self::BF16 => sys::PJRT_Buffer_Type_BF16,
            Self::C64 => sys::PJRT_Buffer_Type_C64,
            Self::C128 => sys::PJRT_Buffer_Type_C128,
        }
    }

    pub(crate) fn from_raw(raw: sys::PJRT_Buffer_Type) -> Result<Self> {
        Self::ALL.into_iter().find(|t| t.to_raw() == raw).ok_or(Error::UnsupportedElementType { raw })
    }
}

impl fmt::Display for ElementType {
    /// MLIR spelling (`i1`, `f32`, `ui8`, ...), as in `tensor<2x3xf32>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Pred => "i1",
            Self::S8 => "i8",
            Self::S16 => "i16",
            Self::S32 => "i32",
            Self::S64 => "i64",
            Self::U8 => "ui8",
            Self::U16 => "ui16",
            Self::U32 => "ui32",
            Self::U64 => "ui64",
            Self::F16 => "f16",
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::BF16 => "bf16",
            Self::C64 => "complex<f32>",
            Self::C128 => "complex<f64>",
        })
    }
}

/// Bytes of a dense array of `dims` elements of `element_type`; rejects
/// negative extents and sizes that overflow `usize`.
pub(crate) fn dense_byte_size(element_type: ElementType, dims: &[i64]) -> Result<usize> {
    let invalid = || Error::InvalidDims { dims: dims.to_vec() };
    dims.iter().try_fold(element_type.byte_size(), |acc, &d| {
        let d = usize::try_from(d).map_err(|_| invalid())?;
        acc.checked_mul(d).ok_or_else(invalid)
    })
}

/// A dense row-major array in host memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBuffer {
    /// Element type of `data`.
    pub element_type: ElementType,
    /// Dimensions, major to minor.
    pub dims: Vec<i64>,
    /// Raw native-endian element bytes.
    pub data: Vec<u8>,
}

/// An array on a device (an owned `PJRT_Buffer`). `Send + Sync`.
pub struct Buffer {
    client: Arc<ClientInner>,
    raw: NonNull<sys::PJRT_Buffer>,
}

// SAFETY: the PJRT C API is thread-safe; a buffer may be read, copied and
// used as an argument from any thread. Destruction needs `&mut`/ownership,
// so it cannot race with shared use.
unsafe impl Send for Buffer {}
// SAFETY: see `Send` above.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Takes ownership of a buffer created through `client`.
    pub(crate) fn from_raw(client: Arc<ClientInner>, raw: NonNull<sys::PJRT_Buffer>) -> Self {
        Self { client, raw }
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Buffer {
        self.raw.as_ptr()
    }

    pub(crate) fn client(&self) -> &Arc<ClientInner> {
        &self.client
    }

    fn api(&self) -> &'static Api {
        self.client.api
    }

    /// Whether the buffer was donated to an execution (or deleted): it then
    /// holds no data, and reading it or passing it to `execute` is an
    /// [`Error::Donated`].
    pub fn is_deleted(&self) -> Result<bool> {
        let f = api_fn!(self.api(), PJRT_Buffer_IsDeleted)?;
        let mut args = sys::PJRT_Buffer_IsDeleted_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer object is alive (owned by `self`), even when its
        // data was donated.
        unsafe { self.api().call(f, &mut args) }?;
        Ok(args.is_deleted)
    }

    /// The id of the device the buffer lives on.
    pub fn device_id(&self) -> Result<i32> {
        let f = api_fn!(self.api(), PJRT_Buffer_Device)?;
        let mut args = sys::PJRT_Buffer_Device_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`); the device is owned
        // by the client, which we hold.
        unsafe { self.api().call(f, &mut args) }?;
        let raw =
            NonNull::new(args.device).ok_or_else(|| Error::Contract("PJRT_Buffer_Device returned no device".into()))?;
        crate::client::Device::from_parts(Arc::clone(&self.client), raw).id()
    }

    /// Element type of the buffer.
    pub fn element_type(&self) -> Result<ElementType> {
        let f = api_fn!(self.api(), PJRT_Buffer_ElementType)?;
        let mut args = sys::PJRT_Buffer_ElementType_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        ElementType::from_raw(args.type_)
    }

    /// Dimensions of the buffer, major to minor.
    pub fn dims(&self) -> Result<Vec<i64>> {
        let f = api_fn!(self.api(), PJRT_Buffer_Dimensions)?;
        let mut args = sys::PJRT_Buffer_Dimensions_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        if args.dims.is_null() || args.num_dims == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returned `num_dims` values owned by the buffer,
        // alive while `self` is.
        Ok(unsafe { std::slice::from_raw_parts(args.dims, args.num_dims) }.to_vec())
    }

    /// Bytes the buffer occupies on the device (may include padding).
    pub fn on_device_size_in_bytes(&self) -> Result<usize> {
        let f = api_fn!(self.api(), PJRT_Buffer_OnDeviceSizeInBytes)?;
        let mut args = sys::PJRT_Buffer_OnDeviceSizeInBytes_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`).
        unsafe { self.api().call(f, &mut args) }?;
        Ok(args.on_device_size_in_bytes)
    }

    /// Copies the buffer to host memory as a dense row-major array and waits
    /// for the copy to finish.
    ///
    /// A buffer that already lies in host memory in that very layout (any
    /// buffer of the CPU plugins) is copied directly once it is ready, on
    /// this thread. Otherwise the plugin copies it
    /// (`PJRT_Buffer_ToHostBuffer`), which the CPU plugin queues to another
    /// thread: for `f32[64]` that hand-off made a download take about 47 us
    /// instead of 0.5 us, and 1 MiB took 100 us instead of 33 us.
    pub fn to_host(&self) -> Result<HostBuffer> {
        self.download(Readback::Auto)
    }

    /// [`to_host`](Self::to_host) by the given route (tests cover each).
    fn download(&self, readback: Readback) -> Result<HostBuffer> {
        if self.is_deleted()? {
            return Err(Error::Donated);
        }
        let element_type = self.element_type()?;
        let dims = self.dims()?;
        let size = dense_byte_size(element_type, &dims)?;

        // Row-major is minor_to_major = [rank-1, ..., 0] without tiling.
        let rank = i64::try_from(dims.len()).map_err(|_| Error::InvalidDims { dims: dims.clone() })?;
        let minor_to_major: Vec<i64> = (0..rank).rev().collect();
        let already_row_major = readback != Readback::ForceLayout && self.has_untiled_layout(&minor_to_major);
        if readback == Readback::Auto
            && already_row_major
            && let Some(data) = self.read_in_place(size)?
        {
            return Ok(HostBuffer { element_type, dims, data });
        }
        let data = self.copy_to_host(size, &minor_to_major, already_row_major)?;
        Ok(HostBuffer { element_type, dims, data })
    }

    /// Copies `size` bytes through `PJRT_Buffer_ToHostBuffer` and waits for
    /// the copy. `minor_to_major` is the row-major order, requested as the
    /// host layout unless `already_row_major`.
    fn copy_to_host(&self, size: usize, minor_to_major: &[i64], already_row_major: bool) -> Result<Vec<u8>> {
        let f = api_fn!(self.api(), PJRT_Buffer_ToHostBuffer)?;

        // We ask for the row-major layout explicitly unless the buffer
        // already has it: an explicit host layout sends the CPU plugin down
        // a conversion path that makes a 1 MiB download about twice as slow.
        let mut layout = sys::PJRT_Buffer_MemoryLayout::sized();
        layout.type_ = sys::PJRT_Buffer_MemoryLayout_Type_Tiled;
        let mut tiled = sys::PJRT_Buffer_MemoryLayout_Tiled::sized();
        tiled.minor_to_major = minor_to_major.as_ptr();
        tiled.minor_to_major_size = minor_to_major.len();
        layout.__bindgen_anon_1.tiled = tiled;

        let mut data = vec![0u8; size];
        let mut args = sys::PJRT_Buffer_ToHostBuffer_Args::sized();
        args.src = self.raw();
        if !already_row_major {
            args.host_layout = &mut layout;
        }
        args.dst = data.as_mut_ptr().cast();
        args.dst_size = data.len();
        // SAFETY: `dst` is writable for `dst_size` bytes, exactly the dense
        // size of the array; `layout` and `minor_to_major` outlive the call;
        // the buffer is alive. `data` is not touched until the event below
        // has completed.
        unsafe { self.api().call(f, &mut args) }?;
        if let Some(event) = Event::from_raw(self.api(), args.event) {
            event.wait()?;
        }
        Ok(data)
    }

    /// Reads the buffer's `size` dense bytes straight from its memory, once
    /// it is ready: the fast path of [`to_host`](Self::to_host), for a
    /// buffer whose untiled row-major layout the caller has checked.
    ///
    /// `Ok(None)` when the buffer does not qualify or the plugin cannot
    /// tell (not in host memory, an allocation of another size, a call
    /// missing or failing); the caller then copies through the plugin,
    /// which reports any real problem. Only an error of the buffer itself
    /// (its ready event failed, e.g. the program that produced it) is
    /// returned, as the plugin's copy would return it too.
    fn read_in_place(&self, size: usize) -> Result<Option<Vec<u8>>> {
        // The allocation must be exactly the dense size: a larger one means
        // padding or a bounded dynamic shape, whose rows do not lie densely
        // at the start.
        if !self.is_on_cpu() || self.on_device_size_in_bytes().ok() != Some(size) {
            return Ok(None);
        }
        let Some(ready) = self.ready_event() else {
            return Ok(None);
        };
        ready.wait()?;
        if size == 0 {
            // Nothing to read; an empty allocation may have no address.
            return Ok(Some(Vec::new()));
        }
        let Some(ptr) = self.unsafe_pointer() else {
            return Ok(None);
        };
        // SAFETY: `ptr` is the start of this buffer's allocation, which
        // is host memory (`PJRT_Buffer_IsOnCpu`) of exactly `size` bytes
        // (`PJRT_Buffer_OnDeviceSizeInBytes`) holding the elements dense and
        // row-major in their host representation (untiled major-to-minor
        // layout, checked by the caller), so the range is readable and the
        // bytes are what `PJRT_Buffer_ToHostBuffer` would copy. It stays
        // allocated for the copy: we own the buffer and `&self` keeps it from
        // being destroyed. Nothing writes it meanwhile: the ready event has
        // completed, so the transfer or execution that defined it is done,
        // and PJRT buffers are immutable once defined; the only other writer
        // would be an execution the buffer is donated to, and none is, since
        // `LoadedExecutable::execute` marks every input non-donatable.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.as_ptr().cast_const(), size) };
        Ok(Some(bytes.to_vec()))
    }

    /// Whether the buffer lies in memory the host can read directly;
    /// `false` whenever the plugin cannot say.
    fn is_on_cpu(&self) -> bool {
        let Ok(f) = api_fn!(self.api(), PJRT_Buffer_IsOnCpu) else {
            return false;
        };
        let mut args = sys::PJRT_Buffer_IsOnCpu_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`); only the out field
        // is written.
        unsafe { self.api().call(f, &mut args) }.is_ok() && args.is_on_cpu
    }

    /// The event that completes when the buffer's data is ready (or has
    /// failed); `None` when the plugin cannot give one.
    fn ready_event(&self) -> Option<Event> {
        let f = api_fn!(self.api(), PJRT_Buffer_ReadyEvent).ok()?;
        let mut args = sys::PJRT_Buffer_ReadyEvent_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`); only the out field
        // is written, and the event it returns is ours to destroy.
        unsafe { self.api().call(f, &mut args) }.ok()?;
        Event::from_raw(self.api(), args.event)
    }

    /// Address of the buffer's memory (`PJRT_Buffer_UnsafePointer`);
    /// `None` when the plugin cannot give one.
    fn unsafe_pointer(&self) -> Option<NonNull<u8>> {
        let f = api_fn!(self.api(), PJRT_Buffer_UnsafePointer).ok()?;
        let mut args = sys::PJRT_Buffer_UnsafePointer_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`); only the out field
        // is written.
        unsafe { self.api().call(f, &mut args) }.ok()?;
        // The plugin hands out an address of memory it allocated: take its
        // provenance as exposed.
        NonNull::new(std::ptr::with_exposed_provenance_mut::<u8>(args.buffer_pointer))
    }
}

/// The route [`Buffer::download`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readback {
    /// Read in place when the buffer allows it, else
    /// `PJRT_Buffer_ToHostBuffer`: what [`Buffer::to_host`] does.
    Auto,
    /// Always `PJRT_Buffer_ToHostBuffer`, passing no host layout when the
    /// buffer is already row-major.
    #[cfg_attr(not(test), allow(dead_code))]
    ToHostBuffer,
    /// Always `PJRT_Buffer_ToHostBuffer` with the explicit row-major host
    /// layout.
    ForceLayout,
}

impl Buffer {
    /// Whether the device layout is untiled with exactly this dimension
    /// order. `false` whenever the plugin cannot say (the call is
    /// deprecated in favour of an extension and may be missing).
    fn has_untiled_layout(&self, minor_to_major: &[i64]) -> bool {
        let Ok(f) = api_fn!(self.api(), PJRT_Buffer_GetMemoryLayout) else {
            return false;
        };
        let mut args = sys::PJRT_Buffer_GetMemoryLayout_Args::sized();
        args.buffer = self.raw();
        // SAFETY: the buffer is alive (owned by `self`); only out fields are
        // written.
        if unsafe { self.api().call(f, &mut args) }.is_err() {
            return false;
        }
        if args.layout.type_ != sys::PJRT_Buffer_MemoryLayout_Type_Tiled {
            return false;
        }
        // SAFETY: `type_` says the `tiled` member of the union is the live one.
        let tiled = unsafe { args.layout.__bindgen_anon_1.tiled };
        if tiled.num_tiles != 0 || tiled.minor_to_major_size != minor_to_major.len() {
            return false;
        }
        if minor_to_major.is_empty() {
            return true;
        }
        if tiled.minor_to_major.is_null() {
            return false;
        }
        // SAFETY: the plugin returned `minor_to_major_size` values owned by
        // the buffer, alive while `self` is.
        let actual = unsafe { std::slice::from_raw_parts(tiled.minor_to_major, tiled.minor_to_major_size) };
        actual == minor_to_major
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match api_fn!(self.api(), PJRT_Buffer_Destroy) {
            Ok(f) => {
                let mut args = sys::PJRT_Buffer_Destroy_Args::sized();
                args.buffer = self.raw();
                // SAFETY: we own the buffer and destroy it exactly once, here;
                // its client is still alive (we hold an `Arc` to it).
                let err = unsafe { f(&mut args) };
                self.api().log_error("PJRT_Buffer_Destroy", err);
            }
            Err(e) => tracing::warn!(error = %e, "leaking a pjrt buffer"),
        }
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("element_type", &self.element_type().ok())
            .field("dims", &self.dims().ok())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_types_round_trip_through_raw_values() {
        for t in ElementType::ALL {
            assert_eq!(ElementType::from_raw(t.to_raw()).expect("known type"), t);
        }
        // The header's enum, not XLA's `PrimitiveType` numbering (where C64 is 15 and C128 18).
        assert_eq!((sys::PJRT_Buffer_Type_C64, sys::PJRT_Buffer_Type_C128), (14, 15));
        assert!(matches!(
            ElementType::from_raw(sys::PJRT_Buffer_Type_F8E5M2),
            Err(Error::UnsupportedElementType { .. })
        ));
    }

    #[test]
    fn dense_byte_size_checks_dims() {
        assert_eq!(dense_byte_size(ElementType::F32, &[2, 3]).expect("valid"), 24);
        assert_eq!(dense_byte_size(ElementType::BF16, &[]).expect("scalar"), 2);
        assert_eq!(dense_byte_size(ElementType::S64, &[0, 5]).expect("empty"), 0);
        assert_eq!(
            dense_byte_size(ElementType::F32, &[2, -1]).expect_err("negative").to_string(),
            "invalid dimensions [2, -1]"
        );
        assert!(dense_byte_size(ElementType::F64, &[i64::MAX, i64::MAX]).is_err());
    }

    fn cpu_client() -> crate::Client {
        let path = crate::find_plugin().unwrap_or_else(|e| panic!("{e}"));
        crate::Client::new(&crate::Plugin::load(path).expect("load")).expect("client")
    }

    #[test]
    fn in_place_reads_match_plugin_copies() {
        let client = cpu_client();
        let bf16: Vec<u8> = [0x3f80u16, 0x8000, 0x0001, 0xff80, 0x7fc1].iter().flat_map(|v| v.to_ne_bytes()).collect();
        let cases: Vec<(ElementType, Vec<i64>, Vec<u8>)> = vec![
            (ElementType::F32, vec![], 7.25f32.to_ne_bytes().to_vec()),
            (ElementType::S32, vec![0], vec![]),
            (ElementType::F32, vec![2, 0, 3], vec![]),
            (ElementType::Pred, vec![2, 3], vec![1, 0, 0, 1, 1, 0]),
            (ElementType::Pred, vec![], vec![1]),
            (ElementType::BF16, vec![5], bf16),
            (ElementType::U8, vec![3, 1, 2], vec![0, 1, 127, 128, 254, 255]),
            (ElementType::S64, vec![1, 1, 2], [i64::MIN, i64::MAX].iter().flat_map(|v| v.to_ne_bytes()).collect()),
            (ElementType::F64, vec![2, 3, 4], (0..24).flat_map(|i| (f64::from(i) * -0.5).to_ne_bytes()).collect()),
            (ElementType::F32, vec![64], (0..64).flat_map(|i| (i as f32 / 3.0).to_ne_bytes()).collect()),
        ];
        for (element_type, dims, data) in cases {
            let what = format!("{element_type}{dims:?}");
            let buffer = client.buffer_from_host(&data, element_type, &dims).expect("upload");
            // The fast path really applies on the CPU plugin: row-major,
            // in host memory, readable in place.
            let minor_to_major: Vec<i64> = (0..dims.len() as i64).rev().collect();
            assert!(buffer.has_untiled_layout(&minor_to_major), "{what}: not row-major on the device");
            let in_place = buffer.read_in_place(data.len()).expect("read in place");
            assert_eq!(in_place.as_ref(), Some(&data), "{what}: direct read");
            for readback in [Readback::Auto, Readback::ToHostBuffer, Readback::ForceLayout] {
                let host = buffer.download(readback).expect("download");
                assert_eq!(
                    (host.element_type, &host.dims, &host.data),
                    (element_type, &dims, &data),
                    "{what}: {readback:?}"
                );
            }
        }
    }

    #[test]
    fn in_place_reads_of_execution_results_match_plugin_copies() {
        // Results of a synchronous client (`new`) and of an asynchronous one
        // (no options: the CPU plugin's default), written on another thread.
        let plugin = crate::Plugin::load(crate::find_plugin().unwrap_or_else(|e| panic!("{e}"))).expect("load");
        for client in [cpu_client(), crate::Client::with_options(&plugin, &[]).expect("client")] {
            let exe = client
                .compile(
                    r#"
module {
  func.func @main(%arg0: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xi1>) {
    %0 = "stablehlo.multiply"(%arg0, %arg0) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %1 = "stablehlo.compare"(%0, %arg0) {comparison_direction = #stablehlo<comparison_direction GT>} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xi1>
    return %0, %1 : tensor<64xf32>, tensor<64xi1>
  }
}
"#,
                )
                .expect("compile");
            let values: Vec<f32> = (0..64).map(|i| i as f32 / 8.0).collect();
            let data: Vec<u8> = values.iter().flat_map(|v| v.to_ne_bytes()).collect();
            let x = client.buffer_from_host(&data, ElementType::F32, &[64]).expect("upload");
            let out = exe.execute(&[&x]).expect("execute");
            let squares: Vec<u8> = values.iter().flat_map(|v| (v * v).to_ne_bytes()).collect();
            let greater: Vec<u8> = values.iter().map(|&v| u8::from(v * v > v)).collect();
            for (buffer, expected) in out.iter().zip([squares, greater]) {
                assert_eq!(buffer.read_in_place(expected.len()).expect("read in place").as_ref(), Some(&expected));
                assert_eq!(buffer.download(Readback::ToHostBuffer).expect("copy").data, expected);
                assert_eq!(buffer.to_host().expect("to_host").data, expected);
            }
        }
    }

    #[test]
    fn explicit_row_major_host_layout_downloads_correctly() {
        let client = cpu_client();
        let data: Vec<u8> = (0..24i32).flat_map(|v| v.to_ne_bytes()).collect();
        let buffer = client.buffer_from_host(&data, ElementType::S32, &[2, 3, 4]).expect("upload");
        for readback in [Readback::ForceLayout, Readback::ToHostBuffer, Readback::Auto] {
            let host = buffer.download(readback).expect("download");
            assert_eq!((host.element_type, host.dims.as_slice()), (ElementType::S32, &[2, 3, 4][..]));
            assert_eq!(host.data, data, "{readback:?}");
        }
    }
}
