//! `prims.*`: PyTorch's primitive ops, which survive some decompositions. Each is one of the
//! ATen decompositions' building blocks, so it maps onto the same helpers; prims reductions
//! never keep dims, and `output_dtype` (when given) is the result's dtype. The view prims
//! (`split_dim`, `broadcast_in_dim`, `squeeze`, `transpose`, `view_of`) return aliases, which
//! torch.export cannot functionalize, so no exported program holds them.

use ttpu_ir::{DType, ReduceKind, Scalar, Shape};

use super::creation::range_values;
use super::elementwise::tensor;
use super::layout::reshape_to;
use super::reduce::reduce_in;
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;
use crate::sym;
use crate::sym::SymExpr;

/// `convert_element_type(a, dtype)`.
pub(super) fn convert_element_type(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("a")?;
    let dtype = args.opt_dtype("dtype")?.ok_or_else(|| cx.bad("needs a dtype"))?;
    tensor(cx.convert(x, dtype)?)
}

/// `collapse(a, start, end)`: dims `start..=end` merged into one.
pub(super) fn collapse(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("a")?;
    let rank = cx.rank(x);
    let (start, end) = (args.int("start")?, args.int("end")?);
    let (Ok(first), Ok(last)) = (usize::try_from(start), usize::try_from(end)) else {
        return Err(cx.bad(format!("collapse({start}, {end}) needs non-negative dims")));
    };
    if first > last || last >= rank.max(1) {
        return Err(cx.bad(format!("collapse({start}, {end}) of a tensor of rank {rank}")));
    }
    let dims: Vec<SymExpr> = cx.shape(x).dims().iter().map(sym::from_dim).collect();
    let mut sizes: Vec<SymExpr> = dims[..first].to_vec();
    let merged = dims[first..=last]
        .iter()
        .cloned()
        .reduce(|acc, dim| SymExpr::Mul(Box::new(acc), Box::new(dim)))
        .unwrap_or(SymExpr::Int(1));
    sizes.push(sym::fold(&merged, cx.symbol_values));
    sizes.extend(dims[last + 1..].iter().cloned());
    tensor(reshape_to(cx, x, &sizes)?)
}

/// `iota(length, *, start, step, dtype, ...)`: `start + step * [0, length)`.
pub(super) fn iota(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let length = args.int("length")?;
    if length < 0 {
        return Err(cx.bad(format!("iota of negative length {length}")));
    }
    let dtype = args.opt_dtype("dtype")?.unwrap_or(DType::I64);
    let (start, step) = (args.scalar("start")?, args.scalar("step")?);
    let all_int = !matches!(start, Scalar::Float(_)) && !matches!(step, Scalar::Float(_));
    range_values(cx, dtype, Shape::from_static(&[length]), start, step, all_int)
}

/// `sum` / `prod` / `amax` / `amin` `(inp, dims, *, output_dtype)`: over `dims` (every dim when
/// `None`), without keeping them.
pub(super) fn reduction(cx: &mut Cx<'_>, args: &Args, kind: ReduceKind) -> Result<Imported> {
    let x = args.tensor("inp")?;
    let rank = cx.rank(x);
    let dims = match args.opt_ints("dims")? {
        Some(dims) => cx.norm_dims(&dims, rank)?,
        None => (0..rank).collect(),
    };
    let dtype = args.opt_dtype("output_dtype")?.unwrap_or(cx.dtype(x));
    let reduced = match kind {
        ReduceKind::Max | ReduceKind::Min => {
            let reduced = cx.reduce_propagating_nan(x, kind, &dims)?;
            cx.convert(reduced, dtype)?
        }
        _ => reduce_in(cx, x, kind, &dims, false, dtype)?,
    };
    tensor(reduced)
}

/// `var(inp, dims, correction, *, output_dtype)`.
pub(super) fn var(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("inp")?;
    let rank = cx.rank(x);
    let dims = match args.opt_ints("dims")? {
        Some(dims) => cx.norm_dims(&dims, rank)?,
        None => (0..rank).collect(),
    };
    let dtype = cx.dtype(x);
    if !dtype.is_float() {
        return Err(cx.bad(format!("var needs floating point, found {dtype}")));
    }
    let correction = args.opt_scalar("correction")?.map_or(1.0, |value| value.as_f64());
    let n: i64 = dims.iter().map(|&dim| cx.static_dim(x, dim, "var")).product::<Result<i64>>()?;
    let compute = cx.convert(x, opmath(dtype))?;
    let total = cx.reduce_keep(compute, ReduceKind::Sum, &dims, true)?;
    let mean = cx.binary_scalar(ttpu_ir::BinaryOp::Divide, total, Scalar::Int(n))?;
    let mean = cx.broadcast_to(mean, &cx.shape(compute))?;
    let centered = cx.binary(ttpu_ir::BinaryOp::Subtract, compute, mean)?;
    let squared = cx.binary(ttpu_ir::BinaryOp::Multiply, centered, centered)?;
    let sum = cx.reduce_keep(squared, ReduceKind::Sum, &dims, false)?;
    let var = cx.binary_scalar(ttpu_ir::BinaryOp::Divide, sum, Scalar::Float(n as f64 - correction))?;
    let out = args.opt_dtype("output_dtype")?.unwrap_or(dtype);
    tensor(cx.convert(var, out)?)
}

/// `reshape(a, shape)`.
pub(super) fn reshape(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("a")?;
    let sizes = args.sym_ints("shape")?;
    tensor(reshape_to(cx, x, &sizes)?)
}

/// `where(pred, a, b)`: operands of one shape and dtype (prims neither broadcast nor promote).
pub(super) fn where_(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (pred, a, b) = (args.tensor("pred")?, args.tensor("a")?, args.tensor("b")?);
    if cx.dtype(a) != cx.dtype(b) {
        return Err(cx.bad(format!("prims do not promote: {} and {}", cx.ty(a), cx.ty(b))));
    }
    tensor(cx.select(pred, a, b)?)
}

/// `fma(a, b, c)`: `a * b + c` rounded once, as Dynamo writes `addcmul_`, `addcdiv_` and `add_`
/// with a tensor `alpha`. StableHLO has no fused multiply-add, so floats up to 32 bits compute
/// in `f64`, where the product of two of them is exact and the sum rounds once before the result
/// rounds to its type (within an ulp of the fused result, as inductor's). `f64` and complex
/// operands compute in their own type (two roundings); integers are exact.
pub(super) fn fma(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let operands = [args.operand("a")?, args.operand("b")?, args.operand("c")?];
    let dtype = cx.result_type(&operands);
    let compute = if dtype.is_float() && dtype != DType::F64 { DType::F64 } else { dtype };
    let [a, b, c] = cx.prepare(operands, compute)?;
    let product = cx.binary(ttpu_ir::BinaryOp::Multiply, a, b)?;
    let sum = cx.binary(ttpu_ir::BinaryOp::Add, product, c)?;
    tensor(cx.convert(sum, dtype)?)
}
