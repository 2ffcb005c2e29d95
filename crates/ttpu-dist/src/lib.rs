//! The control plane of ttpu jobs that span several processes and hosts: the key-value stores
//! their processes meet in, the launch environment that says where a process stands, and a
//! launcher for the processes of one host.
//!
//! The runtime takes part in PJRT's multi-process model through a
//! [`ttpu_runtime::Distributed`]: its place in the job and a [`KvStore`]. The trait lives in
//! `ttpu-pjrt` (re-exported by the runtime), where the plugin's callbacks call it; this crate
//! holds the stores of existing systems and depends on the runtime, never the other way round:
//!
//! - [`FileStore`] (`file:///path`): a directory on one host, or a shared file system; what
//!   [`launch`] uses.
//! - [`RedisStore`] (`redis://host:port[/db]`): a Redis server, for jobs across hosts.
//! - Anything else that can put, get with a timeout and try-get (torch.distributed's store from
//!   Python, through a binding) implements [`KvStore`] itself.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use ttpu_runtime::{Runtime, RuntimeOptions};
//! // Under `ttpu launch`, torchrun or a JAX launcher: where this process stands.
//! let distributed = match ttpu_dist::Launch::from_env()? {
//!     Some(launch) => Some(launch.distributed()?),
//!     None => None,
//! };
//! let runtime = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(4), distributed, ..Default::default() })?;
//! println!("process {} of {}: devices {:?}", runtime.process_index(), runtime.process_count(), runtime.device_ids());
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod env;
mod file;
mod launch;
mod poll;
mod redis_store;

use std::sync::Arc;
use std::time::Duration;

pub use env::Launch;
pub use file::FileStore;
pub use launch::{MAX_PROCESSES, Outcome, launch};
pub use redis_store::{IO_TIMEOUT, RedisStore};
pub use ttpu_runtime::{KvError, KvStore};

/// Environment variable: the longest a process waits for its peers, in seconds (a decimal
/// number); [`ttpu_runtime::DEFAULT_PEER_TIMEOUT`] when unset.
pub const PEER_TIMEOUT_ENV_VAR: &str = "TTPU_PEER_TIMEOUT";

/// What can go wrong in the control plane.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The launch environment is incomplete or names something ttpu cannot use.
    #[error("launch environment: {message}")]
    Environment {
        /// What is wrong and what to set.
        message: String,
    },
    /// An address that names no store ttpu reaches.
    #[error("`{address}` is not a store ttpu reaches: use file:///a/shared/directory or redis://host:port")]
    UnknownStore {
        /// The address given.
        address: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] KvError),
    /// Processes could not be started or waited for.
    #[error("launch: {message}")]
    Launch {
        /// What failed.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<std::io::Error>,
    },
}

/// The store at `address`: `file:///path` (a directory, created if missing) or
/// `redis://host:port[/db]` (`rediss://` with TLS is refused: this build has no TLS).
pub fn open_store(address: &str) -> Result<Arc<dyn KvStore>, Error> {
    if let Some(path) = address.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(Error::UnknownStore { address: address.to_owned() });
        }
        return Ok(Arc::new(FileStore::open(std::path::Path::new(path))?));
    }
    if address.starts_with("redis://") {
        return Ok(Arc::new(RedisStore::open(address)?));
    }
    Err(Error::UnknownStore { address: address.to_owned() })
}

/// A store shared by several jobs, seen by one of them: every key is prefixed with its run id
/// and a `/`.
#[derive(Debug)]
pub struct Prefixed {
    inner: Arc<dyn KvStore>,
    prefix: String,
}

impl Prefixed {
    /// `inner` as the job `run_id` sees it.
    pub fn new(inner: Arc<dyn KvStore>, run_id: &str) -> Prefixed {
        Prefixed { inner, prefix: format!("{run_id}/") }
    }
}

impl KvStore for Prefixed {
    fn put(&self, key: &str, value: &[u8]) -> Result<(), KvError> {
        self.inner.put(&format!("{}{key}", self.prefix), value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, KvError> {
        self.inner.get(&format!("{}{key}", self.prefix), timeout)
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, KvError> {
        self.inner.try_get(&format!("{}{key}", self.prefix))
    }
}

impl Launch {
    /// The runtime's place in the job: the store opened (prefixed with the run id where there
    /// is one), the peer timeout from `TTPU_PEER_TIMEOUT` (else the default), and the local
    /// devices the launcher named.
    pub fn distributed(&self) -> Result<ttpu_runtime::Distributed, Error> {
        let timeout = peer_timeout(std::env::var(PEER_TIMEOUT_ENV_VAR).ok().as_deref())?;
        let mut store = open_store(&self.store)?;
        if let Some(run_id) = &self.run_id {
            store = Arc::new(Prefixed::new(store, run_id));
        }
        Ok(ttpu_runtime::Distributed {
            process_index: self.process_index,
            process_count: self.process_count,
            store,
            timeout,
            visible_devices: self.visible_devices.clone(),
            client_options: self.client_options.clone(),
        })
    }
}

/// The peer timeout a `TTPU_PEER_TIMEOUT` value gives.
fn peer_timeout(value: Option<&str>) -> Result<Duration, Error> {
    let Some(value) = value.map(str::trim).filter(|value| !value.is_empty()) else {
        return Ok(ttpu_runtime::DEFAULT_PEER_TIMEOUT);
    };
    value.parse::<f64>().ok().and_then(|seconds| Duration::try_from_secs_f64(seconds).ok()).ok_or_else(|| {
        Error::Environment { message: format!("{PEER_TIMEOUT_ENV_VAR}=`{value}` is not a number of seconds") }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_timeouts_parse_as_seconds() {
        assert_eq!(peer_timeout(None).expect("default"), ttpu_runtime::DEFAULT_PEER_TIMEOUT);
        assert_eq!(peer_timeout(Some("2.5")).expect("valid"), Duration::from_millis(2500));
        assert_eq!(
            peer_timeout(Some("-1")).expect_err("negative").to_string(),
            "launch environment: TTPU_PEER_TIMEOUT=`-1` is not a number of seconds"
        );
        assert!(peer_timeout(Some("soon")).is_err());
    }

    #[test]
    fn addresses_of_other_systems_are_refused() {
        for address in ["10.0.0.1:1234", "file://relative/dir", "etcd://host:2379", "rediss://host:6380"] {
            assert_eq!(
                open_store(address).expect_err(address).to_string(),
                format!("`{address}` is not a store ttpu reaches: use file:///a/shared/directory or redis://host:port")
            );
        }
    }
}
