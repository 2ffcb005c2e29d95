//! Factorizations and solves built on the unrolled LU and triangular solves of `linalg.rs`:
//! `linalg_lu_factor_ex`, `linalg_lu`, `lu_unpack`, `linalg_lu_solve`, `cholesky_solve`,
//! `cholesky_inverse` and `_linalg_check_errors`.
//!
//! PyTorch hands LAPACK a column-major copy of `A`, so `getrf` factors `A` itself: `P A = L U` with
//! LAPACK's pivots (row `i` exchanged with row `pivots[i]`, 1-based), which `linalg.rs` reproduces.
//! Pivots that arrive as data (`lu_unpack`, `linalg_lu_solve`) are applied as LAPACK's `laswp`
//! applies them: the exchanges one after the other, from the first.

use ttpu_ir::{BinaryOp, CompareDirection, DType, Scalar, Shape, ValueId};

use super::elementwise::tensor;
use super::linalg::{
    Square, broadcast_system, compare_to, expand, identity, iota, lu_factor, matrices, pick_rows, refuse_check_errors,
    square, torch_pivots, transposed, triangular,
};
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// `_linalg_check_errors(info, api_name, *, is_matrix)`: PyTorch raises when `info` is nonzero;
/// a compiled program cannot raise, so this checks nothing (the ops that compute `info` return
/// it, and a model reads it to know).
pub(super) fn check_errors(_cx: &mut Cx<'_>, _args: &Args) -> Result<Imported> {
    Ok(Imported::None)
}

/// `linalg_lu_factor_ex(A, *, pivot, check_errors)` → (LU, pivots, info).
pub(super) fn lu_factor_ex(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    refuse_check_errors(cx, args)?;
    refuse_no_pivot(cx, args)?;
    let a = args.tensor("A")?;
    let (m, _, _) = matrices(cx, a, "linalg.lu_factor_ex")?;
    let lu = lu_factor(cx, &m, a)?;
    let pivots = torch_pivots(cx, lu.pivots)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(lu.lu), Imported::Tensor(pivots), Imported::Tensor(lu.info)]))
}

/// `pivot=False` is CUDA's own (LAPACK always pivots), as PyTorch says on the CPU.
fn refuse_no_pivot(cx: &Cx<'_>, args: &Args) -> Result<()> {
    if !args.bool_or("pivot", true)? {
        return Err(cx.bad("LU without pivoting is not implemented on the CPU (PyTorch's CPU kernel refuses it too)"));
    }
    Ok(())
}

/// The unit lower (`r x k`) and the upper (`k x c`) triangles of a packed `LU` of `r x c`, with
/// `k = min(r, c)`.
fn unpack_triangles(cx: &mut Cx<'_>, m: &Square, lu: ValueId) -> Result<(ValueId, ValueId)> {
    let b = m.b();
    let rows = cx.static_dim(lu, b, "the rows")?;
    let cols = cx.static_dim(lu, b + 1, "the columns")?;
    let k = rows.min(cols);
    let left = cx.slice_dim(lu, b + 1, 0, k, 1)?;
    let top = cx.slice_dim(lu, b, 0, k, 1)?;
    let lower = {
        let (row, col) = (iota(cx, m.shape(&[rows, k]), b)?, iota(cx, m.shape(&[rows, k]), b + 1)?);
        let below = cx.compare(CompareDirection::Gt, row, col)?;
        let on = cx.compare(CompareDirection::Eq, row, col)?;
        let zero = cx.splat_like(left, Scalar::Int(0))?;
        let one = cx.splat_like(left, Scalar::Int(1))?;
        let lower = cx.select(below, left, zero)?;
        cx.select(on, one, lower)?
    };
    let upper = {
        let (row, col) = (iota(cx, m.shape(&[k, cols]), b)?, iota(cx, m.shape(&[k, cols]), b + 1)?);
        let above = cx.compare(CompareDirection::Le, row, col)?;
        let zero = cx.splat_like(top, Scalar::Int(0))?;
        cx.select(above, top, zero)?
    };
    Ok((lower, upper))
}

/// `P^T` of LAPACK's row order `perm` (`[batch.., r]`, `(P A)[i] = A[perm[i]]`): the `P` of
/// `A = P L U`, with `P[perm[i], i] = 1`.
fn permutation_matrix(cx: &mut Cx<'_>, m: &Square, perm: ValueId) -> Result<ValueId> {
    let b = m.b();
    let n = cx.static_dim(perm, b, "the rows")?;
    let rows = iota(cx, m.shape(&[n, n]), b)?;
    let wide = expand(cx, m, perm, &[1], &[n, n])?;
    let hit = cx.compare(CompareDirection::Eq, rows, wide)?;
    cx.convert(hit, m.dtype)
}

/// LAPACK's row order from its 1-based `pivots` (`[batch.., k]`, data) for matrices of `n` rows:
/// the exchanges applied to `0..n` in turn, so `(P A)[r] = A[perm[r]]`. A pivot outside the
/// matrix exchanges nothing.
fn perm_from_pivots(cx: &mut Cx<'_>, m: &Square, n: i64, pivots: ValueId) -> Result<ValueId> {
    let b = m.b();
    let steps = cx.static_dim(pivots, b, "the pivots")?;
    let pivots = cx.convert(pivots, DType::I64)?;
    let pivots = cx.binary_scalar(BinaryOp::Subtract, pivots, Scalar::Int(1))?;
    let positions = iota(cx, m.shape(&[n]), b)?;
    let mut perm = positions;
    for i in 0..steps.min(n) {
        let target = cx.slice_dim(pivots, b, i, i + 1, 1)?;
        let target = cx.reshape(target, m.shape(&[]))?;
        let target = expand(cx, m, target, &[], &[n])?;
        let at_i = compare_to(cx, CompareDirection::Eq, positions, i)?;
        let at_target = cx.compare(CompareDirection::Eq, positions, target)?;
        // The values at i and at the target, spread over the row.
        let value_i = cx.slice_dim(perm, b, i, i + 1, 1)?;
        let value_i = cx.reshape(value_i, m.shape(&[]))?;
        let value_i = expand(cx, m, value_i, &[], &[n])?;
        let minus = cx.splat(DType::I64, Scalar::Int(-1), &m.shape(&[n]))?;
        let at_target_values = cx.select(at_target, perm, minus)?;
        let value_target = cx.reduce(at_target_values, ttpu_ir::ReduceKind::Max, &[b])?;
        let found = compare_to(cx, CompareDirection::Ge, value_target, 0)?;
        let value_target = expand(cx, m, value_target, &[], &[n])?;
        let found = expand(cx, m, found, &[], &[n])?;
        let swap_i = cx.binary(BinaryOp::And, at_i, found)?;
        let swap_target = cx.binary(BinaryOp::And, at_target, found)?;
        let moved = cx.select(swap_target, value_i, perm)?;
        perm = cx.select(swap_i, value_target, moved)?;
    }
    Ok(perm)
}

/// `linalg_lu(A, *, pivot)` → (P, L, U) with `A = P L U`.
pub(super) fn linalg_lu(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    refuse_no_pivot(cx, args)?;
    let a = args.tensor("A")?;
    let (m, _, _) = matrices(cx, a, "linalg.lu")?;
    let lu = lu_factor(cx, &m, a)?;
    let (lower, upper) = unpack_triangles(cx, &m, lu.lu)?;
    let p = permutation_matrix(cx, &m, lu.perm)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(p), Imported::Tensor(lower), Imported::Tensor(upper)]))
}

/// `lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)` → (P, L, U); what is not unpacked
/// is an empty tensor, as PyTorch returns it.
pub(super) fn lu_unpack(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let lu = args.tensor("LU_data")?;
    let pivots = args.tensor("LU_pivots")?;
    let (m, rows, _) = matrices(cx, lu, "lu_unpack")?;
    let empty = |cx: &mut Cx<'_>| cx.literal(ttpu_ir::Literal::splat(m.dtype, &[0], Scalar::Int(0)));
    let (lower, upper) =
        if args.bool_or("unpack_data", true)? { unpack_triangles(cx, &m, lu)? } else { (empty(cx), empty(cx)) };
    let p = if args.bool_or("unpack_pivots", true)? {
        let perm = perm_from_pivots(cx, &m, rows, pivots)?;
        permutation_matrix(cx, &m, perm)?
    } else {
        empty(cx)
    };
    Ok(Imported::Tuple(vec![Imported::Tensor(p), Imported::Tensor(lower), Imported::Tensor(upper)]))
}

/// `linalg_lu_solve(LU, pivots, B, *, left, adjoint)`: `A X = B` from `A`'s factorization (`X A =
/// B` when not `left`, with `A^T` for `adjoint`; real matrices only, so the adjoint is the
/// transpose).
pub(super) fn lu_solve(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (lu, pivots, rhs) = (args.tensor("LU")?, args.tensor("pivots")?, args.tensor("B")?);
    let left = args.bool_or("left", true)?;
    let adjoint = args.bool_or("adjoint", false)?;
    // X A = B is A^T X^T = B^T: the other of the two systems, on transposed sides.
    let rhs = if left { rhs } else { transposed(cx, rhs)? };
    let transpose_a = adjoint == left;
    let (lu, rhs, m) = broadcast_system(cx, lu, rhs, "linalg.lu_solve")?;
    let pivot_shape: Shape = m.shape(&[m.n]);
    let pivots = cx.broadcast_to(pivots, &pivot_shape)?;
    let perm = perm_from_pivots(cx, &m, m.n, pivots)?;
    let solution = if !transpose_a {
        // A = P^T L U: X = U^-1 L^-1 (P B).
        let permuted = pick_rows(cx, &m, rhs, perm)?;
        let lower = triangular(cx, &m, lu, permuted, false, true)?;
        triangular(cx, &m, lu, lower, true, false)?
    } else {
        // A^T = U^T L^T P: X = P^T L^-T U^-T B.
        let lu_t = transposed(cx, lu)?;
        let first = triangular(cx, &m, lu_t, rhs, false, false)?;
        let second = triangular(cx, &m, lu_t, first, true, true)?;
        let inverse = cx.b.argsort(perm, m.b() as i64, false);
        let inverse = cx.ok(inverse)?;
        pick_rows(cx, &m, second, inverse)?
    };
    tensor(if left { solution } else { transposed(cx, solution)? })
}

/// `cholesky_solve(self=B, input2=L, upper)`: `A X = B` for `A = L L^T` (`U^T U` when `upper`).
pub(super) fn cholesky_solve(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (rhs, factor) = (args.tensor("self")?, args.tensor("input2")?);
    let upper = args.bool_or("upper", false)?;
    let (factor, rhs, m) = broadcast_system(cx, factor, rhs, "cholesky_solve")?;
    tensor(solve_with_factor(cx, &m, factor, rhs, upper)?)
}

/// `A^-1 B` with `A = L L^T` (or `U^T U`): two triangular solves.
fn solve_with_factor(cx: &mut Cx<'_>, m: &Square, factor: ValueId, rhs: ValueId, upper: bool) -> Result<ValueId> {
    let factor_t = transposed(cx, factor)?;
    if upper {
        let first = triangular(cx, m, factor_t, rhs, false, false)?;
        triangular(cx, m, factor, first, true, false)
    } else {
        let first = triangular(cx, m, factor, rhs, false, false)?;
        triangular(cx, m, factor_t, first, true, false)
    }
}

/// `cholesky_inverse(self=L, upper)`: `(L L^T)^-1` (or `(U^T U)^-1`).
pub(super) fn cholesky_inverse(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let factor = args.tensor("self")?;
    let upper = args.bool_or("upper", false)?;
    let m = square(cx, factor, "cholesky_inverse")?;
    let eye = identity(cx, &m)?;
    tensor(solve_with_factor(cx, &m, factor, eye, upper)?)
}
