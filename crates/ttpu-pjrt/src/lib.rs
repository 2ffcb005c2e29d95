//! Safe binding over the PJRT C API, at the 0.81 header layout.
//!
//! PJRT plugins (`.so` files exporting `GetPjrtApi`) compile StableHLO and
//! run it on a device. This crate loads a plugin ([`Plugin`]), creates a
//! runtime ([`Client`]), compiles MLIR text ([`LoadedExecutable`]), moves
//! dense arrays between host and device ([`Buffer`], [`HostBuffer`]) and
//! executes. It knows nothing of the compiler's tensor IR. A client of a job
//! of several processes takes the job's [`KvStore`] ([`Client::with_store`]).
//!
//! We own the binding instead of using the `pjrt` crate because that speaks
//! API 0.54, which current plugins reject. Structs are generated from the
//! vendored 0.81 header and every `struct_size` is the header's
//! `*_STRUCT_SIZE`; newer plugins (0.106, 0.115 tested) accept these older
//! sizes. All `unsafe` code of the project lives here.

#![warn(missing_docs)]
// The C API is reached only through `unsafe`; this crate is where that lives (the workspace
// denies `unsafe_code` elsewhere).
#![allow(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]
#![deny(unsafe_op_in_unsafe_fn)]

mod buffer;
mod client;
mod compile_options;
mod error;
mod executable;
mod ffi;
mod kv;
mod plugin;
mod sys;

use std::env;
use std::path::PathBuf;

pub use buffer::{Buffer, ElementType, HostBuffer};
pub use client::{Client, Device};
pub use compile_options::{CompileOptions, OptionValue};
pub use error::{Error, ErrorCode, Result};
pub use executable::LoadedExecutable;
pub use ffi::{FfiBuffer, FfiBufferMut, HostKernelFn, host_kernel_registered, register_host_kernel};
pub use kv::{KvError, KvStore};
pub use plugin::{NamedValue, Plugin};

/// `(major, minor)` of the PJRT C API header this binding is generated from.
pub const HEADER_API_VERSION: (u32, u32) = (sys::PJRT_API_MAJOR, sys::PJRT_API_MINOR);

/// Environment variable naming the plugin to use instead of the default.
pub const PLUGIN_ENV_VAR: &str = "TTPU_PJRT_PLUGIN";

/// Where `cargo xtask setup` installs the CPU plugin:
/// `$XDG_CACHE_HOME/ttpu/plugins/cpu/pjrt_c_api_cpu_plugin.so`, with
/// `XDG_CACHE_HOME` defaulting to `$HOME/.cache`.
///
/// Only computes the location; the file may not exist. `None` when neither
/// variable is set (an unset, empty or relative `XDG_CACHE_HOME` is ignored,
/// as the XDG spec asks).
pub fn default_plugin_path() -> Option<PathBuf> {
    let cache = env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| env::var_os("HOME").filter(|h| !h.is_empty()).map(|h| PathBuf::from(h).join(".cache")))?;
    Some(cache.join("ttpu").join("plugins").join("cpu").join("pjrt_c_api_cpu_plugin.so"))
}

/// The plugin to use: `$TTPU_PJRT_PLUGIN` if set and non-empty, else
/// [`default_plugin_path`]. Only computes the path; see [`find_plugin`].
pub fn plugin_path_from_env_or_default() -> Option<PathBuf> {
    env::var_os(PLUGIN_ENV_VAR).filter(|p| !p.is_empty()).map(PathBuf::from).or_else(default_plugin_path)
}

/// Like [`plugin_path_from_env_or_default`], but the file must exist;
/// otherwise [`Error::PluginNotFound`], whose message says to run
/// `cargo xtask setup`.
pub fn find_plugin() -> Result<PathBuf> {
    match plugin_path_from_env_or_default() {
        Some(path) if path.is_file() => Ok(path),
        path => Err(Error::PluginNotFound { path }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_come_from_the_0_81_header() {
        assert_eq!(HEADER_API_VERSION, (0, 81));
        // PJRT_STRUCT_SIZE(type, last_field) = offsetof + sizeof(last field).
        let execute_end = std::mem::offset_of!(sys::PJRT_LoadedExecutable_Execute_Args, execute_device)
            + std::mem::size_of::<*mut sys::PJRT_Device>();
        assert_eq!(sys::PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE as usize, execute_end);
        assert_eq!(sys::PJRT_Api_STRUCT_SIZE as usize, std::mem::size_of::<sys::PJRT_Api>());
    }
}
