//! Compatibility check against further plugins, run by hand:
//! `TTPU_PJRT_PLUGIN_EXTRA=/path/a.so:/path/b.so cargo test -p ttpu-pjrt --test extra_plugins`.
//!
//! Each listed plugin (e.g. the 0.81 and 0.106 CPU plugins) must load with
//! our 0.81 struct sizes, compute the add, round-trip bf16, pred, scalars
//! and empty arrays, and take or cleanly refuse client create options.
//! Without the variable there is nothing to check and the test passes.

mod common;

use std::path::PathBuf;

use ttpu_pjrt::{Client, ElementType, HostBuffer, NamedValue, Plugin};

use common::{check_add, check_round_trip, check_unknown_option, f32_bytes};

#[test]
fn extra_plugins_compile_execute_and_round_trip() {
    let Some(list) = std::env::var_os("TTPU_PJRT_PLUGIN_EXTRA") else {
        return;
    };
    for path in std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()) {
        check_plugin(path);
    }
}

fn check_plugin(path: PathBuf) {
    let plugin = Plugin::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (major, minor) = plugin.api_version();
    eprintln!("{}: pjrt api {major}.{minor}", path.display());
    assert_eq!(major, 0);
    let client = Client::new(&plugin).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(client.platform_name().expect("platform name"), "cpu");
    check_add(&client);
    check_round_trip(
        &client,
        &HostBuffer { element_type: ElementType::BF16, dims: vec![3], data: vec![0x80, 0x3f, 0x00, 0x80, 0xc1, 0x7f] },
    );
    check_round_trip(&client, &HostBuffer { element_type: ElementType::Pred, dims: vec![2], data: vec![1, 0] });
    check_round_trip(&client, &HostBuffer { element_type: ElementType::F32, dims: vec![], data: f32_bytes(&[2.5]) });
    check_round_trip(&client, &HostBuffer { element_type: ElementType::S32, dims: vec![0, 2], data: vec![] });
    let exe = client.compile(common::ADD_2X3_F32).expect("compile");
    let bytes = exe.serialize().expect("serialize");
    client.deserialize_executable(&bytes).expect("deserialize");
    check_add(&Client::with_options(&plugin, &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    check_unknown_option(&plugin, "ttpu_unknown_option", NamedValue::Int64(1));
}
