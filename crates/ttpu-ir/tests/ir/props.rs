//! Property tests: random builder graphs survive `parse(print(g))`, literal bytes round-trip for
//! every dtype, and the parser never panics on mangled text.

use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use ttpu_ir::text::{parse, print};
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Dim, Graph, GraphBuilder, Literal, Loc, ReduceKind, Scalar, Shape, SymbolRange,
    TensorType, UnaryOp, ValueId, verify,
};

/// One step of a random graph: which kind of node to try and some choices for it.
type Step = (u8, u32, u32, u32);

fn pick<T: Copy>(items: &[T], choice: u32) -> T {
    items[choice as usize % items.len()]
}

/// A random scalar of `dtype`, from `choice`.
fn scalar(dtype: DType, choice: u32) -> Scalar {
    let floats = [0.0, -0.0, 1.0, -2.5, 0.1, 1e-7, 3.0e38, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 65504.0];
    match dtype {
        DType::Bool => Scalar::Bool(choice % 2 == 1),
        DType::U8 => Scalar::Int(i64::from(choice % 256)),
        dtype if dtype.is_integer() => {
            Scalar::Int(pick(&[0, 1, -1, 127, -128, 42, i64::from(i32::MIN), i64::MAX], choice))
        }
        _ => Scalar::Float(pick(&floats, choice)),
    }
}

/// Interprets `steps` with the builder, skipping steps whose operands do not fit.
fn build(inputs: &[(DType, Vec<i64>, bool)], steps: &[Step], outputs: u32) -> Graph {
    let mut b = GraphBuilder::new();
    let symbol = b.graph_mut().symbols.declare("s0", SymbolRange { min: 1, max: None });
    let mut values: Vec<ValueId> = Vec::new();
    for (index, (dtype, dims, symbolic)) in inputs.iter().enumerate() {
        let mut shape: Shape = Shape::from_static(dims);
        if *symbolic && !dims.is_empty() {
            shape.0[0] = Dim::Sym(symbol.clone());
        }
        let name = (index % 2 == 0).then(|| format!("in{index}"));
        values.push(b.input(TensorType::new(*dtype, shape), name));
    }
    for (index, &(kind, a, c, d)) in steps.iter().enumerate() {
        let loc = match index % 4 {
            0 => Loc::default(),
            1 => Loc { name: Some(format!("node_{index}")), origin: None },
            2 => Loc { name: None, origin: Some(format!("aten.op.default @ model.fx:{index}")) },
            _ => Loc { name: Some(format!("n{index}")), origin: Some("aten.x.default @ m.fx:1".into()) },
        };
        b.set_loc(loc);
        let x = pick(&values, a);
        let x_ty = b.ty(x).clone();
        let same_type = values.iter().copied().filter(|&v| b.ty(v) == &x_ty).collect::<Vec<_>>();
        let y = pick(&same_type, c);
        let built = match kind % 13 {
            0 => b.unary(pick(&UnaryOp::ALL, c), x),
            1 => b.binary(pick(&BinaryOp::ALL, d), x, y),
            2 => b.compare(pick(&CompareDirection::ALL, d), x, y),
            3 => {
                let pred = b.compare(CompareDirection::Gt, x, y);
                pred.and_then(|pred| b.select(pred, x, y))
            }
            4 => b.convert(x, pick(&DType::ALL, c)),
            5 => match x_ty.shape.num_elements() {
                Some(count) if x_ty.shape.is_static() => b.reshape(x, Shape::from_static(&[count])),
                _ => continue,
            },
            6 => {
                let rank = x_ty.rank() as i64;
                let permutation: Vec<i64> = (0..rank).map(|i| (i + i64::from(c)) % rank.max(1)).collect();
                b.transpose(x, &permutation)
            }
            7 => {
                let mut shape = vec![Dim::Static(i64::from(c % 3 + 1))];
                shape.extend(x_ty.shape.dims().iter().cloned());
                let dims: Vec<i64> = (1..=x_ty.rank() as i64).collect();
                b.broadcast_in_dim(x, &dims, shape.into_iter().collect())
            }
            8 => match x_ty.shape.as_static() {
                Some(dims) => {
                    let start: Vec<i64> = dims.iter().map(|&size| size / 2).collect();
                    let strides: Vec<i64> = dims.iter().map(|_| i64::from(d % 2 + 1)).collect();
                    b.slice(x, &start, &dims, &strides)
                }
                None => continue,
            },
            9 => b.concatenate(&[x, y], i64::from(c) % (x_ty.rank() as i64).max(1)),
            10 => {
                let dims: Vec<i64> = x_ty.shape.dims().iter().map(|_| i64::from(c % 3)).collect();
                let count = dims.iter().product::<i64>();
                let values: Vec<Scalar> = (0..count).map(|i| scalar(x_ty.dtype, d.wrapping_add(i as u32))).collect();
                let dtype = pick(&DType::ALL, a);
                let values = if dtype == x_ty.dtype { values } else { vec![scalar(dtype, d); values.len()] };
                Ok(b.constant(Literal::from_scalars(dtype, &dims, &values).expect("sizes match")))
            }
            11 => {
                let zero = b.constant(Literal::scalar(x_ty.dtype, scalar(x_ty.dtype, d)));
                let low: Vec<i64> = x_ty.shape.dims().iter().map(|_| i64::from(c % 3) - 1).collect();
                let interior: Vec<i64> = x_ty.shape.dims().iter().map(|_| i64::from(d % 2)).collect();
                b.pad(x, zero, &low, &low, &interior)
            }
            _ => {
                let dims: Vec<i64> = (0..x_ty.rank() as i64).filter(|dim| (c >> dim) & 1 == 1).collect();
                b.reduce(x, pick(&ReduceKind::ALL, d), &dims)
            }
        };
        if let Ok(value) = built {
            values.push(value);
        }
    }
    let count = (outputs as usize % values.len().min(4)) + 1;
    let outputs: Vec<ValueId> = values.iter().rev().take(count).copied().collect();
    b.finish(&outputs)
}

fn input_strategy() -> impl Strategy<Value = (DType, Vec<i64>, bool)> {
    (
        prop::sample::select(vec![DType::F32, DType::BF16, DType::I32, DType::U8, DType::Bool]),
        prop::collection::vec(1i64..5, 0..4),
        any::<bool>(),
    )
}

proptest! {
    // A fixed seed keeps every run reproducible.
    #![proptest_config(ProptestConfig { rng_seed: RngSeed::Fixed(0x7470_7530), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_round_trip(
        inputs in prop::collection::vec(input_strategy(), 1..4),
        steps in prop::collection::vec((any::<u8>(), any::<u32>(), any::<u32>(), any::<u32>()), 0..24),
        outputs in any::<u32>(),
    ) {
        let graph = build(&inputs, &steps, outputs);
        prop_assert_eq!(verify(&graph), Ok(()));
        let text = print(&graph);
        let parsed = parse(&text);
        prop_assert!(parsed.is_ok(), "{}\n{}", parsed.unwrap_err(), text);
        let parsed = parsed.unwrap();
        prop_assert_eq!(print(&parsed), text.clone());
        prop_assert!(parsed == graph, "parse(print(g)) != g for\n{}", text);
    }

    #[test]
    fn scalar_bytes_round_trip(dtype in prop::sample::select(DType::ALL.to_vec()), bits in any::<u64>(), float in any::<f64>()) {
        let value = match dtype {
            DType::Bool => Scalar::Bool(bits & 1 == 1),
            dtype if dtype.is_integer() => Scalar::Int(bits as i64),
            _ => Scalar::Float(float),
        };
        let mut bytes = Vec::new();
        value.to_bytes(dtype, &mut bytes);
        prop_assert_eq!(bytes.len(), dtype.byte_size());
        let decoded = Scalar::from_bytes(dtype, &bytes);
        // Decoding gives the value as the dtype holds it; encoding that again is exact.
        let mut again = Vec::new();
        decoded.to_bytes(dtype, &mut again);
        prop_assert_eq!(&again, &bytes);
        let expected = match (dtype, value) {
            (DType::F64, Scalar::Float(v)) => Scalar::Float(v),
            (DType::F32, Scalar::Float(v)) => Scalar::Float(f64::from(v as f32)),
            (DType::F16, Scalar::Float(v)) => Scalar::Float(half::f16::from_f64(v).to_f64()),
            (DType::BF16, Scalar::Float(v)) => Scalar::Float(half::bf16::from_f64(v).to_f64()),
            (DType::I64, Scalar::Int(v)) => Scalar::Int(v),
            (DType::I32, Scalar::Int(v)) => Scalar::Int(i64::from(v as i32)),
            (DType::I16, Scalar::Int(v)) => Scalar::Int(i64::from(v as i16)),
            (DType::I8, Scalar::Int(v)) => Scalar::Int(i64::from(v as i8)),
            (DType::U8, Scalar::Int(v)) => Scalar::Int(i64::from(v as u8)),
            (DType::U16, Scalar::Int(v)) => Scalar::Int(i64::from(v as u16)),
            (DType::U32, Scalar::Int(v)) => Scalar::Int(i64::from(v as u32)),
            // u64 keeps the bit pattern of the i64.
            (DType::U64, Scalar::Int(v)) => Scalar::Int(v),
            // A real value as a complex element, in the dtype of the parts.
            (DType::C32, Scalar::Float(v)) => Scalar::Float(half::f16::from_f64(v).to_f64()),
            (DType::C64, Scalar::Float(v)) => Scalar::Float(f64::from(v as f32)),
            (_, other) => other,
        };
        match (decoded, expected) {
            (Scalar::Float(a), Scalar::Float(b)) if a.is_nan() => prop_assert!(b.is_nan()),
            (a, b) => prop_assert_eq!(a, b),
        }
    }

    #[test]
    fn literals_round_trip_through_bytes_and_text(
        dtype in prop::sample::select(DType::ALL.to_vec()),
        dims in prop::collection::vec(0i64..4, 0..3),
        seed in any::<u32>(),
    ) {
        let count = dims.iter().product::<i64>() as u32;
        let values: Vec<Scalar> = (0..count).map(|i| scalar(dtype, seed.wrapping_mul(31).wrapping_add(i * 7))).collect();
        let literal = Literal::from_scalars(dtype, &dims, &values).unwrap();
        prop_assert_eq!(literal.len(), count as usize);
        let rebuilt = Literal::from_bytes(dtype, &dims, literal.bytes().to_vec()).unwrap();
        prop_assert_eq!(&rebuilt, &literal);
        let decoded: Vec<Scalar> = literal.scalars().collect();
        prop_assert_eq!(&Literal::from_scalars(dtype, &dims, &decoded).unwrap(), &literal);

        let mut b = GraphBuilder::new();
        let constant = b.constant(literal);
        let graph = b.finish(&[constant]);
        let text = print(&graph);
        prop_assert_eq!(parse(&text), Ok(graph), "{}", text);
    }

    #[test]
    fn parser_never_panics_on_mangled_text(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0usize..4, any::<prop::sample::Index>()), 1..4),
    ) {
        let samples = samples();
        let mut text: Vec<char> = file.get(&samples).chars().collect();
        for (at, delete, insert) in edits {
            let start = at.index(text.len() + 1);
            let end = (start + delete).min(text.len());
            let inserted: Vec<char> = insert.get(FRAGMENTS).chars().collect();
            text.splice(start..end, inserted);
        }
        let text: String = text.into_iter().collect();
        // Either answer is fine; panicking or overflowing is not.
        if let Ok(graph) = parse(&text) {
            prop_assert_eq!(verify(&graph), Ok(()));
            prop_assert_eq!(parse(&print(&graph)), Ok(graph));
        }
    }
}

/// Pieces spliced into valid text to mangle it.
const FRAGMENTS: &[&str] = &[
    "",
    "%",
    "%0",
    "%99",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    "<",
    ">",
    ",",
    ":",
    "=",
    "-",
    "->",
    "\n",
    " ",
    "\"",
    "#",
    "#x: y",
    "0",
    "1",
    "-1",
    "2",
    "7",
    "1.5",
    "1e400",
    "-inf",
    "nan",
    "inf",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999",
    "4611686018427387904",
    "f32",
    "i8",
    "bool",
    "s0",
    "sum",
    "true",
    "dense<",
    "dense<[",
    "[[",
    "add",
    "symbol s0 in [1, 2]\n",
    "\\u{",
    "é",
    "\t",
];

/// The IR bodies of the filetests, as a corpus of valid and nearly valid text.
fn samples() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut samples: Vec<String> = std::fs::read_dir(dir)
        .expect("tests/filetests exists")
        .map(|entry| entry.expect("readable").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "ttir"))
        .map(|path| {
            let contents = std::fs::read_to_string(path).expect("readable");
            let head = contents.split("; expected:\n").next().unwrap_or_default().to_owned();
            head.lines().filter(|line| !line.starts_with(';')).map(|line| format!("{line}\n")).collect()
        })
        .collect();
    samples.sort();
    samples
}

#[test]
fn every_proper_prefix_of_printed_text_is_rejected() {
    for sample in samples() {
        let Ok(graph) = parse(&sample) else { continue };
        let text = print(&graph);
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        // Dropping only the final newline still leaves a complete graph.
        for &(end, _) in &chars[..chars.len() - 1] {
            let prefix = &text[..end];
            let result = parse(prefix);
            assert!(result.is_err(), "the prefix parsed:\n{prefix}");
        }
        assert_eq!(parse(&text[..text.len() - 1]).as_ref(), Ok(&graph));
    }
}

#[test]
fn huge_and_nested_inputs_are_errors() {
    let deep = format!(
        "graph @main(%0: f32[2, 3]) -> (f32[3, 2]) {{\n  %1: f32[3, 2] = transpose(%0) {{permutation = {}0{}}}\n  return %1\n}}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert_eq!(parse(&deep).unwrap_err().message, "attribute lists nest too deeply");
    let huge = "graph @main() -> (f32[4611686018427387904, 4]) {\n  %0: f32[4611686018427387904, 4] = constant() {value = dense<1.0>}\n  return %0\n}\n";
    assert_eq!(parse(huge).unwrap_err().to_string(), "2:37: constant type f32[4611686018427387904, 4] is too large");
    let reshape =
        "graph @main(%0: f32[4611686018427387904, 4]) -> (f32[2]) {\n  %1: f32[2] = reshape(%0)\n  return %1\n}\n";
    assert_eq!(parse(reshape).unwrap_err().to_string(), "2:16: `reshape`: sizes overflow 64 bits");
}

#[test]
fn extreme_integers_anywhere_are_errors_not_panics() {
    let extremes = ["9223372036854775807", "-9223372036854775808", "4611686018427387904", "3037000500", "-1", "0"];
    let mut parsed = 0;
    for sample in samples() {
        let bytes = sample.as_bytes();
        let mut start = 0;
        while start < bytes.len() {
            if !bytes[start].is_ascii_digit() {
                start += 1;
                continue;
            }
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            let begin = if start > 0 && bytes[start - 1] == b'-' { start - 1 } else { start };
            for extreme in extremes {
                let text = format!("{}{extreme}{}", &sample[..begin], &sample[end..]);
                if let Ok(graph) = parse(&text) {
                    parsed += 1;
                    assert_eq!(verify(&graph), Ok(()), "{text}");
                    assert_eq!(parse(&print(&graph)).as_ref(), Ok(&graph), "{text}");
                }
            }
            start = end;
        }
    }
    assert!(parsed > 0);
}
