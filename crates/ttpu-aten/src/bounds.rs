//! The index ranges PyTorch checks at run time, for frontends that can check them.
//!
//! A decomposition turns an index into a gather or a scatter, and those clamp (or drop) an
//! index outside the operand, where PyTorch raises. A compiled program cannot raise, so the
//! checks are separate: [`index_bounds`] says which operand of a call indexes which range,
//! and [`check_graph`] builds the program that folds one such check into an error code. The
//! device records both beside the call and reads the code at its next host read, as CUDA reports
//! a device-side assert at the next synchronizing call.

use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Graph, GraphBuilder, InferError, Literal, ReduceKind, Scalar, Shape, TensorType,
};

use crate::eager::{Arg, Operand};
use crate::ops::OpDef;

/// One index operand of a call and the range PyTorch accepts for its values.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct IndexBound {
    /// The operand holding the indices.
    pub operand: usize,
    /// The smallest index accepted (`-size` where negative indices count from the end, else 0).
    pub low: i64,
    /// One past the largest index accepted (the size indexed).
    pub high: i64,
    /// The dim indexed, or `None` for the flattened elements (`put`).
    pub dim: Option<usize>,
}

impl IndexBound {
    /// PyTorch's words for a failed check, as its CPU kernels raise them.
    pub fn message(&self, op: &str) -> String {
        match self.dim {
            Some(dim) => format!(
                "`{op}`: an index is out of bounds for dimension {dim} with size {} (the valid range is [{}, {}))",
                self.high, self.low, self.high
            ),
            None => format!(
                "`{op}`: an index is out of range on a tensor of {} elements (the valid range is [{}, {}))",
                self.high, self.low, self.high
            ),
        }
    }
}

/// The argument bound to parameter `name` of `def` (positional or keyword).
fn named<'a>(def: &OpDef, args: &'a [Arg], kwargs: &'a [(String, Arg)], name: &str) -> Option<&'a Arg> {
    if let Some((_, arg)) = kwargs.iter().find(|(key, _)| key == name) {
        return Some(arg);
    }
    let position = def.params.split(',').map(str::trim).take_while(|param| *param != "*").position(|p| p == name)?;
    args.get(position)
}

fn operand_of(arg: Option<&Arg>) -> Option<usize> {
    match arg {
        Some(Arg::Tensor(index)) => Some(*index),
        _ => None,
    }
}

/// The size of dim `dim` (negative from the end) of `operand`; a 0-dim tensor has one dim of
/// size 1, as PyTorch's gathers and scatters take it.
fn dim_size(operand: &Operand, dim: i64) -> Option<(usize, i64)> {
    let sizes = operand.ty.shape.as_static()?;
    let rank = sizes.len().max(1) as i64;
    let dim = if dim < 0 { dim.checked_add(rank)? } else { dim };
    if !(0..rank).contains(&dim) {
        return None;
    }
    let size = if sizes.is_empty() { 1 } else { sizes[dim as usize] };
    Some((dim as usize, size))
}

/// An integer tensor of indices (a `uint8` one is a mask to `index`, and no index elsewhere).
fn is_index(operand: &Operand) -> bool {
    operand.ty.dtype.is_integer() && operand.ty.dtype != DType::U8
}

/// The element count of a tensor of static size.
fn numel(operand: &Operand) -> Option<i64> {
    operand.ty.shape.as_static()?.iter().try_fold(1i64, |count, &size| count.checked_mul(size))
}

/// Which operands of the call `def(*args, **kwargs)` hold indices PyTorch checks, and the range
/// of each. Empty for an overload that takes none, or where the call is malformed (the
/// decomposition reports that).
pub fn index_bounds(def: &OpDef, args: &[Arg], kwargs: &[(String, Arg)], operands: &[Operand]) -> Vec<IndexBound> {
    let arg = |name: &str| named(def, args, kwargs, name);
    let op = def.name.strip_prefix("aten.").and_then(|rest| rest.rsplit_once('.')).map(|(op, _)| op);
    let mut bounds = Vec::new();
    // An index along `dim` of `self` with no negative indices (PyTorch's gathers and scatters).
    let mut along_dim = |index: &str, source: &str, dim: Option<i64>, negative: bool| {
        let (Some(index), Some(source)) = (operand_of(arg(index)), operand_of(arg(source))) else { return };
        let (Some(index_operand), Some(source_operand)) = (operands.get(index), operands.get(source)) else { return };
        if !is_index(index_operand) {
            return;
        }
        let Some((dim, size)) = dim_size(source_operand, dim.unwrap_or(0)) else { return };
        bounds.push(IndexBound { operand: index, low: if negative { -size } else { 0 }, high: size, dim: Some(dim) });
    };
    let dim = || match arg("dim") {
        Some(Arg::Int(dim)) => Some(*dim),
        _ => None,
    };
    match op {
        Some("embedding") => along_dim("indices", "weight", Some(0), false),
        Some("index_select" | "gather" | "scatter" | "scatter_add" | "scatter_reduce" | "index_reduce") => {
            if let Some(dim) = dim() {
                along_dim("index", "self", Some(dim), false);
            }
        }
        Some("put") => {
            let (Some(index), Some(source)) = (operand_of(arg("index")), operand_of(arg("self"))) else {
                return bounds;
            };
            let (Some(index_operand), Some(numel)) = (operands.get(index), operands.get(source).and_then(numel)) else {
                return bounds;
            };
            if is_index(index_operand) {
                bounds.push(IndexBound { operand: index, low: -numel, high: numel, dim: None });
            }
        }
        Some("index" | "index_put") => {
            let (Some(Arg::List(indices)), Some(source)) = (arg("indices"), operand_of(arg("self"))) else {
                return bounds;
            };
            let Some(sizes) = operands.get(source).and_then(|operand| operand.ty.shape.as_static()) else {
                return bounds;
            };
            // Each index takes the next dim; a boolean mask takes as many dims as it has.
            let mut dim = 0usize;
            for item in indices {
                match item {
                    Arg::Tensor(index) => {
                        let Some(operand) = operands.get(*index) else { return bounds };
                        if is_index(operand) {
                            let Some(&size) = sizes.get(dim) else { return bounds };
                            bounds.push(IndexBound { operand: *index, low: -size, high: size, dim: Some(dim) });
                            dim += 1;
                        } else {
                            dim += operand.ty.rank();
                        }
                    }
                    _ => dim += 1,
                }
            }
        }
        _ => {}
    }
    bounds
}

/// The program folding one check into an error code: its inputs are the indices (`index`) and,
/// unless it is the `first` check, the code so far (`i32[]`, 0 while every check passed); its
/// output is the code, `code` where this check is the first to fail.
pub fn check_graph(index: &TensorType, bound: &IndexBound, code: i32, first: bool) -> Result<Graph, InferError> {
    let mut b = GraphBuilder::new();
    let dims = index.shape.as_static().map(|dims| dims.to_vec()).unwrap_or_default();
    let indices = b.input(index.clone(), Some("indices".into()));
    let zero = b.constant(Literal::splat(DType::I32, &[], Scalar::Int(0)));
    let before =
        if first { zero } else { b.input(TensorType::new(DType::I32, Shape::from_static(&[])), Some("code".into())) };
    let wide = if index.dtype == DType::I64 { indices } else { b.convert(indices, DType::I64)? };
    let low = b.constant(Literal::splat(DType::I64, &dims, Scalar::Int(bound.low)));
    let high = b.constant(Literal::splat(DType::I64, &dims, Scalar::Int(bound.high)));
    let below = b.compare(CompareDirection::Lt, wide, low)?;
    let above = b.compare(CompareDirection::Ge, wide, high)?;
    let outside = b.binary(BinaryOp::Or, below, above)?;
    let all_dims: Vec<i64> = (0..dims.len() as i64).collect();
    let any = if all_dims.is_empty() { outside } else { b.reduce(outside, ReduceKind::Or, &all_dims)? };
    let clean = b.compare(CompareDirection::Eq, before, zero)?;
    let fails_first = b.binary(BinaryOp::And, clean, any)?;
    let this = b.constant(Literal::splat(DType::I32, &[], Scalar::Int(i64::from(code))));
    let after = b.select(fails_first, this, before)?;
    Ok(b.finish(&[after]))
}

/// The program folding a later code (`after`, input 1) into an earlier one (`before`, input 0):
/// the earlier failure stays the one reported.
pub fn merge_graph() -> Result<Graph, InferError> {
    let mut b = GraphBuilder::new();
    let scalar = TensorType::new(DType::I32, Shape::from_static(&[]));
    let before = b.input(scalar.clone(), Some("before".into()));
    let after = b.input(scalar, Some("after".into()));
    let zero = b.constant(Literal::splat(DType::I32, &[], Scalar::Int(0)));
    let clean = b.compare(CompareDirection::Eq, before, zero)?;
    let code = b.select(clean, after, before)?;
    Ok(b.finish(&[code]))
}
