//! The closed set of tensor primitives, at StableHLO granularity.
//!
//! The frontend decomposes every ATen op into these; rewrites and lowering see nothing else.
//! Names are the StableHLO mnemonics, so IR text, rewrite rules, the StableHLO builders and error
//! messages all spell an op the same way. Attributes live inside the variant, operands in the node.
//! Elementwise ops take operands of one shape: broadcasting is always an explicit `broadcast_in_dim`.

use smallvec::SmallVec;

use crate::{DType, Dim, Literal, Shape};

/// Elementwise ops of one operand whose result has the operand's type (except `is_finite`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum UnaryOp {
    Abs,
    Negate,
    Exponential,
    ExponentialMinusOne,
    Log,
    LogPlusOne,
    Sqrt,
    Rsqrt,
    Cbrt,
    Tanh,
    Logistic,
    Sine,
    Cosine,
    Tan,
    Floor,
    Ceil,
    RoundNearestEven,
    RoundNearestAfz,
    Sign,
    Not,
    /// Result is `bool` of the operand's shape.
    IsFinite,
    /// `log |Γ(x)|` (CHLO's `lgamma`, lowered by the plugin).
    Lgamma,
    /// `d/dx log Γ(x)` (CHLO's `digamma`).
    Digamma,
    /// The inverse of `erf` (CHLO's `erf_inv`).
    ErfInv,
    /// `1 - erf(x)` without cancellation (CHLO's `erfc`).
    Erfc,
    /// `exp(-|x|) I1(x)`, the exponentially scaled modified Bessel function of order one (CHLO's
    /// `bessel_i1e`).
    BesselI1e,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 26] = [
        UnaryOp::Abs,
        UnaryOp::Negate,
        UnaryOp::Exponential,
        UnaryOp::ExponentialMinusOne,
        UnaryOp::Log,
        UnaryOp::LogPlusOne,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Cbrt,
        UnaryOp::Tanh,
        UnaryOp::Logistic,
        UnaryOp::Sine,
        UnaryOp::Cosine,
        UnaryOp::Tan,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::RoundNearestEven,
        UnaryOp::RoundNearestAfz,
        UnaryOp::Sign,
        UnaryOp::Not,
        UnaryOp::IsFinite,
        UnaryOp::Lgamma,
        UnaryOp::Digamma,
        UnaryOp::ErfInv,
        UnaryOp::Erfc,
        UnaryOp::BesselI1e,
    ];

    /// The StableHLO mnemonic.
    pub fn mnemonic(self) -> &'static str {
        match self {
            UnaryOp::Abs => "abs",
            UnaryOp::Negate => "negate",
            UnaryOp::Exponential => "exponential",
            UnaryOp::ExponentialMinusOne => "exponential_minus_one",
            UnaryOp::Log => "log",
            UnaryOp::LogPlusOne => "log_plus_one",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Cbrt => "cbrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Logistic => "logistic",
            UnaryOp::Sine => "sine",
            UnaryOp::Cosine => "cosine",
            UnaryOp::Tan => "tan",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::RoundNearestEven => "round_nearest_even",
            UnaryOp::RoundNearestAfz => "round_nearest_afz",
            UnaryOp::Sign => "sign",
            UnaryOp::Not => "not",
            UnaryOp::IsFinite => "is_finite",
            UnaryOp::Lgamma => "lgamma",
            UnaryOp::Digamma => "digamma",
            UnaryOp::ErfInv => "erf_inv",
            UnaryOp::Erfc => "erfc",
            UnaryOp::BesselI1e => "bessel_i1e",
        }
    }

    /// Whether the op is a CHLO op (`chlo.<mnemonic>`): special functions StableHLO lacks, which
    /// PJRT plugins legalize into their own approximations.
    pub fn is_chlo(self) -> bool {
        matches!(self, UnaryOp::Lgamma | UnaryOp::Digamma | UnaryOp::ErfInv | UnaryOp::Erfc | UnaryOp::BesselI1e)
    }

    /// Whether the op is defined only for floating-point operands.
    pub fn needs_float(self) -> bool {
        !matches!(self, UnaryOp::Abs | UnaryOp::Negate | UnaryOp::Sign | UnaryOp::Not)
    }
}

/// Elementwise ops of two operands of one type; the result has that type.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum BinaryOp {
    Add,
    Subtract,
    Multiply,
    /// Float division, or integer division truncating toward zero.
    Divide,
    /// Remainder with the sign of the dividend (C `fmod`).
    Remainder,
    Power,
    Maximum,
    Minimum,
    Atan2,
    And,
    Or,
    Xor,
    ShiftLeft,
    ShiftRightArithmetic,
    ShiftRightLogical,
    /// `ψ⁽ⁿ⁾(x)`, the `n`-th derivative of digamma (CHLO's `polygamma`; `n` is the left operand).
    Polygamma,
    /// The Hurwitz zeta function `ζ(x, q)` (CHLO's `zeta`).
    Zeta,
    /// The next representable number after `x` toward `y` (CHLO's `next_after`).
    NextAfter,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 18] = [
        BinaryOp::Add,
        BinaryOp::Subtract,
        BinaryOp::Multiply,
        BinaryOp::Divide,
        BinaryOp::Remainder,
        BinaryOp::Power,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::Atan2,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRightArithmetic,
        BinaryOp::ShiftRightLogical,
        BinaryOp::Polygamma,
        BinaryOp::Zeta,
        BinaryOp::NextAfter,
    ];

    /// The StableHLO mnemonic.
    pub fn mnemonic(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Subtract => "subtract",
            BinaryOp::Multiply => "multiply",
            BinaryOp::Divide => "divide",
            BinaryOp::Remainder => "remainder",
            BinaryOp::Power => "power",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::ShiftLeft => "shift_left",
            BinaryOp::ShiftRightArithmetic => "shift_right_arithmetic",
            BinaryOp::ShiftRightLogical => "shift_right_logical",
            BinaryOp::Polygamma => "polygamma",
            BinaryOp::Zeta => "zeta",
            BinaryOp::NextAfter => "next_after",
        }
    }

    /// Whether the op is a CHLO op (see [`UnaryOp::is_chlo`]).
    pub fn is_chlo(self) -> bool {
        matches!(self, BinaryOp::Polygamma | BinaryOp::Zeta | BinaryOp::NextAfter)
    }
}

/// Direction of a `compare`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum CompareDirection {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareDirection {
    /// Every direction.
    pub const ALL: [CompareDirection; 6] = [
        CompareDirection::Eq,
        CompareDirection::Ne,
        CompareDirection::Lt,
        CompareDirection::Le,
        CompareDirection::Gt,
        CompareDirection::Ge,
    ];

    /// StableHLO's spelling (`EQ`, `GT`, ...).
    pub fn mnemonic(self) -> &'static str {
        match self {
            CompareDirection::Eq => "EQ",
            CompareDirection::Ne => "NE",
            CompareDirection::Lt => "LT",
            CompareDirection::Le => "LE",
            CompareDirection::Gt => "GT",
            CompareDirection::Ge => "GE",
        }
    }
}

/// The combining function of a `reduce` or `reduce_window`; its identity is the implicit init value.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)]
pub enum ReduceKind {
    Sum,
    Product,
    Max,
    Min,
    /// Logical and over `bool`.
    And,
    /// Logical or over `bool`.
    Or,
}

impl ReduceKind {
    /// Every kind.
    pub const ALL: [ReduceKind; 6] =
        [ReduceKind::Sum, ReduceKind::Product, ReduceKind::Max, ReduceKind::Min, ReduceKind::And, ReduceKind::Or];

    /// The IR text spelling.
    pub fn mnemonic(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Product => "product",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
            ReduceKind::And => "and",
            ReduceKind::Or => "or",
        }
    }

    /// The binary op that combines two elements.
    pub fn combiner(self) -> BinaryOp {
        match self {
            ReduceKind::Sum => BinaryOp::Add,
            ReduceKind::Product => BinaryOp::Multiply,
            ReduceKind::Max => BinaryOp::Maximum,
            ReduceKind::Min => BinaryOp::Minimum,
            ReduceKind::And => BinaryOp::And,
            ReduceKind::Or => BinaryOp::Or,
        }
    }

    /// The identity element for `dtype`: the init value of the reduction and the padding value of
    /// a `reduce_window` (so max pooling pads with `-inf` as PyTorch does).
    pub fn identity(self, dtype: DType) -> crate::Scalar {
        use crate::Scalar;
        let min_int = |dtype: DType| match dtype {
            DType::I64 => i64::MIN,
            DType::I32 => i64::from(i32::MIN),
            DType::I16 => i64::from(i16::MIN),
            DType::I8 => i64::from(i8::MIN),
            _ => 0,
        };
        let max_int = |dtype: DType| match dtype {
            DType::I64 => i64::MAX,
            DType::I32 => i64::from(i32::MAX),
            DType::I16 => i64::from(i16::MAX),
            DType::I8 => i64::from(i8::MAX),
            // u64::MAX's bit pattern.
            DType::U64 => -1,
            DType::U16 => i64::from(u16::MAX),
            DType::U32 => i64::from(u32::MAX),
            _ => 255,
        };
        match (self, dtype) {
            // Bitwise `and` over integers needs every bit set: -1 in two's complement (255 for u8).
            (ReduceKind::And, dtype) if dtype.is_integer() => Scalar::Int(-1),
            (ReduceKind::Sum, DType::Bool) | (ReduceKind::Or, _) => Scalar::Bool(false),
            (ReduceKind::Product, DType::Bool) | (ReduceKind::And, _) => Scalar::Bool(true),
            (ReduceKind::Sum, _) => Scalar::Int(0),
            (ReduceKind::Product, _) => Scalar::Int(1),
            (ReduceKind::Max, DType::Bool) => Scalar::Bool(false),
            (ReduceKind::Min, DType::Bool) => Scalar::Bool(true),
            (ReduceKind::Max, dtype) if dtype.is_float() => Scalar::Float(f64::NEG_INFINITY),
            (ReduceKind::Min, dtype) if dtype.is_float() => Scalar::Float(f64::INFINITY),
            (ReduceKind::Max, dtype) => Scalar::Int(min_int(dtype)),
            (ReduceKind::Min, dtype) => Scalar::Int(max_int(dtype)),
        }
    }
}

/// Dimension numbers of a `dot_general`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct DotDims {
    /// Batch dims of the lhs, paired with `rhs_batch`.
    pub lhs_batch: SmallVec<[i64; 4]>,
    /// Batch dims of the rhs.
    pub rhs_batch: SmallVec<[i64; 4]>,
    /// Contracting dims of the lhs, paired with `rhs_contracting`.
    pub lhs_contracting: SmallVec<[i64; 4]>,
    /// Contracting dims of the rhs.
    pub rhs_contracting: SmallVec<[i64; 4]>,
}

/// Window of a `reduce_window`: one entry per operand dim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Window {
    /// Window size per dim.
    pub dimensions: SmallVec<[i64; 4]>,
    /// Stride per dim.
    pub strides: SmallVec<[i64; 4]>,
    /// Dilation of the operand per dim.
    pub base_dilations: SmallVec<[i64; 4]>,
    /// Dilation of the window per dim.
    pub window_dilations: SmallVec<[i64; 4]>,
    /// (low, high) padding per dim, filled with the reduction's identity.
    pub padding: SmallVec<[(i64, i64); 4]>,
}

/// Convolution attributes, with StableHLO's dimension numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ConvDims {
    /// Batch dim of the input.
    pub input_batch: i64,
    /// Feature dim of the input.
    pub input_feature: i64,
    /// Spatial dims of the input, in window order.
    pub input_spatial: SmallVec<[i64; 3]>,
    /// Input-feature dim of the kernel.
    pub kernel_input_feature: i64,
    /// Output-feature dim of the kernel.
    pub kernel_output_feature: i64,
    /// Spatial dims of the kernel.
    pub kernel_spatial: SmallVec<[i64; 3]>,
    /// Batch dim of the output.
    pub output_batch: i64,
    /// Feature dim of the output.
    pub output_feature: i64,
    /// Spatial dims of the output.
    pub output_spatial: SmallVec<[i64; 3]>,
    /// Window stride per spatial dim.
    pub window_strides: SmallVec<[i64; 3]>,
    /// (low, high) zero padding per spatial dim.
    pub padding: SmallVec<[(i64, i64); 3]>,
    /// Input (transposed-convolution) dilation per spatial dim.
    pub lhs_dilation: SmallVec<[i64; 3]>,
    /// Kernel dilation per spatial dim.
    pub rhs_dilation: SmallVec<[i64; 3]>,
    /// Feature groups.
    pub feature_group_count: i64,
    /// Batch groups.
    pub batch_group_count: i64,
}

/// Gather attributes, with StableHLO's dimension numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GatherDims {
    /// Result dims that hold the slice's offset dims.
    pub offset_dims: SmallVec<[i64; 4]>,
    /// Operand dims of size-1 slices dropped from the result.
    pub collapsed_slice_dims: SmallVec<[i64; 4]>,
    /// Operand batching dims (paired with `start_indices_batching_dims`).
    pub operand_batching_dims: SmallVec<[i64; 4]>,
    /// Index batching dims.
    pub start_indices_batching_dims: SmallVec<[i64; 4]>,
    /// Operand dim that each index-vector component addresses.
    pub start_index_map: SmallVec<[i64; 4]>,
    /// Dim of the indices that holds the index vector.
    pub index_vector_dim: i64,
    /// Size of the slice taken per operand dim.
    pub slice_sizes: SmallVec<[i64; 4]>,
    /// Whether the caller guarantees sorted indices.
    pub indices_are_sorted: bool,
}

/// How `scatter` combines an update with the value already there.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScatterKind {
    /// Overwrite.
    Replace,
    /// Combine with a reduction's combiner.
    Combine(ReduceKind),
}

/// Scatter attributes, with StableHLO's dimension numbers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScatterDims {
    /// Update dims that lie inside the window.
    pub update_window_dims: SmallVec<[i64; 4]>,
    /// Operand dims of size-1 windows absent from the updates.
    pub inserted_window_dims: SmallVec<[i64; 4]>,
    /// Operand batching dims.
    pub input_batching_dims: SmallVec<[i64; 4]>,
    /// Index batching dims.
    pub scatter_indices_batching_dims: SmallVec<[i64; 4]>,
    /// Operand dim that each index-vector component addresses.
    pub scatter_dims_to_operand_dims: SmallVec<[i64; 4]>,
    /// Dim of the indices that holds the index vector.
    pub index_vector_dim: i64,
    /// How updates combine.
    pub kind: ScatterKind,
    /// Whether the caller guarantees sorted indices.
    pub indices_are_sorted: bool,
    /// Whether the caller guarantees no index repeats.
    pub unique_indices: bool,
}

/// The algorithm of an `rng_bit_generator`, StableHLO's `rng_algorithm`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RngAlgorithm {
    /// The backend's choice (XLA: Philox on CPU and GPU).
    Default,
    /// Threefry-2x32; the state has 2 u64 words.
    ThreeFry,
    /// Philox-4x32; the state has 2 or 3 u64 words.
    Philox,
}

impl RngAlgorithm {
    /// Every algorithm.
    pub const ALL: [RngAlgorithm; 3] = [RngAlgorithm::Default, RngAlgorithm::ThreeFry, RngAlgorithm::Philox];

    /// StableHLO's spelling (`DEFAULT`, `THREE_FRY`, `PHILOX`).
    pub fn mnemonic(self) -> &'static str {
        match self {
            RngAlgorithm::Default => "DEFAULT",
            RngAlgorithm::ThreeFry => "THREE_FRY",
            RngAlgorithm::Philox => "PHILOX",
        }
    }

    /// The number of u64 words of state the algorithm accepts.
    pub fn state_words(self) -> &'static [i64] {
        match self {
            RngAlgorithm::ThreeFry => &[2],
            RngAlgorithm::Philox | RngAlgorithm::Default => &[2, 3],
        }
    }
}

/// A tensor primitive. Operands are in the node; the variant holds the attributes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A constant tensor. No operands.
    Constant(Literal),
    /// `result[i...] = i[dimension]`, in the result type given. No operands.
    Iota {
        /// The counting dim.
        dimension: i64,
        /// Result dtype.
        dtype: DType,
        /// Result shape.
        shape: Shape,
    },
    /// Elementwise unary op.
    Unary(UnaryOp),
    /// Elementwise binary op on operands of one type.
    Binary(BinaryOp),
    /// Elementwise comparison; the result is `bool`.
    Compare(CompareDirection),
    /// `select(pred, on_true, on_false)`; `pred` is `bool` of the same shape or a scalar.
    Select,
    /// `clamp(min, operand, max)`; bounds are scalars or of the operand's shape.
    Clamp,
    /// Elementwise conversion to `dtype`.
    Convert(DType),
    /// Same elements, another shape (row-major).
    Reshape(Shape),
    /// Permutes dims: result dim `i` is operand dim `permutation[i]`.
    Transpose(SmallVec<[i64; 4]>),
    /// Broadcast: operand dim `i` maps to result dim `dims[i]`.
    BroadcastInDim {
        /// Result dim of each operand dim.
        dims: SmallVec<[i64; 4]>,
        /// Result shape.
        shape: Shape,
    },
    /// Strided slice. Starts and strides are static; a limit may be symbolic (`x[:, :s0]`, or a
    /// symbolic dim taken whole), and is then trusted to lie within the operand, as PyTorch's
    /// guards promise.
    Slice {
        /// First index per dim.
        start: SmallVec<[i64; 4]>,
        /// One past the last index per dim.
        limit: SmallVec<[Dim; 4]>,
        /// Step per dim.
        strides: SmallVec<[i64; 4]>,
    },
    /// Joins operands along `dimension`.
    Concatenate(i64),
    /// `pad(operand, value)`; negative low/high crop.
    Pad {
        /// Padding before each dim.
        low: SmallVec<[i64; 4]>,
        /// Padding after each dim.
        high: SmallVec<[i64; 4]>,
        /// Padding between elements of each dim.
        interior: SmallVec<[i64; 4]>,
    },
    /// Generalised matrix product; result dims are batch, lhs free, rhs free.
    DotGeneral(DotDims),
    /// Reduces `dimensions` of the operand with `kind`.
    Reduce {
        /// How elements combine.
        kind: ReduceKind,
        /// Reduced dims, ascending.
        dimensions: SmallVec<[i64; 4]>,
    },
    /// Sliding-window reduction (pooling).
    ReduceWindow {
        /// How elements combine.
        kind: ReduceKind,
        /// The window.
        window: Window,
    },
    /// `convolution(input, kernel)`.
    Convolution(ConvDims),
    /// `gather(operand, start_indices)`.
    Gather(GatherDims),
    /// `scatter(operand, scatter_indices, updates)`.
    Scatter(ScatterDims),
    /// `rng_bit_generator(state)`: random `u64` bits of `shape` from a `u64[2]` or `u64[3]` state.
    ///
    /// StableHLO's op also returns the advanced state; the IR keeps only the bits. Every op that
    /// needs random numbers gets a state of its own (the frontend derives one per op from a seed),
    /// so no graph threads a state from one op to the next, and one result per node keeps the
    /// optimizer's one-value-per-e-class model. With an explicit state operand the op is pure: two
    /// ops with equal states and attributes give equal bits and may be merged.
    RngBitGenerator {
        /// The generator.
        algorithm: RngAlgorithm,
        /// Result dtype (`u64`).
        dtype: DType,
        /// Result shape (static).
        shape: Shape,
    },
    /// The size of dim `.0` of the operand as an `i64` scalar: how a symbolic size becomes a
    /// value (`x * x.size(0)`). The frontend folds static sizes to constants, so this appears
    /// only for symbolic dims.
    DimSize(i64),
    /// The `i64` positions that sort the operand along `dimension`: stably (equal elements keep
    /// their order, `-0.0` equals `0.0`), NaN ordered above every number, ascending or
    /// descending. Values follow with a gather, so the node keeps one result.
    ArgSort {
        /// The sorted dim.
        dimension: i64,
        /// Largest first.
        descending: bool,
    },
    /// Communication between the replicas of a replicated program (see [`Collective`]).
    Collective(Collective),
    /// Reinterprets the bits of each element as `dtype` (StableHLO's `bitcast_convert`). Of equal
    /// widths the shape is kept; a narrower result splits each element into a new trailing dim of
    /// `width ratio` parts (lowest-addressed first, as little-endian memory holds them); a wider
    /// result joins the trailing dim, which must have exactly `ratio` elements. `bool` has no bit
    /// width in StableHLO and is refused.
    BitcastConvert(DType),
    /// The real part of a complex operand, in its part dtype (`c64` -> `f32`).
    Real,
    /// The imaginary part of a complex operand, in its part dtype.
    Imag,
    /// `complex(lhs, rhs)`: the complex number `lhs + i*rhs` from two `f32` (or two `f64`)
    /// operands of one shape.
    Complex,
    /// A discrete Fourier transform over the trailing `length.len()` dims (one to three), as
    /// StableHLO's `fft`: unnormalized forward transforms, inverse transforms scaled by `1/n`.
    Fft {
        /// Which transform.
        kind: FftType,
        /// The transform sizes of the trailing dims (for `irfft`, the real result's sizes).
        length: SmallVec<[i64; 3]>,
    },
    /// A loop (StableHLO's `while`): the operands are the initial loop state; while `cond` of
    /// the state is true, `body` maps the state to the next one; the results are the final
    /// state. One result per operand, of the operand's type.
    While(Box<WhileLoop>),
    /// A user op ([`crate::Kernel`]): one result per kernel result, operands of the kernel's
    /// input types. Opaque: no rewrite reads through it. It is the last variant, so adding it
    /// left the discriminants (and the optimizer's hashes) of the others alone.
    Kernel(std::sync::Arc<crate::Kernel>),
}

/// The two graphs of an [`Op::While`]. Both take the whole loop state (one input per operand of
/// the loop, of its type); `cond` returns one `bool[]`, `body` returns the next state, of the same
/// types. Values of the enclosing graph reach them only as loop state (a body passes an
/// invariant through unchanged), so each is a graph on its own: verified, optimized and printed
/// like any other.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WhileLoop {
    /// The condition: state -> `bool[]`.
    pub cond: crate::Graph,
    /// The step: state -> state.
    pub body: crate::Graph,
}

/// The transform of an [`Op::Fft`], as StableHLO's `fft_type`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FftType {
    /// Complex to complex, forward (`exp(-2*pi*i*k*n/N)`), unnormalized.
    Fft,
    /// Complex to complex, inverse, scaled by `1/N`.
    Ifft,
    /// Real to complex, forward: the last dim keeps its `N/2 + 1` non-redundant entries.
    Rfft,
    /// Complex to real, inverse of `Rfft`, scaled by `1/N`: reads `N/2 + 1` entries of the last dim.
    Irfft,
}

impl FftType {
    /// Every transform.
    pub const ALL: [FftType; 4] = [FftType::Fft, FftType::Ifft, FftType::Rfft, FftType::Irfft];

    /// StableHLO's spelling (`FFT`, `IFFT`, `RFFT`, `IRFFT`), also the IR text's.
    pub fn mnemonic(self) -> &'static str {
        match self {
            FftType::Fft => "FFT",
            FftType::Ifft => "IFFT",
            FftType::Rfft => "RFFT",
            FftType::Irfft => "IRFFT",
        }
    }
}

/// A collective across the replicas of a program run as N replicas, one per device. Replica
/// groups list replica ids; every group has the same size, and no replica appears twice.
/// Collectives are pure functions of all replicas' operands, so equal collectives on equal
/// operands may merge, but no rewrite sees through one.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every replica of a group gets the elementwise `kind`-reduction of the group's operands.
    AllReduce {
        /// How elements combine.
        kind: ReduceKind,
        /// The replica groups.
        groups: Vec<Vec<i64>>,
    },
    /// Every replica of a group gets the group's operands concatenated along `dimension`, in
    /// group order.
    AllGather {
        /// The dim concatenated along.
        dimension: i64,
        /// The replica groups.
        groups: Vec<Vec<i64>>,
    },
    /// The `kind`-reduction of the group's operands, split along `dimension`: the `i`-th
    /// replica of a group gets the `i`-th block.
    ReduceScatter {
        /// How elements combine.
        kind: ReduceKind,
        /// The dim split.
        dimension: i64,
        /// The replica groups.
        groups: Vec<Vec<i64>>,
    },
    /// Each replica splits its operand along `split_dimension` into one block per group member,
    /// sends block `j` to member `j`, and concatenates what it receives along
    /// `concat_dimension`, in group order.
    AllToAll {
        /// The dim split.
        split_dimension: i64,
        /// The dim concatenated along.
        concat_dimension: i64,
        /// The replica groups.
        groups: Vec<Vec<i64>>,
    },
    /// Replica `source` sends its operand to replica `target` for each pair; a replica that is
    /// no target gets zeros.
    CollectivePermute {
        /// `(source, target)` pairs: distinct sources, distinct targets.
        pairs: Vec<(i64, i64)>,
    },
}

impl Collective {
    /// The StableHLO mnemonic.
    pub fn mnemonic(&self) -> &'static str {
        match self {
            Collective::AllReduce { .. } => "all_reduce",
            Collective::AllGather { .. } => "all_gather",
            Collective::ReduceScatter { .. } => "reduce_scatter",
            Collective::AllToAll { .. } => "all_to_all",
            Collective::CollectivePermute { .. } => "collective_permute",
        }
    }

    /// The mnemonics of every collective, for parsers.
    pub const MNEMONICS: [&'static str; 5] =
        ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"];

    /// Checks the collective against a program of `replicas` replicas: every group member and
    /// every pair's source and target is a replica id below `replicas`, and the groups name
    /// every replica (XLA needs each replica in exactly one group). The error says what is
    /// wrong.
    pub fn check_replicas(&self, replicas: usize) -> Result<(), String> {
        let count = i64::try_from(replicas).unwrap_or(i64::MAX);
        let out_of_range = |id: i64| !(0..count).contains(&id);
        match self {
            Collective::CollectivePermute { pairs } => {
                if let Some(&(source, target)) = pairs.iter().find(|&&(s, t)| out_of_range(s) || out_of_range(t)) {
                    return Err(format!("pair ({source}, {target}) names a replica outside 0..{replicas}"));
                }
            }
            _ => {
                let groups = self.groups().unwrap_or(&[]);
                if let Some(&id) = groups.iter().flatten().find(|&&id| out_of_range(id)) {
                    return Err(format!("replica {id} of the groups is outside 0..{replicas}"));
                }
                let named = groups.iter().map(Vec::len).sum::<usize>();
                if named != replicas {
                    return Err(format!("the groups {groups:?} name {named} replicas of {replicas}"));
                }
            }
        }
        Ok(())
    }

    /// The replica groups (none for `collective_permute`).
    pub fn groups(&self) -> Option<&[Vec<i64>]> {
        match self {
            Collective::AllReduce { groups, .. }
            | Collective::AllGather { groups, .. }
            | Collective::ReduceScatter { groups, .. }
            | Collective::AllToAll { groups, .. } => Some(groups),
            Collective::CollectivePermute { .. } => None,
        }
    }
}

impl Op {
    /// The StableHLO-style mnemonic printed in IR text and messages.
    pub fn mnemonic(&self) -> &'static str {
        match self {
            Op::Constant(_) => "constant",
            Op::Iota { .. } => "iota",
            Op::Unary(op) => op.mnemonic(),
            Op::Binary(op) => op.mnemonic(),
            Op::Compare(_) => "compare",
            Op::Select => "select",
            Op::Clamp => "clamp",
            Op::Convert(_) => "convert",
            Op::BitcastConvert(_) => "bitcast_convert",
            Op::Reshape(_) => "reshape",
            Op::Transpose(_) => "transpose",
            Op::BroadcastInDim { .. } => "broadcast_in_dim",
            Op::Slice { .. } => "slice",
            Op::Concatenate(_) => "concatenate",
            Op::Pad { .. } => "pad",
            Op::DotGeneral(_) => "dot_general",
            Op::Reduce { .. } => "reduce",
            Op::ReduceWindow { .. } => "reduce_window",
            Op::Convolution(_) => "convolution",
            Op::Gather(_) => "gather",
            Op::Scatter(_) => "scatter",
            Op::RngBitGenerator { .. } => "rng_bit_generator",
            Op::DimSize(_) => "dim_size",
            Op::ArgSort { .. } => "argsort",
            Op::Collective(collective) => collective.mnemonic(),
            Op::Real => "real",
            Op::Imag => "imag",
            Op::Complex => "complex",
            Op::While(_) => "while",
            Op::Fft { .. } => "fft",
            Op::Kernel(_) => "kernel",
        }
    }
}
