//! The state decompositions work in ([`Cx`]) and the helpers they share: error construction at the
//! current node, IR-building wrappers that turn inference failures into [`Error::BadArguments`],
//! broadcasting, dtype promotion of operands, scalar constants and dim normalisation.
//!
//! Keeping these here means each decomposition in `ops/` reads as the math it implements.

use std::sync::Arc;

use indexmap::IndexMap;
use smallvec::SmallVec;
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Dim, DotDims, GraphBuilder, InferError, Literal, ReduceKind, Scalar, Shape,
    SymbolRange, TensorType, UnaryOp, ValueId,
};

use crate::error::{Error, Location, Result};
use crate::promote::{self, Participant};
use crate::sym;
use crate::{Span, SymExpr};

/// What a node of the `.fx` graph imported to.
#[derive(Clone, Debug, PartialEq)]
pub enum Imported {
    /// A tensor.
    Tensor(ValueId),
    /// The results of a multi-output op, selected with `getitem`.
    Tuple(Vec<Imported>),
    /// A symbolic int (`sym_size`), folded: a literal or an expression over unbound symbols.
    SymInt(SymExpr),
    /// A symbolic bool (a comparison of symbolic ints, for runtime asserts): its value when
    /// every symbol involved has one.
    SymBool(Option<bool>),
    /// Nothing (`_assert_tensor_metadata` and other checks).
    None,
    /// A submodule of the graph (`self.true_graph_0`), by name: an argument of `torch.cond`.
    Submodule(String),
    /// Left out of a size program: it needs a size the data decides that has no value yet (see
    /// [`crate::DataSize`]).
    Skipped,
}

/// Where errors of the node being imported point.
#[derive(Clone, Debug)]
pub struct Site {
    /// The program's path, for messages.
    pub path: Arc<str>,
    /// The program's text, to turn spans into lines and columns.
    pub source: Arc<str>,
    /// The overload (`aten.add.Tensor`) or callee.
    pub op: String,
    /// The node's name.
    pub node: String,
    /// The callee's span (or the statement's, for nodes without a call).
    pub span: Span,
}

impl Site {
    /// The location of `span` in the program.
    pub fn location(&self, span: Span) -> Location {
        Location::new(&self.path, &self.source, span)
    }

    /// [`Error::BadArguments`] at the call.
    pub fn bad(&self, message: impl Into<String>) -> Error {
        Error::BadArguments {
            at: self.location(self.span),
            op: self.op.clone(),
            node: self.node.clone(),
            message: message.into(),
        }
    }

    /// [`Error::DynamicDims`] at the call.
    pub fn dynamic(&self, message: impl Into<String>) -> Error {
        Error::DynamicDims { at: self.location(self.span), message: message.into() }
    }
}

/// An operand of an elementwise op: a tensor or a Python number.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Operand {
    /// A tensor value.
    Tensor(ValueId),
    /// A Python number (a "wrapped number" in PyTorch's promotion).
    Scalar(Scalar),
}

/// The decomposition context: the graph under construction and the current node's site.
pub struct Cx<'a> {
    /// The graph under construction.
    pub b: GraphBuilder,
    /// Where errors point.
    pub site: Site,
    /// Concrete sizes for symbols.
    pub symbol_values: &'a IndexMap<String, i64>,
    /// The seed of random ops (`ttpu_fx::ImportOptions::seed` for `.fx` text).
    pub seed: u64,
    /// Random draws made so far; each gets a generator state of its own.
    pub rng_draws: u64,
    /// The type the `.fx` text annotates the current node with, when it is a tensor. Only sizes
    /// the data decides (how many elements a bool mask selects) are read from it; everything
    /// else is inferred and checked against it.
    pub annotated: Option<TensorType>,
    /// How the current node's tensor arguments sit in memory, by parameter name (only the ones
    /// that are not contiguous): what `as_strided` and `sym_stride` read.
    pub input_layouts: Vec<(&'static str, crate::storage::Layout)>,
    /// For a node with several results: the annotations of the `getitem` nodes that read them,
    /// by result index (where one does), the only place the export prints their sizes.
    pub annotated_elements: Vec<Option<TensorType>>,
    /// Whether every result reaches the caller (an eager call, whose results are all returned),
    /// rather than only those a `getitem` reads ([`Cx::result_read`]).
    pub every_result_read: bool,
    /// The annotation of a node whose result is a symbolic int (`Sym(u0)`), folded.
    pub annotated_sym: Option<SymExpr>,
    /// The symbols of input dims; any other symbol is one the data decides (PyTorch's unbacked
    /// `u0`, ...), defined by a node such as `nonzero` while the program runs.
    pub input_symbols: std::collections::HashSet<String>,
    /// The sizes the data decides that this import computes, for a size program.
    pub pending: Vec<(crate::DataSize, ValueId)>,
    /// For a frontend that draws random numbers with fresh keys on every run (the device): each
    /// draw reads its generator state (`u64[2]`) from a new graph input, listed here in draw
    /// order, instead of a constant derived from [`Cx::seed`].
    pub rng_inputs: Option<Vec<ValueId>>,
    /// For a frontend without annotations (the device): sizes the data decides are named
    /// `u0`, `u1`, ... in the order the decomposition asks for them, counting from this, rather
    /// than read from the node's annotation.
    pub data_symbols: Option<u32>,
}

/// A size the data decides, as a decomposition sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDim {
    /// Its value is known (given in `symbol_values`, or printed as a number).
    Known(i64),
    /// It has no value yet: this import computes it for a size program, and the node is left out.
    Pending,
}

/// The most elements any tensor of an imported program may have (2^40): far beyond any device, and
/// small enough that products of a tensor's dims never overflow `i64`.
pub const MAX_ELEMENTS: i64 = 1 << 40;

/// The most entries of a table the importer computes on the host (gather positions, pooling
/// masks, index lists): 16M entries, about 256 MiB while built.
pub const MAX_TABLE: i64 = 1 << 24;

/// The most steps a decomposition unrolls into graph nodes (pooling kernel offsets).
pub const MAX_UNROLL: i64 = 1 << 16;

/// The element count of `dims` when it is at most [`MAX_ELEMENTS`].
pub fn element_count(dims: &[i64]) -> Option<i64> {
    dims.iter()
        .try_fold(1i64, |acc, &dim| if dim < 0 { None } else { acc.checked_mul(dim) })
        .filter(|&count| count <= MAX_ELEMENTS)
}

pub use ttpu_torch::graph::keepdim_shape;
pub use ttpu_torch::promote::opmath;

impl Cx<'_> {
    /// Whether the current node's result `index` is read: a result a decomposition cannot make
    /// exact (a singular vector's sign, an unstable sort's index) is refused only where it is.
    pub fn result_read(&self, index: usize) -> bool {
        self.every_result_read || self.annotated_elements.get(index).is_some_and(Option::is_some)
    }

    /// The size the data decides at dim `dim` of the current node's result (`element` of a
    /// multi-output node, read from the `getitem` that selects it; the first candidate that has an
    /// annotation decides). A symbol without a value is computed with `count` (an `i64` scalar)
    /// and recorded for the size program; the caller then leaves the node out.
    pub fn data_dim(
        &mut self,
        candidates: &[(Option<usize>, usize)],
        what: &str,
        count: impl FnOnce(&mut Cx<'_>) -> Result<ValueId>,
    ) -> Result<DataDim> {
        if let Some(counter) = self.data_symbols.as_mut() {
            let name = format!("u{counter}");
            *counter += 1;
            if let Some(&known) = self.symbol_values.get(&name) {
                return Ok(DataDim::Known(known));
            }
            let value = count(self)?;
            self.record_pending(&name, what, value)?;
            return Ok(DataDim::Pending);
        }
        let found = candidates.iter().find_map(|&(element, dim)| {
            let ty = match element {
                None => self.annotated.as_ref(),
                Some(index) => self.annotated_elements.get(index).and_then(Option::as_ref),
            }?;
            ty.shape.dims().get(dim).cloned()
        });
        let Some(dim) = found else {
            if candidates.iter().any(|(element, _)| element.is_none()) {
                return Err(
                    self.bad(format!("{what} is decided by the data, and the node has no annotated type to name it"))
                );
            }
            // No `getitem` reads a result that depends on the size: any size builds the program
            // the model uses.
            return Ok(DataDim::Known(0));
        };
        match dim {
            Dim::Static(size) => Ok(DataDim::Known(size)),
            Dim::Sym(name) if self.is_data_symbol(&name) => {
                if !self.pending.iter().any(|(size, _)| size.symbol == name.as_ref()) {
                    let value = count(self)?;
                    self.record_pending(&name, what, value)?;
                }
                Ok(DataDim::Pending)
            }
            other => Err(self.site.dynamic(format!(
                "{what} is decided by the data, and the export gives it as `{other}`, not as a symbol of its own"
            ))),
        }
    }

    /// Whether `name` is a size the data decides that has no value yet.
    pub fn is_data_symbol(&self, name: &str) -> bool {
        !self.input_symbols.contains(name) && !self.symbol_values.contains_key(name)
    }

    /// [`Cx::data_dim`] for a number the data decides (`.item()`): the value of symbol `name`,
    /// or, without one, `value` (an integer scalar) recorded for the size program.
    pub fn data_sym(&mut self, name: &str, what: &str, value: ValueId) -> Result<DataDim> {
        if let Some(&known) = self.symbol_values.get(name) {
            return Ok(DataDim::Known(known));
        }
        if !self.pending.iter().any(|(size, _)| size.symbol == name) {
            self.record_pending(name, what, value)?;
        }
        Ok(DataDim::Pending)
    }

    /// Records that the size program computes symbol `name` as `value`, at the current node.
    fn record_pending(&mut self, name: &str, what: &str, value: ValueId) -> Result<()> {
        let value = self.convert(value, DType::I64)?;
        let size = crate::DataSize {
            symbol: name.to_string(),
            node: self.site.node.clone(),
            op: self.site.op.clone(),
            what: what.to_string(),
            at: self.site.location(self.site.span),
        };
        self.pending.push((size, value));
        Ok(())
    }

    /// The size of a host-side table of `factors` entries multiplied out, checked against
    /// [`MAX_TABLE`]: sizes from the input reach an allocation only through here.
    /// A zero factor counts as one: the loops that fill a table run over the other factors even
    /// when it is empty.
    pub fn table(&self, factors: &[i64], what: &str) -> Result<usize> {
        factors
            .iter()
            .try_fold(1i64, |acc, &factor| if factor < 0 { None } else { acc.checked_mul(factor.max(1)) })
            .filter(|&count| count <= MAX_TABLE)
            .map(|count| count as usize)
            .ok_or_else(|| {
                self.bad(format!("{what} needs a table of {factors:?} entries, more than the {MAX_TABLE} allowed"))
            })
    }

    /// A count of steps to unroll, checked against [`MAX_UNROLL`].
    pub fn unroll(&self, factors: &[i64], what: &str) -> Result<usize> {
        factors
            .iter()
            .try_fold(1i64, |acc, &factor| if factor < 0 { None } else { acc.checked_mul(factor) })
            .filter(|&count| count <= MAX_UNROLL)
            .map(|count| count as usize)
            .ok_or_else(|| {
                self.bad(format!("{what} would unroll {factors:?} steps, more than the {MAX_UNROLL} allowed"))
            })
    }

    /// [`Error::BadArguments`] at the current node.
    pub fn bad(&self, message: impl Into<String>) -> Error {
        self.site.bad(message)
    }

    /// Wraps an IR inference failure as bad arguments of the current node.
    pub fn ok<T>(&self, built: std::result::Result<T, InferError>) -> Result<T> {
        built.map_err(|error| self.bad(error.to_string()))
    }

    /// The type of `value`.
    pub fn ty(&self, value: ValueId) -> TensorType {
        self.b.ty(value).clone()
    }

    /// The dtype of `value`.
    pub fn dtype(&self, value: ValueId) -> DType {
        self.b.ty(value).dtype
    }

    /// The rank of `value`.
    pub fn rank(&self, value: ValueId) -> usize {
        self.b.ty(value).rank()
    }

    /// The shape of `value`.
    pub fn shape(&self, value: ValueId) -> Shape {
        self.b.ty(value).shape.clone()
    }

    /// Static sizes of `value`, or an error naming `what` needs them.
    pub fn static_dims(&self, value: ValueId, what: &str) -> Result<SmallVec<[i64; 4]>> {
        let ty = self.b.ty(value);
        ty.shape.as_static().ok_or_else(|| self.site.dynamic(format!("{what} needs static dims, found {ty}")))
    }

    /// A static dim of `value`.
    pub fn static_dim(&self, value: ValueId, dim: usize, what: &str) -> Result<i64> {
        let ty = self.b.ty(value);
        ty.shape[dim]
            .as_static()
            .ok_or_else(|| self.site.dynamic(format!("{what} needs dim {dim} of {ty} to be static")))
    }

    /// Normalises a PyTorch dim (negative counts from the end) for a tensor of rank `rank`.
    /// Rank-0 tensors accept dims 0 and -1, as in PyTorch.
    pub fn norm_dim(&self, dim: i64, rank: usize) -> Result<usize> {
        let wrap = rank.max(1) as i64;
        let index = if dim < 0 { dim + wrap } else { dim };
        if index < 0 || index >= wrap {
            return Err(self.bad(format!("dim {dim} is out of range for a tensor of rank {rank}")));
        }
        Ok(index as usize)
    }

    /// Normalises a list of dims; duplicates are an error.
    pub fn norm_dims(&self, dims: &[i64], rank: usize) -> Result<Vec<usize>> {
        let mut out = Vec::with_capacity(dims.len());
        for &dim in dims {
            let index = self.norm_dim(dim, rank)?;
            if out.contains(&index) {
                return Err(self.bad(format!("dim {dim} appears more than once in {dims:?}")));
            }
            out.push(index);
        }
        Ok(out)
    }

    /// The IR dim a symbolic size stands for (folded with the given symbol values).
    pub fn dim_of(&mut self, expr: &SymExpr) -> Result<Dim> {
        let folded = sym::fold(expr, self.symbol_values);
        self.intern_dim(&folded).ok_or_else(|| {
            self.site.dynamic(format!(
                "the size `{}` cannot be a dim of the IR; give a value to {} (symbol_values)",
                sym::Show(&folded),
                folded.symbols().join(", ")
            ))
        })
    }

    /// The dim of a folded expression: a literal or a bare symbol (declared if it was not).
    pub fn intern_dim(&mut self, folded: &SymExpr) -> Option<Dim> {
        let symbols = &mut self.b.graph_mut().symbols;
        sym::to_dim(folded, |name| {
            // A symbol without a range constraint still needs a declaration for the verifier.
            symbols.name(name).unwrap_or_else(|| symbols.declare(name, SymbolRange { min: 0, max: None }))
        })
    }

    /// A symbolic int as an `i64` scalar computed at run time from the sizes of input dims
    /// (`dim_size`), with Python's `//` and `%`; `None` when a symbol is no input's dim size.
    /// Unused results are removed by dead-code elimination.
    pub fn sym_tensor(&mut self, expr: &SymExpr) -> Result<Option<ValueId>> {
        let folded = sym::fold(expr, self.symbol_values);
        let int = |cx: &mut Cx<'_>, value: i64| cx.scalar(DType::I64, Scalar::Int(value));
        let value = match &folded {
            SymExpr::Int(value) => int(self, *value),
            SymExpr::Symbol(name) => {
                let source = self.b.graph().inputs.iter().find_map(|&input| {
                    let dims = self.b.ty(input).shape.dims().to_vec();
                    dims.iter()
                        .position(|dim| matches!(dim, Dim::Sym(symbol) if symbol.as_ref() == name))
                        .map(|index| (input, index))
                });
                let Some((input, index)) = source else { return Ok(None) };
                let built = self.b.dim_size(input, index as i64);
                self.ok(built)?
            }
            SymExpr::Add(a, b)
            | SymExpr::Sub(a, b)
            | SymExpr::Mul(a, b)
            | SymExpr::FloorDiv(a, b)
            | SymExpr::Mod(a, b)
            | SymExpr::Min(a, b)
            | SymExpr::Max(a, b) => {
                let (Some(lhs), Some(rhs)) = (self.sym_tensor(a)?, self.sym_tensor(b)?) else { return Ok(None) };
                match &folded {
                    SymExpr::Add(..) => self.binary(BinaryOp::Add, lhs, rhs)?,
                    SymExpr::Min(..) => self.binary(BinaryOp::Minimum, lhs, rhs)?,
                    SymExpr::Max(..) => self.binary(BinaryOp::Maximum, lhs, rhs)?,
                    SymExpr::Sub(..) => self.binary(BinaryOp::Subtract, lhs, rhs)?,
                    SymExpr::Mul(..) => self.binary(BinaryOp::Multiply, lhs, rhs)?,
                    floor_or_mod => {
                        // Truncating division and remainder, moved toward negative infinity when
                        // the remainder is non-zero and its sign differs from the divisor's.
                        let quotient = self.binary(BinaryOp::Divide, lhs, rhs)?;
                        let remainder = self.binary(BinaryOp::Remainder, lhs, rhs)?;
                        let zero = int(self, 0);
                        let inexact = self.compare(CompareDirection::Ne, remainder, zero)?;
                        let remainder_negative = self.compare(CompareDirection::Lt, remainder, zero)?;
                        let divisor_negative = self.compare(CompareDirection::Lt, rhs, zero)?;
                        let signs_differ = self.compare(CompareDirection::Ne, remainder_negative, divisor_negative)?;
                        let adjust = self.binary(BinaryOp::And, inexact, signs_differ)?;
                        if matches!(floor_or_mod, SymExpr::FloorDiv(..)) {
                            let one = int(self, 1);
                            let lower = self.binary(BinaryOp::Subtract, quotient, one)?;
                            self.select(adjust, lower, quotient)?
                        } else {
                            let shifted = self.binary(BinaryOp::Add, remainder, rhs)?;
                            self.select(adjust, shifted, remainder)?
                        }
                    }
                }
            }
        };
        Ok(Some(value))
    }

    /// The shape for a list of symbolic sizes.
    pub fn shape_of(&mut self, sizes: &[SymExpr]) -> Result<Shape> {
        let mut dims = Vec::with_capacity(sizes.len());
        for size in sizes {
            let dim = self.dim_of(size)?;
            if matches!(dim, Dim::Static(size) if size < 0) {
                return Err(self.bad(format!("negative size {dim}")));
            }
            dims.push(dim);
        }
        Ok(dims.into_iter().collect())
    }

    // ---- IR building, with inference errors mapped to this node ----

    /// A rank-0 constant.
    pub fn scalar(&mut self, dtype: DType, value: Scalar) -> ValueId {
        self.b.constant(Literal::scalar(dtype, value))
    }

    /// A constant literal.
    pub fn literal(&mut self, literal: Literal) -> ValueId {
        self.b.constant(literal)
    }

    /// `value` of `dtype`, broadcast to `shape` (a scalar constant when `shape` is rank 0).
    pub fn splat(&mut self, dtype: DType, value: Scalar, shape: &Shape) -> Result<ValueId> {
        let scalar = self.scalar(dtype, value);
        self.broadcast_to(scalar, shape)
    }

    /// `value` of `like`'s dtype and shape.
    pub fn splat_like(&mut self, like: ValueId, value: Scalar) -> Result<ValueId> {
        let ty = self.ty(like);
        self.splat(ty.dtype, value, &ty.shape)
    }

    /// A unary op.
    pub fn unary(&mut self, op: UnaryOp, operand: ValueId) -> Result<ValueId> {
        let built = self.b.unary(op, operand);
        self.ok(built)
    }

    /// A binary op on operands of one type.
    pub fn binary(&mut self, op: BinaryOp, lhs: ValueId, rhs: ValueId) -> Result<ValueId> {
        let built = self.b.binary(op, lhs, rhs);
        self.ok(built)
    }

    /// A binary op on operands of one dtype, broadcasting their shapes.
    pub fn binary_bcast(&mut self, op: BinaryOp, lhs: ValueId, rhs: ValueId) -> Result<ValueId> {
        let [lhs, rhs] = self.broadcast_all([lhs, rhs])?;
        self.binary(op, lhs, rhs)
    }

    /// `value op scalar`, the scalar in `value`'s dtype.
    pub fn binary_scalar(&mut self, op: BinaryOp, value: ValueId, scalar: Scalar) -> Result<ValueId> {
        let constant = self.splat_like(value, scalar)?;
        self.binary(op, value, constant)
    }

    /// An elementwise comparison of operands of one type.
    pub fn compare(&mut self, direction: CompareDirection, lhs: ValueId, rhs: ValueId) -> Result<ValueId> {
        let built = self.b.compare(direction, lhs, rhs);
        self.ok(built)
    }

    /// `on_true` where `pred` holds, else `on_false` (one shape).
    pub fn select(&mut self, pred: ValueId, on_true: ValueId, on_false: ValueId) -> Result<ValueId> {
        let built = self.b.select(pred, on_true, on_false);
        self.ok(built)
    }

    /// Converts to `dtype`; no node when it already has it.
    pub fn convert(&mut self, value: ValueId, dtype: DType) -> Result<ValueId> {
        let built = ttpu_torch::graph::convert(&mut self.b, value, dtype);
        self.ok(built)
    }

    /// Reinterprets the bits as `dtype` (see [`ttpu_ir::Op::BitcastConvert`] for the shape); no
    /// node when it already has it.
    pub fn bitcast_convert(&mut self, value: ValueId, dtype: DType) -> Result<ValueId> {
        if self.dtype(value) == dtype {
            return Ok(value);
        }
        let built = self.b.bitcast_convert(value, dtype);
        self.ok(built)
    }

    /// Reshapes; no node when the shape is unchanged.
    pub fn reshape(&mut self, value: ValueId, shape: Shape) -> Result<ValueId> {
        if self.b.ty(value).shape == shape {
            return Ok(value);
        }
        let built = self.b.reshape(value, shape);
        self.ok(built)
    }

    /// Transposes; no node for the identity permutation.
    pub fn transpose(&mut self, value: ValueId, permutation: &[i64]) -> Result<ValueId> {
        if permutation.iter().enumerate().all(|(index, &dim)| index as i64 == dim) {
            return Ok(value);
        }
        let built = self.b.transpose(value, permutation);
        self.ok(built)
    }

    /// `value` broadcast into `shape`, its dims landing at `dims`.
    pub fn broadcast_in_dim(&mut self, value: ValueId, dims: &[i64], shape: Shape) -> Result<ValueId> {
        let built = self.b.broadcast_in_dim(value, dims, shape);
        self.ok(built)
    }

    /// A static slice: `start..limit` step `strides` per dim.
    pub fn slice(&mut self, value: ValueId, start: &[i64], limit: &[i64], strides: &[i64]) -> Result<ValueId> {
        let built = self.b.slice(value, start, limit, strides);
        self.ok(built)
    }

    /// Slices dim `dim` only: `start..limit` step `stride`; no node when it takes everything.
    pub fn slice_dim(&mut self, value: ValueId, dim: usize, start: i64, limit: i64, stride: i64) -> Result<ValueId> {
        let size = self.static_dim(value, dim, "slicing")?;
        if start == 0 && limit == size && (stride == 1 || size <= 1) {
            return Ok(value);
        }
        // The other dims are taken whole, symbolic ones to their end.
        let mut limits: Vec<Dim> = self.shape(value).0.into_vec();
        let mut starts = vec![0; limits.len()];
        let mut strides = vec![1; limits.len()];
        starts[dim] = start;
        limits[dim] = Dim::Static(limit);
        strides[dim] = stride;
        let built = self.b.slice_to(value, &starts, &limits, &strides);
        self.ok(built)
    }

    /// Values joined along `dimension`.
    pub fn concatenate(&mut self, values: &[ValueId], dimension: i64) -> Result<ValueId> {
        let built = self.b.concatenate(values, dimension);
        self.ok(built)
    }

    /// `value` padded with `fill` (`low`, `high` and `interior` per dim).
    pub fn pad(
        &mut self,
        value: ValueId,
        fill: ValueId,
        low: &[i64],
        high: &[i64],
        interior: &[i64],
    ) -> Result<ValueId> {
        let built = self.b.pad(value, fill, low, high, interior);
        self.ok(built)
    }

    /// A general dot product.
    pub fn dot_general(&mut self, lhs: ValueId, rhs: ValueId, dims: DotDims) -> Result<ValueId> {
        let built = self.b.dot_general(lhs, rhs, dims);
        self.ok(built)
    }

    /// Reduces `dims` (any order); no node when there is nothing to reduce.
    pub fn reduce(&mut self, value: ValueId, kind: ReduceKind, dims: &[usize]) -> Result<ValueId> {
        let dims = self.scalar_dims(value, dims);
        let built = ttpu_torch::graph::reduce(&mut self.b, value, kind, dims);
        self.ok(built)
    }

    /// `dims` of `value`, none for a 0-dim tensor: PyTorch takes dim 0 (or -1) of a 0-dim tensor
    /// as the tensor itself ([`Cx::norm_dim`] wraps over one dim), so reducing it is the identity.
    fn scalar_dims<'d>(&self, value: ValueId, dims: &'d [usize]) -> &'d [usize] {
        if self.rank(value) == 0 { &[] } else { dims }
    }

    /// A `Max`/`Min` reduction over `dims` that is NaN wherever its group holds a NaN, as in
    /// PyTorch. XLA's CPU backend compiles max/min with fast min/max by default and drops NaN, so
    /// the NaN is put back explicitly; other kinds and non-float types reduce plainly.
    pub fn reduce_propagating_nan(&mut self, value: ValueId, kind: ReduceKind, dims: &[usize]) -> Result<ValueId> {
        let reduced = self.reduce(value, kind, dims)?;
        if !matches!(kind, ReduceKind::Max | ReduceKind::Min) || !self.dtype(value).is_float() || dims.is_empty() {
            return Ok(reduced);
        }
        let is_nan = self.compare(CompareDirection::Ne, value, value)?;
        let any_nan = self.reduce(is_nan, ReduceKind::Or, dims)?;
        let nan = self.splat(self.dtype(value), Scalar::Float(f64::NAN), &self.shape(reduced))?;
        self.select(any_nan, nan, reduced)
    }

    /// Reduces `dims` and keeps them as size 1 when `keepdim`.
    pub fn reduce_keep(&mut self, value: ValueId, kind: ReduceKind, dims: &[usize], keepdim: bool) -> Result<ValueId> {
        let dims = self.scalar_dims(value, dims);
        let built = ttpu_torch::graph::reduce_keep(&mut self.b, value, kind, dims, keepdim);
        self.ok(built)
    }

    // ---- broadcasting and promotion ----

    /// Broadcasts `value` to `shape` (numpy rules: rank extension on the left, size-1 dims grow).
    pub fn broadcast_to(&mut self, value: ValueId, shape: &Shape) -> Result<ValueId> {
        let from = self.shape(value);
        if &from == shape {
            return Ok(value);
        }
        if from.rank() > shape.rank() {
            return Err(self.bad(format!("cannot broadcast {} to {shape}", self.ty(value))));
        }
        // Size-1 dims that meet a larger dim need no special handling: `broadcast_in_dim` expands them.
        let built = ttpu_torch::graph::broadcast_to(&mut self.b, value, shape);
        self.ok(built)
    }

    /// The broadcast shape of `shapes` (numpy rules), or bad arguments.
    pub fn broadcast_shape(&self, shapes: &[Shape]) -> Result<Shape> {
        let rank = shapes.iter().map(Shape::rank).max().unwrap_or(0);
        let mut out: Vec<Dim> = vec![Dim::Static(1); rank];
        for shape in shapes {
            let offset = rank - shape.rank();
            for (index, dim) in shape.dims().iter().enumerate() {
                let slot = &mut out[offset + index];
                if *dim == Dim::Static(1) || dim == slot {
                    continue;
                }
                if *slot == Dim::Static(1) {
                    *slot = dim.clone();
                } else {
                    let shown: Vec<String> = shapes.iter().map(ToString::to_string).collect();
                    return Err(self.bad(format!("shapes {} do not broadcast", shown.join(", "))));
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Broadcasts every value to their common shape.
    pub fn broadcast_all<const N: usize>(&mut self, values: [ValueId; N]) -> Result<[ValueId; N]> {
        let shapes: Vec<Shape> = values.iter().map(|&value| self.shape(value)).collect();
        let shape = self.broadcast_shape(&shapes)?;
        let mut out = values;
        for value in &mut out {
            *value = self.broadcast_to(*value, &shape)?;
        }
        Ok(out)
    }

    /// How `operand` takes part in type promotion.
    pub fn participant(&self, operand: Operand) -> Participant {
        match operand {
            Operand::Tensor(value) => {
                let ty = self.b.ty(value);
                if ty.rank() == 0 { Participant::ZeroDim(ty.dtype) } else { Participant::Dim(ty.dtype) }
            }
            Operand::Scalar(value) => Participant::Scalar(promote::scalar_category(value)),
        }
    }

    /// `torch.result_type(*operands)`.
    pub fn result_type(&self, operands: &[Operand]) -> DType {
        let participants: Vec<Participant> = operands.iter().map(|&operand| self.participant(operand)).collect();
        promote::result_type(&participants).unwrap_or(promote::DEFAULT_FLOAT)
    }

    /// Every operand as a tensor of `dtype`, broadcast to their common shape.
    pub fn prepare<const N: usize>(&mut self, operands: [Operand; N], dtype: DType) -> Result<[ValueId; N]> {
        let mut values = Vec::with_capacity(N);
        for operand in operands {
            values.push(match operand {
                Operand::Tensor(value) => self.convert(value, dtype)?,
                Operand::Scalar(value) => self.scalar(dtype, value),
            });
        }
        let values: [ValueId; N] = values.try_into().expect("one value per operand");
        self.broadcast_all(values)
    }

    /// Whether `operand` is a Python number or a zero-dim tensor: PyTorch's CPU kernels read such
    /// an operand at full precision ("opmath") when the result is `f16`/`bf16`.
    pub fn is_scalar_like(&self, operand: Operand) -> bool {
        match operand {
            Operand::Tensor(value) => self.rank(value) == 0,
            Operand::Scalar(_) => true,
        }
    }
}
