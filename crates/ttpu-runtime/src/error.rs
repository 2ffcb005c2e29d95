//! Errors of the runtime. Plugin and lowering errors are kept whole, so their messages reach the
//! user unchanged.

use std::path::PathBuf;

/// Result with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while placing, compiling or running programs and moving tensors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The PJRT plugin failed, or is missing (its message then says to run `cargo xtask setup`).
    #[error(transparent)]
    Pjrt(#[from] ttpu_pjrt::Error),
    /// A program could not be lowered to StableHLO.
    #[error(transparent)]
    Lower(#[from] ttpu_stablehlo::Error),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A safetensors file is malformed or holds a dtype ttpu has no tensor for.
    #[error("{}: {message}", path.display())]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A shape with a negative size, or one too large to address.
    #[error("invalid shape {dims:?}")]
    InvalidShape {
        /// The dims given.
        dims: Vec<i64>,
    },
    /// Host data of another length than its type needs.
    #[error("a tensor of type {ty} needs {expected} bytes, found {actual}")]
    DataLength {
        /// The tensor type.
        ty: String,
        /// Bytes the type needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The disk cache folder could not be created.
    #[error("cannot create disk cache {}: {source}", path.display())]
    DiskCache {
        /// The folder given.
        path: PathBuf,
        /// Why creating it failed.
        #[source]
        source: std::io::Error,
    },
    /// More devices were asked for than the plugin has.
    #[error("{requested} devices requested, but the {platform} plugin has {available}")]
    DeviceCount {
        /// Devices asked for.
        requested: usize,
        /// Devices the plugin made.
        available: usize,
        /// The plugin's platform name.
        platform: String,
    },
    /// A device index past the runtime's devices.
    #[error("device {index} does not exist: the runtime has {count} devices")]
    NoSuchDevice {
        /// The index given.
        index: usize,
        /// Devices the runtime has.
        count: usize,
    },
    /// A sharded program whose mesh has another number of devices than it is placed on.
    #[error("mesh {mesh} has {size} devices, but the program is placed on {devices}")]
    MeshSize {
        /// The mesh.
        mesh: String,
        /// Its device count.
        size: usize,
        /// Devices given.
        devices: usize,
    },
    /// A sharding that does not fit a tensor or a mesh.
    #[error("sharding: {message}")]
    Sharding {
        /// What does not fit.
        message: String,
    },
    /// A program compiled for more replicas than the runtime has devices.
    #[error("a program of {replicas} replicas needs as many devices, but the runtime has {count}")]
    Replicas {
        /// Replicas asked for.
        replicas: usize,
        /// Devices the runtime has.
        count: usize,
    },
    /// The plugin placed a compiled program on other devices than the ones it was compiled for.
    #[error("the plugin placed the program on devices {actual:?}, not the requested {requested:?}")]
    Placement {
        /// Device ids asked for.
        requested: Vec<i32>,
        /// Device ids the executable reports.
        actual: Vec<i32>,
    },
    /// The device returned an element type the IR has no dtype for.
    #[error("the device returned element type {element:?}, which ttpu never emits")]
    ElementType {
        /// The element type.
        element: ttpu_pjrt::ElementType,
    },
    /// Another thread panicked while holding the runtime's compile cache.
    #[error("runtime state is poisoned: another thread panicked while using it")]
    Poisoned,
}

impl<T> From<std::sync::PoisonError<T>> for Error {
    fn from(_: std::sync::PoisonError<T>) -> Error {
        Error::Poisoned
    }
}
