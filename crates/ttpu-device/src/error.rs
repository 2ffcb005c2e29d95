//! Errors of the device: PyTorch-style messages for what the user did, the op table's located
//! errors for calls it refuses, and the layers below kept whole.

/// Result with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong on the device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The op table has no decomposition for this overload (and the CPU fallback is off).
    #[error("`{op}` is not supported on the ttpu device (see docs/ops.md for the supported overloads)")]
    Unsupported {
        /// The overload, like `aten.foo.default`.
        op: String,
    },
    /// The op table refused the call (wrong arguments for PyTorch, or a form it cannot build).
    #[error("{op}: {message}")]
    Call {
        /// The overload.
        op: String,
        /// What is wrong.
        message: String,
    },
    /// A kernel registered for an overload that PyTorch says writes or aliases its arguments: a
    /// kernel gives new tensors only.
    #[error(
        "`{op}` mutates or aliases its arguments, and its kernel `{kernel}` can only stand for a custom op \
         that returns new tensors (`mutates_args=()`) on the ttpu device"
    )]
    KernelNotFunctional {
        /// The overload.
        op: String,
        /// The kernel's name.
        kernel: String,
    },
    /// A kernel that cannot run on the device.
    #[error("kernel `{kernel}`: {message}")]
    BadKernel {
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        message: String,
    },
    /// Operands on different devices.
    #[error("Expected all tensors to be on the same device, but found at least two devices, {first} and {second}!")]
    DeviceMismatch {
        /// One device.
        first: String,
        /// Another.
        second: String,
    },
    /// An in-place op whose result does not fit the tensor it writes.
    #[error("{message}")]
    InPlace {
        /// PyTorch's message.
        message: String,
    },
    /// A result larger than one tensor may be on its device.
    #[error(
        "ttpu:{device} out of memory: {op} would make a tensor of {bytes} bytes, more than the {limit} bytes one \
         tensor may take on this device"
    )]
    OutOfMemory {
        /// The call.
        op: String,
        /// The device index.
        device: usize,
        /// The tensor's size in bytes (saturated).
        bytes: u64,
        /// The most one tensor may take ([`crate::Backend::tensor_byte_limit`]).
        limit: u64,
    },
    /// An index outside the range PyTorch accepts, found by a check that ran with the pending
    /// work (see `checks`).
    #[error(
        "index out of range on the ttpu device: {message}; found when the pending work ran, at this host read \
         (as CUDA reports a device-side assert at the next synchronizing call)"
    )]
    IndexOutOfRange {
        /// Which overload and range.
        message: String,
    },
    /// A device index outside the plugin's devices.
    #[error("invalid device ttpu:{index}: the plugin has {count} device(s)")]
    NoSuchDevice {
        /// The index asked for.
        index: usize,
        /// How many there are.
        count: usize,
    },
    /// Host data that does not fit its description.
    #[error("{message}")]
    HostData {
        /// What is wrong.
        message: String,
    },
    /// The lazy tensors below failed (compiling or running a program, a transfer).
    #[error(transparent)]
    Eager(Box<ttpu_eager::Error>),
    /// The runtime failed.
    #[error(transparent)]
    Runtime(Box<ttpu_runtime::Error>),
    /// Another thread panicked while holding the device's state.
    #[error("the ttpu device's state is poisoned: another thread panicked while using it")]
    Poisoned,
}

impl From<ttpu_eager::Error> for Error {
    fn from(error: ttpu_eager::Error) -> Error {
        Error::Eager(Box::new(error))
    }
}

impl From<ttpu_runtime::Error> for Error {
    fn from(error: ttpu_runtime::Error) -> Error {
        Error::Runtime(Box::new(error))
    }
}

impl<T> From<std::sync::PoisonError<T>> for Error {
    fn from(_: std::sync::PoisonError<T>) -> Error {
        Error::Poisoned
    }
}

impl Error {
    /// The table's refusal of a call of `op`, without the location the table gives eager calls
    /// (`<eager>:1:1`), which says nothing to a user of the device.
    pub(crate) fn from_table(op: &str, error: ttpu_aten::Error) -> Error {
        let message = match error {
            ttpu_aten::Error::BadArguments { message, .. } | ttpu_aten::Error::DynamicDims { message, .. } => message,
            ttpu_aten::Error::OpNotSupported { reason, .. } => format!("not supported: {reason}"),
            other => other.to_string(),
        };
        Error::Call { op: op.to_string(), message }
    }
}
