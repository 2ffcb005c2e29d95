//! Latency of the basic PJRT operations the driver depends on: executing a
//! compiled program, reading a small result back, and moving 1 MiB between
//! host and device.
//!
//! Uses the same plugin lookup as the tests (`TTPU_PJRT_PLUGIN`, else the
//! `cargo xtask setup` location): `cargo bench -p ttpu-pjrt`.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::Duration;

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

/// Elements of the small tensors: the size of a typical eager-mode step.
const SMALL: usize = 64;

/// A chain of `ops` element-wise ops on f32[SMALL] (alternating add and
/// multiply), which XLA fuses into one loop: the shape of a traced eager
/// program, big enough that the CPU client runs it on a worker thread
/// unless the client is synchronous.
fn chain_module(ops: usize) -> String {
    let ty = format!("tensor<{SMALL}xf32>");
    let mut body = String::new();
    let mut prev = "%arg0".to_owned();
    for i in 0..ops {
        let op = if i % 2 == 0 { "add" } else { "multiply" };
        // Writing to a String cannot fail.
        let _ = writeln!(body, "    %{i} = \"stablehlo.{op}\"({prev}, %arg1) : ({ty}, {ty}) -> {ty}");
        prev = format!("%{i}");
    }
    format!(
        "module {{\n  func.func @main(%arg0: {ty}, %arg1: {ty}) -> {ty} {{\n{body}    return {prev} : {ty}\n  }}\n}}\n"
    )
}

fn plugin() -> Plugin {
    let path = ttpu_pjrt::find_plugin().unwrap_or_else(|e| panic!("{e}"));
    Plugin::load(path).unwrap_or_else(|e| panic!("{e}"))
}

fn benches(c: &mut Criterion) {
    let plugin = plugin();
    let client = Client::new(&plugin).unwrap_or_else(|e| panic!("{e}"));

    let exe = client.compile(ADD_2X3_F32).expect("compile");
    let ones: Vec<u8> = [1.0f32; 6].iter().flat_map(|v| v.to_ne_bytes()).collect();
    let a = client.buffer_from_host(&ones, ElementType::F32, &[2, 3]).expect("upload");
    c.bench_function("execute add 2x3 f32", |b| {
        b.iter(|| black_box(exe.execute(&[&a, &a]).expect("execute")));
    });

    // Small programs and results, where per-call overhead (thread hand-offs
    // inside the plugin) dominates.
    let mut group = c.benchmark_group("small f32[64]");
    group.measurement_time(Duration::from_secs(3));
    let values: Vec<u8> = (0..SMALL).flat_map(|i| (1.0 + i as f32 / 1024.0).to_ne_bytes()).collect();
    let dims = [SMALL as i64];
    let x = client.buffer_from_host(&values, ElementType::F32, &dims).expect("upload");
    group.bench_function("to_host", |b| {
        b.iter(|| black_box(x.to_host().expect("download")));
    });
    let chain = chain_module(1000);
    for (name, client) in [
        ("default client", client.clone()),
        ("client without options", Client::with_options(&plugin, &[]).expect("client")),
    ] {
        let exe = client.compile(&chain).expect("compile chain");
        let x = client.buffer_from_host(&values, ElementType::F32, &dims).expect("upload");
        group.bench_function(format!("execute 1000-op chain, {name}"), |b| {
            b.iter(|| black_box(exe.execute(&[&x, &x]).expect("execute")));
        });
        group.bench_function(format!("execute 1000-op chain + to_host, {name}"), |b| {
            b.iter(|| black_box(exe.execute(&[&x, &x]).expect("execute")[0].to_host().expect("download")));
        });
    }
    group.finish();

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
