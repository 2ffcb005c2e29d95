//! One small graph per op family, shared by the snapshot and execution tests.

use super::{at, dims, input, nchw_conv2d};
use ttpu_ir::{
    BinaryOp, CompareDirection, ConvDims, DType, DotDims, GatherDims, Graph, GraphBuilder, Literal, ReduceKind,
    RngAlgorithm, Scalar, ScatterDims, ScatterKind, Shape, TensorType, UnaryOp, Window,
};

/// Every family, by name, for tests that treat them alike.
pub fn all() -> Vec<(&'static str, Graph)> {
    vec![
        ("unary_ops", unary_ops()),
        ("binary_ops", binary_ops()),
        ("compare_select_clamp_convert", compare_select_clamp_convert()),
        ("layout_ops", layout_ops()),
        ("dot_general", dot_general()),
        ("reduce", reduce()),
        ("reduce_window", reduce_window()),
        ("convolution", convolution()),
        ("gather_and_scatter", gather_and_scatter()),
        ("constants_of_every_dtype", constants_of_every_dtype()),
        ("iota", iota()),
        ("rng_bit_generator", rng_bit_generator()),
    ]
}

/// Every unary op, on f32, i32 (`abs`, `negate`, `sign`, `not`) or bool (`not`).
pub fn unary_ops() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2, 3]);
    let i = input(&mut b, "i", DType::I32, &[2, 3]);
    let p = input(&mut b, "p", DType::Bool, &[2, 3]);
    let mut outputs = Vec::new();
    for op in UnaryOp::ALL {
        let operand = match op {
            UnaryOp::Abs | UnaryOp::Negate | UnaryOp::Sign => i,
            UnaryOp::Not => p,
            _ => x,
        };
        outputs.push(b.unary(op, operand).unwrap());
    }
    outputs.push(b.unary(UnaryOp::Not, i).unwrap());
    outputs.push(b.unary(UnaryOp::Negate, x).unwrap());
    b.finish(&outputs)
}

/// Every binary op: arithmetic on f32, bitwise and shifts on i64.
pub fn binary_ops() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[4]);
    let y = input(&mut b, "y", DType::F32, &[4]);
    let i = input(&mut b, "i", DType::I64, &[4]);
    let j = input(&mut b, "j", DType::I64, &[4]);
    let mut outputs = Vec::new();
    for op in BinaryOp::ALL {
        let integer = matches!(
            op,
            BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::ShiftLeft
                | BinaryOp::ShiftRightArithmetic
                | BinaryOp::ShiftRightLogical
        );
        let (lhs, rhs) = if integer { (i, j) } else { (x, y) };
        outputs.push(b.binary(op, lhs, rhs).unwrap());
    }
    b.finish(&outputs)
}

/// Compares of every compare type, select with full and scalar predicates, clamp with scalar and full bounds, converts.
pub fn compare_select_clamp_convert() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2, 2]);
    let i = input(&mut b, "i", DType::I32, &[2, 2]);
    let u = input(&mut b, "u", DType::U8, &[2, 2]);
    let p = input(&mut b, "p", DType::Bool, &[2, 2]);
    let mut outputs = Vec::new();
    for (direction, operand) in [
        (CompareDirection::Lt, x),
        (CompareDirection::Ge, i),
        (CompareDirection::Gt, u),
        (CompareDirection::Ne, p),
        (CompareDirection::Eq, x),
        (CompareDirection::Le, i),
    ] {
        outputs.push(b.compare(direction, operand, operand).unwrap());
    }
    let mask = outputs[0];
    outputs.push(b.select(mask, x, x).unwrap());
    let scalar_pred = b.constant(Literal::scalar(DType::Bool, Scalar::Bool(true)));
    outputs.push(b.select(scalar_pred, i, i).unwrap());
    let low = b.constant(Literal::scalar(DType::F32, Scalar::Float(-1.0)));
    let high = b.constant(Literal::scalar(DType::F32, Scalar::Float(1.0)));
    outputs.push(b.clamp(low, x, high).unwrap());
    outputs.push(b.clamp(x, x, x).unwrap());
    outputs.push(b.convert(x, DType::BF16).unwrap());
    outputs.push(b.convert(p, DType::F32).unwrap());
    outputs.push(b.convert(u, DType::I64).unwrap());
    b.finish(&outputs)
}

/// Reshape, transpose, broadcast (also of a scalar), slice, concatenate and pad (with negative edges).
pub fn layout_ops() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2, 3, 4]);
    let s = input(&mut b, "s", DType::F32, &[]);
    let reshaped = b.reshape(x, Shape::from_static(&[6, 4])).unwrap();
    let transposed = b.transpose(x, &[2, 0, 1]).unwrap();
    let scalar_broadcast = b.broadcast_in_dim(s, &[], Shape::from_static(&[2, 3])).unwrap();
    let broadcast = b.broadcast_in_dim(reshaped, &[1, 2], Shape::from_static(&[5, 6, 4])).unwrap();
    let sliced = b.slice(x, &[0, 1, 0], &[2, 3, 4], &[1, 1, 2]).unwrap();
    let joined = b.concatenate(&[x, x, x], 1).unwrap();
    let zero = b.constant(Literal::scalar(DType::F32, Scalar::Float(0.0)));
    let padded = b.pad(x, zero, &[0, 1, -1], &[1, 0, 2], &[0, 1, 0]).unwrap();
    let flat = b.reshape(s, Shape::from_static(&[1, 1])).unwrap();
    b.finish(&[reshaped, transposed, scalar_broadcast, broadcast, sliced, joined, padded, flat])
}

/// Batched matmul (bf16), a linear layer contracting both last dims, an outer product.
pub fn dot_general() -> Graph {
    let mut b = GraphBuilder::new();
    let lhs = input(&mut b, "lhs", DType::BF16, &[8, 4, 16]);
    let rhs = input(&mut b, "rhs", DType::BF16, &[8, 16, 32]);
    let a = input(&mut b, "a", DType::F32, &[4, 16]);
    let w = input(&mut b, "w", DType::F32, &[32, 16]);
    let v = input(&mut b, "v", DType::F32, &[3]);
    at(&mut b, "bmm", "aten.bmm.default @ model.fx:4");
    let bmm = b
        .dot_general(
            lhs,
            rhs,
            DotDims {
                lhs_batch: dims(&[0]),
                rhs_batch: dims(&[0]),
                lhs_contracting: dims(&[2]),
                rhs_contracting: dims(&[1]),
            },
        )
        .unwrap();
    let linear = b
        .dot_general(a, w, DotDims { lhs_contracting: dims(&[1]), rhs_contracting: dims(&[1]), ..DotDims::default() })
        .unwrap();
    let outer = b.dot_general(v, v, DotDims::default()).unwrap();
    b.finish(&[bmm, linear, outer])
}

/// Reductions of every kind over several dtypes, including bitwise `and` over i32 and an empty dim list.
pub fn reduce() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2, 3, 4]);
    let h = input(&mut b, "h", DType::BF16, &[2, 3]);
    let i = input(&mut b, "i", DType::I32, &[5]);
    let p = input(&mut b, "p", DType::Bool, &[5]);
    let u = input(&mut b, "u", DType::U8, &[5]);
    let outputs = vec![
        b.reduce(x, ReduceKind::Sum, &[0, 2]).unwrap(),
        b.reduce(h, ReduceKind::Max, &[1]).unwrap(),
        b.reduce(h, ReduceKind::Min, &[0, 1]).unwrap(),
        b.reduce(i, ReduceKind::Product, &[0]).unwrap(),
        b.reduce(i, ReduceKind::Max, &[0]).unwrap(),
        b.reduce(i, ReduceKind::And, &[0]).unwrap(),
        b.reduce(p, ReduceKind::And, &[0]).unwrap(),
        b.reduce(p, ReduceKind::Or, &[0]).unwrap(),
        b.reduce(u, ReduceKind::Min, &[0]).unwrap(),
        b.reduce(x, ReduceKind::Sum, &[]).unwrap(),
    ];
    b.finish(&outputs)
}

/// Max pooling with padding, and a sum window with base and window dilations.
pub fn reduce_window() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[1, 3, 8, 8]);
    at(&mut b, "max_pool2d", "aten.max_pool2d.default @ model.fx:7");
    let pooled = b
        .reduce_window(
            x,
            ReduceKind::Max,
            Window {
                dimensions: dims(&[1, 1, 3, 3]),
                strides: dims(&[1, 1, 2, 2]),
                base_dilations: dims(&[1, 1, 1, 1]),
                window_dilations: dims(&[1, 1, 1, 1]),
                padding: [(0, 0), (0, 0), (1, 1), (1, 1)].into_iter().collect(),
            },
        )
        .unwrap();
    at(&mut b, "avg_pool2d", "aten.avg_pool2d.default @ model.fx:8");
    let summed = b
        .reduce_window(
            x,
            ReduceKind::Sum,
            Window {
                dimensions: dims(&[1, 1, 2, 2]),
                strides: dims(&[1, 1, 1, 1]),
                base_dilations: dims(&[1, 1, 2, 1]),
                window_dilations: dims(&[1, 1, 1, 2]),
                padding: [(0, 0), (0, 0), (0, 1), (0, 0)].into_iter().collect(),
            },
        )
        .unwrap();
    b.finish(&[pooled, summed])
}

/// A grouped NCHW convolution with stride, padding and dilation, and a channels-last one with lhs dilation.
pub fn convolution() -> Graph {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2, 4, 9, 9]);
    let w = input(&mut b, "w", DType::F32, &[6, 2, 3, 3]);
    let nhwc = input(&mut b, "nhwc", DType::F16, &[1, 5, 5, 3]);
    let hwio = input(&mut b, "hwio", DType::F16, &[3, 3, 3, 8]);
    at(&mut b, "conv2d", "aten.convolution.default @ model.fx:2");
    let nchw = b.convolution(x, w, nchw_conv2d([2, 1], [(1, 1), (0, 2)], [1, 2], 2)).unwrap();
    let channels_last = b
        .convolution(
            nhwc,
            hwio,
            ConvDims {
                input_batch: 0,
                input_feature: 3,
                input_spatial: dims(&[1, 2]),
                kernel_input_feature: 2,
                kernel_output_feature: 3,
                kernel_spatial: dims(&[0, 1]),
                output_batch: 0,
                output_feature: 3,
                output_spatial: dims(&[1, 2]),
                window_strides: dims(&[1, 1]),
                padding: [(1, 1), (1, 1)].into_iter().collect(),
                lhs_dilation: dims(&[2, 2]),
                rhs_dilation: dims(&[1, 1]),
                feature_group_count: 1,
                batch_group_count: 1,
            },
        )
        .unwrap();
    b.finish(&[nchw, channels_last])
}

/// Embedding gather, a gather with batching dims, and scatters that replace, add and take the max.
pub fn gather_and_scatter() -> Graph {
    let mut b = GraphBuilder::new();
    let table = input(&mut b, "table", DType::F32, &[10, 4]);
    let ids = input(&mut b, "ids", DType::I64, &[3, 1]);
    let updates = input(&mut b, "updates", DType::F32, &[3, 4]);
    let batched = input(&mut b, "batched", DType::F32, &[2, 5]);
    let batch_ids = input(&mut b, "batch_ids", DType::I32, &[2, 1]);
    at(&mut b, "embedding", "aten.embedding.default @ model.fx:1");
    let rows = b
        .gather(
            table,
            ids,
            GatherDims {
                offset_dims: dims(&[1]),
                collapsed_slice_dims: dims(&[0]),
                operand_batching_dims: dims(&[]),
                start_indices_batching_dims: dims(&[]),
                start_index_map: dims(&[0]),
                index_vector_dim: 1,
                slice_sizes: dims(&[1, 4]),
                indices_are_sorted: false,
            },
        )
        .unwrap();
    let per_row = b
        .gather(
            batched,
            batch_ids,
            GatherDims {
                offset_dims: dims(&[]),
                collapsed_slice_dims: dims(&[1]),
                operand_batching_dims: dims(&[0]),
                start_indices_batching_dims: dims(&[0]),
                start_index_map: dims(&[1]),
                index_vector_dim: 1,
                slice_sizes: dims(&[1, 1]),
                indices_are_sorted: true,
            },
        )
        .unwrap();
    let scatter_dims = |kind| ScatterDims {
        update_window_dims: dims(&[1]),
        inserted_window_dims: dims(&[0]),
        input_batching_dims: dims(&[]),
        scatter_indices_batching_dims: dims(&[]),
        scatter_dims_to_operand_dims: dims(&[0]),
        index_vector_dim: 1,
        kind,
        indices_are_sorted: false,
        unique_indices: false,
    };
    at(&mut b, "index_put", "aten.index_put.default @ model.fx:5");
    let replaced = b.scatter(table, ids, updates, scatter_dims(ScatterKind::Replace)).unwrap();
    at(&mut b, "index_add", "aten.index_add.default @ model.fx:6");
    let added = b.scatter(table, ids, updates, scatter_dims(ScatterKind::Combine(ReduceKind::Sum))).unwrap();
    let maxed = b
        .scatter(
            table,
            ids,
            updates,
            ScatterDims { unique_indices: true, ..scatter_dims(ScatterKind::Combine(ReduceKind::Max)) },
        )
        .unwrap();
    b.finish(&[rows, per_row, replaced, added, maxed])
}

/// Constants of every dtype: specials (inf, nan, -0) in each float type, integer extremes, bool
/// patterns, splats, scalars and an empty tensor.
pub fn constants_of_every_dtype() -> Graph {
    let mut b = GraphBuilder::new();
    let floats = |values: &[f64]| values.iter().map(|&value| Scalar::Float(value)).collect::<Vec<_>>();
    let ints = |values: &[i64]| values.iter().map(|&value| Scalar::Int(value)).collect::<Vec<_>>();
    let special = floats(&[0.1, -2.5, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, -0.0, 65504.0, 1e-8]);
    let literals = vec![
        Literal::from_scalars(DType::F64, &[2, 4], &special).unwrap(),
        Literal::from_scalars(DType::F32, &[8], &special).unwrap(),
        Literal::from_scalars(DType::F16, &[8], &special).unwrap(),
        Literal::from_scalars(DType::BF16, &[8], &special).unwrap(),
        Literal::from_scalars(DType::I64, &[3], &ints(&[i64::MIN, -1, i64::MAX])).unwrap(),
        Literal::from_scalars(DType::I32, &[3], &ints(&[i64::from(i32::MIN), 0, i64::from(i32::MAX)])).unwrap(),
        Literal::from_scalars(DType::I16, &[2], &ints(&[-32768, 32767])).unwrap(),
        Literal::from_scalars(DType::I8, &[2], &ints(&[-128, 127])).unwrap(),
        Literal::from_scalars(DType::U8, &[3], &ints(&[0, 128, 255])).unwrap(),
        Literal::from_scalars(
            DType::Bool,
            &[3, 3],
            &[true, false, false, true, true, false, false, false, true].map(Scalar::Bool),
        )
        .unwrap(),
        Literal::splat(DType::Bool, &[4], Scalar::Bool(true)),
        Literal::splat(DType::Bool, &[4], Scalar::Bool(false)),
        Literal::splat(DType::F32, &[2, 3], Scalar::Float(1.5)),
        Literal::splat(DType::BF16, &[16], Scalar::Float(f64::NEG_INFINITY)),
        Literal::splat(DType::U8, &[2], Scalar::Int(200)),
        Literal::scalar(DType::F16, Scalar::Float(0.333)),
        Literal::scalar(DType::I64, Scalar::Int(-7)),
        Literal::from_bytes(DType::F32, &[0, 3], Vec::new()).unwrap(),
        // u64::MAX is held as the i64 of the same bits.
        Literal::from_scalars(DType::U64, &[3], &ints(&[0, i64::MAX, -1])).unwrap(),
    ];
    let outputs: Vec<_> = literals.into_iter().map(|literal| b.constant(literal)).collect();
    b.finish(&outputs)
}

/// Iotas along the first and the last dim, in integer and float types.
pub fn iota() -> Graph {
    let mut b = GraphBuilder::new();
    let outputs = vec![
        b.iota(TensorType::from_static(DType::I64, &[5]), 0).unwrap(),
        b.iota(TensorType::from_static(DType::F32, &[2, 3]), 1).unwrap(),
        b.iota(TensorType::from_static(DType::U8, &[4, 2]), 0).unwrap(),
    ];
    b.finish(&outputs)
}

/// Random bits from each algorithm, and the bits-to-uniform chain the frontend builds: the top 24
/// bits (`shift_right_logical` by 40), converted to f32 and scaled by 2^-24 into `[0, 1)`.
pub fn rng_bit_generator() -> Graph {
    let mut b = GraphBuilder::new();
    let words = |values: &[i64]| values.iter().map(|&value| Scalar::Int(value)).collect::<Vec<_>>();
    let two = b.constant(Literal::from_scalars(DType::U64, &[2], &words(&[42, 7])).unwrap());
    let three = b.constant(Literal::from_scalars(DType::U64, &[3], &words(&[1, 2, 3])).unwrap());
    let bits_ty = TensorType::from_static(DType::U64, &[100, 100]);
    let threefry = b.rng_bit_generator(RngAlgorithm::ThreeFry, two, bits_ty.clone()).unwrap();
    let philox = b.rng_bit_generator(RngAlgorithm::Philox, three, TensorType::from_static(DType::U64, &[5])).unwrap();
    let default = b.rng_bit_generator(RngAlgorithm::Default, two, TensorType::from_static(DType::U64, &[])).unwrap();
    let shift = b.constant(Literal::splat(DType::U64, &[100, 100], Scalar::Int(40)));
    let top = b.binary(BinaryOp::ShiftRightLogical, threefry, shift).unwrap();
    let float = b.convert(top, DType::F32).unwrap();
    let scale = b.constant(Literal::splat(DType::F32, &[100, 100], Scalar::Float(1.0 / 16_777_216.0)));
    let uniform = b.binary(BinaryOp::Multiply, float, scale).unwrap();
    b.finish(&[uniform, philox, default])
}
