//! DeferAndFuse against DeferNever on a chain of 1,000 small elementwise ops on an `f32[64]`.
//!
//! `chain/defer_and_fuse` records the chain and reads the result with a warm compile cache:
//! one cache lookup and one launch. `chain/defer_never` launches every op on its own (each op's
//! executable is cached after the first iteration). The ratio is the win of deferring; the
//! project's target is at least 20x. `parts/*` split a DeferAndFuse read into recording the
//! chain (target: under 1 us per op), running it (cache lookup, execute) and reading the result.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use ttpu_eager::{Device, Mode, Tensor};

const OPS: usize = 1000;

/// `OPS` elementwise ops, cycling through a few kinds, each one step on the pending tape.
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

/// Times only the part `part` of each iteration (`iter_custom`), so the three parts of a
/// DeferAndFuse read are measured apart in one run.
#[derive(Copy, Clone)]
enum Part {
    Record,
    Run,
    Read,
}

fn parts(c: &mut Criterion) {
    let (device, x, y) = setup(Mode::DeferAndFuse);
    // The limit is above the chain, so nothing runs while recording.
    device.set_pending_limit(usize::MAX).expect("device usable");
    chain(&x, &y).to_vec::<f32>().expect("runs");
    let mut group = c.benchmark_group("parts");
    for (name, part) in [("record_1000_ops", Part::Record), ("run_1000_ops", Part::Run), ("read_f32x64", Part::Read)] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let res = black_box(chain(&x, &y));
                    let recorded = Instant::now();
                    res.materialize().expect("runs");
                    let ran = Instant::now();
                    black_box(res.to_vec::<f32>().expect("reads"));
                    let read = Instant::now();
                    total += match part {
                        Part::Record => recorded - start,
                        Part::Run => ran - recorded,
                        Part::Read => read - ran,
                    };
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, modes, parts);
criterion_main!(benches);
