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
    /// A place in a job that does not exist (`process_index >= process_count`).
    #[error("process {index} of a job of {count} processes does not exist")]
    NoSuchProcess {
        /// The process index given.
        index: usize,
        /// Processes in the job.
        count: usize,
    },
    /// The plugin knows neither the CPU plugin's nor the GPU plugins' multi-process options.
    #[error("the pjrt plugin {} takes no multi-process options, so it cannot take part in a job of several processes ({refusals})", plugin.display())]
    NoMultiProcessOptions {
        /// The plugin file.
        plugin: PathBuf,
        /// What the plugin said to each option set.
        refusals: String,
    },
    /// The job's key-value store failed.
    #[error("writing `{key}` to the job's key-value store: {source}")]
    Store {
        /// The key being written.
        key: String,
        /// What failed.
        #[source]
        source: ttpu_pjrt::KvError,
    },
    /// A process of the job did not publish its devices in time (or its store failed).
    #[error("process {process} of {processes} did not join the job: {source}")]
    Peer {
        /// The process waited for.
        process: usize,
        /// Processes in the job.
        processes: usize,
        /// Why it was not seen.
        #[source]
        source: ttpu_pjrt::KvError,
    },
    /// A process published something that is not a device list.
    #[error("process {process} published `{value}` under `{key}`, which is not a ttpu device list")]
    PeerMessage {
        /// The process.
        process: usize,
        /// The key.
        key: String,
        /// What it holds.
        value: String,
    },
    /// Processes of jobs of different sizes share a store.
    #[error(
        "process {process} belongs to a job of {theirs} processes, but process {this} to one of {ours}: they share a key-value store"
    )]
    JobSize {
        /// The other process.
        process: usize,
        /// The other process's job size.
        theirs: usize,
        /// This process's job size.
        ours: usize,
        /// This process.
        this: usize,
    },
    /// Two devices of the job have one id.
    #[error(
        "processes {first} and {second} both have a device of id {id}: the plugin numbered each process's devices \
         alike (it ignored the process index it was given), so it cannot take part in a job of several processes"
    )]
    DuplicateDeviceId {
        /// The id.
        id: i32,
        /// The first process that has it.
        first: usize,
        /// The second.
        second: usize,
    },
    /// A process published a device the plugin does not list for it.
    #[error("process {process} uses device {id}, which the plugin does not list as that process's")]
    Unlisted {
        /// The device id.
        id: i32,
        /// The process.
        process: usize,
    },
    /// Data was sent to, or asked of, a device of another process.
    #[error("device {index} (id {id}) belongs to process {owner}; process {this} can only use its own devices")]
    NotLocal {
        /// The runtime device index.
        index: usize,
        /// Its PJRT id.
        id: i32,
        /// The process that runs it.
        owner: usize,
        /// This process.
        this: usize,
    },
    /// A program placed on one device twice.
    #[error("the program is placed on device {index} twice (devices {devices:?}); each device runs one part")]
    RepeatedDevice {
        /// The repeated runtime device index.
        index: usize,
        /// The devices asked for.
        devices: Vec<usize>,
    },
    /// The plugin cannot run one program over devices of several processes.
    #[error(
        "the {platform} plugin cannot run one program over devices of {processes} processes (device ids {ids:?}): \
         its collectives reach only the devices of one process; a plugin with cross-process collectives can, such \
         as a GPU plugin with NCCL (the CUDA plugin, `jax-cuda12-pjrt`), or one process can run all the devices"
    )]
    CrossProcess {
        /// The plugin's platform name (`cpu`).
        platform: String,
        /// Processes the program spans.
        processes: usize,
        /// The program's device ids, in mesh order.
        ids: Vec<i32>,
        /// The plugin's own refusal.
        #[source]
        source: ttpu_pjrt::Error,
    },
    /// Another thread panicked while holding the runtime's compile cache.
    #[error("runtime state is poisoned: another thread panicked while using it")]
    Poisoned,
    /// A program calls a host kernel that cannot run here: the plugin lacks XLA's FFI, or no
    /// function is registered under the kernel's name in this process.
    #[error("host kernel `{kernel}`: {message}")]
    HostKernel {
        /// The kernel (`mylib::foo`).
        kernel: String,
        /// Why it cannot run.
        message: String,
    },
}

impl<T> From<std::sync::PoisonError<T>> for Error {
    fn from(_: std::sync::PoisonError<T>) -> Error {
        Error::Poisoned
    }
}
