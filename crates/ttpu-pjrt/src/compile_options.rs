//! The serialized `xla.CompileOptionsProto` sent with every compile.
//!
//! PJRT takes compile options as protobuf bytes. An empty blob is not
//! "defaults": the CPU plugin then sees `num_replicas == 0` and aborts the
//! process (`replica_count > 0`). So we hand-declare just the fields we set,
//! with the field numbers of OpenXLA's `xla/pjrt/proto/compile_options.proto`
//! and `xla/xla_data.proto`, and let `prost` encode them; no `protoc` or
//! vendored `.proto` needed.
//!
//! XLA's debug options (`xla.DebugOptions`, hundreds of fields that change
//! between XLA versions) are set by name, the way JAX's `compiler_options`
//! sets them: through `env_option_overrides`, which the plugin applies with
//! protobuf reflection on top of its own defaults
//! (`CompileOptions::ApplyAllOptionOverrides`). Sending a `DebugOptions`
//! message instead would replace every default with proto3's zeros. An
//! unknown name comes back as the plugin's error `No such compile option:
//! '<name>'`, and a value of the wrong type as `While setting option <name>,
//! '<value>' is not a valid <type> value.`

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};

use prost::Message;

/// `xla.CompileOptionsProto`, reduced to the fields we set.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct CompileOptionsProto {
    /// `ExecutableBuildOptionsProto executable_build_options = 3;`
    #[prost(message, optional, tag = "3")]
    pub executable_build_options: Option<ExecutableBuildOptionsProto>,
    /// `map<string, OptionOverrideProto> env_option_overrides = 7;`, sorted by
    /// name so the same options always encode to the same bytes (the disk
    /// cache keys by them).
    #[prost(btree_map = "string, message", tag = "7")]
    pub env_option_overrides: BTreeMap<String, OptionOverrideProto>,
}

/// `xla.OptionOverrideProto`: one option's value.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct OptionOverrideProto {
    /// `oneof value { string string_field = 1; bool bool_field = 2; int64 int_field = 3; double double_field = 4; }`
    #[prost(oneof = "OptionOverrideValue", tags = "1, 2, 3, 4")]
    pub value: Option<OptionOverrideValue>,
}

/// The `value` oneof of `xla.OptionOverrideProto`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum OptionOverrideValue {
    /// `string string_field = 1;`
    #[prost(string, tag = "1")]
    String(String),
    /// `bool bool_field = 2;`
    #[prost(bool, tag = "2")]
    Bool(bool),
    /// `int64 int_field = 3;`
    #[prost(int64, tag = "3")]
    Int(i64),
    /// `double double_field = 4;`
    #[prost(double, tag = "4")]
    Double(f64),
}

/// The value of an XLA option set by name (a field of `xla.DebugOptions`,
/// such as `xla_cpu_use_thunk_runtime` or `xla_dump_to`). The plugin checks
/// it against the field's type: a bool field takes [`OptionValue::Bool`] (or
/// the strings `True`/`False`), an integer field [`OptionValue::Int`], a
/// float field [`OptionValue::Float`], and a string field
/// [`OptionValue::String`]; integer and float fields also parse strings.
#[derive(Clone, Debug)]
pub enum OptionValue {
    /// A bool.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float. Compared and hashed by its bits, so a compile cache tells
    /// `0.0` from `-0.0` and a NaN equals itself.
    Float(f64),
    /// A string.
    String(String),
}

impl OptionValue {
    /// Reads a value typed on a command line: `true`/`false` as a bool, an
    /// integer as an integer, a number with a fraction or exponent (or `inf`,
    /// `nan`) as a float, and anything else as a string; a value in double
    /// quotes is always a string, without the quotes (`"12"` for a string
    /// field that holds digits).
    pub fn parse(text: &str) -> OptionValue {
        if let Some(quoted) = text.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) {
            return OptionValue::String(quoted.to_owned());
        }
        match text {
            "true" => return OptionValue::Bool(true),
            "false" => return OptionValue::Bool(false),
            _ => {}
        }
        if let Ok(int) = text.parse::<i64>() {
            return OptionValue::Int(int);
        }
        match text.parse::<f64>() {
            Ok(float) => OptionValue::Float(float),
            Err(_) => OptionValue::String(text.to_owned()),
        }
    }

    fn to_proto(&self) -> OptionOverrideProto {
        let value = match self {
            OptionValue::Bool(value) => OptionOverrideValue::Bool(*value),
            OptionValue::Int(value) => OptionOverrideValue::Int(*value),
            OptionValue::Float(value) => OptionOverrideValue::Double(*value),
            OptionValue::String(value) => OptionOverrideValue::String(value.clone()),
        };
        OptionOverrideProto { value: Some(value) }
    }
}

impl PartialEq for OptionValue {
    fn eq(&self, other: &OptionValue) -> bool {
        match (self, other) {
            (OptionValue::Bool(a), OptionValue::Bool(b)) => a == b,
            (OptionValue::Int(a), OptionValue::Int(b)) => a == b,
            (OptionValue::Float(a), OptionValue::Float(b)) => a.to_bits() == b.to_bits(),
            (OptionValue::String(a), OptionValue::String(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for OptionValue {}

impl Hash for OptionValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            OptionValue::Bool(value) => value.hash(state),
            OptionValue::Int(value) => value.hash(state),
            OptionValue::Float(value) => value.to_bits().hash(state),
            OptionValue::String(value) => value.hash(state),
        }
    }
}

impl fmt::Display for OptionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::Bool(value) => write!(f, "{value}"),
            OptionValue::Int(value) => write!(f, "{value}"),
            OptionValue::Float(value) => write!(f, "{value:?}"),
            OptionValue::String(value) => write!(f, "{value:?}"),
        }
    }
}

/// `xla.ExecutableBuildOptionsProto`, reduced to the fields we set.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ExecutableBuildOptionsProto {
    /// `int64 device_ordinal = 1;` where -1 means "not set", as XLA's own
    /// `ExecutableBuildOptions` default serializes it.
    #[prost(int64, tag = "1")]
    pub device_ordinal: i64,
    /// `int64 num_replicas = 4;`
    #[prost(int64, tag = "4")]
    pub num_replicas: i64,
    /// `int64 num_partitions = 5;`
    #[prost(int64, tag = "5")]
    pub num_partitions: i64,
    /// `bool use_spmd_partitioning = 6;`
    #[prost(bool, tag = "6")]
    pub use_spmd_partitioning: bool,
    /// `xla.DeviceAssignmentProto device_assignment = 9;`
    #[prost(message, optional, tag = "9")]
    pub device_assignment: Option<DeviceAssignmentProto>,
    /// `bool use_shardy_partitioner = 19;`
    #[prost(bool, tag = "19")]
    pub use_shardy_partitioner: bool,
}

/// `xla.DeviceAssignmentProto`: for each computation (partition), the device
/// id of each replica.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct DeviceAssignmentProto {
    /// `int32 replica_count = 1;`
    #[prost(int32, tag = "1")]
    pub replica_count: i32,
    /// `int32 computation_count = 2;`
    #[prost(int32, tag = "2")]
    pub computation_count: i32,
    /// `repeated ComputationDevice computation_devices = 3;`
    #[prost(message, repeated, tag = "3")]
    pub computation_devices: Vec<ComputationDevice>,
}

/// `xla.DeviceAssignmentProto.ComputationDevice`.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ComputationDevice {
    /// `repeated int64 replica_device_ids = 1;`
    #[prost(int64, repeated, tag = "1")]
    pub replica_device_ids: Vec<i64>,
}

/// How a program is compiled: how many replicas or partitions it runs as and
/// on which devices. The default is one replica on a device the plugin
/// chooses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Device ids (as [`Device::id`](crate::Device::id) reports them) of the
    /// replicas, in replica order; empty for one replica placed by the
    /// plugin. With N ids the program runs as N replicas, one per device,
    /// and [`LoadedExecutable::execute_replicated`](crate::LoadedExecutable::execute_replicated)
    /// takes one argument list per device in this order.
    pub replica_devices: Vec<i32>,
    /// Device ids of the partitions of a program that XLA's SPMD partitioner
    /// splits (one replica; Shardy's `sdy.sharding` annotations say how),
    /// in partition order. Non-empty takes precedence over
    /// `replica_devices`; argument lists then go per partition, in this
    /// order.
    pub partition_devices: Vec<i32>,
    /// XLA options set by name (fields of `xla.DebugOptions`), applied by
    /// the plugin on top of its defaults; a name given twice takes its last
    /// value. Empty: XLA's defaults.
    pub xla_options: Vec<(String, OptionValue)>,
}

impl CompileOptions {
    /// One replica per device of `ids`, in that order.
    pub fn replicated(ids: &[i32]) -> CompileOptions {
        CompileOptions { replica_devices: ids.to_vec(), ..CompileOptions::default() }
    }

    /// One SPMD partition per device of `ids`, in that order, partitioned by
    /// Shardy.
    pub fn partitioned(ids: &[i32]) -> CompileOptions {
        CompileOptions { partition_devices: ids.to_vec(), ..CompileOptions::default() }
    }

    /// The same options with these XLA options (see [`CompileOptions::xla_options`]).
    pub fn with_xla_options(self, xla_options: Vec<(String, OptionValue)>) -> CompileOptions {
        CompileOptions { xla_options, ..self }
    }

    fn option_overrides(&self) -> BTreeMap<String, OptionOverrideProto> {
        self.xla_options.iter().map(|(name, value)| (name.clone(), value.to_proto())).collect()
    }

    /// Number of replicas (at least one).
    pub fn replicas(&self) -> usize {
        if self.partition_devices.is_empty() { self.replica_devices.len().max(1) } else { 1 }
    }

    /// The `xla.CompileOptionsProto` bytes handed to the plugin; also what a
    /// compile cache keys the options by.
    pub fn to_proto_bytes(&self) -> Vec<u8> {
        if !self.partition_devices.is_empty() {
            let partitions = self.partition_devices.len();
            return CompileOptionsProto {
                executable_build_options: Some(ExecutableBuildOptionsProto {
                    device_ordinal: -1,
                    num_replicas: 1,
                    num_partitions: partitions as i64,
                    use_spmd_partitioning: true,
                    // Partitions are computations: one device id (its one replica) each.
                    device_assignment: Some(DeviceAssignmentProto {
                        replica_count: 1,
                        computation_count: partitions as i32,
                        computation_devices: self
                            .partition_devices
                            .iter()
                            .map(|&id| ComputationDevice { replica_device_ids: vec![i64::from(id)] })
                            .collect(),
                    }),
                    use_shardy_partitioner: true,
                }),
                env_option_overrides: self.option_overrides(),
            }
            .encode_to_vec();
        }
        let replicas = self.replicas();
        let device_assignment = (!self.replica_devices.is_empty()).then(|| DeviceAssignmentProto {
            replica_count: replicas as i32,
            computation_count: 1,
            computation_devices: vec![ComputationDevice {
                replica_device_ids: self.replica_devices.iter().map(|&id| i64::from(id)).collect(),
            }],
        });
        CompileOptionsProto {
            executable_build_options: Some(ExecutableBuildOptionsProto {
                device_ordinal: -1,
                num_replicas: replicas as i64,
                num_partitions: 1,
                use_spmd_partitioning: false,
                device_assignment,
                use_shardy_partitioner: false,
            }),
            env_option_overrides: self.option_overrides(),
        }
        .encode_to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_device_options_encode_to_expected_wire_bytes() {
        let mut inner = vec![0x08]; // field 1, varint
        inner.extend([0xff; 9]); // -1 as a ten-byte two's-complement varint
        inner.push(0x01);
        inner.extend([0x20, 0x01]); // field 4 (num_replicas) = 1
        inner.extend([0x28, 0x01]); // field 5 (num_partitions) = 1
        let mut expected = vec![0x1a, inner.len() as u8]; // field 3, length-delimited
        expected.extend(inner);
        assert_eq!(CompileOptions::default().to_proto_bytes(), expected);
    }

    #[test]
    fn replicated_options_carry_a_device_assignment() {
        let bytes = CompileOptions::replicated(&[3, 1]).to_proto_bytes();
        let decoded = CompileOptionsProto::decode(bytes.as_slice()).expect("decodes");
        let build = decoded.executable_build_options.expect("build options");
        assert_eq!((build.num_replicas, build.num_partitions), (2, 1));
        let assignment = build.device_assignment.expect("assignment");
        assert_eq!((assignment.replica_count, assignment.computation_count), (2, 1));
        assert_eq!(assignment.computation_devices[0].replica_device_ids, vec![3, 1]);
    }

    #[test]
    fn xla_options_encode_as_env_option_overrides_sorted_by_name() {
        let options = CompileOptions::default().with_xla_options(vec![
            ("xla_dump_to".into(), OptionValue::String("/tmp/dump".into())),
            ("xla_cpu_use_thunk_runtime".into(), OptionValue::Bool(false)),
            ("xla_backend_optimization_level".into(), OptionValue::Int(1)),
            ("xla_gpu_auto_spmd_partitioning_memory_budget_ratio".into(), OptionValue::Float(0.5)),
            ("xla_backend_optimization_level".into(), OptionValue::Int(2)),
        ]);
        let bytes = options.to_proto_bytes();
        let decoded = CompileOptionsProto::decode(bytes.as_slice()).expect("decodes");
        let names: Vec<&str> = decoded.env_option_overrides.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "xla_backend_optimization_level",
                "xla_cpu_use_thunk_runtime",
                "xla_dump_to",
                "xla_gpu_auto_spmd_partitioning_memory_budget_ratio"
            ]
        );
        let value = |name: &str| decoded.env_option_overrides[name].value.clone();
        assert_eq!(value("xla_backend_optimization_level"), Some(OptionOverrideValue::Int(2)), "the last wins");
        assert_eq!(value("xla_cpu_use_thunk_runtime"), Some(OptionOverrideValue::Bool(false)));
        assert_eq!(value("xla_dump_to"), Some(OptionOverrideValue::String("/tmp/dump".into())));
        assert_eq!(value("xla_gpu_auto_spmd_partitioning_memory_budget_ratio"), Some(OptionOverrideValue::Double(0.5)));
        // The same options in another order give the same bytes (the disk cache's key).
        let mut reordered = options.xla_options.clone();
        reordered.swap(0, 1);
        assert_eq!(CompileOptions::default().with_xla_options(reordered).to_proto_bytes(), bytes);
        // No options: the bytes of before, without field 7.
        assert!(
            CompileOptionsProto::decode(CompileOptions::default().to_proto_bytes().as_slice())
                .expect("decodes")
                .env_option_overrides
                .is_empty()
        );
    }

    #[test]
    fn option_values_parse_as_bool_int_float_or_string() {
        let cases = [
            ("true", OptionValue::Bool(true)),
            ("false", OptionValue::Bool(false)),
            ("3", OptionValue::Int(3)),
            ("-12", OptionValue::Int(-12)),
            ("0.5", OptionValue::Float(0.5)),
            ("1e3", OptionValue::Float(1000.0)),
            ("/tmp/dump", OptionValue::String("/tmp/dump".into())),
            ("True", OptionValue::String("True".into())),
            ("\"12\"", OptionValue::String("12".into())),
            ("", OptionValue::String(String::new())),
        ];
        for (text, expected) in cases {
            assert_eq!(OptionValue::parse(text), expected, "{text}");
        }
    }

    #[test]
    fn partitioned_options_ask_for_shardy_and_one_device_per_partition() {
        let bytes = CompileOptions::partitioned(&[0, 1, 2]).to_proto_bytes();
        let build =
            CompileOptionsProto::decode(bytes.as_slice()).expect("decodes").executable_build_options.expect("set");
        assert_eq!((build.num_replicas, build.num_partitions), (1, 3));
        assert!(build.use_spmd_partitioning && build.use_shardy_partitioner);
        let assignment = build.device_assignment.expect("assignment");
        assert_eq!((assignment.replica_count, assignment.computation_count), (1, 3));
        let ids: Vec<Vec<i64>> = assignment.computation_devices.into_iter().map(|c| c.replica_device_ids).collect();
        assert_eq!(ids, vec![vec![0], vec![1], vec![2]]);
    }
}
