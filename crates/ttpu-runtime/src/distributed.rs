//! A runtime's place in a job of several processes: the client created with the plugin's
//! multi-process options and the job's key-value store, and the global device list every
//! process agrees on.
//!
//! Each process publishes the PJRT ids of the devices it uses under `ttpu/devices/<process>` and
//! reads every other process's, waiting at most [`Distributed::timeout`] for each, so a peer
//! that never comes ends in an error naming it and the key. The global list is sorted by process,
//! then by id (JAX's order); ids must be unique across the job, since a program over two devices
//! of one id aborts the CPU plugin. Where the plugin lists other processes' devices itself (the
//! GPU plugins do), every exchanged id is checked against that listing.
//!
//! The store is whatever the job shares ([`KvStore`]: a directory, Redis, a Python object through
//! a binding): this crate only needs put, get with a timeout, and try-get.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ttpu_pjrt::{Client, KvStore, NamedValue, Plugin};

use crate::{Error, Result};

/// How long a process waits for its peers (and a plugin's key-value reads wait) unless told
/// otherwise: five minutes, for peers that still compile or load.
pub const DEFAULT_PEER_TIMEOUT: Duration = Duration::from_secs(300);

/// The prefix of the keys the runtime itself writes; PJRT's own keys start with the platform
/// name (`cuda:local_topology/...`), so the two never collide.
pub const KEY_PREFIX: &str = "ttpu/";

/// A runtime's place in a job of several processes.
#[derive(Clone)]
pub struct Distributed {
    /// This process's index, `0..process_count`.
    pub process_index: usize,
    /// Processes in the job.
    pub process_count: usize,
    /// The store every process of the job reaches. It must be fresh for the job (a store that
    /// still holds an earlier job's keys makes processes read them).
    pub store: Arc<dyn KvStore>,
    /// The longest any wait on the store lasts: for peers at start-up, and for the plugin's own
    /// reads later.
    pub timeout: Duration,
    /// The local devices a GPU plugin should use, by local index (its `visible_devices`
    /// option): `[LOCAL_RANK]` for one process per GPU. `None`: the plugin's default, every GPU
    /// of the host.
    pub visible_devices: Option<Vec<usize>>,
    /// More create options for the plugin, after the ones that place the process (the CUDA
    /// plugin's `enable_mock_nccl`, say, to run a job of several processes on one GPU). A name
    /// the plugin does not know is its error.
    pub client_options: Vec<(String, NamedValue)>,
}

impl Distributed {
    /// Process `process_index` of `process_count`, sharing `store`, with the default timeout
    /// and every local device.
    pub fn new(process_index: usize, process_count: usize, store: Arc<dyn KvStore>) -> Distributed {
        Distributed {
            process_index,
            process_count,
            store,
            timeout: DEFAULT_PEER_TIMEOUT,
            visible_devices: None,
            client_options: Vec::new(),
        }
    }
}

impl PartialEq for Distributed {
    /// Equal places in the same store (the same `Arc`).
    fn eq(&self, other: &Distributed) -> bool {
        self.process_index == other.process_index
            && self.process_count == other.process_count
            && Arc::ptr_eq(&self.store, &other.store)
            && self.timeout == other.timeout
            && self.visible_devices == other.visible_devices
            && self.client_options == other.client_options
    }
}

// Equality is an equivalence but for a NaN float create option, which no plugin takes.
impl Eq for Distributed {}

impl fmt::Debug for Distributed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Distributed")
            .field("process_index", &self.process_index)
            .field("process_count", &self.process_count)
            .field("store", &self.store)
            .field("timeout", &self.timeout)
            .field("visible_devices", &self.visible_devices)
            .field("client_options", &self.client_options)
            .finish()
    }
}

/// A device of the job: its PJRT id and the process that runs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GlobalDevice {
    /// The process that can issue work to it.
    pub process: usize,
    /// Its PJRT id, unique in the job.
    pub id: i32,
}

/// Whether a plugin refused a create option because it does not know its name (the 0.115 CPU
/// plugin and the GPU plugins say `Unexpected option name passed to PJRT_Client_Create: NAME`).
fn unknown_option(error: &ttpu_pjrt::Error) -> bool {
    matches!(error, ttpu_pjrt::Error::Plugin { message, .. } if message.contains("Unexpected option name"))
}

/// A client of the job: the CPU plugin's options (`process_id`, with `cpu_device_count` when a
/// count is asked for), else the GPU plugins' (`node_id`, `num_nodes`, `visible_devices`), each
/// with the store behind all three callbacks. Only a refusal of an option's name moves on to the
/// next set; any other failure (a peer that never comes, say) is the answer. The caller's extra
/// options go with both sets.
pub(crate) fn create_client(plugin: &Plugin, devices: Option<usize>, place: &Distributed) -> Result<Client> {
    let int = |value: usize| NamedValue::Int64(i64::try_from(value).unwrap_or(i64::MAX));
    let mut cpu = vec![("asynchronous", NamedValue::Bool(false)), ("process_id", int(place.process_index))];
    if let Some(count) = devices {
        cpu.push(("cpu_device_count", int(count)));
    }
    let mut gpu = vec![("node_id", int(place.process_index)), ("num_nodes", int(place.process_count))];
    if let Some(visible) = &place.visible_devices {
        let ids = visible.iter().map(|&index| i64::try_from(index).unwrap_or(i64::MAX)).collect();
        gpu.push(("visible_devices", NamedValue::Int64List(ids)));
    }
    for (name, value) in &place.client_options {
        cpu.push((name.as_str(), value.clone()));
        gpu.push((name.as_str(), value.clone()));
    }
    let mut refusals = Vec::new();
    for options in [cpu, gpu] {
        match Client::with_store(plugin, &options, Arc::clone(&place.store), place.timeout) {
            Ok(client) => return Ok(client),
            Err(error) if unknown_option(&error) => {
                tracing::debug!(%error, ?options, "pjrt plugin does not know these multi-process options");
                refusals.push(error.to_string());
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(Error::NoMultiProcessOptions { plugin: plugin.path().to_owned(), refusals: refusals.join("; ") })
}

/// The key process `process` publishes its device ids under.
pub fn devices_key(process: usize) -> String {
    format!("{KEY_PREFIX}devices/{process}")
}

/// What a process publishes: the job's size (so processes of different jobs sharing a store
/// notice) and its device ids, as text: `processes=2 devices=2048,2049`.
fn encode(process_count: usize, ids: &[i32]) -> String {
    let ids: Vec<String> = ids.iter().map(i32::to_string).collect();
    format!("processes={process_count} devices={}", ids.join(","))
}

fn decode(value: &[u8]) -> Option<(usize, Vec<i32>)> {
    let text = std::str::from_utf8(value).ok()?;
    let (processes, devices) = text.strip_prefix("processes=")?.split_once(" devices=")?;
    let ids = if devices.is_empty() {
        Vec::new()
    } else {
        devices.split(',').map(|id| id.parse().ok()).collect::<Option<Vec<i32>>>()?
    };
    Some((processes.parse().ok()?, ids))
}

/// Every device of the job, sorted by process then id: this process's `local_ids` published,
/// every other process's read from the store. `listed` holds the devices the plugin itself lists
/// with their processes, checked against what the processes published where it names others.
pub(crate) fn global_devices(
    place: &Distributed,
    local_ids: &[i32],
    listed: &[GlobalDevice],
) -> Result<Vec<GlobalDevice>> {
    let store = &place.store;
    let key = devices_key(place.process_index);
    store
        .put(&key, encode(place.process_count, local_ids).as_bytes())
        .map_err(|source| Error::Store { key, source })?;
    let mut global = Vec::new();
    for process in 0..place.process_count {
        let ids = if process == place.process_index {
            local_ids.to_vec()
        } else {
            let key = devices_key(process);
            let value = store.get(&key, place.timeout).map_err(|source| Error::Peer {
                process,
                processes: place.process_count,
                source,
            })?;
            let (processes, ids) = decode(&value).ok_or_else(|| Error::PeerMessage {
                process,
                key: key.clone(),
                value: String::from_utf8_lossy(&value).into_owned(),
            })?;
            if processes != place.process_count {
                return Err(Error::JobSize {
                    process,
                    theirs: processes,
                    ours: place.process_count,
                    this: place.process_index,
                });
            }
            ids
        };
        global.extend(ids.into_iter().map(|id| GlobalDevice { process, id }));
    }
    global.sort();
    check_unique(&global)?;
    if listed.iter().any(|device| device.process != place.process_index)
        && let Some(device) = global.iter().find(|device| !listed.contains(device))
    {
        return Err(Error::Unlisted { id: device.id, process: device.process });
    }
    Ok(global)
}

/// Refuses a device id that two processes (or one process twice) publish.
fn check_unique(global: &[GlobalDevice]) -> Result<()> {
    for (index, device) in global.iter().enumerate() {
        if let Some(other) = global[..index].iter().find(|other| other.id == device.id) {
            return Err(Error::DuplicateDeviceId { id: device.id, first: other.process, second: device.process });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_devices_round_trip_and_garbage_is_refused() {
        assert_eq!(encode(2, &[2048, 2049]), "processes=2 devices=2048,2049");
        assert_eq!(decode(b"processes=2 devices=2048,2049"), Some((2, vec![2048, 2049])));
        assert_eq!(decode(b"processes=3 devices="), Some((3, vec![])));
        for bad in [&b"devices=1"[..], b"processes=x devices=1", b"processes=2 devices=1,,2", b"\xff"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    /// A store in memory, enough for one thread.
    #[derive(Debug, Default)]
    struct Memory(std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>);

    impl KvStore for Memory {
        fn put(&self, key: &str, value: &[u8]) -> Result<(), ttpu_pjrt::KvError> {
            self.0.lock().expect("not poisoned").insert(key.to_owned(), value.to_vec());
            Ok(())
        }

        fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, ttpu_pjrt::KvError> {
            self.try_get(key)?.ok_or_else(|| ttpu_pjrt::KvError::Timeout {
                key: key.to_owned(),
                waited: timeout,
                store: "memory".to_owned(),
            })
        }

        fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, ttpu_pjrt::KvError> {
            Ok(self.0.lock().expect("not poisoned").get(key).cloned())
        }
    }

    #[test]
    fn the_exchanged_list_is_sorted_and_checked_against_the_plugins() {
        let store = Arc::new(Memory::default());
        store.put(&devices_key(0), b"processes=2 devices=3,1").expect("put");
        let place = Distributed::new(1, 2, store);
        let device = |process, id| GlobalDevice { process, id };
        // A plugin that lists its own devices only (the CPU plugin) is not a reference.
        let global = global_devices(&place, &[2049, 2048], &[device(1, 2049), device(1, 2048)]).expect("agreed");
        assert_eq!(global, [device(0, 1), device(0, 3), device(1, 2048), device(1, 2049)]);
        // A plugin that lists the job's devices (a GPU plugin) must list every published one.
        let listed = [device(0, 1), device(0, 3), device(1, 2048), device(1, 2049)];
        assert!(global_devices(&place, &[2048, 2049], &listed).is_ok());
        let listed = [device(0, 1), device(0, 2), device(1, 2048), device(1, 2049)];
        assert_eq!(
            global_devices(&place, &[2048, 2049], &listed).expect_err("id 3 is not listed").to_string(),
            "process 0 uses device 3, which the plugin does not list as that process's"
        );
    }

    #[test]
    fn duplicate_ids_are_refused_with_both_processes() {
        let devices = |pairs: &[(usize, i32)]| -> Vec<GlobalDevice> {
            pairs.iter().map(|&(process, id)| GlobalDevice { process, id }).collect()
        };
        assert!(check_unique(&devices(&[(0, 0), (0, 1), (1, 2048), (1, 2049)])).is_ok());
        let error = check_unique(&devices(&[(0, 0), (0, 1), (1, 0), (1, 1)])).expect_err("duplicates");
        assert_eq!(
            error.to_string(),
            "processes 0 and 1 both have a device of id 0: the plugin numbered each process's devices \
             alike (it ignored the process index it was given), so it cannot take part in a job of \
             several processes"
        );
    }
}
