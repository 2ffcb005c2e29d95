//! A device's programs over a mesh of 4 CPU devices: a value split over the mesh computes what
//! it computes on one device, outputs of a split input's type stay split (a quarter of their
//! bytes on each device), and meshes that do not fit their devices are refused.

use ttpu_eager::{Device, Runtime, Tensor};
use ttpu_ir::{Mesh, Sharding};
use ttpu_runtime::RuntimeOptions;

fn four_devices() -> Device {
    let plugin = Runtime::cpu().unwrap_or_else(|error| panic!("{error}")).plugin_path().to_path_buf();
    let runtime = Runtime::new(&plugin, &RuntimeOptions { devices: Some(4), ..RuntimeOptions::default() })
        .unwrap_or_else(|error| panic!("{error}"));
    Device::on(&runtime, 0).expect("device 0")
}

#[test]
fn a_split_value_computes_what_one_device_computes() {
    let device = four_devices();
    let data: Vec<f32> = (0..32).map(|i| i as f32 * 0.5 - 3.0).collect();
    let whole = Tensor::from_slice(&device, &data, &[8, 4]).unwrap();
    let want = whole.mul_scalar(2.0f32).unwrap().add_scalar(1.0f32).unwrap().to_vec::<f32>().unwrap();

    device.set_mesh(Mesh::one_d(4).unwrap(), vec![0, 1, 2, 3]).unwrap();
    let split = Sharding { dims: vec![vec!["devices".into()], vec![]] };
    let x = Tensor::from_slice(&device, &data, &[8, 4]).unwrap().sharded(&split).unwrap();
    assert_eq!(x.sharding(), Some(split.clone()));
    let y = x.mul_scalar(2.0f32).unwrap().add_scalar(1.0f32).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
    assert_eq!(y.sharding(), Some(split), "an output of the split input's type stays split");
    // x and y: two values of 8x4 f32 (128 bytes each), a quarter of each on every device.
    assert_eq!(device.resident_bytes().unwrap(), vec![64; 4]);
    // A reduction over the split dim is replicated, and still right.
    let total = y.sum(&[0, 1]).unwrap().to_vec::<f32>().unwrap();
    let expected: f32 = want.iter().sum();
    assert!((total[0] - expected).abs() < 1e-4, "{total:?} vs {expected}");
    // A value made before the mesh is replicated onto it when read.
    assert_eq!(whole.add(&x).unwrap().to_vec::<f32>().unwrap(), data.iter().map(|v| v * 2.0).collect::<Vec<_>>());
}

#[test]
fn meshes_that_do_not_fit_are_refused() {
    let device = four_devices();
    let error = device.set_mesh(Mesh::one_d(4).unwrap(), vec![0, 1, 2]).unwrap_err();
    assert_eq!(error.to_string(), "mesh: mesh devices=4 has 4 positions, given 3 devices");
    let error = device.set_mesh(Mesh::one_d(2).unwrap(), vec![1, 1]).unwrap_err();
    assert_eq!(error.to_string(), "mesh: devices [1, 1] name one device twice");
    let x = Tensor::from_slice(&device, &[1.0f32; 6], &[3, 2]).unwrap();
    let error = x.sharded(&Sharding { dims: vec![vec!["devices".into()], vec![]] }).unwrap_err();
    assert_eq!(error.to_string(), "mesh: sharding a tensor needs a device that runs over a mesh (set_mesh)");
    device.set_mesh(Mesh::one_d(4).unwrap(), vec![0, 1, 2, 3]).unwrap();
    assert!(x.sharded(&Sharding { dims: vec![vec!["devices".into()], vec![]] }).is_err(), "3 rows over 4 devices");
}

#[test]
fn a_complex32_value_splits_over_the_mesh_intact() {
    // complex32 lives in c64 buffers; splitting it goes through its 4-byte host form.
    let device = four_devices();
    device.set_mesh(Mesh::one_d(4).unwrap(), vec![0, 1, 2, 3]).unwrap();
    let halves: Vec<u8> = (0..8u16).flat_map(|i| half::f16::from_f32(f32::from(i) - 2.5).to_le_bytes()).collect();
    let whole = Tensor::from_bytes(&device, ttpu_ir::DType::C32, &halves, &[4]).unwrap();
    let split = whole.sharded(&Sharding { dims: vec![vec!["devices".into()]] }).unwrap();
    let host = split.to_host().unwrap();
    assert_eq!(ttpu_runtime::host_bytes(ttpu_ir::DType::C32, host.data), halves);
}
