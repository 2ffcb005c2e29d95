//! The key-value store a multi-process client shares with its peers, and the three C callbacks
//! (`kv_get`, `kv_try_get`, `kv_put`) that hand it to the plugin.
//!
//! PJRT's multi-process clients (the CUDA plugin's NCCL cliques, the topology exchange) need a
//! store every process of a job reaches. The plugin calls it from its own threads, during client
//! creation and later (NCCL ids are exchanged at a program's first collective), so a store is
//! `Send + Sync` and [`Client`](crate::Client) keeps it alive as long as the client.
//!
//! The callbacks never unwind into the plugin: a panic in a store becomes an `INTERNAL` error. A
//! missing key answers `NOT_FOUND` from `kv_try_get` at once; `kv_get` waits for at most its
//! timeout, and never longer than the client's longest wait (a plugin may pass an infinite
//! timeout, which XLA's conversion to `int` milliseconds can even turn negative), so a peer that
//! never comes ends in a `DEADLINE_EXCEEDED` naming the key instead of a hang.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::sys;

/// A key-value store shared by every process of a job: what PJRT's multi-process clients
/// exchange device topologies and collective ids through, and what ttpu exchanges global device
/// ids through.
///
/// Implementations must be thread-safe (the plugin calls them from several threads at once) and
/// must never block longer than asked. Values are opaque bytes; keys are text. Writing a key
/// that exists replaces its value.
pub trait KvStore: Send + Sync + fmt::Debug {
    /// Stores `value` under `key`, visible to every process once this returns.
    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError>;
    /// The value of `key`, waiting up to `timeout` for some process to put it;
    /// [`KvError::Timeout`] when none did.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError>;
    /// The value of `key` if it is there now (`None` otherwise), without waiting.
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError>;
}

/// What a [`KvStore`] can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// No process put the key within the time waited.
    #[error("timed out after {waited:?} waiting for key `{key}` in {store}")]
    Timeout {
        /// The key waited for.
        key: String,
        /// How long it was waited for.
        waited: Duration,
        /// The store, as its address (`file:///...`, `redis://...`).
        store: String,
    },
    /// The store itself failed (a file that cannot be written, a server that cannot be reached).
    #[error("{store}: {message}")]
    Backend {
        /// The store, as its address.
        store: String,
        /// What failed.
        message: String,
        /// The underlying error, where there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

/// A store as the callbacks see it: boxed once per client, so its address (the callbacks'
/// `user_arg`) stays fixed while the client lives.
#[derive(Debug)]
pub(crate) struct StoreHandle {
    pub(crate) store: Arc<dyn KvStore>,
    /// The longest a `kv_get` waits, whatever timeout the plugin asks for.
    pub(crate) max_wait: Duration,
}

impl StoreHandle {
    /// The wait for a plugin's `timeout_in_ms`: at most `max_wait`, and `max_wait` for a
    /// negative one.
    pub(crate) fn wait_for(&self, timeout_in_ms: c_int) -> Duration {
        match u64::try_from(timeout_in_ms) {
            Ok(ms) => Duration::from_millis(ms).min(self.max_wait),
            Err(_) => self.max_wait,
        }
    }
}

/// Bytes in front of every value handed to the plugin: its length, so the deleter (which gets
/// only the pointer) can rebuild the allocation.
const LENGTH_PREFIX: usize = size_of::<u64>();

/// A copy of `value` the plugin owns until it calls [`delete_value`]: the length, then the bytes.
/// Returns the pointer to the bytes.
fn leak_value(value: &[u8]) -> *mut c_char {
    let mut block = Vec::with_capacity(LENGTH_PREFIX + value.len());
    block.extend_from_slice(&(value.len() as u64).to_ne_bytes());
    block.extend_from_slice(value);
    let block: Box<[u8]> = block.into_boxed_slice();
    let start = Box::into_raw(block).cast::<u8>();
    // SAFETY: the block holds at least `LENGTH_PREFIX` bytes, so the offset stays inside it.
    unsafe { start.add(LENGTH_PREFIX) }.cast()
}

/// The value deleter handed to the plugin with every value (`value_deleter_callback`).
///
/// # Safety
/// `value` must come from [`leak_value`] and be deleted once.
unsafe extern "C" fn delete_value(value: *mut c_char) {
    if value.is_null() {
        return;
    }
    // SAFETY: `leak_value` put the length `LENGTH_PREFIX` bytes before `value`, in the same block.
    let start = unsafe { value.cast::<u8>().sub(LENGTH_PREFIX) };
    let mut length = [0u8; LENGTH_PREFIX];
    // SAFETY: the prefix is `LENGTH_PREFIX` readable bytes of that block (alignment 1).
    unsafe { std::ptr::copy_nonoverlapping(start, length.as_mut_ptr(), LENGTH_PREFIX) };
    let len = u64::from_ne_bytes(length) as usize;
    // SAFETY: `start` is the block `leak_value` leaked from a `Box<[u8]>` of exactly
    // `LENGTH_PREFIX + len` bytes, and the caller deletes it only once.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(start, LENGTH_PREFIX + len)) });
}

/// An error for the plugin, made through the `callback_error` function it passed; null when it
/// passed none (a plugin that breaks the C API's contract), which is logged.
///
/// # Safety
/// `callback_error` must be null or point to the plugin's `PJRT_CallbackError`.
unsafe fn plugin_error(
    callback_error: *mut sys::PJRT_CallbackError,
    code: sys::PJRT_Error_Code,
    message: &str,
) -> *mut sys::PJRT_Error {
    // SAFETY: null or a valid pointer, by the caller's contract.
    let make = unsafe { callback_error.as_ref() }.copied().flatten();
    match make {
        // SAFETY: the plugin's own error constructor; it copies `message` during the call.
        Some(make) => unsafe { make(code, message.as_ptr().cast(), message.len()) },
        None => {
            tracing::error!(message, "the pjrt plugin gave a key-value callback no way to report an error");
            std::ptr::null_mut()
        }
    }
}

/// The key a callback got, as text.
///
/// # Safety
/// `key` must be null or point to `size` readable bytes.
unsafe fn key_text<'a>(key: *const c_char, size: usize) -> Result<&'a str, String> {
    if key.is_null() {
        return if size == 0 { Ok("") } else { Err("the plugin passed a null key".to_owned()) };
    }
    // SAFETY: `size` readable bytes, by the caller's contract.
    let bytes = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), size) };
    std::str::from_utf8(bytes).map_err(|_| format!("the key {bytes:?} is not UTF-8 text"))
}

/// The PJRT error code of a store error.
fn error_code(error: &KvError) -> sys::PJRT_Error_Code {
    match error {
        KvError::Timeout { .. } => sys::PJRT_Error_Code_DEADLINE_EXCEEDED,
        KvError::Backend { .. } => sys::PJRT_Error_Code_UNAVAILABLE,
    }
}

/// Runs a store call, turning a panic into an error message.
fn guarded<T>(call: impl FnOnce() -> Result<T, KvError>) -> Result<T, (sys::PJRT_Error_Code, String)> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err((error_code(&error), error.to_string())),
        Err(_) => Err((sys::PJRT_Error_Code_INTERNAL, "the key-value store panicked".to_owned())),
    }
}

/// The argument structs of the three callbacks, as far as [`with_store`] needs them.
trait CallbackArgs {
    const KNOWN_SIZE: usize;
    fn struct_size(&self) -> usize;
    fn callback_error(&self) -> *mut sys::PJRT_CallbackError;
    fn user_arg(&self) -> *mut c_void;
    fn key(&self) -> (*const c_char, usize);
}

macro_rules! callback_args {
    ($($ty:ident => $size:ident),* $(,)?) => {
        $(
            impl CallbackArgs for sys::$ty {
                const KNOWN_SIZE: usize = sys::$size as usize;
                fn struct_size(&self) -> usize { self.struct_size }
                fn callback_error(&self) -> *mut sys::PJRT_CallbackError { self.callback_error }
                fn user_arg(&self) -> *mut c_void { self.user_arg }
                fn key(&self) -> (*const c_char, usize) { (self.key, self.key_size) }
            }
        )*
    };
}

callback_args! {
    PJRT_KeyValueGetCallback_Args => PJRT_KeyValueGetCallback_Args_STRUCT_SIZE,
    PJRT_KeyValueTryGetCallback_Args => PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE,
    PJRT_KeyValuePutCallback_Args => PJRT_KeyValuePutCallback_Args_STRUCT_SIZE,
}

/// Checks a callback's arguments and runs `body` with the store and the key; an error of either
/// goes back to the plugin through its `callback_error`.
///
/// # Safety
/// `args` must be null or a valid, exclusive pointer to the plugin's argument struct for the
/// call, whose `user_arg` is the [`StoreHandle`] of a live client and whose key and
/// `callback_error` follow the C API's contract.
unsafe fn with_store<A: CallbackArgs>(
    args: *mut A,
    body: impl FnOnce(&mut A, &StoreHandle, &str) -> Result<(), (sys::PJRT_Error_Code, String)>,
) -> *mut sys::PJRT_Error {
    // SAFETY: null or valid and exclusive for the call, by the caller's contract.
    let Some(args) = (unsafe { args.as_mut() }) else {
        tracing::error!("the pjrt plugin called a key-value callback without arguments");
        return std::ptr::null_mut();
    };
    let fail = |args: &A, code, message: String| {
        // SAFETY: the plugin's `callback_error`, by the caller's contract.
        unsafe { plugin_error(args.callback_error(), code, &message) }
    };
    if args.struct_size() < A::KNOWN_SIZE {
        let message =
            format!("key-value callback arguments of {} bytes, fewer than {}", args.struct_size(), A::KNOWN_SIZE);
        return fail(args, sys::PJRT_Error_Code_INVALID_ARGUMENT, message);
    }
    // SAFETY: `user_arg` is the client's boxed `StoreHandle`, alive while the client is (the
    // caller's contract); the plugin only calls back while it is.
    let Some(store) = (unsafe { args.user_arg().cast::<StoreHandle>().as_ref() }) else {
        return fail(args, sys::PJRT_Error_Code_INTERNAL, "a key-value callback without its store".to_owned());
    };
    let (key, key_size) = args.key();
    // SAFETY: the key is `key_size` readable bytes for the call, by the C API's contract.
    let key = match unsafe { key_text(key, key_size) } {
        Ok(key) => key,
        Err(message) => return fail(args, sys::PJRT_Error_Code_INVALID_ARGUMENT, message),
    };
    match body(args, store, key) {
        Ok(()) => std::ptr::null_mut(),
        Err((code, message)) => fail(args, code, message),
    }
}

/// `PJRT_KeyValueGetCallback`: waits for the key, at most the client's longest wait.
///
/// # Safety
/// Called by the plugin with arguments that follow the C API's contract and the `user_arg` given
/// at client creation.
pub(crate) unsafe extern "C" fn kv_get(args: *mut sys::PJRT_KeyValueGetCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin's arguments for this call, with our `user_arg`.
    unsafe {
        with_store(args, |args, store, key| {
            let wait = store.wait_for(args.timeout_in_ms);
            let value = guarded(|| store.store.get(key, wait))?;
            args.value_size = value.len();
            args.value = leak_value(&value);
            args.value_deleter_callback = Some(delete_value);
            Ok(())
        })
    }
}

/// `PJRT_KeyValueTryGetCallback`: the value, or `NOT_FOUND` at once.
///
/// # Safety
/// As [`kv_get`].
pub(crate) unsafe extern "C" fn kv_try_get(args: *mut sys::PJRT_KeyValueTryGetCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin's arguments for this call, with our `user_arg`.
    unsafe {
        with_store(args, |args, store, key| {
            let Some(value) = guarded(|| store.store.try_get(key))? else {
                return Err((sys::PJRT_Error_Code_NOT_FOUND, format!("key `{key}` not found")));
            };
            args.value_size = value.len();
            args.value = leak_value(&value);
            args.value_deleter_callback = Some(delete_value);
            Ok(())
        })
    }
}

/// `PJRT_KeyValuePutCallback`: stores the value.
///
/// # Safety
/// As [`kv_get`].
pub(crate) unsafe extern "C" fn kv_put(args: *mut sys::PJRT_KeyValuePutCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin's arguments for this call, with our `user_arg`.
    unsafe {
        with_store(args, |args, store, key| {
            let value: &[u8] = if args.value.is_null() {
                &[]
            } else {
                // SAFETY: `value_size` readable bytes for the call, by the C API's contract.
                std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size)
            };
            guarded(|| store.store.put(key, value))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;
    use crate::plugin::Args;

    /// A store in memory; `get` waits for nothing (a missing key is a timeout at once).
    #[derive(Debug, Default)]
    struct Memory(Mutex<HashMap<String, Vec<u8>>>);

    impl KvStore for Memory {
        fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
            if key == "panic" {
                panic!("a store that panics");
            }
            self.0.lock().expect("not poisoned").insert(key.to_owned(), value.to_vec());
            Ok(())
        }

        fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
            self.try_get(key)?.ok_or_else(|| KvError::Timeout {
                key: key.to_owned(),
                waited: timeout,
                store: "memory".to_owned(),
            })
        }

        fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
            Ok(self.0.lock().expect("not poisoned").get(key).cloned())
        }
    }

    /// What the test's stand-in for the plugin's error constructor was given last.
    static LAST_ERROR: Mutex<Option<(sys::PJRT_Error_Code, String)>> = Mutex::new(None);

    /// A stand-in for the plugin's `PJRT_CallbackError`: records the error and returns a
    /// non-null marker that is never dereferenced.
    unsafe extern "C" fn record_error(
        code: sys::PJRT_Error_Code,
        message: *const c_char,
        size: usize,
    ) -> *mut sys::PJRT_Error {
        // SAFETY: the callbacks pass a message of `size` bytes.
        let text = unsafe { crate::plugin::string_from_raw(message, size) };
        *LAST_ERROR.lock().expect("not poisoned") = Some((code, text));
        std::ptr::NonNull::dangling().as_ptr()
    }

    fn last_error() -> Option<(sys::PJRT_Error_Code, String)> {
        LAST_ERROR.lock().expect("not poisoned").take()
    }

    /// Calls the three callbacks as the plugin would. One test, because the error recorder is
    /// shared state.
    #[test]
    fn callbacks_put_get_and_report_missing_keys_and_failures() {
        let handle = StoreHandle { store: Arc::new(Memory::default()), max_wait: Duration::from_millis(250) };
        let user_arg = std::ptr::from_ref(&handle).cast_mut().cast::<c_void>();
        let mut make_error: sys::PJRT_CallbackError = Some(record_error);
        let make_error = &raw mut make_error;
        let put = |key: &str, value: &[u8]| {
            let mut args = sys::PJRT_KeyValuePutCallback_Args::sized();
            args.key = key.as_ptr().cast();
            args.key_size = key.len();
            args.value = value.as_ptr().cast();
            args.value_size = value.len();
            args.callback_error = make_error;
            args.user_arg = user_arg;
            // SAFETY: arguments as the C API describes them, our store as `user_arg`.
            unsafe { kv_put(&mut args) }
        };
        assert!(put("cpu:local_topology/cpu/0", b"\x00topology\xff").is_null());
        assert!(put("empty", b"").is_null());

        let get = |key: &str, timeout_in_ms: c_int| {
            let mut args = sys::PJRT_KeyValueGetCallback_Args::sized();
            args.key = key.as_ptr().cast();
            args.key_size = key.len();
            args.timeout_in_ms = timeout_in_ms;
            args.callback_error = make_error;
            args.user_arg = user_arg;
            // SAFETY: as above.
            let error = unsafe { kv_get(&mut args) };
            if !error.is_null() {
                return Err(last_error().expect("an error was made"));
            }
            // SAFETY: the callback returned `value_size` bytes at `value`.
            let value = unsafe { std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size) }.to_vec();
            let deleter = args.value_deleter_callback.expect("a deleter comes with every value");
            // SAFETY: the value the callback made, deleted once.
            unsafe { deleter(args.value) };
            Ok(value)
        };
        assert_eq!(get("cpu:local_topology/cpu/0", 1000), Ok(b"\x00topology\xff".to_vec()));
        assert_eq!(get("empty", 1000), Ok(Vec::new()));
        // A missing key: the wait is capped by the client's longest wait, also for a negative
        // (infinite) timeout.
        let timeout = |waited: &str| {
            Err((
                sys::PJRT_Error_Code_DEADLINE_EXCEEDED,
                format!("timed out after {waited} waiting for key `missing` in memory"),
            ))
        };
        assert_eq!(get("missing", 60_000), timeout("250ms"));
        assert_eq!(get("missing", -1), timeout("250ms"));
        assert_eq!(get("missing", 10), timeout("10ms"));

        let try_get = |key: &[u8]| {
            let mut args = sys::PJRT_KeyValueTryGetCallback_Args::sized();
            args.key = key.as_ptr().cast();
            args.key_size = key.len();
            args.callback_error = make_error;
            args.user_arg = user_arg;
            // SAFETY: as above.
            let error = unsafe { kv_try_get(&mut args) };
            if !error.is_null() {
                return Err(last_error().expect("an error was made"));
            }
            // SAFETY: as above.
            let value = unsafe { std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size) }.to_vec();
            // SAFETY: as above.
            unsafe { args.value_deleter_callback.expect("a deleter")(args.value) };
            Ok(value)
        };
        assert_eq!(try_get(b"cpu:local_topology/cpu/0"), Ok(b"\x00topology\xff".to_vec()));
        assert_eq!(try_get(b"missing"), Err((sys::PJRT_Error_Code_NOT_FOUND, "key `missing` not found".to_owned())));
        assert_eq!(
            try_get(b"\xff\xfe"),
            Err((sys::PJRT_Error_Code_INVALID_ARGUMENT, "the key [255, 254] is not UTF-8 text".to_owned()))
        );

        // A panicking store is an error for the plugin, never an unwind into it.
        assert!(!put("panic", b"x").is_null());
        assert_eq!(last_error(), Some((sys::PJRT_Error_Code_INTERNAL, "the key-value store panicked".to_owned())));

        // Arguments of an older, shorter layout are refused.
        let mut args = sys::PJRT_KeyValuePutCallback_Args::sized();
        args.struct_size = 16;
        args.callback_error = make_error;
        args.user_arg = user_arg;
        // SAFETY: as above; the struct is whole, only its declared size is short.
        assert!(!unsafe { kv_put(&mut args) }.is_null());
        assert_eq!(
            last_error(),
            Some((
                sys::PJRT_Error_Code_INVALID_ARGUMENT,
                "key-value callback arguments of 16 bytes, fewer than 64".to_owned()
            ))
        );
    }

    #[test]
    fn values_of_every_length_survive_the_round_trip_through_the_deleter() {
        for len in [0usize, 1, 7, 8, 9, 4096] {
            let value: Vec<u8> = (0..len).map(|index| index as u8).collect();
            let raw = leak_value(&value);
            // SAFETY: `leak_value` returned `len` bytes at `raw`.
            assert_eq!(unsafe { std::slice::from_raw_parts(raw.cast::<u8>(), len) }, value.as_slice());
            // SAFETY: made by `leak_value`, deleted once.
            unsafe { delete_value(raw) };
        }
    }
}
