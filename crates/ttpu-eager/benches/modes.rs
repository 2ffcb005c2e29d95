//! DeferAndFuse against DeferNever on a chain of 1,000 small elementwise ops on an `f32[64]`.
//!
//! `chain/defer_and_fuse` records the chain and reads the result with a warm compile cache:
//! one cache lookup and one launch. `chain/defer_never` launches every op on its own (each op's
//! executable is cached after the first iteration). The ratio is the win of deferring; the
//! project's target is at least 20x. `record/1000_ops` only records the chain, without
//! materializing, and catches regressions in per-op recording overhead (target: under 1 us/op).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ttpu_eager::{Device, Mode, Tensor};

const OPS: usize = 1000;

/// `OPS` elementwise ops, cycling through a few kinds, each one node in the pending graph.
fn chain(x: &Tensor, y: &Tensor) -> Tensor {
    let mut value = x.clone();
    for index in 0..OPS {
        value = match index % 4 {
            0 => value.add(y),
            1 => value.mul(y),
            2 => value.tanh(),
            _ => value.neg(),
        }
        .expect("shapes match");
    }
    value
}

fn setup(mode: Mode) -> (Device, Tensor, Tensor) {
    let device = Device::cpu().unwrap_or_else(|error| panic!("{error}"));
    device.set_mode(mode).expect("a fresh device has no pending work");
    let x = Tensor::from_slice(&device, &[0.5f32; 64], &[64]).expect("64 values");
    let y = Tensor::from_slice(&device, &[0.25f32; 64], &[64]).expect("64 values");
    (device, x, y)
}

fn modes(c: &mut Criterion) {
    let mut group = c.benchmark_group("chain");
    group.sample_size(20);
    for (name, mode) in [("defer_and_fuse", Mode::DeferAndFuse), ("defer_never", Mode::DeferNever)] {
        let (_device, x, y) = setup(mode);
        // Warm the cache so the timed runs measure steady state, not compilation.
        chain(&x, &y).to_vec::<f32>().expect("runs");
        group.bench_function(name, |b| b.iter(|| black_box(chain(&x, &y).to_vec::<f32>().expect("runs"))));
    }
    group.finish();
}

fn record(c: &mut Criterion) {
    let (device, x, y) = setup(Mode::DeferAndFuse);
    // The limit is above the chain, so nothing runs while recording.
    device.set_pending_limit(usize::MAX).expect("device usable");
    let mut group = c.benchmark_group("record");
    group.bench_function("1000_ops", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let res = black_box(chain(&x, &y));
                total += start.elapsed();
                // Untimed: dropping the result leaves no live tensor, so `sync` only discards
                // the pending graph and the next iteration starts from an empty one.
                drop(res);
                device.sync().expect("device usable");
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, modes, record);
criterion_main!(benches);
