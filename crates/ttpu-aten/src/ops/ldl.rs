//! `linalg_ldl_factor_ex` and `linalg_ldl_solve`: the Bunch-Kaufman factorization `P A P^T = L D
//! L^T` of a symmetric matrix, as LAPACK's `sytrf` computes it for PyTorch (lower storage; `D` of
//! 1x1 and 2x2 blocks; the pivots 1-based, negative for a 2x2 block), and `sytrs`'s solve with it.
//!
//! Which pivot a column takes, and whether it starts a 2x2 block, depends on the values, so each
//! matrix of a batch steps through its own column index in one IR `while`, every column chosen,
//! swapped and eliminated through masks over the matrix (the index compared with an iota). The
//! pivot rule is `sytf2`'s: LAPACK's blocked `sytrf` chooses the same pivots (PyTorch's results
//! for matrices up to 100 rows match it exactly), and the arithmetic follows its order.

use ttpu_ir::{BinaryOp, CompareDirection, DType, Graph, ReduceKind, Scalar, TensorType, UnaryOp, ValueId};

use super::elementwise::tensor;
use super::linalg::{Square, broadcast_system, expand, iota, refuse_check_errors, square};
use super::loops::loop_graph;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// Bunch and Kaufman's `alpha = (1 + sqrt(17)) / 8`, which bounds the growth of the entries.
const ALPHA: f64 = 0.6403882032022076;

/// `while any(k < n)`: the loop runs until every matrix's column index has passed the last
/// column (`k` is `[batch..]`, `i64`; for the backward solve, `-1 < k`).
fn until_all_done(cx: &mut Cx<'_>, m: &Square, types: &[TensorType], descending: bool) -> Result<Graph> {
    let b = m.b();
    let n = m.n;
    loop_graph(cx, types, |cx, s| {
        let active = if descending {
            let bound = cx.splat_like(s[0], Scalar::Int(0))?;
            cx.compare(CompareDirection::Ge, s[0], bound)?
        } else {
            let bound = cx.splat_like(s[0], Scalar::Int(n))?;
            cx.compare(CompareDirection::Lt, s[0], bound)?
        };
        let any = if b == 0 { active } else { cx.reduce(active, ReduceKind::Or, &(0..b).collect::<Vec<_>>())? };
        Ok(vec![any])
    })
}

/// `select(mask, values, 0)` summed over `dim`: the one entry the mask picks, exactly.
fn pick(cx: &mut Cx<'_>, mask: ValueId, values: ValueId, dim: usize) -> Result<ValueId> {
    let zero = cx.splat_like(values, Scalar::Float(0.0))?;
    let kept = cx.select(mask, values, zero)?;
    cx.reduce(kept, ReduceKind::Sum, &[dim])
}

/// `value` (`[batch..]`) compared with the iota of `shape`'s `dim`, spread over `shape`'s tail.
fn hit(
    cx: &mut Cx<'_>,
    m: &Square,
    value: ValueId,
    tail: &[i64],
    dim: usize,
    direction: CompareDirection,
) -> Result<ValueId> {
    let positions = iota(cx, m.shape(tail), m.b() + dim)?;
    let spread = expand(cx, m, value, &[], tail)?;
    cx.compare(direction, positions, spread)
}

fn and(cx: &mut Cx<'_>, a: ValueId, b: ValueId) -> Result<ValueId> {
    cx.binary(BinaryOp::And, a, b)
}

fn or(cx: &mut Cx<'_>, a: ValueId, b: ValueId) -> Result<ValueId> {
    cx.binary(BinaryOp::Or, a, b)
}

fn not(cx: &mut Cx<'_>, a: ValueId) -> Result<ValueId> {
    cx.unary(UnaryOp::Not, a)
}

/// `value + constant` in `value`'s dtype.
fn plus(cx: &mut Cx<'_>, value: ValueId, constant: i64) -> Result<ValueId> {
    cx.binary_scalar(BinaryOp::Add, value, Scalar::Int(constant))
}

/// Rows `i` and `j` (`[batch..]` each) of `x` (`[batch.., n, r]`) exchanged.
fn swap_rows(cx: &mut Cx<'_>, m: &Square, x: ValueId, i: ValueId, j: ValueId) -> Result<ValueId> {
    let r = cx.static_dim(x, m.b() + 1, "the columns")?;
    let tail = [m.n, r];
    let at_i = hit(cx, m, i, &tail, 0, CompareDirection::Eq)?;
    let at_j = hit(cx, m, j, &tail, 0, CompareDirection::Eq)?;
    let row_i = pick(cx, at_i, x, m.b())?;
    let row_j = pick(cx, at_j, x, m.b())?;
    let row_i = expand(cx, m, row_i, &[1], &tail)?;
    let row_j = expand(cx, m, row_j, &[1], &tail)?;
    let moved = cx.select(at_j, row_i, x)?;
    cx.select(at_i, row_j, moved)
}

/// `linalg_ldl_factor_ex(self, *, hermitian, check_errors)` → (LD, pivots, info).
pub(super) fn factor_ex(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    refuse_check_errors(cx, args)?;
    let a = args.tensor("self")?;
    // For real matrices `hermitian` changes nothing (`hetrf` is `sytrf`).
    let m = square(cx, a, "linalg.ldl_factor_ex")?;
    let (b, n) = (m.b(), m.n);
    let dtype = m.dtype;
    let full = [n, n];
    // LAPACK reads the lower triangle only; the loop keeps the trailing matrix whole.
    let a = mirrored(cx, &m, a)?;
    let state = [
        cx.splat(DType::I64, Scalar::Int(0), &m.shape(&[]))?,
        a,
        cx.splat(DType::I64, Scalar::Int(0), &m.shape(&[n]))?,
        cx.splat(DType::I64, Scalar::Int(0), &m.shape(&[]))?,
    ];
    let types: Vec<TensorType> = state.iter().map(|&value| cx.ty(value)).collect();
    let cond = until_all_done(cx, &m, &types, false)?;
    let body = loop_graph(cx, &types, |cx, s| {
        let (k, a, pivots, info) = (s[0], s[1], s[2], s[3]);
        let limit = cx.splat_like(k, Scalar::Int(n))?;
        let active = cx.compare(CompareDirection::Lt, k, limit)?;
        let zero = cx.splat(dtype, Scalar::Float(0.0), &m.shape(&[]))?;
        // Column k, its diagonal entry and the largest entry below it (the first, as `idamax`).
        let at_k_cols = hit(cx, &m, k, &full, 1, CompareDirection::Eq)?;
        let col_k = pick(cx, at_k_cols, a, b + 1)?;
        let at_k = hit(cx, &m, k, &[n], 0, CompareDirection::Eq)?;
        let akk = pick(cx, at_k, col_k, b)?;
        let absakk = cx.unary(UnaryOp::Abs, akk)?;
        let below_k = hit(cx, &m, k, &[n], 0, CompareDirection::Gt)?;
        let magnitudes = cx.unary(UnaryOp::Abs, col_k)?;
        let zeros = cx.splat_like(magnitudes, Scalar::Float(0.0))?;
        let below = cx.select(below_k, magnitudes, zeros)?;
        let colmax = cx.reduce(below, ReduceKind::Max, &[b])?;
        let positions = iota(cx, m.shape(&[n]), b)?;
        let colmax_wide = expand(cx, &m, colmax, &[], &[n])?;
        let is_max = cx.compare(CompareDirection::Eq, below, colmax_wide)?;
        let is_max = and(cx, is_max, below_k)?;
        let past = cx.splat_like(positions, Scalar::Int(n))?;
        let candidates = cx.select(is_max, positions, past)?;
        let imax = cx.reduce(candidates, ReduceKind::Min, &[b])?;
        // Row imax of the trailing matrix (its column, by symmetry), off its diagonal.
        let at_imax_cols = hit(cx, &m, imax, &full, 1, CompareDirection::Eq)?;
        let col_imax = pick(cx, at_imax_cols, a, b + 1)?;
        let at_imax = hit(cx, &m, imax, &[n], 0, CompareDirection::Eq)?;
        let aii = pick(cx, at_imax, col_imax, b)?;
        let from_k = hit(cx, &m, k, &[n], 0, CompareDirection::Ge)?;
        let not_imax = not(cx, at_imax)?;
        let in_row = and(cx, from_k, not_imax)?;
        let row_magnitudes = cx.unary(UnaryOp::Abs, col_imax)?;
        let row = cx.select(in_row, row_magnitudes, zeros)?;
        let rowmax = cx.reduce(row, ReduceKind::Max, &[b])?;
        // The pivot: k itself (1x1), imax (1x1), or the block (k, imax) (2x2).
        let largest = cx.binary(BinaryOp::Maximum, absakk, colmax)?;
        let vanishing = cx.compare(CompareDirection::Eq, largest, zero)?;
        let nan = cx.compare(CompareDirection::Ne, akk, akk)?;
        let singular = or(cx, vanishing, nan)?;
        let alpha = cx.binary_scalar(BinaryOp::Multiply, colmax, Scalar::Float(ALPHA))?;
        let keep = cx.compare(CompareDirection::Ge, absakk, alpha)?;
        let ratio = cx.binary(BinaryOp::Divide, colmax, rowmax)?;
        let bound = cx.binary(BinaryOp::Multiply, alpha, ratio)?;
        let keep_too = cx.compare(CompareDirection::Ge, absakk, bound)?;
        let keep = or(cx, keep, keep_too)?;
        let keep = or(cx, keep, singular)?;
        let aii_size = cx.unary(UnaryOp::Abs, aii)?;
        let row_bound = cx.binary_scalar(BinaryOp::Multiply, rowmax, Scalar::Float(ALPHA))?;
        let diagonal_pivot = cx.compare(CompareDirection::Ge, aii_size, row_bound)?;
        let not_keep = not(cx, keep)?;
        let not_diagonal = not(cx, diagonal_pivot)?;
        let two = and(cx, not_keep, not_diagonal)?;
        let kp = cx.select(keep, k, imax)?;
        let one = plus(cx, k, 1)?;
        let kk = cx.select(two, one, k)?;
        // The symmetric exchange of kk and kp within the trailing matrix (rows and columns from
        // k on; the columns of L before k keep their rows).
        let swapped = swap_rows(cx, &m, a, kk, kp)?;
        let swapped = transpose_last(cx, &m, swapped)?;
        let swapped = swap_rows(cx, &m, swapped, kk, kp)?;
        let swapped = transpose_last(cx, &m, swapped)?;
        let rows_from_k = hit(cx, &m, k, &full, 0, CompareDirection::Ge)?;
        let cols_from_k = hit(cx, &m, k, &full, 1, CompareDirection::Ge)?;
        let trailing = and(cx, rows_from_k, cols_from_k)?;
        let a = cx.select(trailing, swapped, a)?;
        // Elimination.
        let one_by_one = update_1x1(cx, &m, a, k)?;
        let two_by_two = update_2x2(cx, &m, a, k)?;
        let two_wide = expand(cx, &m, two, &[], &full)?;
        let updated = cx.select(two_wide, two_by_two, one_by_one)?;
        let eliminate = not(cx, singular)?;
        let eliminate = and(cx, eliminate, active)?;
        let eliminate_wide = expand(cx, &m, eliminate, &[], &full)?;
        let a = cx.select(eliminate_wide, updated, a)?;
        // Pivots (1-based, negative for both columns of a 2x2 block), info, the next column.
        let kp_one = plus(cx, kp, 1)?;
        let minus = cx.unary(UnaryOp::Negate, kp_one)?;
        let value = cx.select(two, minus, kp_one)?;
        let value_wide = expand(cx, &m, value, &[], &[n])?;
        let active_row = expand(cx, &m, active, &[], &[n])?;
        let at_k_active = and(cx, at_k, active_row)?;
        let pivots = cx.select(at_k_active, value_wide, pivots)?;
        let at_next = hit(cx, &m, one, &[n], 0, CompareDirection::Eq)?;
        let two_row = expand(cx, &m, two, &[], &[n])?;
        let second = and(cx, at_next, two_row)?;
        let second = and(cx, second, active_row)?;
        let pivots = cx.select(second, value_wide, pivots)?;
        let no_info = cx.splat_like(info, Scalar::Int(0))?;
        let first = cx.compare(CompareDirection::Eq, info, no_info)?;
        let record = and(cx, first, singular)?;
        let record = and(cx, record, active)?;
        let info = cx.select(record, one, info)?;
        let k2 = plus(cx, k, 2)?;
        let step = cx.select(two, k2, one)?;
        let k = cx.select(active, step, k)?;
        Ok(vec![k, a, pivots, info])
    })?;
    let built = cx.b.while_loop(cond, body, &state);
    let end = cx.ok(built)?;
    // LD: the lower triangle (L below the diagonal, D on it and on its first subdiagonal).
    let rows = iota(cx, m.shape(&full), b)?;
    let cols = iota(cx, m.shape(&full), b + 1)?;
    let lower = cx.compare(CompareDirection::Ge, rows, cols)?;
    let zero = cx.splat_like(end[1], Scalar::Float(0.0))?;
    let ld = cx.select(lower, end[1], zero)?;
    let pivots = cx.convert(end[2], DType::I32)?;
    let info = cx.convert(end[3], DType::I32)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(ld), Imported::Tensor(pivots), Imported::Tensor(info)]))
}

/// The last two dims of `x` exchanged.
fn transpose_last(cx: &mut Cx<'_>, m: &Square, x: ValueId) -> Result<ValueId> {
    let b = m.b() as i64;
    let permutation: Vec<i64> = (0..b).chain([b + 1, b]).collect();
    cx.transpose(x, &permutation)
}

/// `lower` (computed for `i >= j`) mirrored into a symmetric matrix.
fn mirrored(cx: &mut Cx<'_>, m: &Square, lower: ValueId) -> Result<ValueId> {
    let full = [m.n, m.n];
    let rows = iota(cx, m.shape(&full), m.b())?;
    let cols = iota(cx, m.shape(&full), m.b() + 1)?;
    let on_or_below = cx.compare(CompareDirection::Ge, rows, cols)?;
    let upper = transpose_last(cx, m, lower)?;
    cx.select(on_or_below, lower, upper)
}

/// A 1x1 pivot at `k`: `A -= x (x / a_kk)^T` on the trailing matrix past `k` (as `syr` with
/// `-1 / a_kk`), then column `k` below the diagonal scaled by `1 / a_kk` (L's column).
fn update_1x1(cx: &mut Cx<'_>, m: &Square, a: ValueId, k: ValueId) -> Result<ValueId> {
    let (b, n) = (m.b(), m.n);
    let full = [n, n];
    let at_k_cols = hit(cx, m, k, &full, 1, CompareDirection::Eq)?;
    let col = pick(cx, at_k_cols, a, b + 1)?;
    let at_k = hit(cx, m, k, &[n], 0, CompareDirection::Eq)?;
    let akk = pick(cx, at_k, col, b)?;
    let one = cx.splat_like(akk, Scalar::Float(1.0))?;
    let d11 = cx.binary(BinaryOp::Divide, one, akk)?;
    let below_k = hit(cx, m, k, &[n], 0, CompareDirection::Gt)?;
    let zeros = cx.splat_like(col, Scalar::Float(0.0))?;
    let x = cx.select(below_k, col, zeros)?;
    // a_ij + x_i * (-d11 * x_j).
    let minus = cx.unary(UnaryOp::Negate, d11)?;
    let minus = expand(cx, m, minus, &[], &[n])?;
    let temp = cx.binary(BinaryOp::Multiply, minus, x)?;
    let x_i = expand(cx, m, x, &[0], &full)?;
    let temp_j = expand(cx, m, temp, &[1], &full)?;
    let product = cx.binary(BinaryOp::Multiply, x_i, temp_j)?;
    let sum = cx.binary(BinaryOp::Add, a, product)?;
    let rows_past = hit(cx, m, k, &full, 0, CompareDirection::Gt)?;
    let cols_past = hit(cx, m, k, &full, 1, CompareDirection::Gt)?;
    let trailing = and(cx, rows_past, cols_past)?;
    let a = cx.select(trailing, sum, a)?;
    let a = mirrored(cx, m, a)?;
    // L's column: a_ik * d11 below the diagonal.
    let d11 = expand(cx, m, d11, &[], &full)?;
    let scaled = cx.binary(BinaryOp::Multiply, a, d11)?;
    let column = and(cx, at_k_cols, rows_past)?;
    cx.select(column, scaled, a)
}

/// A 2x2 pivot at `(k, k + 1)`: the trailing matrix past `k + 1` less `W D^-1 W^T`, in `sytf2`'s
/// order, and columns `k`, `k + 1` below the block replaced by L's.
fn update_2x2(cx: &mut Cx<'_>, m: &Square, a: ValueId, k: ValueId) -> Result<ValueId> {
    let (b, n) = (m.b(), m.n);
    let full = [n, n];
    let k1 = plus(cx, k, 1)?;
    let at_k_cols = hit(cx, m, k, &full, 1, CompareDirection::Eq)?;
    let at_k1_cols = hit(cx, m, k1, &full, 1, CompareDirection::Eq)?;
    let col_k = pick(cx, at_k_cols, a, b + 1)?;
    let col_k1 = pick(cx, at_k1_cols, a, b + 1)?;
    let at_k = hit(cx, m, k, &[n], 0, CompareDirection::Eq)?;
    let at_k1 = hit(cx, m, k1, &[n], 0, CompareDirection::Eq)?;
    let akk = pick(cx, at_k, col_k, b)?;
    let d21 = pick(cx, at_k1, col_k, b)?;
    let ak1k1 = pick(cx, at_k1, col_k1, b)?;
    // d11 = a(k+1,k+1) / d21; d22 = a(k,k) / d21; t = 1 / (d11 d22 - 1); d21 = t / d21.
    let d11 = cx.binary(BinaryOp::Divide, ak1k1, d21)?;
    let d22 = cx.binary(BinaryOp::Divide, akk, d21)?;
    let product = cx.binary(BinaryOp::Multiply, d11, d22)?;
    let one = cx.splat_like(product, Scalar::Float(1.0))?;
    let denominator = cx.binary(BinaryOp::Subtract, product, one)?;
    let t = cx.binary(BinaryOp::Divide, one, denominator)?;
    let d21 = cx.binary(BinaryOp::Divide, t, d21)?;
    let below = hit(cx, m, k1, &[n], 0, CompareDirection::Gt)?;
    let zeros = cx.splat_like(col_k, Scalar::Float(0.0))?;
    let ck = cx.select(below, col_k, zeros)?;
    let ck1 = cx.select(below, col_k1, zeros)?;
    let [d11, d22, d21] = [d11, d22, d21].map(|value| expand(cx, m, value, &[], &[n]));
    let (d11, d22, d21) = (d11?, d22?, d21?);
    // wk = d21 (d11 a(j,k) - a(j,k+1)); wkp1 = d21 (d22 a(j,k+1) - a(j,k)).
    let scaled = cx.binary(BinaryOp::Multiply, d11, ck)?;
    let difference = cx.binary(BinaryOp::Subtract, scaled, ck1)?;
    let wk = cx.binary(BinaryOp::Multiply, d21, difference)?;
    let scaled = cx.binary(BinaryOp::Multiply, d22, ck1)?;
    let difference = cx.binary(BinaryOp::Subtract, scaled, ck)?;
    let wkp1 = cx.binary(BinaryOp::Multiply, d21, difference)?;
    // a(i,j) - a(i,k) wk_j - a(i,k+1) wkp1_j.
    let ck_i = expand(cx, m, ck, &[0], &full)?;
    let ck1_i = expand(cx, m, ck1, &[0], &full)?;
    let wk_j = expand(cx, m, wk, &[1], &full)?;
    let wkp1_j = expand(cx, m, wkp1, &[1], &full)?;
    let first = cx.binary(BinaryOp::Multiply, ck_i, wk_j)?;
    let second = cx.binary(BinaryOp::Multiply, ck1_i, wkp1_j)?;
    let less = cx.binary(BinaryOp::Subtract, a, first)?;
    let less = cx.binary(BinaryOp::Subtract, less, second)?;
    let rows_past = hit(cx, m, k1, &full, 0, CompareDirection::Gt)?;
    let cols_past = hit(cx, m, k1, &full, 1, CompareDirection::Gt)?;
    let trailing = and(cx, rows_past, cols_past)?;
    let a = cx.select(trailing, less, a)?;
    let a = mirrored(cx, m, a)?;
    // Columns k and k+1 below the block: wk and wkp1.
    let wk_i = expand(cx, m, wk, &[0], &full)?;
    let wkp1_i = expand(cx, m, wkp1, &[0], &full)?;
    let column_k = and(cx, at_k_cols, rows_past)?;
    let a = cx.select(column_k, wk_i, a)?;
    let column_k1 = and(cx, at_k1_cols, rows_past)?;
    cx.select(column_k1, wkp1_i, a)
}

/// `linalg_ldl_solve(LD, pivots, B, *, hermitian)`: `A X = B` from `ldl_factor`'s `(LD, pivots)`,
/// as `sytrs` solves it: `L D` forward (each exchange, then L's column, then `D`'s block), then
/// `L^T` backward (L's column, then the exchange). Batches broadcast.
pub(super) fn solve(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (ld, pivots, rhs) = (args.tensor("LD")?, args.tensor("pivots")?, args.tensor("B")?);
    let m0 = square(cx, ld, "linalg.ldl_solve")?;
    let pivots_ty = cx.ty(pivots);
    if pivots_ty.rank() != m0.b() + 1 || pivots_ty.shape[m0.b()] != ttpu_ir::Dim::Static(m0.n) {
        return Err(
            cx.bad(format!("linalg.ldl_solve: pivots {pivots_ty} must hold one pivot per row of LD {}", cx.ty(ld)))
        );
    }
    let (ld, rhs, m) = broadcast_system(cx, ld, rhs, "linalg.ldl_solve")?;
    let pivots = cx.convert(pivots, DType::I64)?;
    let pivots = cx.broadcast_to(pivots, &m.shape(&[m.n]))?;
    let (b, n) = (m.b(), m.n);
    let r = cx.static_dim(rhs, b + 1, "the right-hand sides")?;
    let tall = [n, r];
    let start = cx.splat(DType::I64, Scalar::Int(0), &m.shape(&[]))?;
    let state = [start, rhs, ld, pivots];
    let types: Vec<TensorType> = state.iter().map(|&value| cx.ty(value)).collect();
    // L D Y = P B, forward.
    let cond = until_all_done(cx, &m, &types, false)?;
    let body = loop_graph(cx, &types, |cx, s| {
        let (k, x, ld, pivots) = (s[0], s[1], s[2], s[3]);
        let limit = cx.splat_like(k, Scalar::Int(n))?;
        let active = cx.compare(CompareDirection::Lt, k, limit)?;
        let at_k = hit(cx, &m, k, &[n], 0, CompareDirection::Eq)?;
        let pivot = pick_int(cx, at_k, pivots, b)?;
        let zero = cx.splat_like(pivot, Scalar::Int(0))?;
        let two = cx.compare(CompareDirection::Lt, pivot, zero)?;
        let k1 = plus(cx, k, 1)?;
        // The exchange: row k (1x1) or k+1 (2x2) with the pivot's row.
        let minus = cx.unary(UnaryOp::Negate, pivot)?;
        let target = cx.select(two, minus, pivot)?;
        let target = plus(cx, target, -1)?;
        let row = cx.select(two, k1, k)?;
        let x = swap_rows(cx, &m, x, row, target)?;
        // L's columns: rows past the block less l_ik x_k (and l_i,k+1 x_k+1 for a 2x2 block).
        let col_k = column(cx, &m, ld, k)?;
        let col_k1 = column(cx, &m, ld, k1)?;
        let last = cx.select(two, k1, k)?;
        let past = hit(cx, &m, last, &[n], 0, CompareDirection::Gt)?;
        let zeros = cx.splat_like(col_k, Scalar::Float(0.0))?;
        let l_k = cx.select(past, col_k, zeros)?;
        let l_k1 = cx.select(past, col_k1, zeros)?;
        let at_k_rows = hit(cx, &m, k, &tall, 0, CompareDirection::Eq)?;
        let at_k1_rows = hit(cx, &m, k1, &tall, 0, CompareDirection::Eq)?;
        let x_k = pick(cx, at_k_rows, x, b)?;
        let x_k1 = pick(cx, at_k1_rows, x, b)?;
        let minus_k = cx.unary(UnaryOp::Negate, x_k)?;
        let minus_k = expand(cx, &m, minus_k, &[1], &tall)?;
        let l_k_wide = expand(cx, &m, l_k, &[0], &tall)?;
        let product = cx.binary(BinaryOp::Multiply, l_k_wide, minus_k)?;
        let once = cx.binary(BinaryOp::Add, x, product)?;
        let minus_k1 = cx.unary(UnaryOp::Negate, x_k1)?;
        let minus_k1 = expand(cx, &m, minus_k1, &[1], &tall)?;
        let l_k1_wide = expand(cx, &m, l_k1, &[0], &tall)?;
        let product = cx.binary(BinaryOp::Multiply, l_k1_wide, minus_k1)?;
        let twice = cx.binary(BinaryOp::Add, once, product)?;
        let two_tall = expand(cx, &m, two, &[], &tall)?;
        let x = cx.select(two_tall, twice, once)?;
        // D: x_k / d_kk (times the reciprocal, as `scal`), or the 2x2 block's inverse.
        let d_kk = pick(cx, at_k, col_k, b)?;
        let one = cx.splat_like(d_kk, Scalar::Float(1.0))?;
        let inverse = cx.binary(BinaryOp::Divide, one, d_kk)?;
        let inverse = expand(cx, &m, inverse, &[], &[r])?;
        let x_k = pick(cx, at_k_rows, x, b)?;
        let x_k1 = pick(cx, at_k1_rows, x, b)?;
        let single = cx.binary(BinaryOp::Multiply, x_k, inverse)?;
        let at_k1 = hit(cx, &m, k1, &[n], 0, CompareDirection::Eq)?;
        let akm1k = pick(cx, at_k1, col_k, b)?;
        let d_k1k1 = pick(cx, at_k1, col_k1, b)?;
        let akm1 = cx.binary(BinaryOp::Divide, d_kk, akm1k)?;
        let ak = cx.binary(BinaryOp::Divide, d_k1k1, akm1k)?;
        let product = cx.binary(BinaryOp::Multiply, akm1, ak)?;
        let denominator = cx.binary(BinaryOp::Subtract, product, one)?;
        let [akm1k, akm1, ak, denominator] = [akm1k, akm1, ak, denominator].map(|v| expand(cx, &m, v, &[], &[r]));
        let (akm1k, akm1, ak, denominator) = (akm1k?, akm1?, ak?, denominator?);
        let bkm1 = cx.binary(BinaryOp::Divide, x_k, akm1k)?;
        let bk = cx.binary(BinaryOp::Divide, x_k1, akm1k)?;
        let first = cx.binary(BinaryOp::Multiply, ak, bkm1)?;
        let first = cx.binary(BinaryOp::Subtract, first, bk)?;
        let first = cx.binary(BinaryOp::Divide, first, denominator)?;
        let second = cx.binary(BinaryOp::Multiply, akm1, bk)?;
        let second = cx.binary(BinaryOp::Subtract, second, bkm1)?;
        let second = cx.binary(BinaryOp::Divide, second, denominator)?;
        let two_r = expand(cx, &m, two, &[], &[r])?;
        let new_k = cx.select(two_r, first, single)?;
        let new_k = expand(cx, &m, new_k, &[1], &tall)?;
        let x = cx.select(at_k_rows, new_k, x)?;
        let new_k1 = expand(cx, &m, second, &[1], &tall)?;
        let block_second = and(cx, at_k1_rows, two_tall)?;
        let stepped = cx.select(block_second, new_k1, x)?;
        let active_tall = expand(cx, &m, active, &[], &tall)?;
        let x = cx.select(active_tall, stepped, s[1])?;
        let k2 = plus(cx, k, 2)?;
        let next = cx.select(two, k2, k1)?;
        let k = cx.select(active, next, k)?;
        Ok(vec![k, x, ld, pivots])
    })?;
    let built = cx.b.while_loop(cond, body, &state);
    let forward = cx.ok(built)?;
    // L^T X = Y, backward from the last row.
    let last = cx.splat(DType::I64, Scalar::Int(n - 1), &m.shape(&[]))?;
    let state = [last, forward[1], forward[2], forward[3]];
    let cond = until_all_done(cx, &m, &types, true)?;
    let body = loop_graph(cx, &types, |cx, s| {
        let (k, x, ld, pivots) = (s[0], s[1], s[2], s[3]);
        let zero_k = cx.splat_like(k, Scalar::Int(0))?;
        let active = cx.compare(CompareDirection::Ge, k, zero_k)?;
        let at_k = hit(cx, &m, k, &[n], 0, CompareDirection::Eq)?;
        let pivot = pick_int(cx, at_k, pivots, b)?;
        let zero = cx.splat_like(pivot, Scalar::Int(0))?;
        let two = cx.compare(CompareDirection::Lt, pivot, zero)?;
        let km1 = plus(cx, k, -1)?;
        // x_k -= sum_{i>k} l_ik x_i (and x_k-1 with column k-1 for a 2x2 block).
        let past = hit(cx, &m, k, &[n], 0, CompareDirection::Gt)?;
        let col_k = column(cx, &m, ld, k)?;
        let col_km1 = column(cx, &m, ld, km1)?;
        let zeros = cx.splat_like(col_k, Scalar::Float(0.0))?;
        let l_k = cx.select(past, col_k, zeros)?;
        let l_km1 = cx.select(past, col_km1, zeros)?;
        let dot_k = weighted_rows(cx, &m, l_k, x, &tall)?;
        let dot_km1 = weighted_rows(cx, &m, l_km1, x, &tall)?;
        let at_k_rows = hit(cx, &m, k, &tall, 0, CompareDirection::Eq)?;
        let at_km1_rows = hit(cx, &m, km1, &tall, 0, CompareDirection::Eq)?;
        let x_k = pick(cx, at_k_rows, x, b)?;
        let x_km1 = pick(cx, at_km1_rows, x, b)?;
        let new_k = cx.binary(BinaryOp::Subtract, x_k, dot_k)?;
        let new_km1 = cx.binary(BinaryOp::Subtract, x_km1, dot_km1)?;
        let new_k = expand(cx, &m, new_k, &[1], &tall)?;
        let new_km1 = expand(cx, &m, new_km1, &[1], &tall)?;
        let two_tall = expand(cx, &m, two, &[], &tall)?;
        let updated = cx.select(at_k_rows, new_k, x)?;
        let block_first = and(cx, at_km1_rows, two_tall)?;
        let updated = cx.select(block_first, new_km1, updated)?;
        // The exchange of row k with the pivot's.
        let minus = cx.unary(UnaryOp::Negate, pivot)?;
        let target = cx.select(two, minus, pivot)?;
        let target = plus(cx, target, -1)?;
        let updated = swap_rows(cx, &m, updated, k, target)?;
        let active_tall = expand(cx, &m, active, &[], &tall)?;
        let x = cx.select(active_tall, updated, x)?;
        let km2 = plus(cx, k, -2)?;
        let next = cx.select(two, km2, km1)?;
        let k = cx.select(active, next, k)?;
        Ok(vec![k, x, ld, pivots])
    })?;
    let built = cx.b.while_loop(cond, body, &state);
    let backward = cx.ok(built)?;
    tensor(backward[1])
}

/// `sum_i weights_i x_i` over the rows of `x` (`[batch.., n, r]`) as `[batch.., r]` (`gemv`).
fn weighted_rows(cx: &mut Cx<'_>, m: &Square, weights: ValueId, x: ValueId, tall: &[i64]) -> Result<ValueId> {
    let wide = expand(cx, m, weights, &[0], tall)?;
    let product = cx.binary(BinaryOp::Multiply, wide, x)?;
    cx.reduce(product, ReduceKind::Sum, &[m.b()])
}

/// Column `k` (`[batch..]`) of `matrix` (`[batch.., n, n]`) as `[batch.., n]`.
fn column(cx: &mut Cx<'_>, m: &Square, matrix: ValueId, k: ValueId) -> Result<ValueId> {
    let at = hit(cx, m, k, &[m.n, m.n], 1, CompareDirection::Eq)?;
    pick(cx, at, matrix, m.b() + 1)
}

/// The integer `values` (`[batch.., n]`) at the one position `mask` picks, as `[batch..]`.
fn pick_int(cx: &mut Cx<'_>, mask: ValueId, values: ValueId, dim: usize) -> Result<ValueId> {
    let zero = cx.splat_like(values, Scalar::Int(0))?;
    let kept = cx.select(mask, values, zero)?;
    cx.reduce(kept, ReduceKind::Sum, &[dim])
}
