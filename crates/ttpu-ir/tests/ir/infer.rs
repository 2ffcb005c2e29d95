//! Result-type inference per op family, with concrete numbers.

use std::sync::Arc;

use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Dim, DotDims, Literal, Op, ReduceKind, Scalar, ScatterDims, ScatterKind, Shape,
    TensorType, UnaryOp, Window,
};

use crate::common::{conv2d, embedding_gather, f32s, infer_str, infer1, ty};

fn sym(name: &str) -> Dim {
    Dim::Sym(Arc::from(name))
}

#[test]
fn constant_and_iota() {
    let literal = Literal::splat(DType::BF16, &[2, 3], Scalar::Float(1.5));
    assert_eq!(infer_str(Op::Constant(literal), &[]), "bf16[2, 3]");
    let iota = |dimension| Op::Iota { dimension, dtype: DType::I64, shape: Shape::from_static(&[4, 5]) };
    assert_eq!(infer_str(iota(1), &[]), "i64[4, 5]");
    assert_eq!(infer_str(iota(2), &[]), "`iota`: dim 2 is out of range for rank 2");
    assert_eq!(infer_str(iota(-1), &[]), "`iota`: dim -1 is out of range for rank 2");
}

#[test]
fn bitcast_convert_widths() {
    let bitcast = |dtype| Op::BitcastConvert(dtype);
    let x = f32s(&[2, 3]);
    // Equal widths keep the shape.
    assert_eq!(infer_str(bitcast(DType::I32), &[&x]), "i32[2, 3]");
    // Narrower: each element becomes a trailing dim of parts.
    assert_eq!(infer_str(bitcast(DType::I16), &[&x]), "i16[2, 3, 2]");
    assert_eq!(infer_str(bitcast(DType::U8), &[&x]), "u8[2, 3, 4]");
    assert_eq!(infer_str(bitcast(DType::I32), &[&ty(DType::F64, &[])]), "i32[2]");
    // Wider: the trailing dim must be exactly the ratio, and goes.
    assert_eq!(infer_str(bitcast(DType::F64), &[&ty(DType::I32, &[5, 2])]), "f64[5]");
    assert_eq!(infer_str(bitcast(DType::I64), &[&ty(DType::U8, &[8])]), "i64[]");
    assert_eq!(
        infer_str(bitcast(DType::F64), &[&x]),
        "`bitcast_convert`: f32[2, 3] to f64 needs a trailing dim of exactly 2 (4-byte parts of 8)"
    );
    assert_eq!(
        infer_str(bitcast(DType::F64), &[&ty(DType::F32, &[])]),
        "`bitcast_convert`: f32[] to f64 needs a trailing dim of exactly 2 (4-byte parts of 8)"
    );
    let symbolic = TensorType::new(DType::I32, [sym("s0"), sym("s1")].into_iter().collect());
    assert!(infer_str(bitcast(DType::F64), &[&symbolic]).contains("needs a trailing dim of exactly 2"));
    assert_eq!(infer_str(bitcast(DType::F32), &[&symbolic]), "f32[s0, s1]");
    assert_eq!(
        infer_str(bitcast(DType::U8), &[&ty(DType::Bool, &[3])]),
        "`bitcast_convert`: bool has no bit width; cannot reinterpret bool as u8"
    );
    assert_eq!(
        infer_str(bitcast(DType::Bool), &[&ty(DType::U8, &[3])]),
        "`bitcast_convert`: bool has no bit width; cannot reinterpret u8 as bool"
    );
}

#[test]
fn unary() {
    let x = f32s(&[2, 3]);
    let n = ty(DType::I32, &[2, 3]);
    assert_eq!(infer_str(Op::Unary(UnaryOp::Tanh), &[&x]), "f32[2, 3]");
    assert_eq!(infer_str(Op::Unary(UnaryOp::IsFinite), &[&x]), "bool[2, 3]");
    assert_eq!(infer_str(Op::Unary(UnaryOp::Negate), &[&n]), "i32[2, 3]");
    assert_eq!(infer_str(Op::Unary(UnaryOp::Not), &[&ty(DType::Bool, &[])]), "bool[]");
    assert_eq!(
        infer_str(Op::Unary(UnaryOp::Exponential), &[&n]),
        "`exponential`: needs a floating-point operand, found i32[2, 3]"
    );
    assert_eq!(infer_str(Op::Unary(UnaryOp::Not), &[&x]), "`not`: needs an integer or bool operand, found f32[2, 3]");
}

#[test]
fn binary_and_compare() {
    let x = f32s(&[4]);
    let p = ty(DType::Bool, &[4]);
    assert_eq!(infer_str(Op::Binary(BinaryOp::Add), &[&x, &x]), "f32[4]");
    assert_eq!(
        infer_str(Op::Binary(BinaryOp::Add), &[&x, &f32s(&[5])]),
        "`add`: operand types differ: f32[4] vs f32[5]"
    );
    assert_eq!(
        infer_str(Op::Binary(BinaryOp::Add), &[&x, &ty(DType::F16, &[4])]),
        "`add`: operand types differ: f32[4] vs f16[4]"
    );
    assert_eq!(infer_str(Op::Binary(BinaryOp::ShiftLeft), &[&x, &x]), "`shift_left`: not defined for f32");
    assert_eq!(infer_str(Op::Binary(BinaryOp::Xor), &[&p, &p]), "bool[4]");
    assert_eq!(infer_str(Op::Binary(BinaryOp::Subtract), &[&p, &p]), "`subtract`: not defined for bool");
    assert_eq!(infer_str(Op::Compare(CompareDirection::Lt), &[&x, &x]), "bool[4]");
    assert_eq!(infer_str(Op::Binary(BinaryOp::Add), &[&x]), "`add`: expected 2 operands, found 1");
}

#[test]
fn select_clamp_convert() {
    let x = f32s(&[2, 2]);
    let pred = ty(DType::Bool, &[2, 2]);
    let flag = ty(DType::Bool, &[]);
    let scalar = f32s(&[]);
    assert_eq!(infer_str(Op::Select, &[&pred, &x, &x]), "f32[2, 2]");
    assert_eq!(infer_str(Op::Select, &[&flag, &x, &x]), "f32[2, 2]");
    assert_eq!(
        infer_str(Op::Select, &[&ty(DType::Bool, &[2]), &x, &x]),
        "`select`: predicate shape [2] does not match [2, 2]"
    );
    assert_eq!(infer_str(Op::Select, &[&x, &x, &x]), "`select`: predicate must be bool, found f32[2, 2]");
    assert_eq!(infer_str(Op::Clamp, &[&scalar, &x, &scalar]), "f32[2, 2]");
    assert_eq!(
        infer_str(Op::Clamp, &[&f32s(&[2]), &x, &scalar]),
        "`clamp`: bound f32[2] does not fit operand f32[2, 2]"
    );
    assert_eq!(infer_str(Op::Convert(DType::U8), &[&x]), "u8[2, 2]");
}

#[test]
fn reshape_and_transpose() {
    let x = f32s(&[2, 3, 4]);
    assert_eq!(infer_str(Op::Reshape(Shape::from_static(&[6, 4])), &[&x]), "f32[6, 4]");
    assert_eq!(
        infer_str(Op::Reshape(Shape::from_static(&[5, 5])), &[&x]),
        "`reshape`: cannot reshape f32[2, 3, 4] (24 elements) to [5, 5] (25 elements)"
    );
    let dynamic = TensorType::new(DType::F32, Shape([sym("s0"), Dim::Static(4)].into_iter().collect()));
    let flat = Shape([sym("s1")].into_iter().collect());
    assert_eq!(infer_str(Op::Reshape(flat), &[&dynamic]), "f32[s1]");
    assert_eq!(infer_str(Op::Reshape(Shape::from_static(&[i64::MAX, 2])), &[&x]), "`reshape`: sizes overflow 64 bits");
    assert_eq!(infer_str(Op::Transpose([2, 0, 1].as_slice().into()), &[&x]), "f32[4, 2, 3]");
    assert_eq!(
        infer_str(Op::Transpose([1, 0].as_slice().into()), &[&x]),
        "`transpose`: permutation [1, 0] does not fit rank 3"
    );
    assert_eq!(
        infer_str(Op::Transpose([0, 3, 1].as_slice().into()), &[&x]),
        "`transpose`: dim 3 is out of range for rank 3"
    );
}

#[test]
fn broadcast_in_dim() {
    let broadcast =
        |dims: &[i64], shape: &[i64]| Op::BroadcastInDim { dims: dims.into(), shape: Shape::from_static(shape) };
    assert_eq!(infer_str(broadcast(&[], &[2, 3]), &[&f32s(&[])]), "f32[2, 3]");
    assert_eq!(infer_str(broadcast(&[1], &[2, 3]), &[&f32s(&[3])]), "f32[2, 3]");
    assert_eq!(infer_str(broadcast(&[0, 1], &[4, 3]), &[&f32s(&[1, 3])]), "f32[4, 3]");
    assert_eq!(
        infer_str(broadcast(&[0], &[2, 3]), &[&f32s(&[3])]),
        "`broadcast_in_dim`: operand f32[3] does not broadcast to [2, 3] along dims [0]"
    );
    assert_eq!(
        infer_str(broadcast(&[0], &[2, 3]), &[&f32s(&[2, 3])]),
        "`broadcast_in_dim`: 1 broadcast dims for operand f32[2, 3]"
    );
}

#[test]
fn slice_concatenate_pad() {
    let x = f32s(&[10, 6]);
    let slice = |start: &[i64], limit: &[i64], strides: &[i64]| Op::Slice {
        start: start.into(),
        limit: limit.iter().map(|&end| Dim::Static(end)).collect(),
        strides: strides.into(),
    };
    // 1..10 step 3 takes 1, 4, 7: 3 elements; 0..6 step 4 takes 0, 4: 2 elements.
    assert_eq!(infer_str(slice(&[1, 0], &[10, 6], &[3, 4]), &[&x]), "f32[3, 2]");
    assert_eq!(infer_str(slice(&[5, 0], &[5, 6], &[1, 1]), &[&x]), "f32[0, 6]");
    assert_eq!(infer_str(slice(&[0, 0], &[11, 6], &[1, 1]), &[&x]), "`slice`: limit 11 exceeds size 10 of dim 0");
    assert_eq!(
        infer_str(slice(&[0, 0], &[10, 6], &[1, i64::MAX]), &[&x]),
        "f32[10, 1]",
        "a huge stride takes one element and does not overflow"
    );

    assert_eq!(infer_str(Op::Concatenate(0), &[&x, &f32s(&[3, 6]), &x]), "f32[23, 6]");
    assert_eq!(
        infer_str(Op::Concatenate(1), &[&x, &f32s(&[3, 6])]),
        "`concatenate`: operand f32[3, 6] does not match f32[10, 6] outside dim 1"
    );
    assert_eq!(infer_str(Op::Concatenate(0), &[]), "`concatenate`: needs at least one operand");

    let pad = |low: &[i64], high: &[i64], interior: &[i64]| Op::Pad {
        low: low.into(),
        high: high.into(),
        interior: interior.into(),
    };
    let zero = f32s(&[]);
    // dim 0: 1 + 10 + 9 * 2 + 3 = 32; dim 1: -2 + 6 - 1 = 3.
    assert_eq!(infer_str(pad(&[1, -2], &[3, -1], &[2, 0]), &[&x, &zero]), "f32[32, 3]");
    assert_eq!(infer_str(pad(&[-8, 0], &[-3, 0], &[0, 0]), &[&x, &zero]), "`pad`: padding makes dim 0 negative");
    assert_eq!(
        infer_str(pad(&[0, 0], &[0, 0], &[0, 0]), &[&x, &f32s(&[1])]),
        "`pad`: padding value must be a f32 scalar, found f32[1]"
    );
    assert_eq!(infer_str(pad(&[i64::MAX, 0], &[1, 0], &[0, 0]), &[&x, &zero]), "`pad`: sizes overflow 64 bits");
}

#[test]
fn dot_general_orders_batch_then_lhs_free_then_rhs_free() {
    let dot = |lhs_batch: &[i64], rhs_batch: &[i64], lhs_contracting: &[i64], rhs_contracting: &[i64]| {
        Op::DotGeneral(DotDims {
            lhs_batch: lhs_batch.into(),
            rhs_batch: rhs_batch.into(),
            lhs_contracting: lhs_contracting.into(),
            rhs_contracting: rhs_contracting.into(),
        })
    };
    // Plain matmul.
    assert_eq!(infer_str(dot(&[], &[], &[1], &[0]), &[&f32s(&[4, 16]), &f32s(&[16, 8])]), "f32[4, 8]");
    // lhs [m=5, b=2, k=3], rhs [n=7, k=3, b=2]: batch first even though it is not leading.
    assert_eq!(infer_str(dot(&[1], &[2], &[2], &[1]), &[&f32s(&[5, 2, 3]), &f32s(&[7, 3, 2])]), "f32[2, 5, 7]");
    // Free dims keep their operand order: lhs [m1=6, k=3, m2=4], rhs [n1=9, k=3, n2=8].
    assert_eq!(infer_str(dot(&[], &[], &[1], &[1]), &[&f32s(&[6, 3, 4]), &f32s(&[9, 3, 8])]), "f32[6, 4, 9, 8]");
    // Two batch dims, in the order lhs_batch lists them.
    assert_eq!(
        infer_str(dot(&[1, 0], &[0, 1], &[3], &[2]), &[&f32s(&[2, 3, 5, 4]), &f32s(&[3, 2, 4, 6])]),
        "f32[3, 2, 5, 6]"
    );
    assert_eq!(
        infer_str(dot(&[], &[], &[1], &[0]), &[&f32s(&[4, 16]), &f32s(&[8, 16])]),
        "`dot_general`: lhs dim 1 of f32[4, 16] does not match rhs dim 0 of f32[8, 16]"
    );
    assert_eq!(
        infer_str(dot(&[0], &[], &[1], &[0]), &[&f32s(&[4, 16]), &f32s(&[16, 8])]),
        "`dot_general`: batch and contracting dims must pair up"
    );
}

#[test]
fn reduce() {
    let x = f32s(&[2, 3, 4]);
    let reduce = |kind, dimensions: &[i64]| Op::Reduce { kind, dimensions: dimensions.into() };
    assert_eq!(infer_str(reduce(ReduceKind::Sum, &[0, 2]), &[&x]), "f32[3]");
    assert_eq!(infer_str(reduce(ReduceKind::Max, &[0, 1, 2]), &[&x]), "f32[]");
    assert_eq!(infer_str(reduce(ReduceKind::Sum, &[2, 0]), &[&x]), "`reduce`: dimensions [2, 0] must be ascending");
    assert_eq!(infer_str(reduce(ReduceKind::And, &[0]), &[&x]), "`reduce`: `and` reduction is not defined for f32");
    assert_eq!(infer_str(reduce(ReduceKind::Or, &[0]), &[&ty(DType::Bool, &[5])]), "bool[]");
}

fn window(dimensions: &[i64], strides: &[i64], base: &[i64], dilations: &[i64], padding: &[(i64, i64)]) -> Window {
    Window {
        dimensions: dimensions.into(),
        strides: strides.into(),
        base_dilations: base.into(),
        window_dilations: dilations.into(),
        padding: padding.into(),
    }
}

#[test]
fn reduce_window_with_padding_and_dilation() {
    let x = f32s(&[1, 1, 5, 5]);
    let pool = |window| Op::ReduceWindow { kind: ReduceKind::Max, window };
    // (5 + 1 + 1 - 3) / 2 + 1 = 3.
    let padded = window(&[1, 1, 3, 3], &[1, 1, 2, 2], &[1; 4], &[1; 4], &[(0, 0), (0, 0), (1, 1), (1, 1)]);
    assert_eq!(infer_str(pool(padded), &[&x]), "f32[1, 1, 3, 3]");
    // Asymmetric padding: (5 + 0 + 2 - 2) / 2 + 1 = 3 and (5 + 2 + 0 - 2) / 1 + 1 = 6.
    let asymmetric = window(&[1, 1, 2, 2], &[1, 1, 2, 1], &[1; 4], &[1; 4], &[(0, 0), (0, 0), (0, 2), (2, 0)]);
    assert_eq!(infer_str(pool(asymmetric), &[&x]), "f32[1, 1, 3, 6]");
    // Base dilation 2 spreads 5 elements over 9; window dilation 2 makes a 3-window span 5:
    // (9 - 3) / 1 + 1 = 7 and (5 - 5) / 1 + 1 = 1.
    let dilated = window(&[1, 1, 3, 3], &[1; 4], &[1, 1, 2, 1], &[1, 1, 1, 2], &[(0, 0); 4]);
    assert_eq!(infer_str(pool(dilated), &[&x]), "f32[1, 1, 7, 1]");
    // A window larger than the padded input gives an empty dim.
    let too_big = window(&[1, 1, 7, 1], &[1; 4], &[1; 4], &[1; 4], &[(0, 0); 4]);
    assert_eq!(infer_str(pool(too_big), &[&x]), "f32[1, 1, 0, 5]");
    let zero_stride = window(&[1, 1, 1, 1], &[1, 1, 0, 1], &[1; 4], &[1; 4], &[(0, 0); 4]);
    assert_eq!(
        infer_str(pool(zero_stride), &[&x]),
        "`reduce_window`: window sizes, strides and dilations must be positive in dim 2"
    );
    let short = window(&[3, 3], &[1, 1], &[1, 1], &[1, 1], &[(0, 0); 2]);
    assert_eq!(infer_str(pool(short), &[&x]), "`reduce_window`: window attributes must have 4 entries");
}

#[test]
fn convolution_output_sizes() {
    let input = f32s(&[1, 3, 32, 32]);
    let kernel = f32s(&[16, 3, 5, 5]);
    let conv = |strides, padding, lhs, rhs| ttpu_ir::Op::Convolution(conv2d(strides, padding, lhs, rhs));
    // (32 + 2 + 2 - 5) / 2 + 1 = 16.
    let same = conv([2, 2], [(2, 2), (2, 2)], [1, 1], [1, 1]);
    assert_eq!(infer_str(same, &[&input, &kernel]), "f32[1, 16, 16, 16]");
    // Kernel dilation 2 spans 9: (32 + 4 - 9) / 2 + 1 = 14; no padding, stride 3: (32 - 9) / 3 + 1 = 8.
    let dilated = conv([2, 3], [(2, 2), (0, 0)], [1, 1], [2, 2]);
    assert_eq!(infer_str(dilated, &[&input, &kernel]), "f32[1, 16, 14, 8]");
    // Input dilation (transposed conv): 32 elements spread over 63, padded by 4 each side: 71 - 5 + 1 = 67.
    let transposed = conv([1, 1], [(4, 4), (4, 4)], [2, 2], [1, 1]);
    assert_eq!(infer_str(transposed, &[&input, &kernel]), "f32[1, 16, 67, 67]");

    // NHWC input, HWIO kernel, NHWC output.
    let mut nhwc = conv2d([1, 1], [(1, 1), (1, 1)], [1, 1], [1, 1]);
    nhwc.input_feature = 3;
    nhwc.input_spatial = [1, 2].as_slice().into();
    nhwc.kernel_input_feature = 2;
    nhwc.kernel_output_feature = 3;
    nhwc.kernel_spatial = [0, 1].as_slice().into();
    nhwc.output_feature = 3;
    nhwc.output_spatial = [1, 2].as_slice().into();
    assert_eq!(infer_str(Op::Convolution(nhwc), &[&f32s(&[2, 10, 12, 3]), &f32s(&[3, 3, 3, 8])]), "f32[2, 10, 12, 8]");

    // Depthwise: 3 groups of 1 input feature each.
    let mut depthwise = conv2d([1, 1], [(0, 0), (0, 0)], [1, 1], [1, 1]);
    depthwise.feature_group_count = 3;
    assert_eq!(infer_str(Op::Convolution(depthwise.clone()), &[&input, &f32s(&[6, 1, 3, 3])]), "f32[1, 6, 30, 30]");
    assert_eq!(
        infer_str(Op::Convolution(depthwise), &[&input, &f32s(&[6, 3, 3, 3])]),
        "`convolution`: input features 3 / groups 3 must equal kernel input features 3"
    );
    assert_eq!(
        infer_str(conv([1, 1], [(0, 0), (0, 0)], [1, 1], [1, 1]), &[&input, &f32s(&[16, 4, 5, 5])]),
        "`convolution`: input features 3 / groups 1 must equal kernel input features 4"
    );
}

#[test]
fn gather_shapes() {
    // Embedding lookup: table [10, 4], ids [2, 5] -> [2, 5, 4].
    let table = f32s(&[10, 4]);
    assert_eq!(infer_str(Op::Gather(embedding_gather(2, 4)), &[&table, &ty(DType::I64, &[2, 5])]), "f32[2, 5, 4]");
    // The index vector spelled out as a trailing dim of size 1.
    let mut explicit = embedding_gather(2, 4);
    explicit.index_vector_dim = 1;
    explicit.offset_dims = [1].as_slice().into();
    assert_eq!(infer_str(Op::Gather(explicit), &[&table, &ty(DType::I32, &[3, 1])]), "f32[3, 4]");
    // index_select along dim 1 of [3, 10] with 4 indices, offset dim first: [3, 4].
    let select = ttpu_ir::GatherDims {
        offset_dims: [0].as_slice().into(),
        collapsed_slice_dims: [1].as_slice().into(),
        operand_batching_dims: Default::default(),
        start_indices_batching_dims: Default::default(),
        start_index_map: [1].as_slice().into(),
        index_vector_dim: 1,
        slice_sizes: [3, 1].as_slice().into(),
        indices_are_sorted: false,
    };
    assert_eq!(infer_str(Op::Gather(select), &[&f32s(&[3, 10]), &ty(DType::I64, &[4])]), "f32[3, 4]");
    assert_eq!(
        infer_str(Op::Gather(embedding_gather(2, 4)), &[&table, &f32s(&[2, 5])]),
        "`gather`: indices must be integers, found f32[2, 5]"
    );
    assert_eq!(
        infer_str(Op::Gather(embedding_gather(2, 5)), &[&table, &ty(DType::I64, &[2, 5])]),
        "`gather`: slice size 5 does not fit dim 1 of f32[10, 4]"
    );
    let mut uncollapsible = embedding_gather(2, 4);
    uncollapsible.slice_sizes = [2, 4].as_slice().into();
    assert_eq!(
        infer_str(Op::Gather(uncollapsible), &[&table, &ty(DType::I64, &[2, 5])]),
        "`gather`: slice size 2 does not fit dim 0 of f32[10, 4]"
    );
}

#[test]
fn scatter_keeps_the_operand_type() {
    let dims = ScatterDims {
        update_window_dims: [1].as_slice().into(),
        inserted_window_dims: [0].as_slice().into(),
        input_batching_dims: Default::default(),
        scatter_indices_batching_dims: Default::default(),
        scatter_dims_to_operand_dims: [0].as_slice().into(),
        index_vector_dim: 1,
        kind: ScatterKind::Combine(ReduceKind::Sum),
        indices_are_sorted: false,
        unique_indices: false,
    };
    let operand = f32s(&[10, 4]);
    let indices = ty(DType::I64, &[3, 1]);
    assert_eq!(infer1(Op::Scatter(dims.clone()), &[&operand, &indices, &f32s(&[3, 4])]), Ok(operand.clone()));
    assert_eq!(
        infer_str(Op::Scatter(dims.clone()), &[&operand, &indices, &ty(DType::F16, &[3, 4])]),
        "`scatter`: updates f16[3, 4] do not match operand f32[10, 4]"
    );
    assert_eq!(
        infer_str(Op::Scatter(dims), &[&operand, &f32s(&[3, 1]), &f32s(&[3, 4])]),
        "`scatter`: indices must be integers, found f32[3, 1]"
    );
}
