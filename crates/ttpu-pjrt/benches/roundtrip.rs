//! Latency of the basic PJRT operations the driver depends on: executing a
//! small compiled add, and moving 1 MiB between host and device.
//!
//! Uses the same plugin lookup as the tests (`TTPU_PJRT_PLUGIN`, else the
//! `cargo xtask setup` location): `cargo bench -p ttpu-pjrt`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ttpu_pjrt::{Client, ElementType, Plugin};

const ADD_2X3_F32: &str = r#"
module {
  func.func @main(%arg0: tensor<2x3xf32>, %arg1: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}
"#;

fn client() -> Client {
    let path = ttpu_pjrt::find_plugin().unwrap_or_else(|e| panic!("{e}"));
    let plugin = Plugin::load(path).unwrap_or_else(|e| panic!("{e}"));
    Client::new(&plugin).unwrap_or_else(|e| panic!("{e}"))
}

fn benches(c: &mut Criterion) {
    let client = client();

    let exe = client.compile(ADD_2X3_F32).expect("compile");
    let ones: Vec<u8> = [1.0f32; 6].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let a = client.buffer_from_host(&ones, ElementType::F32, &[2, 3]).expect("upload");
    c.bench_function("execute add 2x3 f32", |b| {
        b.iter(|| black_box(exe.execute(&[&a, &a]).expect("execute")));
    });

    const MIB: usize = 1 << 20;
    let data = vec![0x5au8; MIB];
    let dims = [(MIB / 4) as i64];
    let mut group = c.benchmark_group("transfer 1 MiB f32");
    group.throughput(Throughput::Bytes(MIB as u64));
    group.bench_function("host to device", |b| {
        b.iter(|| black_box(client.buffer_from_host(&data, ElementType::F32, &dims).expect("upload")));
    });
    let on_device = client.buffer_from_host(&data, ElementType::F32, &dims).expect("upload");
    group.bench_function("device to host", |b| {
        b.iter(|| black_box(on_device.to_host().expect("download")));
    });
    group.finish();
}

criterion_group!(roundtrip, benches);
criterion_main!(roundtrip);
