//! Where a process stands in its job, from the environment its launcher set.
//!
//! The process index and count come from the first of three conventions that sets them:
//! ttpu's own (`TTPU_PROCESS_ID`, `TTPU_NUM_PROCESSES`), JAX's (`JAX_PROCESS_ID`,
//! `JAX_NUM_PROCESSES`) and torchrun's (`RANK`, `WORLD_SIZE`). The store comes from
//! `TTPU_COORDINATOR`, else `JAX_COORDINATOR_ADDRESS`, else torchrun's
//! `MASTER_ADDR`/`MASTER_PORT`, and must be a store ttpu reaches (`file://` or `redis://`): JAX's
//! coordination service and torchrun's `TCPStore` speak protocols of their own, so a bare
//! `host:port` from them is refused with what to set instead. The local devices come from
//! `JAX_LOCAL_DEVICE_IDS`, else torchrun's `LOCAL_RANK`. `TTPU_RUN_ID` (else torchrun's
//! `TORCHELASTIC_RUN_ID`) names the job inside a store that several jobs share, and
//! `TTPU_CLIENT_OPTIONS` (`name=value,...`) adds create options for the plugin (the CUDA plugin's
//! `enable_mock_nccl=true`, say).
//!
//! A job of one process is no job: the result is `None` and the runtime runs alone.

use ttpu_runtime::NamedValue;

use crate::Error;

/// A process's place in its job, as its environment gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// This process's index.
    pub process_index: usize,
    /// Processes in the job.
    pub process_count: usize,
    /// The job's store (`file:///...` or `redis://...`).
    pub store: String,
    /// The local devices this process uses, by local index, where the launcher says
    /// (`JAX_LOCAL_DEVICE_IDS`, or torchrun's `LOCAL_RANK` as one device).
    pub visible_devices: Option<Vec<usize>>,
    /// The job's name inside a shared store (`TTPU_RUN_ID`, `TORCHELASTIC_RUN_ID`): every key is
    /// prefixed with it.
    pub run_id: Option<String>,
    /// More create options for the plugin (`TTPU_CLIENT_OPTIONS`).
    pub client_options: Vec<(String, NamedValue)>,
    /// The convention the place came from (`TTPU_*`, `JAX_*` or `torchrun`), for messages.
    pub convention: &'static str,
}

/// The three conventions: a name for messages, the process index's variable, the count's.
const CONVENTIONS: [(&str, &str, &str); 3] = [
    ("TTPU_*", "TTPU_PROCESS_ID", "TTPU_NUM_PROCESSES"),
    ("JAX_*", "JAX_PROCESS_ID", "JAX_NUM_PROCESSES"),
    ("torchrun", "RANK", "WORLD_SIZE"),
];

impl Launch {
    /// The place the process environment gives, if any.
    pub fn from_env() -> Result<Option<Launch>, Error> {
        Launch::from_vars(|name| std::env::var(name).ok())
    }

    /// The place the variables `var` looks up give (the environment's, or a test's).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, Error> {
        let var = |name: &str| var(name).filter(|value| !value.trim().is_empty());
        let number = |name: &str| -> Result<Option<usize>, Error> {
            var(name)
                .map(|value| {
                    value.trim().parse::<usize>().map_err(|_| Error::Environment {
                        message: format!("{name}=`{value}` is not a process number"),
                    })
                })
                .transpose()
        };
        let mut place = None;
        for (convention, index_var, count_var) in CONVENTIONS {
            match (number(index_var)?, number(count_var)?) {
                (Some(index), Some(count)) => {
                    place = Some((convention, index, count, index_var, count_var));
                    break;
                }
                (None, None) => {}
                (Some(_), None) | (None, Some(_)) => {
                    return Err(Error::Environment {
                        message: format!("{index_var} and {count_var} come together; only one of them is set"),
                    });
                }
            }
        }
        let Some((convention, process_index, process_count, index_var, count_var)) = place else {
            return Ok(None);
        };
        if process_index >= process_count {
            return Err(Error::Environment {
                message: format!(
                    "{index_var}={process_index} is not a process of a job of {count_var}={process_count}"
                ),
            });
        }
        if process_count == 1 {
            return Ok(None);
        }
        let store = match (var("TTPU_COORDINATOR"), var("JAX_COORDINATOR_ADDRESS"), var("MASTER_ADDR")) {
            (Some(url), _, _) => store_address("TTPU_COORDINATOR", &url)?,
            (None, Some(address), _) => store_address("JAX_COORDINATOR_ADDRESS", &address)?,
            (None, None, Some(host)) => {
                let port = var("MASTER_PORT").unwrap_or_default();
                return Err(Error::Environment {
                    message: format!(
                        "MASTER_ADDR={host} MASTER_PORT={port} name torchrun's TCPStore, which only \
                         torch.distributed speaks; set TTPU_COORDINATOR to a store ttpu reaches \
                         (file:///a/shared/directory or redis://host:port)"
                    ),
                });
            }
            (None, None, None) => {
                return Err(Error::Environment {
                    message: format!(
                        "{count_var}={process_count} asks for a job of several processes, but no store is \
                         set: set TTPU_COORDINATOR (file:///a/shared/directory or redis://host:port)"
                    ),
                });
            }
        };
        let visible_devices = match (var("JAX_LOCAL_DEVICE_IDS"), var("LOCAL_RANK")) {
            (Some(ids), _) => {
                Some(ids.split(',').map(|id| id.trim().parse::<usize>()).collect::<Result<Vec<usize>, _>>().map_err(
                    |_| Error::Environment {
                        message: format!("JAX_LOCAL_DEVICE_IDS=`{ids}` is not a list of device numbers"),
                    },
                )?)
            }
            (None, Some(_)) => number("LOCAL_RANK")?.map(|rank| vec![rank]),
            (None, None) => None,
        };
        let run_id = var("TTPU_RUN_ID").or_else(|| var("TORCHELASTIC_RUN_ID"));
        let client_options =
            var("TTPU_CLIENT_OPTIONS").map(|text| client_options(&text)).transpose()?.unwrap_or_default();
        Ok(Some(Launch { process_index, process_count, store, visible_devices, run_id, client_options, convention }))
    }
}

/// `TTPU_CLIENT_OPTIONS`: `name=value` pairs split by commas; a value is `true`/`false`, an
/// integer, a number with a fraction, or else a string.
fn client_options(text: &str) -> Result<Vec<(String, NamedValue)>, Error> {
    text.split(',')
        .filter(|pair| !pair.trim().is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').ok_or_else(|| Error::Environment {
                message: format!("TTPU_CLIENT_OPTIONS: expected NAME=VALUE, found `{pair}`"),
            })?;
            let value = value.trim();
            let value = match value {
                "true" => NamedValue::Bool(true),
                "false" => NamedValue::Bool(false),
                _ => match (value.parse::<i64>(), value.parse::<f32>()) {
                    (Ok(int), _) => NamedValue::Int64(int),
                    (Err(_), Ok(float)) => NamedValue::Float(float),
                    _ => NamedValue::String(value.to_owned()),
                },
            };
            Ok((name.trim().to_owned(), value))
        })
        .collect()
}

/// `value` of variable `name` as a store address, or why it is not one.
fn store_address(name: &str, value: &str) -> Result<String, Error> {
    let value = value.trim();
    if value.starts_with("file://") || value.starts_with("redis://") {
        return Ok(value.to_owned());
    }
    Err(Error::Environment {
        message: format!(
            "{name}={value} is not a store ttpu reaches: ttpu's processes meet in a shared directory \
             (file:///path) or on a Redis server (redis://host:port)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn launch(vars: &[(&str, &str)]) -> Result<Option<Launch>, String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Launch::from_vars(|name| vars.get(name).cloned()).map_err(|error| error.to_string())
    }

    #[test]
    fn each_convention_gives_the_place() {
        assert_eq!(launch(&[]), Ok(None));
        let ttpu = launch(&[
            ("TTPU_PROCESS_ID", "1"),
            ("TTPU_NUM_PROCESSES", "2"),
            ("TTPU_COORDINATOR", "file:///tmp/job"),
            ("TTPU_RUN_ID", "run7"),
        ]);
        assert_eq!(
            ttpu,
            Ok(Some(Launch {
                process_index: 1,
                process_count: 2,
                store: "file:///tmp/job".into(),
                visible_devices: None,
                run_id: Some("run7".into()),
                client_options: Vec::new(),
                convention: "TTPU_*",
            }))
        );
        let jax = launch(&[
            ("JAX_PROCESS_ID", "0"),
            ("JAX_NUM_PROCESSES", "4"),
            ("JAX_COORDINATOR_ADDRESS", "redis://10.0.0.1:6379/0"),
            ("JAX_LOCAL_DEVICE_IDS", "2,3"),
        ])
        .expect("valid")
        .expect("a job");
        assert_eq!((jax.process_index, jax.process_count, jax.convention), (0, 4, "JAX_*"));
        assert_eq!((jax.store.as_str(), jax.visible_devices), ("redis://10.0.0.1:6379/0", Some(vec![2, 3])));
        let torchrun = launch(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
            ("TTPU_COORDINATOR", "redis://10.0.0.1:6379"),
            ("TORCHELASTIC_RUN_ID", "elastic-1"),
            ("TTPU_CLIENT_OPTIONS", "enable_mock_nccl=true, mock_gpu_topology=2x1x1,memory_fraction=0.5,num=3"),
        ])
        .expect("valid")
        .expect("a job");
        assert_eq!((torchrun.process_index, torchrun.process_count, torchrun.convention), (3, 4, "torchrun"));
        assert_eq!((torchrun.visible_devices, torchrun.run_id), (Some(vec![1]), Some("elastic-1".into())));
        assert_eq!(
            torchrun.client_options,
            [
                ("enable_mock_nccl".to_owned(), NamedValue::Bool(true)),
                ("mock_gpu_topology".to_owned(), NamedValue::String("2x1x1".into())),
                ("memory_fraction".to_owned(), NamedValue::Float(0.5)),
                ("num".to_owned(), NamedValue::Int64(3)),
            ]
        );
        // ttpu's variables win over the others.
        let both = launch(&[
            ("TTPU_PROCESS_ID", "0"),
            ("TTPU_NUM_PROCESSES", "2"),
            ("RANK", "5"),
            ("WORLD_SIZE", "8"),
            ("TTPU_COORDINATOR", "file:///tmp/job"),
        ]);
        assert_eq!(both.expect("valid").map(|launch| (launch.process_index, launch.process_count)), Some((0, 2)));
        // One process is no job, with or without a store.
        assert_eq!(launch(&[("RANK", "0"), ("WORLD_SIZE", "1")]), Ok(None));
    }

    #[test]
    fn incomplete_or_foreign_settings_are_refused_with_what_to_set() {
        assert_eq!(
            launch(&[("TTPU_PROCESS_ID", "0")]),
            Err("launch environment: TTPU_PROCESS_ID and TTPU_NUM_PROCESSES come together; only one of them is set"
                .into())
        );
        assert_eq!(
            launch(&[("RANK", "two"), ("WORLD_SIZE", "4")]),
            Err("launch environment: RANK=`two` is not a process number".into())
        );
        assert_eq!(
            launch(&[("JAX_PROCESS_ID", "2"), ("JAX_NUM_PROCESSES", "2")]),
            Err("launch environment: JAX_PROCESS_ID=2 is not a process of a job of JAX_NUM_PROCESSES=2".into())
        );
        assert_eq!(
            launch(&[("TTPU_PROCESS_ID", "0"), ("TTPU_NUM_PROCESSES", "2")]),
            Err("launch environment: TTPU_NUM_PROCESSES=2 asks for a job of several processes, but no store is set: \
                 set TTPU_COORDINATOR (file:///a/shared/directory or redis://host:port)"
                .into())
        );
        assert_eq!(
            launch(&[
                ("JAX_PROCESS_ID", "0"),
                ("JAX_NUM_PROCESSES", "2"),
                ("JAX_COORDINATOR_ADDRESS", "10.0.0.1:1234")
            ]),
            Err("launch environment: JAX_COORDINATOR_ADDRESS=10.0.0.1:1234 is not a store ttpu reaches: ttpu's \
                 processes meet in a shared directory (file:///path) or on a Redis server (redis://host:port)"
                .into())
        );
        assert_eq!(
            launch(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500")]),
            Err("launch environment: MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 name torchrun's TCPStore, which only \
                 torch.distributed speaks; set TTPU_COORDINATOR to a store ttpu reaches \
                 (file:///a/shared/directory or redis://host:port)"
                .into())
        );
        assert_eq!(
            launch(&[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("TTPU_COORDINATOR", "file:///tmp/x"),
                ("JAX_LOCAL_DEVICE_IDS", "0,a")
            ]),
            Err("launch environment: JAX_LOCAL_DEVICE_IDS=`0,a` is not a list of device numbers".into())
        );
        assert_eq!(
            launch(&[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("TTPU_COORDINATOR", "file:///tmp/x"),
                ("TTPU_CLIENT_OPTIONS", "enable_mock_nccl")
            ]),
            Err("launch environment: TTPU_CLIENT_OPTIONS: expected NAME=VALUE, found `enable_mock_nccl`".into())
        );
    }
}
