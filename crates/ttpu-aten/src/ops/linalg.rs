//! Dense linear algebra on batches of small matrices: LU with partial pivoting (`det`, `slogdet`,
//! `inv`, `solve`), Cholesky and triangular solves.
//!
//! The IR has no loops, so each factorization is unrolled over the matrix size, which must be
//! static and at most [`MAX_N`]; batch dims may be anything. Every step works on whole
//! `[batch.., n, n]` tensors with selects, so a step costs a few dozen IR ops. The algorithms are
//! LAPACK's unblocked ones (`getf2`, `potf2`, column-oriented `trsm`), with the same pivot choice
//! (the first largest magnitude) and the same treatment of zero pivots and failed factorizations.
//! Row exchanges pick rows through the integer bits of the elements, so they move every value
//! exactly (NaN payloads, `-0.0` and infinities too).
//!
//! Which matrix is factored follows PyTorch, since the `LU`, `pivots` and `info` it returns
//! depend on it: `det` and `slogdet` factor `A^T` for a contiguous real `A` (LAPACK wants
//! column-major storage, and `det(A^T) = det(A)`), which every value an export holds is; `solve`
//! and `inv` factor `A`.

use ttpu_ir::{BinaryOp, CompareDirection, DType, Dim, ReduceKind, Scalar, Shape, TensorType, UnaryOp, ValueId};

use super::elementwise::{same_width_int, tensor};
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// The largest matrix size unrolled. Each column of a factorization adds a few dozen IR ops over
/// the whole batch (and its substitutions as many again), so graphs and compile times grow with
/// `n`: a 64x64 `det`, `inv` and `solve` together are about 20,000 IR ops, optimized and compiled
/// in under a minute by a debug build, where 128x128 takes minutes and gigabytes. Models solve
/// small systems; larger ones are refused rather than left to compile for that long.
pub(crate) const MAX_N: i64 = 64;

/// A batch of square matrices: `[batch.., n, n]`.
#[derive(Clone)]
pub(super) struct Square {
    pub(super) batch: Vec<Dim>,
    pub(super) n: i64,
    pub(super) dtype: DType,
}

impl Square {
    /// `[batch.., tail..]`.
    pub(super) fn shape(&self, tail: &[i64]) -> Shape {
        self.batch.iter().cloned().chain(tail.iter().map(|&size| Dim::Static(size))).collect()
    }

    /// The number of batch dims.
    pub(super) fn b(&self) -> usize {
        self.batch.len()
    }
}

/// Checks `a` is a batch of static square float matrices of at most [`MAX_N`] rows.
pub(super) fn square(cx: &Cx<'_>, a: ValueId, what: &str) -> Result<Square> {
    let (m, rows, cols) = matrices(cx, a, what)?;
    if rows != cols {
        return Err(
            cx.bad(format!("{what}: A must be batches of square matrices, but they are {rows} by {cols} matrices"))
        );
    }
    Ok(m)
}

/// Checks `a` is a batch of static float matrices of at most [`MAX_N`] rows and columns; gives
/// the batch (its `n` is the rows) with the rows and columns.
pub(super) fn matrices(cx: &Cx<'_>, a: ValueId, what: &str) -> Result<(Square, i64, i64)> {
    let ty = cx.ty(a);
    if ty.rank() < 2 {
        return Err(cx.bad(format!("{what}: The input tensor A must have at least 2 dimensions, found {ty}")));
    }
    if !matches!(ty.dtype, DType::F32 | DType::F64) {
        return Err(cx.bad(format!(
            "{what}: expected a float32 or float64 tensor (PyTorch's CPU linear algebra has no other real \
             dtypes), found {ty}"
        )));
    }
    let rank = ty.rank();
    let (rows, cols) = match (&ty.shape[rank - 2], &ty.shape[rank - 1]) {
        (Dim::Static(rows), Dim::Static(cols)) => (*rows, *cols),
        _ => {
            return Err(
                cx.bad(format!("{what}: the matrix size must be static to unroll the factorization, found {ty}"))
            );
        }
    };
    if rows > MAX_N || cols > MAX_N {
        return Err(cx.bad(format!(
            "{what}: {rows}x{cols} matrices exceed the {MAX_N}x{MAX_N} that ttpu unrolls (the factorization \
             becomes IR ops per column, so graph size and compile time grow with the size)"
        )));
    }
    Ok((Square { batch: ty.shape.dims()[..rank - 2].to_vec(), n: rows, dtype: ty.dtype }, rows, cols))
}

/// An `i64` iota of `shape` along `dim`.
pub(super) fn iota(cx: &mut Cx<'_>, shape: Shape, dim: usize) -> Result<ValueId> {
    let built = cx.b.iota(TensorType::new(DType::I64, shape), dim as i64);
    cx.ok(built)
}

/// `value` (`[batch.., tail..]`) broadcast to `[batch.., target..]`, its tail dims going to
/// `positions` of the target's tail.
pub(super) fn expand(
    cx: &mut Cx<'_>,
    m: &Square,
    value: ValueId,
    positions: &[usize],
    target: &[i64],
) -> Result<ValueId> {
    let b = m.b();
    let dims: Vec<i64> = (0..b).chain(positions.iter().map(|&position| b + position)).map(|dim| dim as i64).collect();
    cx.broadcast_in_dim(value, &dims, m.shape(target))
}

/// `value` compared with the constant `index` of its dtype.
pub(super) fn compare_to(cx: &mut Cx<'_>, direction: CompareDirection, value: ValueId, index: i64) -> Result<ValueId> {
    let constant = cx.splat_like(value, Scalar::Int(index))?;
    cx.compare(direction, value, constant)
}

pub(super) fn and(cx: &mut Cx<'_>, lhs: ValueId, rhs: ValueId) -> Result<ValueId> {
    cx.binary(BinaryOp::And, lhs, rhs)
}

/// Rows `index[.., r]` of `matrix` (`[batch.., n, k]`) as `[batch.., r, k]`: the chosen row's bits
/// summed with zeros, so exact for every value.
pub(super) fn pick_rows(cx: &mut Cx<'_>, m: &Square, matrix: ValueId, index: ValueId) -> Result<ValueId> {
    let b = m.b();
    let dtype = cx.dtype(matrix);
    let bits = if dtype.is_float() { cx.bitcast_convert(matrix, same_width_int(dtype))? } else { matrix };
    let k = cx.static_dim(matrix, b + 1, "the columns")?;
    let r = cx.static_dim(index, b, "the rows picked")?;
    let n = cx.static_dim(matrix, b, "the rows")?;
    let spread = expand(cx, m, bits, &[1, 2], &[r, n, k])?;
    let wanted = expand(cx, m, index, &[0], &[r, n, k])?;
    let rows = iota(cx, m.shape(&[r, n, k]), b + 1)?;
    let hit = cx.compare(CompareDirection::Eq, wanted, rows)?;
    let zero = cx.splat_like(spread, Scalar::Int(0))?;
    let chosen = cx.select(hit, spread, zero)?;
    let picked = cx.reduce(chosen, ReduceKind::Sum, &[b + 1])?;
    if dtype.is_float() { cx.bitcast_convert(picked, dtype) } else { Ok(picked) }
}

/// Row `i` of `matrix` (`[batch.., n, k]`) as `[batch.., 1, k]`.
pub(super) fn row(cx: &mut Cx<'_>, m: &Square, matrix: ValueId, i: i64) -> Result<ValueId> {
    cx.slice_dim(matrix, m.b(), i, i + 1, 1)
}

/// Column `j` of `matrix` (`[batch.., n, k]`) as `[batch.., n, 1]`.
pub(super) fn column(cx: &mut Cx<'_>, m: &Square, matrix: ValueId, j: i64) -> Result<ValueId> {
    cx.slice_dim(matrix, m.b() + 1, j, j + 1, 1)
}

/// Element `(i, j)` of each matrix as `[batch..]`.
pub(super) fn element(cx: &mut Cx<'_>, m: &Square, matrix: ValueId, i: i64, j: i64) -> Result<ValueId> {
    let row = row(cx, m, matrix, i)?;
    let value = column(cx, m, row, j)?;
    cx.reshape(value, m.shape(&[]))
}

/// The diagonal of each matrix as `[batch.., n]` (exactly, through the bits).
pub(super) fn diagonal(cx: &mut Cx<'_>, m: &Square, matrix: ValueId) -> Result<ValueId> {
    let b = m.b();
    let bits = cx.bitcast_convert(matrix, same_width_int(m.dtype))?;
    let rows = iota(cx, m.shape(&[m.n, m.n]), b)?;
    let cols = iota(cx, m.shape(&[m.n, m.n]), b + 1)?;
    let on = cx.compare(CompareDirection::Eq, rows, cols)?;
    let zero = cx.splat_like(bits, Scalar::Int(0))?;
    let kept = cx.select(on, bits, zero)?;
    let summed = cx.reduce(kept, ReduceKind::Sum, &[b + 1])?;
    cx.bitcast_convert(summed, m.dtype)
}

/// `getf2`'s factorization `P A = L U` of each matrix (`[batch.., r, c]`, square or not): `L`
/// unit lower (below the diagonal of `lu`, `r x min(r, c)`), `U` upper (`min(r, c) x c`).
pub(super) struct Lu {
    /// `L` and `U` in one matrix.
    pub(super) lu: ValueId,
    /// LAPACK's pivots: row `i` was exchanged with row `pivots[i]` (0-based, `i64`,
    /// `[batch.., min(r, c)]`).
    pub(super) pivots: ValueId,
    /// Where each row of `P A` came from (`i64`, `[batch.., r]`).
    pub(super) perm: ValueId,
    /// Whether `P` is an odd permutation (`bool`, `[batch..]`).
    pub(super) odd: ValueId,
    /// 0, or the 1-based index of the first zero pivot (`i32`, `[batch..]`).
    pub(super) info: ValueId,
}

/// LU with partial pivoting, unrolled over the columns as LAPACK's `getf2`: the pivot is the first
/// largest magnitude at or below the diagonal; a zero pivot leaves its column as it is and records
/// `info`; the multipliers are scaled by the pivot's reciprocal, as LAPACK does. A matrix of `r`
/// rows and `c` columns takes `min(r, c)` steps.
pub(super) fn lu_factor(cx: &mut Cx<'_>, m: &Square, a: ValueId) -> Result<Lu> {
    let b = m.b();
    let n = cx.static_dim(a, b, "the rows")?;
    let cols = cx.static_dim(a, b + 1, "the columns")?;
    let full = [n, cols];
    let rows2 = iota(cx, m.shape(&full), b)?;
    let cols2 = iota(cx, m.shape(&full), b + 1)?;
    let rows1 = iota(cx, m.shape(&[n]), b)?;
    let mut a = a;
    let mut perm = iota(cx, m.shape(&[n, 1]), b)?;
    let mut odd = cx.splat(DType::Bool, Scalar::Bool(false), &m.shape(&[]))?;
    let mut info = cx.splat(DType::I32, Scalar::Int(0), &m.shape(&[]))?;
    let steps = n.min(cols);
    let mut pivots = Vec::with_capacity(steps as usize);
    let minus_one = cx.splat(m.dtype, Scalar::Int(-1), &m.shape(&[n]))?;
    let past_end = cx.splat(DType::I64, Scalar::Int(n), &m.shape(&[n]))?;
    for j in 0..steps {
        // The pivot row: the first largest |a[i, j]| with i >= j (past the end only with NaNs,
        // which then stay on the diagonal).
        let col = column(cx, m, a, j)?;
        let col = cx.reshape(col, m.shape(&[n]))?;
        let magnitude = cx.unary(UnaryOp::Abs, col)?;
        let candidate = compare_to(cx, CompareDirection::Ge, rows1, j)?;
        let magnitude = cx.select(candidate, magnitude, minus_one)?;
        let largest = cx.reduce(magnitude, ReduceKind::Max, &[b])?;
        let largest = expand(cx, m, largest, &[], &[n])?;
        let hit = cx.compare(CompareDirection::Eq, magnitude, largest)?;
        let position = cx.select(hit, rows1, past_end)?;
        let p = cx.reduce(position, ReduceKind::Min, &[b])?;
        let none = compare_to(cx, CompareDirection::Eq, p, n)?;
        let here = cx.splat_like(p, Scalar::Int(j))?;
        let p = cx.select(none, here, p)?;
        let p_column = cx.reshape(p, m.shape(&[1]))?;
        pivots.push(p_column);
        let moved = compare_to(cx, CompareDirection::Ne, p, j)?;
        odd = cx.binary(BinaryOp::Xor, odd, moved)?;
        // Exchange rows j and p of the matrix and of the permutation.
        let p_wide = expand(cx, m, p, &[], &full)?;
        let at_j = compare_to(cx, CompareDirection::Eq, rows2, j)?;
        let at_p = cx.compare(CompareDirection::Eq, rows2, p_wide)?;
        let row_p = pick_rows(cx, m, a, p_column)?;
        let row_j = row(cx, m, a, j)?;
        let row_p_wide = expand(cx, m, row_p, &[0, 1], &full)?;
        let row_j_wide = expand(cx, m, row_j, &[0, 1], &full)?;
        let swapped = cx.select(at_p, row_j_wide, a)?;
        a = cx.select(at_j, row_p_wide, swapped)?;
        let perm_p = pick_rows(cx, m, perm, p_column)?;
        let perm_j = row(cx, m, perm, j)?;
        let rows_perm = iota(cx, m.shape(&[n, 1]), b)?;
        let at_j1 = compare_to(cx, CompareDirection::Eq, rows_perm, j)?;
        let p_perm = expand(cx, m, p, &[], &[n, 1])?;
        let at_p1 = cx.compare(CompareDirection::Eq, rows_perm, p_perm)?;
        let perm_p = expand(cx, m, perm_p, &[0, 1], &[n, 1])?;
        let perm_j = expand(cx, m, perm_j, &[0, 1], &[n, 1])?;
        let swapped = cx.select(at_p1, perm_j, perm)?;
        perm = cx.select(at_j1, perm_p, swapped)?;
        // A zero pivot: record it and leave the (all-zero) column unscaled.
        let pivot = element(cx, m, a, j, j)?;
        let zero = cx.splat_like(pivot, Scalar::Int(0))?;
        let singular = cx.compare(CompareDirection::Eq, pivot, zero)?;
        let first = compare_to(cx, CompareDirection::Eq, info, 0)?;
        let first = and(cx, first, singular)?;
        let index = cx.splat_like(info, Scalar::Int(j + 1))?;
        info = cx.select(first, index, info)?;
        let one = cx.splat_like(pivot, Scalar::Int(1))?;
        let reciprocal = cx.binary(BinaryOp::Divide, one, pivot)?;
        let reciprocal = cx.select(singular, zero, reciprocal)?;
        // Multipliers below the pivot, and the rank-1 update of the trailing matrix.
        let col = column(cx, m, a, j)?;
        let reciprocal = expand(cx, m, reciprocal, &[], &[n, 1])?;
        let multipliers = cx.binary(BinaryOp::Multiply, col, reciprocal)?;
        let u = row(cx, m, a, j)?;
        let multipliers_wide = expand(cx, m, multipliers, &[0, 1], &full)?;
        let u_wide = expand(cx, m, u, &[0, 1], &full)?;
        let outer = cx.binary(BinaryOp::Multiply, multipliers_wide, u_wide)?;
        let updated = cx.binary(BinaryOp::Subtract, a, outer)?;
        let below = compare_to(cx, CompareDirection::Gt, rows2, j)?;
        let right = compare_to(cx, CompareDirection::Gt, cols2, j)?;
        let trailing = and(cx, below, right)?;
        a = cx.select(trailing, updated, a)?;
        let on_column = compare_to(cx, CompareDirection::Eq, cols2, j)?;
        let under = and(cx, below, on_column)?;
        a = cx.select(under, multipliers_wide, a)?;
    }
    let pivots = if pivots.is_empty() { iota(cx, m.shape(&[0]), b)? } else { cx.concatenate(&pivots, b as i64)? };
    let perm = cx.reshape(perm, m.shape(&[n]))?;
    Ok(Lu { lu: a, pivots, perm, odd, info })
}

/// `A^T` of each matrix.
pub(super) fn transposed(cx: &mut Cx<'_>, value: ValueId) -> Result<ValueId> {
    let rank = cx.rank(value);
    let mut permutation: Vec<i64> = (0..rank as i64).collect();
    permutation.swap(rank - 2, rank - 1);
    cx.transpose(value, &permutation)
}

/// Solves `A X = B` for `B` of `[batch.., n, k]`, given the factorization `P A^T = L U`:
/// `A = U^T L^T P`, so `U^T y = B` (forward), `L^T z = y` (backward, unit diagonal),
/// and `X = P^T z`. Each substitution is column-oriented, as LAPACK's `trsm`.
fn lu_solve_transposed(cx: &mut Cx<'_>, m: &Square, lu: &Lu, rhs: ValueId) -> Result<ValueId> {
    let (b, n) = (m.b(), m.n);
    let k = cx.static_dim(rhs, b + 1, "the right-hand sides")?;
    let rows = iota(cx, m.shape(&[n, k]), b)?;
    let mut x = rhs;
    // U^T is lower triangular: U^T[r, i] = U[i, r], row i of `lu` right of the diagonal.
    for i in 0..n {
        let diagonal = element(cx, m, lu.lu, i, i)?;
        let diagonal = expand(cx, m, diagonal, &[], &[1, k])?;
        let xi = row(cx, m, x, i)?;
        let xi = cx.binary(BinaryOp::Divide, xi, diagonal)?;
        let xi_wide = expand(cx, m, xi, &[0, 1], &[n, k])?;
        let at_i = compare_to(cx, CompareDirection::Eq, rows, i)?;
        x = cx.select(at_i, xi_wide, x)?;
        x = eliminate(cx, m, lu.lu, x, xi_wide, rows, i, CompareDirection::Gt)?;
    }
    // L^T is unit upper triangular: L^T[r, i] = L[i, r], row i of `lu` left of the diagonal.
    for i in (0..n).rev() {
        let xi = row(cx, m, x, i)?;
        let xi_wide = expand(cx, m, xi, &[0, 1], &[n, k])?;
        x = eliminate(cx, m, lu.lu, x, xi_wide, rows, i, CompareDirection::Lt)?;
    }
    // X[perm[r]] = z[r]: the inverse permutation picks the rows.
    let inverse = cx.b.argsort(lu.perm, b as i64, false);
    let inverse = cx.ok(inverse)?;
    pick_rows(cx, m, x, inverse)
}

/// `x[r] -= lu[i, r] * x[i]` for the rows `r` on `side` of `i`.
#[allow(clippy::too_many_arguments)]
fn eliminate(
    cx: &mut Cx<'_>,
    m: &Square,
    lu: ValueId,
    x: ValueId,
    xi_wide: ValueId,
    rows: ValueId,
    i: i64,
    side: CompareDirection,
) -> Result<ValueId> {
    let (b, n) = (m.b(), m.n);
    let k = cx.static_dim(x, b + 1, "the right-hand sides")?;
    let coefficients = row(cx, m, lu, i)?;
    let coefficients = cx.reshape(coefficients, m.shape(&[n]))?;
    let coefficients = expand(cx, m, coefficients, &[0], &[n, k])?;
    let product = cx.binary(BinaryOp::Multiply, coefficients, xi_wide)?;
    let updated = cx.binary(BinaryOp::Subtract, x, product)?;
    let affected = compare_to(cx, side, rows, i)?;
    cx.select(affected, updated, x)
}

/// The pivots as PyTorch returns them: 1-based `i32`.
pub(super) fn torch_pivots(cx: &mut Cx<'_>, pivots: ValueId) -> Result<ValueId> {
    let one_based = cx.binary_scalar(BinaryOp::Add, pivots, Scalar::Int(1))?;
    cx.convert(one_based, DType::I32)
}

/// Solves `A X = B` for `B` of `[batch.., n, k]` from `P A = L U`: `X = U^-1 L^-1 P B`.
pub(super) fn lu_solve(cx: &mut Cx<'_>, m: &Square, lu: &Lu, rhs: ValueId) -> Result<ValueId> {
    let permuted = pick_rows(cx, m, rhs, lu.perm)?;
    let lower = triangular(cx, m, lu.lu, permuted, false, true)?;
    triangular(cx, m, lu.lu, lower, true, false)
}

/// `prod(diag(U))`, negated for an odd permutation.
fn determinant(cx: &mut Cx<'_>, m: &Square, lu: &Lu) -> Result<ValueId> {
    let diagonal = diagonal(cx, m, lu.lu)?;
    let product = cx.reduce(diagonal, ReduceKind::Product, &[m.b()])?;
    let negated = cx.unary(UnaryOp::Negate, product)?;
    cx.select(lu.odd, negated, product)
}

/// `_linalg_det(A) -> (det, LU, pivots)`.
pub(super) fn det(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let a = args.tensor("A")?;
    let m = square(cx, a, "linalg.det")?;
    let a_t = transposed(cx, a)?;
    let lu = lu_factor(cx, &m, a_t)?;
    let det = determinant(cx, &m, &lu)?;
    let pivots = torch_pivots(cx, lu.pivots)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(det), Imported::Tensor(lu.lu), Imported::Tensor(pivots)]))
}

/// `_linalg_slogdet(A) -> (sign, logabsdet, LU, pivots)`: the sign is the product of the signs of
/// `U`'s diagonal (0 for a singular matrix, whose `logabsdet` is `-inf`), negated for an odd
/// permutation; `logabsdet` sums `log |u_ii|`.
pub(super) fn slogdet(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let a = args.tensor("A")?;
    let m = square(cx, a, "linalg.slogdet")?;
    let a_t = transposed(cx, a)?;
    let lu = lu_factor(cx, &m, a_t)?;
    let diagonal = diagonal(cx, &m, lu.lu)?;
    // sign(x) as (x > 0) - (x < 0), PyTorch's `sgn` of a real number.
    let zero = cx.splat_like(diagonal, Scalar::Int(0))?;
    let positive = cx.compare(CompareDirection::Gt, diagonal, zero)?;
    let negative = cx.compare(CompareDirection::Lt, diagonal, zero)?;
    let positive = cx.convert(positive, m.dtype)?;
    let negative = cx.convert(negative, m.dtype)?;
    let signs = cx.binary(BinaryOp::Subtract, positive, negative)?;
    let sign = cx.reduce(signs, ReduceKind::Product, &[m.b()])?;
    let flipped = cx.unary(UnaryOp::Negate, sign)?;
    let sign = cx.select(lu.odd, flipped, sign)?;
    let magnitude = cx.unary(UnaryOp::Abs, diagonal)?;
    let logs = cx.unary(UnaryOp::Log, magnitude)?;
    let logabsdet = cx.reduce(logs, ReduceKind::Sum, &[m.b()])?;
    let pivots = torch_pivots(cx, lu.pivots)?;
    Ok(Imported::Tuple(vec![
        Imported::Tensor(sign),
        Imported::Tensor(logabsdet),
        Imported::Tensor(lu.lu),
        Imported::Tensor(pivots),
    ]))
}

/// `linalg_inv_ex(A, check_errors) -> (inverse, info)`: PyTorch solves `A X = I` from the
/// factors of `A`. `check_errors`
/// raises on a singular matrix at run time; that is refused, since the graph cannot raise.
pub(super) fn inv_ex(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let a = args.tensor("A")?;
    refuse_check_errors(cx, args)?;
    let m = square(cx, a, "linalg.inv")?;
    let lu = lu_factor(cx, &m, a)?;
    let identity = identity(cx, &m)?;
    let inverse = lu_solve(cx, &m, &lu, identity)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(inverse), Imported::Tensor(lu.info)]))
}

/// `check_errors=True` raises at run time on a failed factorization: the graph has no way to.
pub(super) fn refuse_check_errors(cx: &Cx<'_>, args: &Args) -> Result<()> {
    if args.bool_or("check_errors", false)? {
        return Err(cx.bad(
            "check_errors=True raises when a matrix is singular or not positive-definite, a run-time error the \
             compiled graph cannot raise; export with check_errors=False and read `info`",
        ));
    }
    Ok(())
}

/// The identity matrices of `m`'s batch and size.
pub(super) fn identity(cx: &mut Cx<'_>, m: &Square) -> Result<ValueId> {
    let b = m.b();
    let rows = iota(cx, m.shape(&[m.n, m.n]), b)?;
    let cols = iota(cx, m.shape(&[m.n, m.n]), b + 1)?;
    let on = cx.compare(CompareDirection::Eq, rows, cols)?;
    cx.convert(on, m.dtype)
}

/// `_linalg_solve_ex(A, B, left, check_errors) -> (result, LU, pivots, info)`. `B` is a batch of
/// vectors when it has one dim, or one dim less than `A` with `A`'s leading sizes (PyTorch's
/// rule), else of matrices; batch dims broadcast. `left=False` solves `X A = B`.
pub(super) fn solve_ex(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (a, rhs) = (args.tensor("A")?, args.tensor("B")?);
    let left = args.bool_or("left", true)?;
    refuse_check_errors(cx, args)?;
    let m = square(cx, a, "linalg.solve")?;
    let (a_ty, b_ty) = (cx.ty(a), cx.ty(rhs));
    if b_ty.dtype != m.dtype {
        return Err(cx.bad(format!("linalg.solve: Expected A and B to have the same dtype, found {a_ty} and {b_ty}")));
    }
    let a_dims = a_ty.shape.dims();
    let vector =
        b_ty.rank() == 1 || (b_ty.rank() + 1 == a_ty.rank() && b_ty.shape.dims() == &a_dims[..a_dims.len() - 1]);
    if vector && !left {
        return Err(cx.bad(
            "linalg.solve: Vector broadcasting of the left hand side is not supported for left=False. In this \
             case linalg.solve is equivalent to B / A.squeeze(-1)",
        ));
    }
    let n = m.n;
    // As `[batch.., n, k]` with the system's rows second to last.
    let rhs = if vector {
        cx.reshape(rhs, b_ty.shape.dims().iter().cloned().chain([Dim::Static(1)]).collect())?
    } else {
        rhs
    };
    let rhs = if left { rhs } else { transposed(cx, rhs)? };
    let rhs_ty = cx.ty(rhs);
    if rhs_ty.rank() < 2 || rhs_ty.shape[rhs_ty.rank() - 2] != Dim::Static(n) {
        return Err(cx.bad(format!(
            "linalg.solve: Incompatible shapes of A and B for the equation {} ({a_ty} and {b_ty})",
            if left { "AX = B" } else { "XA = B" }
        )));
    }
    // Broadcast the batch dims of A and B.
    let a_batch: Shape = m.batch.iter().cloned().collect();
    let b_batch: Shape = rhs_ty.shape.dims()[..rhs_ty.rank() - 2].iter().cloned().collect();
    let batch = cx.broadcast_shape(&[a_batch, b_batch])?;
    let k = cx.static_dim(rhs, rhs_ty.rank() - 1, "the right-hand sides")?;
    let full = |tail: &[i64]| -> Shape {
        batch.dims().iter().cloned().chain(tail.iter().map(|&size| Dim::Static(size))).collect()
    };
    let a = cx.broadcast_to(a, &full(&[n, n]))?;
    let rhs = cx.broadcast_to(rhs, &full(&[n, k]))?;
    let m = Square { batch: batch.dims().to_vec(), n, dtype: m.dtype };
    // PyTorch factors A itself here (P A = L U) whichever side. left: X = U^-1 L^-1 P B. right:
    // X A = B is A^T X^T = B^T, with A^T = U^T L^T P.
    let lu = lu_factor(cx, &m, a)?;
    let solution = if left { lu_solve(cx, &m, &lu, rhs)? } else { lu_solve_transposed(cx, &m, &lu, rhs)? };
    let solution = if vector {
        let shape = cx.shape(solution);
        cx.reshape(solution, shape.dims()[..shape.rank() - 1].iter().cloned().collect())?
    } else if left {
        solution
    } else {
        transposed(cx, solution)?
    };
    let pivots = torch_pivots(cx, lu.pivots)?;
    Ok(Imported::Tuple(vec![
        Imported::Tensor(solution),
        Imported::Tensor(lu.lu),
        Imported::Tensor(pivots),
        Imported::Tensor(lu.info),
    ]))
}

/// `linalg_solve_ex(A, B, left, check_errors) -> (result, info)`: `_linalg_solve_ex` without the
/// factors (the form an export keeps when it does not decompose it).
pub(super) fn solve_ex_pair(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let Imported::Tuple(mut results) = solve_ex(cx, args)? else { unreachable!("solve_ex returns a tuple") };
    let info = results.swap_remove(3);
    results.truncate(1);
    results.push(info);
    Ok(Imported::Tuple(results))
}

/// `linalg_cholesky_ex(A, upper, check_errors) -> (L, info)`, as LAPACK's unblocked `potf2`:
/// column `j` takes `d = a_jj - sum_k l_jk^2`; `d <= 0` or NaN stops with `info = j + 1`, leaving
/// `d` on the diagonal and the rest of the lower triangle as `A` had it (what MKL returns for the
/// matrix sizes PyTorch's CPU build factors unblocked). Only the lower triangle of `A` is read
/// (the upper one for `upper=True`, which returns `U = L^T`).
pub(super) fn cholesky_ex(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let a = args.tensor("self")?;
    let upper = args.bool_or("upper", false)?;
    refuse_check_errors(cx, args)?;
    let m = square(cx, a, "linalg.cholesky")?;
    let (b, n) = (m.b(), m.n);
    let square = [n, n];
    let original = if upper { transposed(cx, a)? } else { a };
    let rows = iota(cx, m.shape(&square), b)?;
    let cols = iota(cx, m.shape(&square), b + 1)?;
    let mut l = original;
    let mut info = cx.splat(DType::I32, Scalar::Int(0), &m.shape(&[]))?;
    // The Schur-complement diagonal where each matrix failed (kept once `info` is set).
    let mut failed_diagonal = cx.splat(m.dtype, Scalar::Int(0), &m.shape(&[]))?;
    for j in 0..n {
        // Right-looking: `l[j, j]` already holds a_jj - sum_k l_jk^2.
        let d = element(cx, &m, l, j, j)?;
        let zero = cx.splat_like(d, Scalar::Int(0))?;
        let positive = cx.compare(CompareDirection::Gt, d, zero)?;
        let fails = cx.unary(UnaryOp::Not, positive)?;
        let first = compare_to(cx, CompareDirection::Eq, info, 0)?;
        let first = and(cx, first, fails)?;
        let index = cx.splat_like(info, Scalar::Int(j + 1))?;
        info = cx.select(first, index, info)?;
        failed_diagonal = cx.select(first, d, failed_diagonal)?;
        let root = cx.unary(UnaryOp::Sqrt, d)?;
        let root_column = expand(cx, &m, root, &[], &[n, 1])?;
        let col = column(cx, &m, l, j)?;
        let scaled = cx.binary(BinaryOp::Divide, col, root_column)?;
        let scaled_rows = expand(cx, &m, scaled, &[0, 1], &square)?;
        let scaled_t = cx.reshape(scaled, m.shape(&[n]))?;
        let scaled_cols = expand(cx, &m, scaled_t, &[1], &square)?;
        let outer = cx.binary(BinaryOp::Multiply, scaled_rows, scaled_cols)?;
        let updated = cx.binary(BinaryOp::Subtract, l, outer)?;
        let below = compare_to(cx, CompareDirection::Gt, rows, j)?;
        let right = compare_to(cx, CompareDirection::Gt, cols, j)?;
        let trailing = and(cx, below, right)?;
        l = cx.select(trailing, updated, l)?;
        let on_column = compare_to(cx, CompareDirection::Eq, cols, j)?;
        let under = and(cx, below, on_column)?;
        l = cx.select(under, scaled_rows, l)?;
        let at_diagonal = compare_to(cx, CompareDirection::Eq, rows, j)?;
        let at_diagonal = and(cx, at_diagonal, on_column)?;
        let root_wide = expand(cx, &m, root, &[], &square)?;
        l = cx.select(at_diagonal, root_wide, l)?;
    }
    // Where a matrix failed at column f: columns before f are final, its diagonal holds the
    // failing d, and everything from column f on is A's own lower triangle.
    let info_wide = expand(cx, &m, info, &[], &square)?;
    let info_wide = cx.convert(info_wide, DType::I64)?;
    let failed = compare_to(cx, CompareDirection::Gt, info_wide, 0)?;
    let failed_column = cx.binary_scalar(BinaryOp::Subtract, info_wide, Scalar::Int(1))?;
    let late = cx.compare(CompareDirection::Ge, cols, failed_column)?;
    let untouched = and(cx, failed, late)?;
    l = cx.select(untouched, original, l)?;
    let on_failed_column = cx.compare(CompareDirection::Eq, cols, failed_column)?;
    let on_diagonal = cx.compare(CompareDirection::Eq, rows, cols)?;
    let failed_spot = and(cx, failed, on_failed_column)?;
    let failed_spot = and(cx, failed_spot, on_diagonal)?;
    let failed_diagonal = expand(cx, &m, failed_diagonal, &[], &square)?;
    l = cx.select(failed_spot, failed_diagonal, l)?;
    let lower = cx.compare(CompareDirection::Ge, rows, cols)?;
    let zeros = cx.splat_like(l, Scalar::Int(0))?;
    l = cx.select(lower, l, zeros)?;
    let l = if upper { transposed(cx, l)? } else { l };
    Ok(Imported::Tuple(vec![Imported::Tensor(l), Imported::Tensor(info)]))
}

/// Solves `T X = B` with `T` triangular (only its `upper` or lower triangle read; a unit diagonal
/// when `unitriangular`), column-oriented as LAPACK's `trsm`. `t` is `[batch.., n, n]`, `rhs`
/// `[batch.., n, k]` of the same batch.
pub(super) fn triangular(
    cx: &mut Cx<'_>,
    m: &Square,
    t: ValueId,
    rhs: ValueId,
    upper: bool,
    unit: bool,
) -> Result<ValueId> {
    let (b, n) = (m.b(), m.n);
    let k = cx.static_dim(rhs, b + 1, "the right-hand sides")?;
    let rows = iota(cx, m.shape(&[n, k]), b)?;
    // Columns of T as rows of T^T, so `eliminate` reads `t_t[i, r] = T[r, i]`.
    let t_t = transposed(cx, t)?;
    let order: Vec<i64> = if upper { (0..n).rev().collect() } else { (0..n).collect() };
    let side = if upper { CompareDirection::Lt } else { CompareDirection::Gt };
    let mut x = rhs;
    for i in order {
        let xi = row(cx, m, x, i)?;
        let xi = if unit {
            xi
        } else {
            let diagonal = element(cx, m, t, i, i)?;
            let diagonal = expand(cx, m, diagonal, &[], &[1, k])?;
            cx.binary(BinaryOp::Divide, xi, diagonal)?
        };
        let xi_wide = expand(cx, m, xi, &[0, 1], &[n, k])?;
        let at_i = compare_to(cx, CompareDirection::Eq, rows, i)?;
        x = cx.select(at_i, xi_wide, x)?;
        x = eliminate(cx, m, t_t, x, xi_wide, rows, i, side)?;
    }
    Ok(x)
}

/// `A` and `B` broadcast to one batch: `([batch.., n, n], [batch.., n, k], square)`.
pub(super) fn broadcast_system(
    cx: &mut Cx<'_>,
    a: ValueId,
    rhs: ValueId,
    what: &str,
) -> Result<(ValueId, ValueId, Square)> {
    let m = square(cx, a, what)?;
    let (a_ty, b_ty) = (cx.ty(a), cx.ty(rhs));
    if b_ty.dtype != m.dtype {
        return Err(cx.bad(format!("{what}: Expected A and B to have the same dtype, found {a_ty} and {b_ty}")));
    }
    if b_ty.rank() < 2 || b_ty.shape[b_ty.rank() - 2] != Dim::Static(m.n) {
        return Err(
            cx.bad(format!("{what}: Incompatible shapes of A and B for the equation AX = B ({a_ty} and {b_ty})"))
        );
    }
    let a_batch: Shape = m.batch.iter().cloned().collect();
    let b_batch: Shape = b_ty.shape.dims()[..b_ty.rank() - 2].iter().cloned().collect();
    let batch = cx.broadcast_shape(&[a_batch, b_batch])?;
    let k = cx.static_dim(rhs, b_ty.rank() - 1, "the right-hand sides")?;
    let full = |tail: &[i64]| -> Shape {
        batch.dims().iter().cloned().chain(tail.iter().map(|&size| Dim::Static(size))).collect()
    };
    let a = cx.broadcast_to(a, &full(&[m.n, m.n]))?;
    let rhs = cx.broadcast_to(rhs, &full(&[m.n, k]))?;
    Ok((a, rhs, Square { batch: batch.dims().to_vec(), n: m.n, dtype: m.dtype }))
}

/// `triangular_solve(self=B, A, upper, transpose, unitriangular) -> (solution, cloned_coefficient)`:
/// solves `A X = B` (`A^T X = B` with `transpose`); the second result is `A` broadcast to the
/// batch, as PyTorch returns it.
pub(super) fn triangular_solve(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (rhs, a) = (args.tensor("self")?, args.tensor("A")?);
    let upper = args.bool_or("upper", true)?;
    let transpose = args.bool_or("transpose", false)?;
    let unit = args.bool_or("unitriangular", false)?;
    let (a, rhs, m) = broadcast_system(cx, a, rhs, "triangular_solve")?;
    // A^T of an upper triangle is lower.
    let (t, upper_t) = if transpose { (transposed(cx, a)?, !upper) } else { (a, upper) };
    let solution = triangular(cx, &m, t, rhs, upper_t, unit)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(solution), Imported::Tensor(a)]))
}

/// `linalg_solve_triangular(A, B, upper, left, unitriangular)`: `A X = B`, or `X A = B` when not
/// `left` (solved as `A^T X^T = B^T`).
pub(super) fn solve_triangular(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (a, rhs) = (args.tensor("self")?, args.tensor("B")?);
    if !args.given("upper") {
        return Err(cx.bad("linalg.solve_triangular: the keyword argument `upper` is required"));
    }
    let upper = args.bool_or("upper", false)?;
    let left = args.bool_or("left", true)?;
    let unit = args.bool_or("unitriangular", false)?;
    if left {
        let (a, rhs, m) = broadcast_system(cx, a, rhs, "linalg.solve_triangular")?;
        return tensor(triangular(cx, &m, a, rhs, upper, unit)?);
    }
    let a_t = transposed(cx, a)?;
    let rhs_t = transposed(cx, rhs)?;
    let (a_t, rhs_t, m) = broadcast_system(cx, a_t, rhs_t, "linalg.solve_triangular")?;
    let solution = triangular(cx, &m, a_t, rhs_t, !upper, unit)?;
    tensor(transposed(cx, solution)?)
}
