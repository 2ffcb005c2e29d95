//! Eigenvalues of symmetric matrices and singular values by Jacobi rotations, as XLA's own TPU
//! libraries compute them: `_linalg_eigh` (two-sided Jacobi on the symmetric matrix), `_linalg_svd`
//! (one-sided Jacobi on the columns), and `linalg_pinv.atol_rtol_tensor` from the latter.
//!
//! Each sweep visits every pair of indices once, in `n - 1` rounds of disjoint pairs (a
//! round-robin tournament), and a round applies its rotations together as one orthogonal matrix
//! `J` (its entries placed by products with 0/1 selection matrices, so exactly). One sweep is the
//! body of an IR `while` that runs a fixed number of them: the off-diagonal mass falls
//! quadratically, and a sweep after convergence rotates by angles of zero.
//!
//! Eigenvalues and singular values are unique, so they match LAPACK's to rounding, in its order
//! (ascending eigenvalues, descending singular values). Eigenvectors and singular vectors are not:
//! each is determined up to its sign (and a basis of a repeated value up to a rotation), which
//! LAPACK's `syevd`/`gesdd` fix by the course of their own algorithm, so reading them is refused.
//! What does not depend on that choice is computed: the pseudo-inverse `V S^+ U^T`.

use ttpu_ir::{BinaryOp, CompareDirection, DType, DotDims, Literal, ReduceKind, Scalar, Shape, UnaryOp, ValueId};

use super::elementwise::tensor;
use super::householder::{Mat, matrices};
use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// The largest matrix rotated, as for the other factorizations: the loop's body (one sweep) is
/// `n - 1` rounds of a few `n x n` products; at 64 a debug build compiles it in seconds.
const MAX_JACOBI: i64 = 64;

/// Sweeps for each float type: enough for the off-diagonal mass to fall below the type's
/// precision from any start (Jacobi converges quadratically once the angles are small).
fn sweeps(dtype: DType) -> usize {
    if dtype == DType::F64 { 12 } else { 8 }
}

/// The rounds of a sweep over `n` indices (an odd `n` gets a phantom index `n`, whose pairs are
/// left out): the circle method, `n' - 1` rounds of `n' / 2` disjoint pairs `(p, q)`, `p < q`.
fn rounds(n: i64) -> Vec<Vec<(i64, i64)>> {
    let size = n + n % 2;
    let mut ring: Vec<i64> = (0..size).collect();
    let mut out = Vec::new();
    for _ in 0..size.saturating_sub(1) {
        let mut round = Vec::new();
        for k in 0..(size / 2) as usize {
            let (a, b) = (ring[k], ring[size as usize - 1 - k]);
            if a < n && b < n {
                round.push((a.min(b), a.max(b)));
            }
        }
        out.push(round);
        // Keep the first index, rotate the rest.
        let last = ring.pop().expect("a ring of two or more");
        ring.insert(1, last);
    }
    out
}

/// A 0/1 matrix `[n, pairs]` with a 1 at `(index(pair), pair)`.
fn selection(cx: &mut Cx<'_>, dtype: DType, n: i64, pairs: &[(i64, i64)], first: bool) -> ValueId {
    let count = pairs.len() as i64;
    let mut values = vec![Scalar::Float(0.0); (n * count) as usize];
    for (k, &(p, q)) in pairs.iter().enumerate() {
        let row = if first { p } else { q };
        values[(row * count) as usize + k] = Scalar::Float(1.0);
    }
    cx.literal(Literal::from_scalars(dtype, &[n, count], &values).expect("one value per entry"))
}

/// `lhs @ rhs` over the last two dims, with batch dims `b` (`rhs` without batch dims when
/// `rhs_batched` is false).
fn matmul(cx: &mut Cx<'_>, b: usize, lhs: ValueId, rhs: ValueId, rhs_batched: bool) -> Result<ValueId> {
    let b = b as i64;
    let dims = if rhs_batched {
        DotDims {
            lhs_batch: (0..b).collect(),
            rhs_batch: (0..b).collect(),
            lhs_contracting: [b + 1].into_iter().collect(),
            rhs_contracting: [b].into_iter().collect(),
        }
    } else {
        DotDims {
            lhs_contracting: [b + 1].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
            ..DotDims::default()
        }
    };
    cx.dot_general(lhs, rhs, dims)
}

/// `M^T` over the last two dims.
fn transposed(cx: &mut Cx<'_>, value: ValueId) -> Result<ValueId> {
    let rank = cx.rank(value);
    let mut permutation: Vec<i64> = (0..rank as i64).collect();
    permutation.swap(rank - 2, rank - 1);
    cx.transpose(value, &permutation)
}

/// `diag(S^T M T)` for 0/1 selections `S`, `T` (`[n, k]`) and matrices `M` (`[batch.., n, n]`):
/// `M[s_k, t_k]` for each `k`, as `[batch.., k]`.
fn entries(cx: &mut Cx<'_>, a: &Mat, m: ValueId, s: ValueId, t: ValueId) -> Result<ValueId> {
    let b = a.b();
    let mt = matmul(cx, b, m, t, false)?;
    let n = cx.static_dim(s, 0, "the selection")?;
    let k = cx.static_dim(s, 1, "the selection")?;
    let s_wide = cx.broadcast_in_dim(s, &[b as i64, b as i64 + 1], a.shape(&[n, k]))?;
    let picked = cx.binary(BinaryOp::Multiply, mt, s_wide)?;
    cx.reduce(picked, ReduceKind::Sum, &[b])
}

/// The rotation `J` (`[batch.., n, n]`) of one round: `c` on the pairs' diagonal entries, `s` at
/// `(p, q)` and `-s` at `(q, p)`, the identity elsewhere.
fn rotation(cx: &mut Cx<'_>, a: &Mat, n: i64, pairs: &[(i64, i64)], c: ValueId, s: ValueId) -> Result<ValueId> {
    let b = a.b();
    let dtype = a.dtype;
    let p = selection(cx, dtype, n, pairs, true);
    let q = selection(cx, dtype, n, pairs, false);
    // The diagonal: c at each paired index, 1 at the others.
    let mut unpaired = vec![Scalar::Float(1.0); n as usize];
    for &(i, j) in pairs {
        unpaired[i as usize] = Scalar::Float(0.0);
        unpaired[j as usize] = Scalar::Float(0.0);
    }
    let unpaired = cx.literal(Literal::from_scalars(dtype, &[n], &unpaired).expect("one per index"));
    let column = |cx: &mut Cx<'_>, selection: ValueId, value: ValueId| -> Result<ValueId> {
        // `selection @ value` over the pairs: `[batch.., n]`.
        let dims = DotDims {
            lhs_contracting: [1].into_iter().collect(),
            rhs_contracting: [b as i64].into_iter().collect(),
            ..DotDims::default()
        };
        let product = cx.dot_general(selection, value, dims)?;
        // `[n, batch..]` to `[batch.., n]`.
        let permutation: Vec<i64> = (1..=b as i64).chain([0]).collect();
        cx.transpose(product, &permutation)
    };
    let on_p = column(cx, p, c)?;
    let on_q = column(cx, q, c)?;
    let unpaired = cx.broadcast_in_dim(unpaired, &[b as i64], a.shape(&[n]))?;
    let diagonal = cx.binary(BinaryOp::Add, on_p, on_q)?;
    let diagonal = cx.binary(BinaryOp::Add, diagonal, unpaired)?;
    let rows = super::index::iota(cx, &a.shape(&[n, n]), b)?;
    let cols = super::index::iota(cx, &a.shape(&[n, n]), b + 1)?;
    let on = cx.compare(CompareDirection::Eq, rows, cols)?;
    let diagonal_wide = cx.broadcast_in_dim(diagonal, &(0..=b as i64).collect::<Vec<_>>(), a.shape(&[n, n]))?;
    let zero = cx.splat(dtype, Scalar::Int(0), &a.shape(&[n, n]))?;
    let diagonal = cx.select(on, diagonal_wide, zero)?;
    // P diag(s) Q^T - Q diag(s) P^T.
    let k = pairs.len() as i64;
    let s_wide = cx.broadcast_in_dim(s, &(0..=b as i64).collect::<Vec<_>>(), a.shape(&[k, n]))?;
    let p_t = cx.transpose(p, &[1, 0])?;
    let q_t = cx.transpose(q, &[1, 0])?;
    let p_t = cx.broadcast_in_dim(p_t, &[b as i64, b as i64 + 1], a.shape(&[k, n]))?;
    let q_t = cx.broadcast_in_dim(q_t, &[b as i64, b as i64 + 1], a.shape(&[k, n]))?;
    let s_q_t = cx.binary(BinaryOp::Multiply, s_wide, q_t)?;
    let s_p_t = cx.binary(BinaryOp::Multiply, s_wide, p_t)?;
    let p_wide = cx_broadcast(cx, a, p, n, k)?;
    let q_wide = cx_broadcast(cx, a, q, n, k)?;
    let upper = matmul(cx, b, p_wide, s_q_t, true)?;
    let lower = matmul(cx, b, q_wide, s_p_t, true)?;
    let off = cx.binary(BinaryOp::Subtract, upper, lower)?;
    cx.binary(BinaryOp::Add, diagonal, off)
}

/// A `[n, k]` constant broadcast over the batch.
fn cx_broadcast(cx: &mut Cx<'_>, a: &Mat, value: ValueId, n: i64, k: i64) -> Result<ValueId> {
    let b = a.b() as i64;
    cx.broadcast_in_dim(value, &[b, b + 1], a.shape(&[n, k]))
}

/// The rotation angle of each pair from its entries `app`, `aqq`, `apq` (two-sided: zero `apq`;
/// one-sided, the Gram entries: orthogonal columns): `t = sign(z) / (|z| + sqrt(1 + z^2))` with `z
/// = (aqq - app) / (2 apq)`, `c = 1 / sqrt(1 + t^2)`, `s = t c`; no rotation where `apq` is 0.
fn angles(cx: &mut Cx<'_>, app: ValueId, aqq: ValueId, apq: ValueId) -> Result<(ValueId, ValueId)> {
    let zero = cx.splat_like(apq, Scalar::Int(0))?;
    let one = cx.splat_like(apq, Scalar::Int(1))?;
    let rotates = cx.compare(CompareDirection::Ne, apq, zero)?;
    let safe = cx.select(rotates, apq, one)?;
    let gap = cx.binary(BinaryOp::Subtract, aqq, app)?;
    let twice = cx.binary_scalar(BinaryOp::Multiply, safe, Scalar::Float(2.0))?;
    let z = cx.binary(BinaryOp::Divide, gap, twice)?;
    let z2 = cx.binary(BinaryOp::Multiply, z, z)?;
    let root = cx.binary(BinaryOp::Add, one, z2)?;
    let root = cx.unary(UnaryOp::Sqrt, root)?;
    let magnitude = cx.unary(UnaryOp::Abs, z)?;
    let denominator = cx.binary(BinaryOp::Add, magnitude, root)?;
    let t = cx.binary(BinaryOp::Divide, one, denominator)?;
    let negative = cx.compare(CompareDirection::Lt, z, zero)?;
    let minus_t = cx.unary(UnaryOp::Negate, t)?;
    let t = cx.select(negative, minus_t, t)?;
    let t = cx.select(rotates, t, zero)?;
    let t2 = cx.binary(BinaryOp::Multiply, t, t)?;
    let norm = cx.binary(BinaryOp::Add, one, t2)?;
    let norm = cx.unary(UnaryOp::Sqrt, norm)?;
    let c = cx.binary(BinaryOp::Divide, one, norm)?;
    let s = cx.binary(BinaryOp::Multiply, t, c)?;
    Ok((c, s))
}

/// Checks the size the rotations are unrolled for.
fn check_size(cx: &Cx<'_>, n: i64, what: &str) -> Result<()> {
    if n > MAX_JACOBI {
        return Err(cx.bad(format!(
            "{what}: matrices with {n} columns exceed the {MAX_JACOBI} that ttpu rotates (each Jacobi sweep holds n - 1 rounds of n x n products)"
        )));
    }
    Ok(())
}

/// Two-sided Jacobi on symmetric matrices: (the rotated matrix, whose diagonal holds the
/// eigenvalues, and the accumulated rotations `V`, whose columns are the eigenvectors).
fn symmetric_jacobi(cx: &mut Cx<'_>, a: &Mat, matrix: ValueId) -> Result<(ValueId, ValueId)> {
    let n = a.n;
    let b = a.b();
    let vectors = identity(cx, a, n)?;
    let [matrix, vectors] = sweep_loop(cx, a.dtype, [matrix, vectors], |cx, [mut matrix, mut vectors]| {
        for pairs in rounds(n) {
            if pairs.is_empty() {
                continue;
            }
            let p = selection(cx, a.dtype, n, &pairs, true);
            let q = selection(cx, a.dtype, n, &pairs, false);
            let app = entries(cx, a, matrix, p, p)?;
            let aqq = entries(cx, a, matrix, q, q)?;
            let apq = entries(cx, a, matrix, p, q)?;
            let (c, s) = angles(cx, app, aqq, apq)?;
            let j = rotation(cx, a, n, &pairs, c, s)?;
            let j_t = transposed(cx, j)?;
            let left = matmul(cx, b, j_t, matrix, true)?;
            matrix = matmul(cx, b, left, j, true)?;
            vectors = matmul(cx, b, vectors, j, true)?;
        }
        Ok([matrix, vectors])
    })?;
    Ok((matrix, vectors))
}

/// The sweeps over `state` (the matrix and the accumulated rotations): one IR `while` whose body
/// is one sweep (its rounds unrolled), run [`sweeps`] times, so the graph holds one sweep.
fn sweep_loop(
    cx: &mut Cx<'_>,
    dtype: DType,
    state: [ValueId; 2],
    sweep: impl Fn(&mut Cx<'_>, [ValueId; 2]) -> Result<[ValueId; 2]>,
) -> Result<[ValueId; 2]> {
    let count = cx.scalar(DType::I64, Scalar::Int(0));
    let state = [count, state[0], state[1]];
    let types: Vec<ttpu_ir::TensorType> = state.iter().map(|&value| cx.ty(value)).collect();
    let total = sweeps(dtype) as i64;
    let cond = super::loops::loop_graph(cx, &types, |cx, s| {
        let limit = cx.scalar(DType::I64, Scalar::Int(total));
        Ok(vec![cx.compare(CompareDirection::Lt, s[0], limit)?])
    })?;
    let body = super::loops::loop_graph(cx, &types, |cx, s| {
        let [matrix, vectors] = sweep(cx, [s[1], s[2]])?;
        let next = cx.binary_scalar(BinaryOp::Add, s[0], Scalar::Int(1))?;
        Ok(vec![next, matrix, vectors])
    })?;
    let built = cx.b.while_loop(cond, body, &state);
    let end = cx.ok(built)?;
    Ok([end[1], end[2]])
}

/// The identity matrices `[batch.., n, n]`.
fn identity(cx: &mut Cx<'_>, a: &Mat, n: i64) -> Result<ValueId> {
    let b = a.b();
    let rows = super::index::iota(cx, &a.shape(&[n, n]), b)?;
    let cols = super::index::iota(cx, &a.shape(&[n, n]), b + 1)?;
    let on = cx.compare(CompareDirection::Eq, rows, cols)?;
    cx.convert(on, a.dtype)
}

/// One-sided Jacobi on the columns of `A` (`m x n`): (`A V`, whose columns are orthogonal with
/// the singular values as norms, and `V`).
fn column_jacobi(cx: &mut Cx<'_>, a: &Mat, matrix: ValueId) -> Result<(ValueId, ValueId)> {
    let n = a.n;
    let b = a.b();
    let vectors = identity(cx, a, n)?;
    let square = Mat { batch: a.batch.clone(), m: n, n, dtype: a.dtype };
    let [columns, vectors] = sweep_loop(cx, a.dtype, [matrix, vectors], |cx, [mut columns, mut vectors]| {
        for pairs in rounds(n) {
            if pairs.is_empty() {
                continue;
            }
            // The Gram matrix of the columns holds each pair's norms and inner product.
            let columns_t = transposed(cx, columns)?;
            let gram = matmul(cx, b, columns_t, columns, true)?;
            let p = selection(cx, a.dtype, n, &pairs, true);
            let q = selection(cx, a.dtype, n, &pairs, false);
            let app = entries(cx, &square, gram, p, p)?;
            let aqq = entries(cx, &square, gram, q, q)?;
            let apq = entries(cx, &square, gram, p, q)?;
            let (c, s) = angles(cx, app, aqq, apq)?;
            let j = rotation(cx, &square, n, &pairs, c, s)?;
            columns = matmul(cx, b, columns, j, true)?;
            vectors = matmul(cx, b, vectors, j, true)?;
        }
        Ok([columns, vectors])
    })?;
    Ok((columns, vectors))
}

/// The norm of each column of `[batch.., m, n]`: `[batch.., n]`.
fn column_norms(cx: &mut Cx<'_>, a: &Mat, columns: ValueId) -> Result<ValueId> {
    let squares = cx.binary(BinaryOp::Multiply, columns, columns)?;
    let sum = cx.reduce(squares, ReduceKind::Sum, &[a.b()])?;
    cx.unary(UnaryOp::Sqrt, sum)
}

/// `values` (`[batch.., n]`) sorted along the last dim.
fn sorted(cx: &mut Cx<'_>, values: ValueId, descending: bool) -> Result<ValueId> {
    let (sorted, _) = super::index::sort_last(cx, values, descending)?;
    Ok(sorted)
}

/// Refuses reading element `index` of the node's results (a basis LAPACK chooses).
fn refuse_read(cx: &Cx<'_>, index: usize, what: &str) -> Result<()> {
    if cx.result_read(index) {
        return Err(cx.bad(format!(
            "reading {what} is refused: each is unique only up to its sign (a repeated value's basis up to a \
             rotation), which LAPACK fixes by the course of its own algorithm; the values, and what does not \
             depend on that choice (the pseudo-inverse, the matrix norms), are computed"
        )));
    }
    Ok(())
}

/// The matrix `A` of a symmetric problem read from one triangle (`UPLO`).
fn symmetric(cx: &mut Cx<'_>, a: &Mat, matrix: ValueId, lower: bool) -> Result<ValueId> {
    let b = a.b();
    let rows = super::index::iota(cx, &a.shape(&[a.n, a.n]), b)?;
    let cols = super::index::iota(cx, &a.shape(&[a.n, a.n]), b + 1)?;
    let keep = cx.compare(if lower { CompareDirection::Ge } else { CompareDirection::Le }, rows, cols)?;
    let mirrored = transposed(cx, matrix)?;
    cx.select(keep, matrix, mirrored)
}

/// `_linalg_eigh(A, UPLO, compute_v)` → (eigenvalues ascending, eigenvectors); reading the
/// eigenvectors is refused (see the module docs).
pub(super) fn eigh(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("A")?;
    let a = matrices(cx, x, "linalg.eigh")?;
    if a.m != a.n {
        return Err(cx.bad(format!("linalg.eigh: A must be batches of square matrices, found {}", cx.ty(x))));
    }
    check_size(cx, a.n, "linalg.eigh")?;
    let compute_v = args.bool_or("compute_v", true)?;
    if compute_v {
        refuse_read(cx, 1, "the eigenvectors of linalg.eigh")?;
    }
    let lower = match args.opt_str("UPLO")?.unwrap_or("L") {
        "L" => true,
        "U" => false,
        other => return Err(cx.bad(format!("linalg.eigh: UPLO must be 'L' or 'U', found '{other}'"))),
    };
    let matrix = symmetric(cx, &a, x, lower)?;
    let (rotated, _) = symmetric_jacobi(cx, &a, matrix)?;
    let diagonal = super::linalg::diagonal(
        cx,
        &super::linalg::Square { batch: a.batch.clone(), n: a.n, dtype: a.dtype },
        rotated,
    )?;
    let values = sorted(cx, diagonal, false)?;
    // The eigenvectors' slot: empty without compute_v, as PyTorch returns it; never read otherwise.
    let vectors =
        if compute_v { identity(cx, &a, a.n)? } else { cx.splat(a.dtype, Scalar::Int(0), &Shape::from_static(&[0]))? };
    Ok(Imported::Tuple(vec![Imported::Tensor(values), Imported::Tensor(vectors)]))
}

/// `A` with its rows and columns exchanged when it is wide, so the columns to orthogonalize are
/// the fewer.
fn tall(cx: &mut Cx<'_>, a: &Mat, x: ValueId) -> Result<(Mat, ValueId, bool)> {
    if a.m >= a.n {
        return Ok((a.clone(), x, false));
    }
    let t = transposed(cx, x)?;
    Ok((Mat { batch: a.batch.clone(), m: a.n, n: a.m, dtype: a.dtype }, t, true))
}

/// `_linalg_svd(A, full_matrices, compute_uv, driver)` → (U, S descending, Vh); reading `U` or
/// `Vh` is refused (see the module docs).
pub(super) fn svd(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("A")?;
    let a = matrices(cx, x, "linalg.svd")?;
    let compute_uv = args.bool_or("compute_uv", true)?;
    if compute_uv {
        refuse_read(cx, 0, "the left singular vectors of linalg.svd")?;
        refuse_read(cx, 2, "the right singular vectors of linalg.svd")?;
    }
    let (t, value, _) = tall(cx, &a, x)?;
    check_size(cx, t.n, "linalg.svd")?;
    let (columns, _) = column_jacobi(cx, &t, value)?;
    let norms = column_norms(cx, &t, columns)?;
    let values = sorted(cx, norms, true)?;
    let empty = cx.splat(a.dtype, Scalar::Int(0), &Shape::from_static(&[0]))?;
    let (u, vh) = if compute_uv {
        let k = a.m.min(a.n);
        let full = args.bool_or("full_matrices", false)?;
        let (u_cols, v_rows) = if full { (a.m, a.n) } else { (k, k) };
        // Never read (refused above): shaped placeholders of PyTorch's types.
        (
            cx.splat(a.dtype, Scalar::Int(0), &a.shape(&[a.m, u_cols]))?,
            cx.splat(a.dtype, Scalar::Int(0), &a.shape(&[v_rows, a.n]))?,
        )
    } else {
        (empty, empty)
    };
    Ok(Imported::Tuple(vec![Imported::Tensor(u), Imported::Tensor(values), Imported::Tensor(vh)]))
}

/// `linalg_pinv.atol_rtol_tensor(self, *, atol, rtol, hermitian)`: `V S^+ U^T`, the singular
/// values at most `max(atol, rtol * largest)` left out (`rtol` defaults to `eps * max(m, n)`
/// without `atol`, to 0 with it), as `sum_i v_i (A v_i)^T / s_i^2` over the kept ones.
pub(super) fn pinv(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let a = matrices(cx, x, "linalg.pinv")?;
    // PyTorch's Hermitian path reads the lower triangle only.
    let x = if args.bool_or("hermitian", false)? {
        if a.m != a.n {
            return Err(cx.bad(format!("linalg.pinv: hermitian=True needs square matrices, found {}", cx.ty(x))));
        }
        symmetric(cx, &a, x, true)?
    } else {
        x
    };
    let (t, value, wide) = tall(cx, &a, x)?;
    check_size(cx, t.n, "linalg.pinv")?;
    let b = t.b();
    let (columns, vectors) = column_jacobi(cx, &t, value)?;
    let norms = column_norms(cx, &t, columns)?;
    // The threshold per matrix.
    let largest = cx.reduce(norms, ReduceKind::Max, &[b])?;
    let eps = if a.dtype == DType::F64 { f64::EPSILON } else { f64::from(f32::EPSILON) };
    let atol = args.opt_tensor("atol")?;
    let rtol = args.opt_tensor("rtol")?;
    let scalar_of = |cx: &mut Cx<'_>, value: Option<ValueId>, default: f64| -> Result<ValueId> {
        match value {
            Some(value) => {
                let value = cx.convert(value, a.dtype)?;
                cx.broadcast_to(value, &largest_shape(&t))
            }
            None => cx.splat(a.dtype, Scalar::Float(default), &largest_shape(&t)),
        }
    };
    let rtol_default = if atol.is_some() { 0.0 } else { eps * a.m.max(a.n) as f64 };
    let atol = scalar_of(cx, atol, 0.0)?;
    let rtol = scalar_of(cx, rtol, rtol_default)?;
    let relative = cx.binary(BinaryOp::Multiply, rtol, largest)?;
    let threshold = cx.binary(BinaryOp::Maximum, atol, relative)?;
    let threshold = cx.broadcast_in_dim(threshold, &(0..b as i64).collect::<Vec<_>>(), t.shape(&[t.n]))?;
    let kept = cx.compare(CompareDirection::Gt, norms, threshold)?;
    let squares = cx.binary(BinaryOp::Multiply, norms, norms)?;
    let one = cx.splat_like(squares, Scalar::Int(1))?;
    let zero = cx.splat_like(squares, Scalar::Int(0))?;
    let safe = cx.select(kept, squares, one)?;
    let weights = cx.binary(BinaryOp::Divide, one, safe)?;
    let weights = cx.select(kept, weights, zero)?;
    // V diag(w) (A V)^T: [n, n] x [n, m].
    let weights =
        cx.broadcast_in_dim(weights, &(0..b as i64).chain([b as i64 + 1]).collect::<Vec<_>>(), t.shape(&[t.n, t.n]))?;
    let scaled = cx.binary(BinaryOp::Multiply, vectors, weights)?;
    let columns_t = transposed(cx, columns)?;
    let result = matmul(cx, b, scaled, columns_t, true)?;
    tensor(if wide { transposed(cx, result)? } else { result })
}

/// The shape of one number per matrix.
fn largest_shape(a: &Mat) -> Shape {
    a.shape(&[])
}
