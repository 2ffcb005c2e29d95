//! The serialized `xla.CompileOptionsProto` sent with every compile.
//!
//! PJRT takes compile options as protobuf bytes. An empty blob is not
//! "defaults": the CPU plugin then sees `num_replicas == 0` and aborts the
//! process (`replica_count > 0`). So we hand-declare just the fields we set,
//! with the field numbers of OpenXLA's `xla/pjrt/proto/compile_options.proto`,
//! and let `prost` encode them; no `protoc` or vendored `.proto` needed.

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
}

/// Options for one replica, one partition, device chosen by the plugin: the
/// only configuration this crate executes.
pub(crate) fn single_device() -> Vec<u8> {
    CompileOptionsProto {
        executable_build_options: Some(ExecutableBuildOptionsProto {
            device_ordinal: -1,
            num_replicas: 1,
            num_partitions: 1,
        }),
    }
    .encode_to_vec()
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
        assert_eq!(single_device(), expected);
    }
}
