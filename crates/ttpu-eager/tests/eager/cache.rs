//! The compile cache: keyed by structure not values, bounded in memory, and safe on disk.

use std::path::PathBuf;

use ttpu_eager::Tensor;

use crate::common::{device, tensor};

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ttpu-eager-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn equal_structure_hits_and_other_shapes_miss() {
    let device = device();
    for values in [[1.0f32, 2.0], [3.0, 4.0]] {
        let x = tensor(&device, &values, &[2]);
        assert_eq!(x.mul(&x).unwrap().to_vec::<f32>().unwrap(), vec![values[0] * values[0], values[1] * values[1]]);
    }
    assert_eq!((device.counters().compiles, device.counters().cache_hits), (1, 1));
    let wider = tensor(&device, &[1.0, 2.0, 3.0], &[3]);
    wider.mul(&wider).unwrap().materialize().unwrap();
    assert_eq!(device.counters().compiles, 2);
}

#[test]
fn constants_and_attributes_are_part_of_the_key() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    assert_eq!(x.mul_scalar(2.0f32).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0, 8.0]);
    assert_eq!(x.mul_scalar(3.0f32).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 6.0, 9.0, 12.0]);
    assert_eq!(x.sum(&[0]).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
    assert_eq!(x.sum(&[1]).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 7.0]);
    assert_eq!((device.counters().compiles, device.counters().cache_hits), (4, 0));
}

#[test]
fn the_memory_cache_evicts_the_least_recently_used() {
    let device = device();
    device.set_cache_capacity(1).unwrap();
    let x = tensor(&device, &[1.0, 2.0], &[2]);
    for _ in 0..2 {
        x.exp().unwrap().materialize().unwrap();
        x.tanh().unwrap().materialize().unwrap();
    }
    assert_eq!(device.cached_graphs().unwrap(), 1);
    assert_eq!(device.counters().compiles, 4);
}

#[test]
fn the_disk_cache_survives_devices_and_ignores_damage() {
    let dir = scratch_dir("disk");
    let run = |expect_compiles: u64, expect_disk_hits: u64| {
        let device = device();
        device.set_disk_cache(&dir).unwrap();
        let x = tensor(&device, &[1.0, 4.0], &[2]);
        assert_eq!(x.sqrt().unwrap().add_scalar(1.0f32).unwrap().to_vec::<f32>().unwrap(), vec![2.0, 3.0]);
        let counters = device.counters();
        assert_eq!((counters.compiles, counters.disk_hits), (expect_compiles, expect_disk_hits));
    };
    run(1, 0);
    run(0, 1);
    let entries: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|entry| entry.unwrap().path()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    // A torn write: the entry loses its tail, so its checksum no longer matches.
    let bytes = std::fs::read(&entries[0]).unwrap();
    std::fs::write(&entries[0], &bytes[..bytes.len() / 2]).unwrap();
    run(1, 0);
    // Garbage under the right name is ignored too, then replaced by a good entry.
    std::fs::write(&entries[0], b"not an executable").unwrap();
    run(1, 0);
    run(0, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dtypes_and_ops_are_part_of_the_key() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0], &[2]);
    let y = tensor(&device, &[3.0, 4.0], &[2]);
    assert_eq!(x.add(&y).unwrap().to_vec::<f32>().unwrap(), vec![4.0, 6.0]);
    assert_eq!(x.mul(&y).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 8.0]);
    let wide = Tensor::from_slice(&device, &[1.0f64, 2.0], &[2]).unwrap();
    assert_eq!(wide.add(&wide).unwrap().to_vec::<f64>().unwrap(), vec![2.0, 4.0]);
    assert_eq!((device.counters().compiles, device.counters().cache_hits), (3, 0));
    // The same three structures on other values only hit.
    let (u, v) = (tensor(&device, &[5.0, 6.0], &[2]), tensor(&device, &[7.0, 8.0], &[2]));
    assert_eq!(u.add(&v).unwrap().to_vec::<f32>().unwrap(), vec![12.0, 14.0]);
    assert_eq!(u.mul(&v).unwrap().to_vec::<f32>().unwrap(), vec![35.0, 48.0]);
    let wide = Tensor::from_slice(&device, &[0.5f64, 0.25], &[2]).unwrap();
    assert_eq!(wide.add(&wide).unwrap().to_vec::<f64>().unwrap(), vec![1.0, 0.5]);
    assert_eq!((device.counters().compiles, device.counters().cache_hits), (3, 3));
}

#[test]
fn a_program_extracted_from_a_larger_pending_tape_shares_the_entry() {
    let device = device();
    let x = tensor(&device, &[1.0, 2.0], &[2]);
    let chain = |x: &Tensor| x.exp().unwrap().add(x).unwrap().tanh().unwrap();
    // The whole pending tape is the program: it is taken as it stands.
    let first = chain(&x).to_vec::<f32>().unwrap();
    // An op whose result dies first leaves a dead step, so the program is extracted from the
    // tape; it is the same structure and must find the same executable.
    drop(x.neg().unwrap());
    let second = chain(&x).to_vec::<f32>().unwrap();
    assert_eq!(first, second);
    assert_eq!((device.counters().compiles, device.counters().cache_hits), (1, 1));
}
