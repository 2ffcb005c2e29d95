//! Products and distances the operator sweep met: `addbmm`, `addmv` and `dist`.

use ttpu_ir::{BinaryOp, CompareDirection, DotDims, ReduceKind, Scalar, Shape, UnaryOp};

use super::elementwise::tensor;
use super::nn::add_bias;
use crate::args::Args;
use crate::ctx::{Cx, Imported, Operand, opmath};
use crate::error::Result;

/// `addbmm(self, batch1, batch2, *, beta, alpha)`: `beta * self + alpha * sum_b batch1[b] @
/// batch2[b]`, the batch contracted with the inner dim in one product.
pub(super) fn addbmm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lhs, rhs) = (args.tensor("batch1")?, args.tensor("batch2")?);
    let dtype = cx.dtype(lhs);
    if cx.rank(lhs) != 3 || cx.rank(rhs) != 3 || cx.dtype(rhs) != dtype {
        return Err(cx.bad(format!(
            "expects two rank-3 operands of one dtype, found {} and {}",
            cx.ty(lhs),
            cx.ty(rhs)
        )));
    }
    let compute = opmath(dtype);
    let (lhs, rhs) = (cx.convert(lhs, compute)?, cx.convert(rhs, compute)?);
    let dims = DotDims {
        lhs_contracting: [0, 2].into_iter().collect(),
        rhs_contracting: [0, 1].into_iter().collect(),
        ..DotDims::default()
    };
    let product = cx.dot_general(lhs, rhs, dims)?;
    tensor(add_bias(cx, args, args.tensor("self")?, product, dtype)?)
}

/// `addmv(self, mat, vec, *, beta, alpha)`: `beta * self + alpha * mat @ vec`.
pub(super) fn addmv(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (mat, vec) = (args.tensor("mat")?, args.tensor("vec")?);
    let dtype = cx.dtype(mat);
    if cx.rank(mat) != 2 || cx.rank(vec) != 1 || cx.dtype(vec) != dtype {
        return Err(cx.bad(format!(
            "expects a matrix and a vector of one dtype, found {} and {}",
            cx.ty(mat),
            cx.ty(vec)
        )));
    }
    let compute = opmath(dtype);
    let (mat, vec) = (cx.convert(mat, compute)?, cx.convert(vec, compute)?);
    let dims = DotDims {
        lhs_contracting: [1].into_iter().collect(),
        rhs_contracting: [0].into_iter().collect(),
        ..DotDims::default()
    };
    let product = cx.dot_general(mat, vec, dims)?;
    tensor(add_bias(cx, args, args.tensor("self")?, product, dtype)?)
}

/// `dist(self, other, p)`: the `p`-norm of `self - other` over every element (`inf`: the largest
/// magnitude, `-inf`: the smallest, `0`: the count of nonzero differences), in opmath.
pub(super) fn dist(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (a, b) = (args.tensor("self")?, args.tensor("other")?);
    let p = args.scalar_or("p", Scalar::Int(2))?.as_f64();
    let dtype = cx.result_type(&[Operand::Tensor(a), Operand::Tensor(b)]);
    if !dtype.is_float() {
        return Err(cx.bad(format!("dist takes floating-point tensors, found {} and {}", cx.ty(a), cx.ty(b))));
    }
    let compute = opmath(dtype);
    let [a, b] = cx.prepare([Operand::Tensor(a), Operand::Tensor(b)], compute)?;
    let diff = cx.binary(BinaryOp::Subtract, a, b)?;
    let count: i64 = cx.static_dims(diff, "dist")?.iter().product();
    let diff = cx.reshape(diff, Shape::from_static(&[count]))?;
    let magnitude = cx.unary(UnaryOp::Abs, diff)?;
    let norm = if p == f64::NEG_INFINITY {
        cx.reduce_propagating_nan(magnitude, ReduceKind::Min, &[0])?
    } else if p == f64::INFINITY {
        cx.reduce_propagating_nan(magnitude, ReduceKind::Max, &[0])?
    } else if p == 0.0 {
        let zero = cx.splat_like(diff, Scalar::Int(0))?;
        let nonzero = cx.compare(CompareDirection::Ne, diff, zero)?;
        let nonzero = cx.convert(nonzero, compute)?;
        cx.reduce(nonzero, ReduceKind::Sum, &[0])?
    } else {
        super::nn::p_norm_last(cx, diff, p)?
    };
    tensor(cx.convert(norm, dtype)?)
}
