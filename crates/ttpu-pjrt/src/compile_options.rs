//! The serialized `xla.CompileOptionsProto` sent with every compile.
//!
//! PJRT takes compile options as protobuf bytes. An empty blob is not
//! "defaults": the CPU plugin then sees `num_replicas == 0` and aborts the
//! process (`replica_count > 0`). So we hand-declare just the fields we set,
//! with the field numbers of OpenXLA's `xla/pjrt/proto/compile_options.proto`
//! and `xla/xla_data.proto`, and let `prost` encode them; no `protoc` or
//! vendored `.proto` needed.

use prost::Message;

/// `xla.CompileOptionsProto`, reduced to the one field we set.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct CompileOptionsProto {
    /// `ExecutableBuildOptionsProto executable_build_options = 3;`
    #[prost(message, optional, tag = "3")]
    pub executable_build_options: Option<ExecutableBuildOptionsProto>,
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
}

impl CompileOptions {
    /// One replica per device of `ids`, in that order.
    pub fn replicated(ids: &[i32]) -> CompileOptions {
        CompileOptions { replica_devices: ids.to_vec(), partition_devices: Vec::new() }
    }

    /// One SPMD partition per device of `ids`, in that order, partitioned by
    /// Shardy.
    pub fn partitioned(ids: &[i32]) -> CompileOptions {
        CompileOptions { replica_devices: Vec::new(), partition_devices: ids.to_vec() }
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
