//! Shared set-up of the integration tests: one client on the configured
//! plugin, and the small modules the tests compile.
//!
//! A missing plugin fails the calling test (never skips it): the message
//! says to run `cargo xtask setup`.

#![allow(dead_code)] // each test binary uses a different subset

use std::sync::OnceLock;

use ttpu_pjrt::{Client, ElementType, Error, ErrorCode, HostBuffer, NamedValue, Plugin};

/// Adds two 2x3 f32 tensors (generic op form, as the emitter prints it).
pub const ADD_2X3_F32: &str = r#"
module {
  func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}
"#;

/// The configured plugin; panics with the setup hint when it is missing.
pub fn plugin() -> Plugin {
    let path = ttpu_pjrt::find_plugin().unwrap_or_else(|e| panic!("{e}"));
    Plugin::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// One client shared by all tests of a binary (clients are `Sync`, and a
/// CPU client per test would only add start-up time).
pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Client::new(&plugin()).unwrap_or_else(|e| panic!("{e}")))
}

/// Native-endian bytes of f32 values.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_ne_bytes()).collect()
}

/// f32 values from native-endian bytes.
pub fn f32_values(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_ne_bytes(c.try_into().expect("chunks of 4"))).collect()
}

/// Compiles [`ADD_2X3_F32`] on `client`, runs it and checks every number.
pub fn check_add(client: &Client) {
    let exe = client.compile(ADD_2X3_F32).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(exe.num_outputs(), 1);
    let a = client
        .buffer_from_host(&f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), ElementType::F32, &[2, 3])
        .expect("upload a");
    let b = client
        .buffer_from_host(&f32_bytes(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.5]), ElementType::F32, &[2, 3])
        .expect("upload b");
    let out = exe.execute(&[&a, &b]).expect("execute");
    assert_eq!(out.len(), 1);
    let host = out[0].to_host().expect("download");
    assert_eq!(host.element_type, ElementType::F32);
    assert_eq!(host.dims, vec![2, 3]);
    assert_eq!(f32_values(&host.data), vec![11.0, 22.0, 33.0, 44.0, 55.0, 66.5]);
}

/// Uploads `host`, downloads it again and checks that nothing changed.
pub fn check_round_trip(client: &Client, host: &HostBuffer) {
    let buffer = client.buffer_from_host_buffer(host).unwrap_or_else(|e| panic!("{:?}: {e}", host.element_type));
    assert_eq!(buffer.element_type().expect("element type"), host.element_type);
    assert_eq!(buffer.dims().expect("dims"), host.dims);
    let back = buffer.to_host().expect("download");
    assert_eq!(&back, host, "{:?} changed on the round trip", host.element_type);
}

/// Creates a client with one option the plugin cannot know. Plugins differ:
/// the 0.81 CPU plugin ignores it (the client must then work), the 0.115
/// one rejects it with an invalid-argument error naming the option.
pub fn check_unknown_option(plugin: &Plugin, name: &str, value: NamedValue) {
    match Client::with_options(plugin, &[(name, value)]) {
        Ok(client) => check_add(&client),
        Err(Error::Plugin { code, message }) => {
            assert_eq!(code, ErrorCode::InvalidArgument, "{message}");
            assert!(message.contains(name), "{message}");
        }
        Err(e) => panic!("{name}: {e}"),
    }
}
