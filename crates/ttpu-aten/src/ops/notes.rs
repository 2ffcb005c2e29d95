//! Notes on the decomposition table: which supported overloads leave variants out, and why the
//! unsupported core overloads are not in the table. `docs/ops.md` is generated from these notes,
//! the table and `data/core_ops.txt` (see [`crate::coverage`]).
//!
//! An overload in the table without a note is fully supported. An overload with a
//! [`Note::Unsupported`] must not be in the table; the refusal message of the importer quotes it.

/// What is known about one overload beyond its table entry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// In the table, but some variants are refused or differ from PyTorch: which ones.
    Partial(&'static str),
    /// Not in the table: why.
    Unsupported(&'static str),
}

/// The note of every random op.
const RANDOM: &str = "PyTorch's distribution from the seeded generator (see Random numbers), not PyTorch's \
                      numbers; fixed at compile time, so every run draws the same numbers";

/// The note of the unrolled LU factorizations.
const LU: &str = "matrices of a static size up to 64x64 (the factorization is unrolled into IR ops per column); \
                  float32 and float64; the pivots are LAPACK getf2's (the first largest magnitude), which MKL's \
                  blocked getrf matches unless two candidates tie to within its different rounding; `check_errors=True` \
                  (a run-time raise) is refused";

/// The note of the ops that read memory rather than elements.
const LAYOUT: &str = "exact over the layouts PyTorch gives views (permute, transpose, slice, select, unfold, \
                      diagonal, expand, split, unbind, view, as_strided), channels-last and preserve-format copies, \
                      pointwise ops of one strided tensor and the reductions, scans and products PyTorch always \
                      makes contiguous; graph inputs are taken as contiguous, as \
                      `torch.export` does; refused, naming the node, where the layout is not tracked (another op \
                      reading a strided view)";

/// What the FFT kernels leave out.
const FFT: &str = "at most three transformed dims in one call (StableHLO's `fft`), each of a static size; \
                   inverse transforms are XLA's, scaled by `n` times PyTorch's factor";

/// Notes, at most one per overload.
pub static NOTES: &[(&str, Note)] = &[
    (
        "aten.histc.default",
        Note::Partial(
            "with `min == max` and a NaN in the data PyTorch raises, here every bin is 0; integer tensors, \
             which PyTorch's CPU kernel refuses, are binned as its CUDA kernel bins them (64-bit integer \
             arithmetic)",
        ),
    ),
    (
        "aten.masked_scatter_backward.default",
        Note::Partial(
            "a mask with more true elements than `sizes` holds is PyTorch's view error (autograd never makes \
             one); here the excess is dropped",
        ),
    ),
    (
        "aten._grouped_mm.default",
        Note::Partial(
            "the four forms (2-D by 3-D, 2-D by 2-D and 3-D by 2-D with `offs`, 3-D by 3-D without); a `bias`, or \
             an `out_dtype` other than the operands', is refused",
        ),
    ),
    ("aten.as_strided.default", Note::Partial(LAYOUT)),
    ("aten.sym_storage_offset.default", Note::Partial(LAYOUT)),
    ("aten.sym_stride.int", Note::Partial(LAYOUT)),
    ("aten._fft_c2c.default", Note::Partial(FFT)),
    ("aten._fft_c2r.default", Note::Partial(FFT)),
    ("aten._fft_r2c.default", Note::Partial(FFT)),
    (
        "aten._local_scalar_dense.default",
        Note::Partial(
            "integer values (`.item()` of an integer tensor): a number the data decides, read back by a size \
             program before the rest of the program compiles for it (see docs/fx-format.md); the value of a \
             float or bool tensor is refused",
        ),
    ),
    (
        "aten.item.default",
        Note::Partial("as `_local_scalar_dense`: integer values only; a float or bool value is refused"),
    ),
    (
        "aten.native_dropout.default",
        Note::Partial(
            "train=True draws the mask with the seeded generator (see Random numbers): PyTorch's \
             distribution, not its numbers, fixed at compile time; eval mode is exact",
        ),
    ),
    ("aten.rand.default", Note::Partial(RANDOM)),
    ("aten.rand_like.default", Note::Partial(RANDOM)),
    ("aten.randn.default", Note::Partial(RANDOM)),
    ("aten.randn_like.default", Note::Partial(RANDOM)),
    ("aten.randint.default", Note::Partial(RANDOM)),
    ("aten.randint.low", Note::Partial(RANDOM)),
    ("aten.randint_like.default", Note::Partial(RANDOM)),
    ("aten.randint_like.low_dtype", Note::Partial(RANDOM)),
    (
        "aten.multinomial.default",
        Note::Partial(
            "PyTorch's algorithms (exponential keys without replacement, a search of the running sums with it) \
             from the seeded generator (see Random numbers), not PyTorch's numbers; weights that are negative, \
             infinite or NaN, a row whose weights sum to zero, or a row with fewer positive weights than \
             samples drawn without replacement (PyTorch's errors, decided by the data) are not detected",
        ),
    ),
    (
        "aten.randperm.default",
        Note::Partial(
            "a uniformly random permutation from the seeded generator (see Random numbers), not PyTorch's \
             numbers",
        ),
    ),
    ("aten.uniform.default", Note::Partial(RANDOM)),
    ("aten._linalg_det.default", Note::Partial(LU)),
    ("aten._linalg_slogdet.default", Note::Partial(LU)),
    ("aten.linalg_inv_ex.default", Note::Partial(LU)),
    ("aten._linalg_solve_ex.default", Note::Partial(LU)),
    ("aten.linalg_solve_ex.default", Note::Partial(LU)),
    (
        "aten.linalg_cholesky_ex.default",
        Note::Partial(
            "matrices of a static size up to 64x64, float32 and float64; where `info > 0` the factor is LAPACK \
             potf2's partial one (the failing column's remainder on the diagonal, `A`'s own entries from there \
             on), which is what MKL returns for small matrices; `check_errors=True` is refused",
        ),
    ),
    (
        "aten.triangular_solve.default",
        Note::Partial("matrices of a static size up to 64x64 (the substitution is unrolled); float32 and float64"),
    ),
    (
        "aten.linalg_solve_triangular.default",
        Note::Partial("matrices of a static size up to 64x64 (the substitution is unrolled); float32 and float64"),
    ),
    (
        "aten.rrelu_with_noise_functional.default",
        Note::Partial(
            "evaluation (`training=False`) is exact; training draws the slopes from PyTorch's distribution with \
             the seeded generator (see Random numbers), not PyTorch's numbers",
        ),
    ),
    ("aten.normal_functional.default", Note::Partial(RANDOM)),
    ("aten.normal.Tensor_float", Note::Partial(RANDOM)),
    ("aten.normal.float_Tensor", Note::Partial(RANDOM)),
    ("aten.normal.Tensor_Tensor", Note::Partial(RANDOM)),
    ("aten.normal.float_float", Note::Partial(RANDOM)),
    ("aten.bernoulli.p", Note::Partial(RANDOM)),
    ("aten.exponential.default", Note::Partial(RANDOM)),
    (
        "aten._assert_async.msg",
        Note::Partial(
            "a constant false condition is refused at import; a condition that depends on the data is not \
             checked at run time (PyTorch raises; the compiled program computes the same values and cannot raise)",
        ),
    ),
    (
        "aten._assert_async.default",
        Note::Partial(
            "a constant false condition is refused at import; a condition that depends on the data is not \
             checked at run time (PyTorch raises; the compiled program computes the same values and cannot raise)",
        ),
    ),
    ("quantized_decomposed.choose_qparams.tensor", Note::Partial(CHOOSE_QPARAMS)),
    ("quantized_decomposed.choose_qparams_symmetric.tensor", Note::Partial(CHOOSE_QPARAMS)),
    // ---- overloads the operator sweep added ----
    ("aten.randn.generator", Note::Partial(RANDOM)),
    ("aten.rand.generator", Note::Partial(RANDOM)),
    ("aten.as_strided_copy.default", Note::Partial(LAYOUT)),
    (
        "aten.as_strided_scatter.default",
        Note::Partial(
            "a contiguous self of static size; a view that holds one element twice is refused (which write wins is not defined)",
        ),
    ),
    (
        "aten.nanmedian.dim",
        Note::Partial(
            "the index of a row of NaN only is 0; PyTorch's `std::nth_element` leaves another NaN's index there in rows longer than three (the values agree)",
        ),
    ),
    (
        "aten.mode.default",
        Note::Partial(
            "the index along a dim longer than 16 is refused when the program reads it: PyTorch's kernel sorts such rows with `std::sort`, which reorders equal values by no rule (the value is computed either way)",
        ),
    ),
    (
        "aten.segment_reduce.default",
        Note::Partial("floating-point data, with `lengths` or `offsets` (PyTorch's kernel takes no `indices` either)"),
    ),
    (
        "aten._linalg_check_errors.default",
        Note::Partial(
            "checks nothing: PyTorch raises on a nonzero `info`, which a compiled program cannot (the factorization \
             returns `info` for the model to read)",
        ),
    ),
    ("aten.linalg_lu_factor_ex.default", Note::Partial(LU_ANY)),
    ("aten.linalg_lu.default", Note::Partial(LU_ANY)),
    ("aten.lu_unpack.default", Note::Partial(LU_ANY)),
    ("aten.linalg_lu_solve.default", Note::Partial(LU_SQUARE)),
    ("aten.cholesky_solve.default", Note::Partial(LU_SQUARE)),
    ("aten.cholesky_inverse.default", Note::Partial(LU_SQUARE)),
    ("aten.geqrf.default", Note::Partial(QR)),
    ("aten.linalg_qr.default", Note::Partial(QR)),
    ("aten.linalg_householder_product.default", Note::Partial(QR)),
    ("aten.ormqr.default", Note::Partial(QR)),
    (
        "aten._linalg_eigh.default",
        Note::Partial(
            "eigenvalues (ascending, as LAPACK's) of matrices up to 64x64 by Jacobi rotations, float32 and float64; \
             reading the eigenvectors is refused: each is unique only up to its sign (a repeated eigenvalue's \
             basis up to a rotation), which LAPACK's `syevd` fixes by the course of its own algorithm",
        ),
    ),
    (
        "aten._linalg_svd.default",
        Note::Partial(
            "singular values (descending) of matrices with up to 64 columns (and rows) by one-sided Jacobi \
             rotations, float32 and float64, which also give `svdvals`, `matrix_rank`, `cond` and the 2- and \
             nuclear norms; reading `U` or `Vh` is refused: LAPACK's `gesdd` chooses each singular vector's sign \
             (and a repeated value's basis) by the course of its own algorithm",
        ),
    ),
    (
        "aten.linalg_pinv.atol_rtol_tensor",
        Note::Partial(
            "matrices with up to 64 columns (and rows), float32 and float64 (`hermitian=True` reads the lower \
             triangle, as PyTorch's eigendecomposition path does)",
        ),
    ),
    (
        "aten.linalg_matrix_exp.default",
        Note::Partial(
            "matrices of a static size up to 64x64, float32 and float64; scaling and squaring with a Taylor series \
             of degree 18, so equal to PyTorch's to rounding (its kernel picks lower degrees for small norms)",
        ),
    ),
    (
        "aten.linalg_eig.default",
        Note::Unsupported(
            "the eigenvalues of a general matrix come in the order LAPACK's `geev` deflates them in its Hessenberg \
             QR iterations, and each eigenvector is unique only up to a complex scale LAPACK normalizes its own \
             way: neither follows a rule another algorithm can reproduce",
        ),
    ),
    ("aten._upsample_bilinear2d_aa.default", Note::Partial(ANTIALIAS)),
    ("aten._upsample_bilinear2d_aa.vec", Note::Partial(ANTIALIAS)),
    ("aten._upsample_bicubic2d_aa.default", Note::Partial(ANTIALIAS)),
    ("aten._upsample_bicubic2d_aa.vec", Note::Partial(ANTIALIAS)),
];

/// The unrolled LU factorization of matrices of any shape.
const LU_ANY: &str = "matrices (square, tall or wide) of a static size up to 64x64 (unrolled per column, \
                      `min(m, n)` steps), float32 and float64; `pivot=False` is refused as on PyTorch's CPU, \
                      `check_errors=True` (a run-time raise) too";

/// The unrolled factorizations and solves of square matrices.
const LU_SQUARE: &str = "square matrices of a static size up to 64x64 (unrolled per column), float32 and float64; \
                         `pivot=False` is refused as on PyTorch's CPU, `check_errors=True` (a run-time raise) too";

/// The unrolled Householder reflections.
const QR: &str = "matrices of a static size up to 64x64 (unrolled per column), float32 and float64; `ormqr`'s \
                  other operand shares the reflectors' batch";

/// What the antialiased upsamplings take.
const ANTIALIAS: &str = "float32, float64 and uint8 images (PyTorch's CPU kernels take no other dtype)";

/// The note of the dynamic quantization flow's parameter choice.
const CHOOSE_QPARAMS: &str = "float32 inputs only (PyTorch also takes float16 and bfloat16, computing in \
                              their own dtype); an input with a symbolic or zero element count is refused; a NaN in the \
                              input gives PyTorch a NaN scale, which no quantized value can use, and is not \
                              reproduced";

/// Why the `torch.distributed` functional collectives (`_c10d_functional.all_reduce`, ...) are
/// refused: a program exported from one rank names its process group, not devices.
const C10D: &str = "a collective of `torch.distributed` is exported for one rank of a process group, which \
                    says nothing of the devices it ran on; export the single-device model and lay it out over \
                    devices with `--parallel ddp|fsdp` or `--plan` (XLA's partitioner adds the collectives), \
                    or build the collective in the IR (`ttpu_ir::Collective`)";

/// The note on `name`, if any.
pub fn note(name: &str) -> Option<Note> {
    if name.starts_with("_c10d_functional.") || name.starts_with("c10d_functional.") {
        return Some(Note::Unsupported(C10D));
    }
    NOTES.iter().find(|(key, _)| *key == name).map(|(_, note)| *note)
}
