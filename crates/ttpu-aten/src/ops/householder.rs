//! Householder QR as LAPACK computes it: `geqrf` (`dgeqr2`'s reflections, `dlarfg`'s sign and
//! scaling conventions), `linalg_householder_product` (`dorg2r`), `ormqr` (`dorm2r`) and
//! `linalg_qr` in its three modes.
//!
//! PyTorch hands LAPACK a column-major copy of `A`, so the factorization is of `A` itself. Column
//! `i` of `geqrf` is `dlarfg` of `A[i:, i]`: `beta = -sign(alpha) sqrt(alpha^2 + |x|^2)`, `tau =
//! (beta - alpha) / beta`, the reflector's tail `x / (alpha - beta)` stored below the diagonal and
//! `beta` on it (no reflection, `tau = 0`, when `x` is zero); the reflection `I - tau v v^T` then
//! applies to the columns on the right. The sign of `R`'s diagonal, and so of `Q`'s columns, is
//! LAPACK's. Every step works on whole matrices with masks, unrolled over the columns of a static
//! size (at most [`super::linalg::MAX_N`]).

use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Dim, DotDims, ReduceKind, Scalar, Shape, TensorType, UnaryOp, ValueId,
};

use super::elementwise::tensor;
use super::linalg::MAX_N;
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// A batch of `m x n` matrices.
#[derive(Clone)]
pub(super) struct Mat {
    pub(super) batch: Vec<Dim>,
    pub(super) m: i64,
    pub(super) n: i64,
    pub(super) dtype: DType,
}

impl Mat {
    /// `[batch.., tail..]`.
    pub(super) fn shape(&self, tail: &[i64]) -> Shape {
        self.batch.iter().cloned().chain(tail.iter().map(|&size| Dim::Static(size))).collect()
    }

    pub(super) fn b(&self) -> usize {
        self.batch.len()
    }
}

/// Checks `a` is a batch of static float matrices of at most [`MAX_N`] rows and columns.
pub(super) fn matrices(cx: &Cx<'_>, a: ValueId, what: &str) -> Result<Mat> {
    let ty = cx.ty(a);
    if ty.rank() < 2 || !matches!(ty.dtype, DType::F32 | DType::F64) {
        return Err(cx.bad(format!("{what}: expected a float32 or float64 tensor of matrices, found {ty}")));
    }
    let rank = ty.rank();
    let (Some(m), Some(n)) = (ty.shape[rank - 2].as_static(), ty.shape[rank - 1].as_static()) else {
        return Err(cx.bad(format!("{what}: the matrix size must be static to unroll the factorization, found {ty}")));
    };
    if m > MAX_N || n > MAX_N {
        return Err(cx.bad(format!(
            "{what}: {m}x{n} matrices exceed the {MAX_N}x{MAX_N} that ttpu unrolls (the factorization becomes IR ops \
             per column)"
        )));
    }
    Ok(Mat { batch: ty.shape.dims()[..rank - 2].to_vec(), m, n, dtype: ty.dtype })
}

fn iota(cx: &mut Cx<'_>, shape: Shape, dim: usize) -> Result<ValueId> {
    let built = cx.b.iota(TensorType::new(DType::I64, shape), dim as i64);
    cx.ok(built)
}

fn compare_to(cx: &mut Cx<'_>, direction: CompareDirection, value: ValueId, index: i64) -> Result<ValueId> {
    let constant = cx.splat_like(value, Scalar::Int(index))?;
    cx.compare(direction, value, constant)
}

/// `value` (`[batch.., tail..]`) broadcast to `[batch.., target..]`, its tail at `positions`.
fn expand(cx: &mut Cx<'_>, a: &Mat, value: ValueId, positions: &[usize], target: &[i64]) -> Result<ValueId> {
    let b = a.b();
    let dims: Vec<i64> = (0..b).chain(positions.iter().map(|&position| b + position)).map(|dim| dim as i64).collect();
    cx.broadcast_in_dim(value, &dims, a.shape(target))
}

/// Column `j` of each matrix as `[batch.., rows]`.
fn column(cx: &mut Cx<'_>, a: &Mat, matrix: ValueId, j: i64) -> Result<ValueId> {
    let rows = cx.static_dim(matrix, a.b(), "the rows")?;
    let col = cx.slice_dim(matrix, a.b() + 1, j, j + 1, 1)?;
    cx.reshape(col, a.shape(&[rows]))
}

/// `v^T M` for the vectors `v` (`[batch.., r]`) and matrices `M` (`[batch.., r, c]`): `[batch.., c]`.
fn vector_times(cx: &mut Cx<'_>, a: &Mat, v: ValueId, matrix: ValueId) -> Result<ValueId> {
    let b = a.b() as i64;
    let dims = DotDims {
        lhs_batch: (0..b).collect(),
        rhs_batch: (0..b).collect(),
        lhs_contracting: [b].into_iter().collect(),
        rhs_contracting: [b].into_iter().collect(),
    };
    cx.dot_general(v, matrix, dims)
}

/// `M v` for matrices `M` (`[batch.., r, c]`) and vectors `v` (`[batch.., c]`): `[batch.., r]`.
fn times_vector(cx: &mut Cx<'_>, a: &Mat, matrix: ValueId, v: ValueId) -> Result<ValueId> {
    let b = a.b() as i64;
    let dims = DotDims {
        lhs_batch: (0..b).collect(),
        rhs_batch: (0..b).collect(),
        lhs_contracting: [b + 1].into_iter().collect(),
        rhs_contracting: [b].into_iter().collect(),
    };
    cx.dot_general(matrix, v, dims)
}

/// `geqrf`'s packed factorization of each matrix: (`R` with the reflectors below it, `tau`).
pub(super) fn geqr2(cx: &mut Cx<'_>, a: &Mat, matrix: ValueId) -> Result<(ValueId, ValueId)> {
    let (b, m, n) = (a.b(), a.m, a.n);
    let k = m.min(n);
    let rows1 = iota(cx, a.shape(&[m]), b)?;
    let rows2 = iota(cx, a.shape(&[m, n]), b)?;
    let cols2 = iota(cx, a.shape(&[m, n]), b + 1)?;
    let mut matrix = matrix;
    let mut taus = Vec::with_capacity(k as usize);
    for i in 0..k {
        let x = column(cx, a, matrix, i)?;
        let below = compare_to(cx, CompareDirection::Gt, rows1, i)?;
        let zero = cx.splat_like(x, Scalar::Int(0))?;
        let tail = cx.select(below, x, zero)?;
        let squares = cx.binary(BinaryOp::Multiply, tail, tail)?;
        let sum = cx.reduce(squares, ReduceKind::Sum, &[b])?;
        let xnorm = cx.unary(UnaryOp::Sqrt, sum)?;
        let alpha = cx.slice_dim(x, b, i, i + 1, 1)?;
        let alpha = cx.reshape(alpha, a.shape(&[]))?;
        // beta = -sign(alpha) * sqrt(alpha^2 + xnorm^2) (Fortran's SIGN: + for alpha = +-0).
        let alpha2 = cx.binary(BinaryOp::Multiply, alpha, alpha)?;
        let both = cx.binary(BinaryOp::Add, alpha2, sum)?;
        let length = cx.unary(UnaryOp::Sqrt, both)?;
        let zero_s = cx.splat_like(alpha, Scalar::Int(0))?;
        let negative = cx.compare(CompareDirection::Lt, alpha, zero_s)?;
        let minus_length = cx.unary(UnaryOp::Negate, length)?;
        let beta = cx.select(negative, length, minus_length)?;
        let reflects = cx.compare(CompareDirection::Ne, xnorm, zero_s)?;
        let difference = cx.binary(BinaryOp::Subtract, beta, alpha)?;
        let tau = cx.binary(BinaryOp::Divide, difference, beta)?;
        let tau = cx.select(reflects, tau, zero_s)?;
        let one = cx.splat_like(alpha, Scalar::Int(1))?;
        let gap = cx.binary(BinaryOp::Subtract, alpha, beta)?;
        let scale = cx.binary(BinaryOp::Divide, one, gap)?;
        let scale = cx.select(reflects, scale, one)?;
        let scale_wide = expand(cx, a, scale, &[], &[m])?;
        let v_tail = cx.binary(BinaryOp::Multiply, tail, scale_wide)?;
        let diagonal = cx.select(reflects, beta, alpha)?;
        taus.push(cx.reshape(tau, a.shape(&[1]))?);
        // The reflector v = e_i + tail, applied to the columns right of i: A -= tau v (v^T A).
        let at_i = compare_to(cx, CompareDirection::Eq, rows1, i)?;
        let ones = cx.splat_like(v_tail, Scalar::Int(1))?;
        let v = cx.select(at_i, ones, v_tail)?;
        let w = vector_times(cx, a, v, matrix)?;
        let tau_wide = expand(cx, a, tau, &[], &[m])?;
        let tau_v = cx.binary(BinaryOp::Multiply, v, tau_wide)?;
        let tau_v = expand(cx, a, tau_v, &[0], &[m, n])?;
        let w = expand(cx, a, w, &[1], &[m, n])?;
        let outer = cx.binary(BinaryOp::Multiply, tau_v, w)?;
        let updated = cx.binary(BinaryOp::Subtract, matrix, outer)?;
        let right = compare_to(cx, CompareDirection::Gt, cols2, i)?;
        matrix = cx.select(right, updated, matrix)?;
        // Column i: beta on the diagonal, the reflector's tail below it.
        let on_column = compare_to(cx, CompareDirection::Eq, cols2, i)?;
        let below2 = compare_to(cx, CompareDirection::Gt, rows2, i)?;
        let at_diagonal = compare_to(cx, CompareDirection::Eq, rows2, i)?;
        let tail_wide = expand(cx, a, v_tail, &[0], &[m, n])?;
        let diagonal_wide = expand(cx, a, diagonal, &[], &[m, n])?;
        let put_tail = cx.binary(BinaryOp::And, on_column, below2)?;
        let put_diagonal = cx.binary(BinaryOp::And, on_column, at_diagonal)?;
        matrix = cx.select(put_tail, tail_wide, matrix)?;
        matrix = cx.select(put_diagonal, diagonal_wide, matrix)?;
    }
    let tau = if taus.is_empty() {
        cx.splat(a.dtype, Scalar::Int(0), &a.shape(&[0]))?
    } else {
        cx.concatenate(&taus, b as i64)?
    };
    Ok((matrix, tau))
}

/// The reflector `v_i` (`[batch.., m]`: 0 above `i`, 1 at `i`, the packed tail below) and `tau_i`
/// (`[batch..]`) of a packed factorization.
fn reflector(cx: &mut Cx<'_>, a: &Mat, packed: ValueId, tau: ValueId, i: i64) -> Result<(ValueId, ValueId)> {
    let b = a.b();
    let rows1 = iota(cx, a.shape(&[a.m]), b)?;
    let x = column(cx, a, packed, i)?;
    let below = compare_to(cx, CompareDirection::Gt, rows1, i)?;
    let at_i = compare_to(cx, CompareDirection::Eq, rows1, i)?;
    let zero = cx.splat_like(x, Scalar::Int(0))?;
    let one = cx.splat_like(x, Scalar::Int(1))?;
    let v = cx.select(below, x, zero)?;
    let v = cx.select(at_i, one, v)?;
    let t = cx.slice_dim(tau, b, i, i + 1, 1)?;
    let t = cx.reshape(t, a.shape(&[]))?;
    Ok((v, t))
}

/// `H_i C = C - tau v (v^T C)` for `C` of `[batch.., m, c]`.
fn reflect_left(cx: &mut Cx<'_>, a: &Mat, v: ValueId, tau: ValueId, c: ValueId) -> Result<ValueId> {
    let columns = cx.static_dim(c, a.b() + 1, "the columns")?;
    let w = vector_times(cx, a, v, c)?;
    let tau_wide = expand(cx, a, tau, &[], &[a.m])?;
    let tau_v = cx.binary(BinaryOp::Multiply, v, tau_wide)?;
    let tau_v = expand(cx, a, tau_v, &[0], &[a.m, columns])?;
    let w = expand(cx, a, w, &[1], &[a.m, columns])?;
    let outer = cx.binary(BinaryOp::Multiply, tau_v, w)?;
    cx.binary(BinaryOp::Subtract, c, outer)
}

/// `C H_i = C - (C v) tau v^T` for `C` of `[batch.., r, m]`.
fn reflect_right(cx: &mut Cx<'_>, a: &Mat, v: ValueId, tau: ValueId, c: ValueId) -> Result<ValueId> {
    let rows = cx.static_dim(c, a.b(), "the rows")?;
    let w = times_vector(cx, a, c, v)?;
    let tau_wide = expand(cx, a, tau, &[], &[rows])?;
    let tau_w = cx.binary(BinaryOp::Multiply, w, tau_wide)?;
    let tau_w = expand(cx, a, tau_w, &[0], &[rows, a.m])?;
    let v = expand(cx, a, v, &[1], &[rows, a.m])?;
    let outer = cx.binary(BinaryOp::Multiply, tau_w, v)?;
    cx.binary(BinaryOp::Subtract, c, outer)
}

/// `Q[:, :columns]` of a packed factorization (`Q = H_0 H_1 ... H_{k-1}`), built from the identity
/// by the reflections from the last, as `dorg2r`.
fn q_columns(cx: &mut Cx<'_>, a: &Mat, packed: ValueId, tau: ValueId, k: i64, columns: i64) -> Result<ValueId> {
    let b = a.b();
    let rows = iota(cx, a.shape(&[a.m, columns]), b)?;
    let cols = iota(cx, a.shape(&[a.m, columns]), b + 1)?;
    let eye = cx.compare(CompareDirection::Eq, rows, cols)?;
    let mut q = cx.convert(eye, a.dtype)?;
    for i in (0..k).rev() {
        let (v, t) = reflector(cx, a, packed, tau, i)?;
        q = reflect_left(cx, a, v, t, q)?;
    }
    Ok(q)
}

/// The upper triangle of `R` (`[batch.., rows, n]` of the packed factorization's first rows).
fn upper(cx: &mut Cx<'_>, a: &Mat, packed: ValueId, rows: i64) -> Result<ValueId> {
    let b = a.b();
    let top = cx.slice_dim(packed, b, 0, rows, 1)?;
    let r = iota(cx, a.shape(&[rows, a.n]), b)?;
    let c = iota(cx, a.shape(&[rows, a.n]), b + 1)?;
    let keep = cx.compare(CompareDirection::Le, r, c)?;
    let zero = cx.splat_like(top, Scalar::Int(0))?;
    cx.select(keep, top, zero)
}

/// `geqrf(self)` → (a, tau).
pub(super) fn geqrf(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let a = matrices(cx, x, "geqrf")?;
    let (packed, tau) = geqr2(cx, &a, x)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(packed), Imported::Tensor(tau)]))
}

/// `linalg_qr(A, mode)` → (Q, R): `reduced` (`m x k`, `k x n`), `complete` (`m x m`, `m x n`) or
/// `r` (an empty `Q`).
pub(super) fn linalg_qr(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("A")?;
    let mode = args.opt_str("mode")?.unwrap_or("reduced").to_owned();
    let a = matrices(cx, x, "linalg.qr")?;
    let k = a.m.min(a.n);
    let (packed, tau) = geqr2(cx, &a, x)?;
    let (q, r) = match mode.as_str() {
        "reduced" => (q_columns(cx, &a, packed, tau, k, k)?, upper(cx, &a, packed, k)?),
        "complete" => (q_columns(cx, &a, packed, tau, k, a.m)?, upper(cx, &a, packed, a.m)?),
        "r" => (cx.splat(a.dtype, Scalar::Int(0), &Shape::from_static(&[0]))?, upper(cx, &a, packed, k)?),
        other => {
            return Err(cx.bad(format!(
                "qr received unrecognized mode '{other}' but expected one of 'reduced' (default), 'r', or 'complete'"
            )));
        }
    };
    Ok(Imported::Tuple(vec![Imported::Tensor(q), Imported::Tensor(r)]))
}

/// `linalg_householder_product(input, tau)`: the first `n` columns of `H_0 ... H_{k-1}`.
pub(super) fn householder_product(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, tau) = (args.tensor("input")?, args.tensor("tau")?);
    let a = matrices(cx, x, "linalg.householder_product")?;
    let k = cx.static_dim(tau, cx.rank(tau) - 1, "the reflectors")?;
    if k > a.n || a.n > a.m || cx.dtype(tau) != a.dtype {
        return Err(cx.bad(format!(
            "linalg.householder_product: needs m >= n >= k and one dtype, found {} and {}",
            cx.ty(x),
            cx.ty(tau)
        )));
    }
    let tau = cx.broadcast_to(tau, &a.shape(&[k]))?;
    tensor(q_columns(cx, &a, x, tau, k, a.n)?)
}

/// `ormqr(self=a, input2=tau, input3=C, left, transpose)`: `Q C`, `Q^T C`, `C Q` or `C Q^T` for
/// the `Q` of a packed factorization.
pub(super) fn ormqr(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (x, tau, c) = (args.tensor("self")?, args.tensor("input2")?, args.tensor("input3")?);
    let left = args.bool_or("left", true)?;
    let transpose = args.bool_or("transpose", false)?;
    let a = matrices(cx, x, "ormqr")?;
    let k = cx.static_dim(tau, cx.rank(tau) - 1, "the reflectors")?;
    let tau = cx.broadcast_to(tau, &a.shape(&[k]))?;
    let c_ty = cx.ty(c);
    let ok = c_ty.rank() == cx.rank(x)
        && c_ty.dtype == a.dtype
        && c_ty.shape[c_ty.rank() - if left { 2 } else { 1 }] == Dim::Static(a.m);
    if !ok || k > a.n.min(a.m) {
        return Err(cx.bad(format!("ormqr: cannot apply the reflectors of {} to {c_ty}", cx.ty(x))));
    }
    // Q = H_0 ... H_{k-1}: Q C applies the last first, Q^T C the first first; from the right the
    // order turns around.
    let forward = left == transpose;
    let order: Vec<i64> = if forward { (0..k).collect() } else { (0..k).rev().collect() };
    let mut value = c;
    for i in order {
        let (v, t) = reflector(cx, &a, x, tau, i)?;
        value = if left { reflect_left(cx, &a, v, t, value)? } else { reflect_right(cx, &a, v, t, value)? };
    }
    tensor(value)
}
