//! Runs the dynamic fixtures at 100 sizes each, with power-of-two bucketing and with exact
//! specialisation, and prints compiles, total wall time and the median warm latency per size:
//! the figures in docs/performance.md. `cargo run --release -p ttpu --example dynamic_sizes`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use ttpu::{Bucketing, HostTensor, Session, TensorMap, read_safetensors};
use ttpu_ir::DType;

/// A deterministic stream of sizes in `[low, high]` (xorshift), the same the tests use.
fn sizes(count: usize, low: i64, high: i64, seed: u64) -> Vec<i64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            low + (state % (high - low + 1) as u64) as i64
        })
        .collect()
}

fn f32_tensor(shape: Vec<i64>) -> HostTensor {
    let count: i64 = shape.iter().product();
    let data = (0..count).flat_map(|index| (((index * 37 % 101) as f32 - 50.0) / 25.0).to_le_bytes()).collect();
    HostTensor { dtype: DType::F32, shape, data }
}

struct Measured {
    compiles: usize,
    total: Duration,
    median_warm: Duration,
}

fn measure(bucketing: Bucketing, fixture: &str, input: &str, shapes: &[Vec<i64>]) -> anyhow::Result<Measured> {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(fixture);
    let source = std::fs::read_to_string(folder.join("model.fx"))?;
    let weights = read_safetensors(&folder.join("weights.safetensors"))?;
    let mut session = Session::from_plugin_or_default(None)?;
    session.set_bucketing(bucketing);
    let model = session.load_model(&source, &format!("fixtures/{fixture}/model.fx"))?;
    let start = Instant::now();
    for shape in shapes {
        let inputs: TensorMap = [(input.to_owned(), f32_tensor(shape.clone()))].into_iter().collect();
        session.run(&model, &weights, &inputs).with_context(|| format!("{fixture} at {shape:?}"))?;
    }
    let total = start.elapsed();
    // Warm latency: each size again, now compiled.
    let mut warm: Vec<Duration> = shapes
        .iter()
        .map(|shape| {
            let inputs: TensorMap = [(input.to_owned(), f32_tensor(shape.clone()))].into_iter().collect();
            let start = Instant::now();
            session.run(&model, &weights, &inputs).map(|_| start.elapsed())
        })
        .collect::<Result<_, _>>()?;
    warm.sort();
    Ok(Measured { compiles: model.compile_count(), total, median_warm: warm[warm.len() / 2] })
}

fn main() -> anyhow::Result<()> {
    let batches: Vec<Vec<i64>> =
        sizes(100, 2, 1024, 0x2545_f491_4f6c_dd1d).into_iter().map(|batch| vec![batch, 16]).collect();
    let pairs: Vec<Vec<i64>> = sizes(100, 1, 16, 0x2545_f491_4f6c_dd1d)
        .into_iter()
        .zip(sizes(100, 2, 15, 0x9e37_79b9_7f4a_7c15))
        .map(|(batch, length)| vec![batch, length, 32])
        .collect();
    println!("| model | sizes | bucketing | compiles | total wall | median warm run |");
    println!("|---|---|---|---|---|---|");
    for (fixture, input, shapes, what) in [
        ("mlp_dynamic", "x", &batches, "100 batches in [2, 1024]"),
        ("gpt2_block_dynamic", "hidden_states", &pairs, "100 (batch, length) in [1, 16] x [2, 15]"),
    ] {
        for (bucketing, name) in [(Bucketing::PowersOfTwo, "powers of two"), (Bucketing::Exact, "exact")] {
            let measured = measure(bucketing, fixture, input, shapes)?;
            println!(
                "| {fixture} | {what} | {name} | {} | {:.2} s | {:.2} ms |",
                measured.compiles,
                measured.total.as_secs_f64(),
                measured.median_warm.as_secs_f64() * 1e3
            );
        }
    }
    Ok(())
}
