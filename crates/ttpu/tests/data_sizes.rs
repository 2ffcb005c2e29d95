//! Sizes the data decides: size programs run first, each size set compiles once, sizes outside
//! their ranges fail the run as PyTorch's asserts do, and replicas must agree.

mod common;

use ttpu::{HostTensor, Runtime, RuntimeOptions, Session, TensorMap, read_safetensors};
use ttpu_ir::DType;

fn model(session: &Session, name: &str) -> (ttpu::Model, TensorMap) {
    let folder = common::fixtures_dir().join(name);
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let model = session.load_model(&source, &common::relative_model_path(name)).expect("the model loads");
    let weights = folder.join("weights.safetensors");
    let weights = if weights.is_file() { read_safetensors(&weights).expect("weights read") } else { TensorMap::new() };
    (model, weights)
}

fn i64s(shape: &[i64], values: &[i64]) -> HostTensor {
    let data = values.iter().flat_map(|value| value.to_le_bytes()).collect();
    HostTensor { dtype: DType::I64, shape: shape.to_vec(), data }
}

fn f32s(shape: &[i64], values: &[f32]) -> HostTensor {
    let data = values.iter().flat_map(|value| value.to_le_bytes()).collect();
    HostTensor { dtype: DType::F32, shape: shape.to_vec(), data }
}

fn bools(shape: &[i64], values: &[bool]) -> HostTensor {
    HostTensor {
        dtype: DType::Bool,
        shape: shape.to_vec(),
        data: values.iter().map(|&value| u8::from(value)).collect(),
    }
}

#[test]
fn the_dynamic_module_is_a_size_program_and_each_size_set_compiles_once() {
    let session = Session::with_runtime(Runtime::cpu().expect("the CPU plugin"));
    let (model, weights) = model(&session, "data_select");
    let pending: Vec<&str> = model.module().pending.iter().map(|size| size.symbol.as_str()).collect();
    assert_eq!(pending.len(), 5, "nonzero, masked_select, two mask indexes and argwhere: {pending:?}");
    assert!(model.padding_verdicts().iter().all(|(_, verdict)| *verdict != ttpu_ir::PaddingVerdict::Pad));
    let x = f32s(&[4, 6], &(0..24).map(|index| index as f32 - 11.5).collect::<Vec<_>>());
    let mask = |selected: &[usize]| bools(&[4, 6], &(0..24).map(|index| selected.contains(&index)).collect::<Vec<_>>());
    let run = |selected: &[usize]| {
        let inputs: TensorMap = [("x".to_owned(), x.clone()), ("m".to_owned(), mask(selected))].into_iter().collect();
        session.run(&model, &weights, &inputs).expect("runs")
    };
    let first = run(&[1, 7, 20]);
    // nonzero(x * m): the coordinates of the three selected elements (x is nonzero there).
    assert_eq!(first["output_0"].shape, [3, 2]);
    let coordinates: Vec<i64> =
        first["output_0"].data.chunks(8).map(|bytes| i64::from_le_bytes(bytes.try_into().unwrap())).collect();
    // Elements 1, 7 and 20 of a 4x6 tensor are (0, 1), (1, 1) and (3, 2), doubled.
    assert_eq!(coordinates, [0, 2, 2, 2, 6, 4], "row-major coordinates, doubled");
    let compiles = model.compile_count();
    // Another mask with the same counts reuses every program; one with other counts does not.
    let again = run(&[2, 8, 21]);
    assert_eq!(again["output_0"].shape, [3, 2]);
    assert_eq!(model.compile_count(), compiles, "the same sizes compile nothing new");
    let none = run(&[]);
    assert_eq!(none["output_0"].shape, [0, 2]);
    assert_eq!(none["output_5"].shape, [0]);
    assert!(model.compile_count() > compiles);
}

#[test]
fn a_size_outside_its_range_fails_the_run_as_pytorch_does() {
    let session = common::session();
    let (model, weights) = model(session, "data_unique");
    let inputs = |repeats: &[i64], values: &[i64]| -> TensorMap {
        [
            ("v".to_owned(), f32s(&[8], &[1.0, 2.0, 2.0, 3.0, 5.0, 5.0, 5.0, 8.0])),
            ("g".to_owned(), i64s(&[4, 3], values)),
            ("r".to_owned(), i64s(&[4], repeats)),
            ("w".to_owned(), f32s(&[12], &[1.0; 12])),
        ]
        .into_iter()
        .collect()
    };
    let good =
        session.run(&model, &weights, &inputs(&[1, 2, 0, 3], &[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5])).expect("runs");
    assert_eq!(good["output_13"].shape, [6], "repeat_interleave of v's first four by 1, 2, 0, 3");
    // A negative repeat (PyTorch raises in `bincount(r)` and `repeat_interleave(r)`) gives no
    // size: the run fails and names the first node that decides one.
    let error = session
        .run(&model, &weights, &inputs(&[1, -2, 0, 3], &[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5]))
        .expect_err("a negative repeat has no result");
    let message = error.to_string();
    assert!(message.contains("is invalid for these inputs (PyTorch raises here)"), "{message}");
    assert!(message.contains("at node `bincount_1`"), "{message}");
    // A negative value is no bin (PyTorch raises): so is a bincount of one.
    let error = session
        .run(&model, &weights, &inputs(&[1, 2, 0, 3], &[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, -5]))
        .expect_err("bincount of a negative value");
    assert!(error.to_string().contains("the number of bins"), "{error}");
}

#[test]
fn an_item_outside_its_range_is_refused_and_replicas_must_agree_on_sizes() {
    let runtime = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(2), ..Default::default() })
        .expect("two CPU devices");
    let session = Session::with_runtime(runtime);
    let (model, weights) = model(&session, "data_chain");
    let inputs = |n: i64, sign: f32| -> TensorMap {
        let x: Vec<f32> = (0..10).map(|index| sign * (index as f32 - 3.5)).collect();
        [("x".to_owned(), f32s(&[10], &x)), ("n".to_owned(), i64s(&[], &[n]))].into_iter().collect()
    };
    let single = session.run(&model, &weights, &inputs(3, 1.0)).expect("runs");
    assert_eq!(single["output_2"].shape, [3], "x[:n] + 1 with n = 3");
    // `torch._check_is_size(n)`: a negative n fails its range [0, inf].
    let error = session.run(&model, &weights, &inputs(-1, 1.0)).expect_err("n must be a size");
    assert!(error.to_string().contains("symbol `u3` (range [0, inf])"), "{error}");
    let loaded = session.place(&model, &weights, 2).expect("weights on two devices");
    let (a, b) = (inputs(3, 1.0), inputs(3, 1.0));
    let outputs = loaded.run_replicated(&[&a, &b]).expect("replicas with the same sizes run");
    assert_eq!(outputs[0]["output_0"], outputs[1]["output_0"]);
    let other = inputs(5, 1.0);
    let error = loaded.run_replicated(&[&a, &other]).expect_err("one program runs on every device");
    assert!(error.to_string().contains("replica 1's inputs give sizes"), "{error}");
}
