//! Shapes, dims and tensor types.
//!
//! A dim is a static size, a symbol from the model's range constraints (`s77`), or a compound
//! expression of symbols ([`DimExpr`]: `s0*s1`, `2*s0 + 1`). Symbols carry their name, so a type
//! prints the same way everywhere (`f32[s77, 8]`); their ranges live in the graph's
//! [`SymbolTable`]. A dim is always in its simplest form: an expression that is a constant is
//! `Static`, one that is a single symbol is `Sym` ([`DimExpr::into_dim`]), so `==` on dims is
//! equality of sizes as polynomials.

use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use smallvec::SmallVec;

use crate::{DType, DimExpr};

/// One dimension of a shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    /// A size known when the graph is built.
    Static(i64),
    /// A size named by a symbol, known only at run time.
    Sym(Arc<str>),
    /// A size computed from symbols; never a constant or a bare symbol (only
    /// [`DimExpr::into_dim`] makes one, so `==` on dims is equality of sizes).
    Expr(Compound),
}

/// The expression of a [`Dim::Expr`]: a canonical [`DimExpr`] that is neither a constant nor a
/// bare symbol. It has no public constructor; [`DimExpr::into_dim`] is the one way to make it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Compound(Arc<DimExpr>);

impl Compound {
    /// Wraps `expr`, which the caller has checked is neither a constant nor a bare symbol.
    pub(crate) fn new(expr: DimExpr) -> Compound {
        debug_assert!(expr.as_constant().is_none() && expr.as_symbol().is_none(), "`{expr}` is not compound");
        Compound(Arc::new(expr))
    }
}

impl std::ops::Deref for Compound {
    type Target = DimExpr;

    fn deref(&self) -> &DimExpr {
        &self.0
    }
}

impl fmt::Display for Compound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Dim {
    /// The static size, if there is one.
    pub fn as_static(&self) -> Option<i64> {
        match self {
            Dim::Static(size) => Some(*size),
            Dim::Sym(_) | Dim::Expr(_) => None,
        }
    }

    /// The symbols this size depends on, sorted.
    pub fn symbols(&self) -> Vec<Arc<str>> {
        match self {
            Dim::Static(_) => Vec::new(),
            Dim::Sym(name) => vec![name.clone()],
            Dim::Expr(expr) => expr.symbols(),
        }
    }

    /// The size once every symbol has a value; `None` when one is missing.
    pub fn eval(&self, values: &IndexMap<String, i64>) -> Option<i64> {
        match self {
            Dim::Static(size) => Some(*size),
            Dim::Sym(name) => values.get(name.as_ref()).copied(),
            Dim::Expr(expr) => expr.eval(values),
        }
    }

    /// `self + other`, simplified; `None` on overflow.
    pub fn checked_add(&self, other: &Dim) -> Option<Dim> {
        match (self, other) {
            (Dim::Static(a), Dim::Static(b)) => a.checked_add(*b).map(Dim::Static),
            _ => DimExpr::of(self).checked_add(&DimExpr::of(other)).map(DimExpr::into_dim),
        }
    }

    /// `self - other`, simplified; `None` on overflow.
    pub fn checked_sub(&self, other: &Dim) -> Option<Dim> {
        match (self, other) {
            (Dim::Static(a), Dim::Static(b)) => a.checked_sub(*b).map(Dim::Static),
            _ => DimExpr::of(self).checked_sub(&DimExpr::of(other)).map(DimExpr::into_dim),
        }
    }

    /// `self * other`, simplified; `None` on overflow.
    pub fn checked_mul(&self, other: &Dim) -> Option<Dim> {
        match (self, other) {
            (Dim::Static(a), Dim::Static(b)) => a.checked_mul(*b).map(Dim::Static),
            _ => DimExpr::of(self).checked_mul(&DimExpr::of(other)).map(DimExpr::into_dim),
        }
    }

    /// `self // divisor` with Python rounding, simplified; `None` unless `divisor > 0`.
    pub fn floor_div(&self, divisor: i64) -> Option<Dim> {
        DimExpr::of(self).floor_div(divisor).map(DimExpr::into_dim)
    }
}

impl From<i64> for Dim {
    fn from(size: i64) -> Self {
        Dim::Static(size)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(size) => write!(f, "{size}"),
            Dim::Sym(name) => f.write_str(name),
            Dim::Expr(expr) => write!(f, "{expr}"),
        }
    }
}

/// The dims of a tensor, outermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shape(pub SmallVec<[Dim; 4]>);

impl Shape {
    /// A shape of static dims.
    pub fn from_static(dims: &[i64]) -> Shape {
        Shape(dims.iter().map(|&size| Dim::Static(size)).collect())
    }

    /// The rank-0 shape.
    pub fn scalar() -> Shape {
        Shape(SmallVec::new())
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// All sizes, if every dim is static.
    pub fn as_static(&self) -> Option<SmallVec<[i64; 4]>> {
        self.0.iter().map(Dim::as_static).collect()
    }

    /// Whether every dim is static.
    pub fn is_static(&self) -> bool {
        self.0.iter().all(|dim| matches!(dim, Dim::Static(_)))
    }

    /// Product of the sizes, if every dim is static and the product fits in an `i64`.
    pub fn num_elements(&self) -> Option<i64> {
        self.0.iter().try_fold(1i64, |acc, dim| dim.as_static().and_then(|size| acc.checked_mul(size)))
    }

    /// Product of the sizes, symbolic or not; `None` on overflow.
    pub fn element_count(&self) -> Option<Dim> {
        self.0.iter().try_fold(Dim::Static(1), |acc, dim| acc.checked_mul(dim))
    }
}

impl FromIterator<Dim> for Shape {
    fn from_iter<T: IntoIterator<Item = Dim>>(iter: T) -> Self {
        Shape(iter.into_iter().collect())
    }
}

impl std::ops::Index<usize> for Shape {
    type Output = Dim;
    fn index(&self, index: usize) -> &Dim {
        &self.0[index]
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (index, dim) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{dim}")?;
        }
        f.write_str("]")
    }
}

/// The type of a tensor value: element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub shape: Shape,
}

impl TensorType {
    /// A type from a dtype and a shape.
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }

    /// A type with static dims.
    pub fn from_static(dtype: DType, dims: &[i64]) -> TensorType {
        TensorType { dtype, shape: Shape::from_static(dims) }
    }

    /// A rank-0 type.
    pub fn scalar(dtype: DType) -> TensorType {
        TensorType { dtype, shape: Shape::scalar() }
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// The same shape with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> TensorType {
        TensorType { dtype, shape: self.shape.clone() }
    }
}

impl fmt::Display for TensorType {
    /// The `.fx` spelling: `f32[2, s77]`, `i64[]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

/// The range a symbol may take, inclusive on both ends; `max` is `None` for unbounded.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SymbolRange {
    /// Smallest allowed value.
    pub min: i64,
    /// Largest allowed value, or `None` when PyTorch printed `int_oo`.
    pub max: Option<i64>,
}

/// The symbols of a graph and their ranges, in the order they were declared.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolTable {
    ranges: IndexMap<Arc<str>, SymbolRange>,
}

impl std::hash::Hash for SymbolTable {
    /// `IndexMap`'s equality ignores the order of entries, so the hash must too: entries are
    /// hashed sorted by name.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut entries: Vec<_> = self.ranges.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        entries.hash(state);
    }
}

impl SymbolTable {
    /// Declares `name` with `range`; declaring it again replaces the range.
    pub fn declare(&mut self, name: &str, range: SymbolRange) -> Arc<str> {
        if let Some((_, existing, _)) = self.ranges.get_full(name) {
            let existing = existing.clone();
            self.ranges.insert(existing.clone(), range);
            return existing;
        }
        let name: Arc<str> = Arc::from(name);
        self.ranges.insert(name.clone(), range);
        name
    }

    /// The range of `name`.
    pub fn range(&self, name: &str) -> Option<&SymbolRange> {
        self.ranges.get(name)
    }

    /// The shared name of a declared symbol.
    pub fn name(&self, name: &str) -> Option<Arc<str>> {
        self.ranges.get_key_value(name).map(|(key, _)| key.clone())
    }

    /// Symbols in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &SymbolRange)> {
        self.ranges.iter()
    }

    /// Whether no symbol is declared.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}
