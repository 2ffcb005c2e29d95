//! Errors of this crate, including errors reported by the plugin itself.
//!
//! A plugin error keeps the plugin's own message byte for byte (only lossily
//! decoded as UTF-8): it is usually the only useful diagnosis, e.g. an MLIR
//! parse error with its location.

use std::fmt;
use std::path::PathBuf;

use crate::sys;

/// Result with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when talking to a PJRT plugin.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin library could not be opened or is not a PJRT plugin.
    #[error("failed to load pjrt plugin {}: {message}", path.display())]
    Load {
        /// Path that was given to [`Plugin::load`](crate::Plugin::load).
        path: PathBuf,
        /// Why loading failed.
        message: String,
    },
    /// No plugin is installed where the environment or the default points.
    #[error(
        "no pjrt plugin found at {}: run `cargo xtask setup` or set {}",
        path.as_ref().map_or_else(|| "an unknown location (neither XDG_CACHE_HOME nor HOME is set)".into(), |p| p.display().to_string()),
        crate::PLUGIN_ENV_VAR
    )]
    PluginNotFound {
        /// Location that was looked at, if one could be determined.
        path: Option<PathBuf>,
    },
    /// The plugin speaks a major API version this binding cannot talk to.
    #[error("pjrt plugin api version {major}.{minor} is incompatible with this binding (built for {}.{})", crate::HEADER_API_VERSION.0, crate::HEADER_API_VERSION.1)]
    IncompatibleVersion {
        /// Major version reported by the plugin.
        major: i32,
        /// Minor version reported by the plugin.
        minor: i32,
    },
    /// The plugin's API table lacks a function this binding needs.
    #[error("pjrt plugin does not provide {function}")]
    Unsupported {
        /// Name of the missing C API function.
        function: &'static str,
    },
    /// A PJRT call returned an error; `message` is the plugin's own text.
    #[error("pjrt plugin error ({code}): {message}")]
    Plugin {
        /// Status code of the error.
        code: ErrorCode,
        /// Message from `PJRT_Error_Message`, unchanged.
        message: String,
    },
    /// Host data length does not match the dimensions and element type.
    #[error("host data has {actual} bytes but dims and element type need {expected}")]
    SizeMismatch {
        /// Bytes implied by dims × element size.
        expected: usize,
        /// Bytes actually given.
        actual: usize,
    },
    /// Dimensions with a negative extent, or a size that overflows `usize`.
    #[error("invalid dimensions {dims:?}")]
    InvalidDims {
        /// The offending dimensions.
        dims: Vec<i64>,
    },
    /// The plugin reported an element type this crate does not model.
    #[error("unsupported pjrt element type {raw}")]
    UnsupportedElementType {
        /// Raw `PJRT_Buffer_Type` value.
        raw: u32,
    },
    /// The client has no addressable device to place buffers on.
    #[error("pjrt client has no addressable device")]
    NoDevice,
    /// A buffer passed to `execute` belongs to another client.
    #[error("argument {index} belongs to a different pjrt client")]
    ForeignBuffer {
        /// Position of the argument.
        index: usize,
    },
    /// A buffer was donated to an earlier execution (or deleted) and holds
    /// no data any more.
    #[error("the buffer was donated to an earlier execution and can no longer be read or used")]
    Donated,
    /// `execute_replicated` got argument lists that do not fit the
    /// executable: another number of devices, or lists of different lengths.
    #[error("execute: {0}")]
    ArgumentLists(String),
    /// A host kernel cannot be registered or run: a name registered twice, or a plugin without
    /// the PJRT FFI extension.
    #[error("{0}")]
    HostKernel(String),
    /// The plugin returned something that contradicts the API contract.
    #[error("pjrt plugin broke the api contract: {0}")]
    Contract(String),
}

/// Status code of a plugin error (`PJRT_Error_Code`, the absl status codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `CANCELLED`
    Cancelled,
    /// `UNKNOWN`, also used when the plugin cannot tell the code.
    Unknown,
    /// `INVALID_ARGUMENT`
    InvalidArgument,
    /// `DEADLINE_EXCEEDED`
    DeadlineExceeded,
    /// `NOT_FOUND`
    NotFound,
    /// `ALREADY_EXISTS`
    AlreadyExists,
    /// `PERMISSION_DENIED`
    PermissionDenied,
    /// `RESOURCE_EXHAUSTED`
    ResourceExhausted,
    /// `FAILED_PRECONDITION`
    FailedPrecondition,
    /// `ABORTED`
    Aborted,
    /// `OUT_OF_RANGE`
    OutOfRange,
    /// `UNIMPLEMENTED`
    Unimplemented,
    /// `INTERNAL`
    Internal,
    /// `UNAVAILABLE`
    Unavailable,
    /// `DATA_LOSS`
    DataLoss,
    /// `UNAUTHENTICATED`
    Unauthenticated,
    /// A code this header does not know (kept so nothing is lost).
    Other(u32),
}

impl ErrorCode {
    pub(crate) fn from_raw(raw: sys::PJRT_Error_Code) -> Self {
        match raw {
            sys::PJRT_Error_Code_CANCELLED => Self::Cancelled,
            sys::PJRT_Error_Code_UNKNOWN => Self::Unknown,
            sys::PJRT_Error_Code_INVALID_ARGUMENT => Self::InvalidArgument,
            sys::PJRT_Error_Code_DEADLINE_EXCEEDED => Self::DeadlineExceeded,
            sys::PJRT_Error_Code_NOT_FOUND => Self::NotFound,
            sys::PJRT_Error_Code_ALREADY_EXISTS => Self::AlreadyExists,
            sys::PJRT_Error_Code_PERMISSION_DENIED => Self::PermissionDenied,
            sys::PJRT_Error_Code_RESOURCE_EXHAUSTED => Self::ResourceExhausted,
            sys::PJRT_Error_Code_FAILED_PRECONDITION => Self::FailedPrecondition,
            sys::PJRT_Error_Code_ABORTED => Self::Aborted,
            sys::PJRT_Error_Code_OUT_OF_RANGE => Self::OutOfRange,
            sys::PJRT_Error_Code_UNIMPLEMENTED => Self::Unimplemented,
            sys::PJRT_Error_Code_INTERNAL => Self::Internal,
            sys::PJRT_Error_Code_UNAVAILABLE => Self::Unavailable,
            sys::PJRT_Error_Code_DATA_LOSS => Self::DataLoss,
            sys::PJRT_Error_Code_UNAUTHENTICATED => Self::Unauthenticated,
            other => Self::Other(other),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::Cancelled => "cancelled",
            Self::Unknown => "unknown",
            Self::InvalidArgument => "invalid argument",
            Self::DeadlineExceeded => "deadline exceeded",
            Self::NotFound => "not found",
            Self::AlreadyExists => "already exists",
            Self::PermissionDenied => "permission denied",
            Self::ResourceExhausted => "resource exhausted",
            Self::FailedPrecondition => "failed precondition",
            Self::Aborted => "aborted",
            Self::OutOfRange => "out of range",
            Self::Unimplemented => "unimplemented",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
            Self::DataLoss => "data loss",
            Self::Unauthenticated => "unauthenticated",
            Self::Other(raw) => return write!(f, "code {raw}"),
        };
        f.write_str(name)
    }
}
