//! Composite math built from IR primitives, shared by frontends so that both compute identical
//! bits.
//!
//! The IR keeps StableHLO's op set, which has no `erf`. A frontend that needs one builds it here
//! instead of writing its own approximation: the `.fx` importer and the eager tensors then emit the
//! same nodes for the same input, so a model imported from PyTorch and the same model written with
//! eager ops agree bit for bit, and a change to the approximation reaches both at once.
//!
//! Every function appends nodes through [`GraphBuilder`] (so each node is type-checked as it is
//! built) and returns the builder's [`InferError`] when its operand does not fit.

use crate::{BinaryOp, CompareDirection, DType, GraphBuilder, InferError, Literal, Scalar, UnaryOp, ValueId};

/// The error function of a float tensor, elementwise, with the operand's type.
///
/// `f32` uses XLA's `ErfImpl32` rational approximation (a few ulp) on `x` clamped to [-4, 4],
/// where `erf` is ±1 in `f32`. `f64` uses Cephes' approximations instead (those of XLA's
/// `ErfImpl64` and `ErfcImpl64`, a few ulp), since the `f32` one is only good to about 1e-7 and
/// exceeds 1 in magnitude in `f64`. `f16` and `bf16`
/// are computed in `f32` and rounded once, as PyTorch's CPU kernels do, because the `f32`
/// coefficients lose their accuracy when rounded to a half type. NaN stays NaN.
///
/// Fails for integer and bool operands: PyTorch converts those to a float type first, and which
/// one is the frontend's decision.
pub fn erf(builder: &mut GraphBuilder, x: ValueId) -> Result<ValueId, InferError> {
    match builder.ty(x).dtype {
        DType::F64 => erf_f64(builder, x),
        DType::F32 => erf_f32(builder, x),
        DType::F16 | DType::BF16 => {
            let dtype = builder.ty(x).dtype;
            let wide = builder.convert(x, DType::F32)?;
            let res = erf_f32(builder, wide)?;
            builder.convert(res, dtype)
        }
        _ => Err(InferError { op: "erf", message: format!("needs a floating-point operand, found {}", builder.ty(x)) }),
    }
}

/// XLA's `ErfImpl32`: `x P(x²) / Q(x²)` on `x` clamped to [-4, 4].
fn erf_f32(builder: &mut GraphBuilder, x: ValueId) -> Result<ValueId, InferError> {
    const ALPHA: [f64; 7] = [
        -2.726_142_258_013_06e-10,
        2.770_681_424_959_02e-08,
        -2.101_024_020_825_08e-06,
        -5.692_506_394_623_46e-05,
        -7.349_906_303_268_55e-04,
        -2.954_599_808_540_25e-03,
        -1.609_603_332_624_15e-02,
    ];
    const BETA: [f64; 5] = [
        -1.456_607_184_649_96e-05,
        -2.133_740_552_789_05e-04,
        -1.682_826_974_382_03e-03,
        -7.373_329_167_204_68e-03,
        -1.426_473_905_141_89e-02,
    ];
    let x = clamp_scalar(builder, x, 4.0)?;
    let square = builder.binary(BinaryOp::Multiply, x, x)?;
    let numerator = polynomial(builder, square, &ALPHA)?;
    let numerator = builder.binary(BinaryOp::Multiply, x, numerator)?;
    let denominator = polynomial(builder, square, &BETA)?;
    builder.binary(BinaryOp::Divide, numerator, denominator)
}

/// `erf` of an `f64` tensor to a few ulp: Cephes' `ndtr.c` rational approximations (those of
/// XLA's `ErfImpl64` and `ErfcImpl64`), `x T(x²) / U(x²)` for `|x| <= 1` and `1 - erfc(|x|)` with
/// `erfc(x) = exp(-x²) P(x) / Q(x)` above, signed. `x` is clamped to [-6, 6] first: `erf` rounds
/// to ±1 in `f64` beyond 6, and the clamp keeps `exp(-x²) P / Q` away from `0 * inf` at ±inf.
/// NaN stays NaN through the clamp and both branches.
fn erf_f64(builder: &mut GraphBuilder, x: ValueId) -> Result<ValueId, InferError> {
    const T: [f64; 5] = [
        9.604_973_739_870_516,
        9.002_601_972_038_427e1,
        2.232_005_345_946_843e3,
        7.003_325_141_128_051e3,
        5.559_230_130_103_949e4,
    ];
    const U: [f64; 6] = [
        1.0,
        3.356_171_416_475_031e1,
        5.213_579_497_801_527e2,
        4.594_323_829_709_801e3,
        2.262_900_006_138_909_5e4,
        4.926_739_426_086_359e4,
    ];
    const P: [f64; 9] = [
        2.461_969_814_735_305e-10,
        5.641_895_648_310_689e-1,
        7.463_210_564_422_699,
        4.863_719_709_856_814e1,
        1.965_208_329_560_771e2,
        5.264_451_949_954_773e2,
        9.345_285_271_719_576e2,
        1.027_551_886_895_157_2e3,
        5.575_353_353_693_994e2,
    ];
    const Q: [f64; 9] = [
        1.0,
        1.322_819_511_547_449_9e1,
        8.670_721_408_859_897e1,
        3.549_377_788_878_199e2,
        9.757_085_017_432_055e2,
        1.823_909_166_879_097_3e3,
        2.246_337_608_187_109_7e3,
        1.656_663_091_941_613_4e3,
        5.575_353_408_177_277e2,
    ];
    let x = clamp_scalar(builder, x, 6.0)?;
    let square = builder.binary(BinaryOp::Multiply, x, x)?;
    // |x| <= 1.
    let numerator = polynomial(builder, square, &T)?;
    let numerator = builder.binary(BinaryOp::Multiply, x, numerator)?;
    let denominator = polynomial(builder, square, &U)?;
    let small = builder.binary(BinaryOp::Divide, numerator, denominator)?;
    // |x| > 1: 1 - erfc(|x|), negated for negative x.
    let magnitude = builder.unary(UnaryOp::Abs, x)?;
    let negated = builder.unary(UnaryOp::Negate, square)?;
    let gaussian = builder.unary(UnaryOp::Exponential, negated)?;
    let numerator = polynomial(builder, magnitude, &P)?;
    let denominator = polynomial(builder, magnitude, &Q)?;
    let ratio = builder.binary(BinaryOp::Divide, numerator, denominator)?;
    let erfc = builder.binary(BinaryOp::Multiply, gaussian, ratio)?;
    let one = splat_like(builder, x, 1.0)?;
    let positive = builder.binary(BinaryOp::Subtract, one, erfc)?;
    let negative = builder.unary(UnaryOp::Negate, positive)?;
    let zero = splat_like(builder, x, 0.0)?;
    let is_negative = builder.compare(CompareDirection::Lt, x, zero)?;
    let large = builder.select(is_negative, negative, positive)?;
    let is_small = builder.compare(CompareDirection::Le, magnitude, one)?;
    builder.select(is_small, small, large)
}

/// `x` clamped to `[-bound, bound]` by rank-0 bounds of its dtype.
fn clamp_scalar(builder: &mut GraphBuilder, x: ValueId, bound: f64) -> Result<ValueId, InferError> {
    let dtype = builder.ty(x).dtype;
    let low = builder.constant(Literal::scalar(dtype, Scalar::Float(-bound)));
    let high = builder.constant(Literal::scalar(dtype, Scalar::Float(bound)));
    builder.clamp(low, x, high)
}

/// Horner evaluation of `coefficients` (highest degree first) at `x`.
fn polynomial(builder: &mut GraphBuilder, x: ValueId, coefficients: &[f64]) -> Result<ValueId, InferError> {
    let Some((&leading, rest)) = coefficients.split_first() else {
        return splat_like(builder, x, 0.0);
    };
    let mut acc = splat_like(builder, x, leading)?;
    for &coefficient in rest {
        acc = builder.binary(BinaryOp::Multiply, acc, x)?;
        let constant = splat_like(builder, acc, coefficient)?;
        acc = builder.binary(BinaryOp::Add, acc, constant)?;
    }
    Ok(acc)
}

/// `value` in `like`'s dtype and shape: a rank-0 constant, broadcast unless `like` is rank 0.
fn splat_like(builder: &mut GraphBuilder, like: ValueId, value: f64) -> Result<ValueId, InferError> {
    let ty = builder.ty(like).clone();
    let scalar = builder.constant(Literal::scalar(ty.dtype, Scalar::Float(value)));
    if ty.rank() == 0 {
        return Ok(scalar);
    }
    builder.broadcast_in_dim(scalar, &[], ty.shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Op, TensorType, verify};

    /// The graph of `erf` on one input of `dtype` and `dims`, verified.
    fn erf_graph(dtype: DType, dims: &[i64]) -> crate::Graph {
        let mut builder = GraphBuilder::new();
        let x = builder.input(TensorType::from_static(dtype, dims), None);
        let res = erf(&mut builder, x).unwrap();
        assert_eq!(*builder.ty(res), TensorType::from_static(dtype, dims), "erf keeps its operand's type");
        let graph = builder.finish(&[res]);
        verify(&graph).unwrap();
        graph
    }

    fn count(graph: &crate::Graph, wanted: impl Fn(&Op) -> bool) -> usize {
        graph.nodes().filter(|(_, node)| wanted(&node.op)).count()
    }

    #[test]
    fn erf_builds_a_verified_graph_of_the_operand_type_for_every_float() {
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for dims in [&[][..], &[3], &[2, 4]] {
                erf_graph(dtype, dims);
            }
        }
    }

    #[test]
    fn each_float_width_gets_its_own_approximation() {
        let f32_graph = erf_graph(DType::F32, &[3]);
        // One rational function and no branches: 6 + 4 Horner steps of a multiply and an add.
        assert_eq!(count(&f32_graph, |op| matches!(op, Op::Select)), 0);
        assert_eq!(count(&f32_graph, |op| matches!(op, Op::Clamp)), 1);
        assert_eq!(count(&f32_graph, |op| matches!(op, Op::Binary(BinaryOp::Add))), 10);
        let f64_graph = erf_graph(DType::F64, &[3]);
        // erf and erfc branches, chosen by |x| <= 1 and the sign.
        assert_eq!(count(&f64_graph, |op| matches!(op, Op::Select)), 2);
        assert_eq!(count(&f64_graph, |op| matches!(op, Op::Unary(UnaryOp::Exponential))), 1);
        let half_graph = erf_graph(DType::BF16, &[3]);
        assert_eq!(count(&half_graph, |op| matches!(op, Op::Convert(_))), 2, "computed in f32, rounded once");
        assert_eq!(count(&half_graph, |op| matches!(op, Op::Clamp)), 1);
    }

    #[test]
    fn erf_of_an_integer_is_refused() {
        let mut builder = GraphBuilder::new();
        let x = builder.input(TensorType::from_static(DType::I64, &[2]), None);
        let error = erf(&mut builder, x).unwrap_err();
        assert_eq!(error.to_string(), "`erf`: needs a floating-point operand, found i64[2]");
        assert_eq!(builder.graph().nodes().count(), 0, "nothing is built for a refused operand");
    }
}
