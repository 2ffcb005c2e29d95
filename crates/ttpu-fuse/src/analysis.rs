//! Per-e-class facts: the type, and constant values small enough to fold.
//!
//! Every e-class has exactly one [`TensorType`]: rules only union classes of equal type (the
//! applier checks before it adds anything), so merging never has to choose. Constant facts come
//! from `constant` nodes and travel through data movement that keeps a splat a splat
//! (`broadcast_in_dim`, `reshape`, `transpose`, `slice`). Side conditions of rules read these facts,
//! never printed text.

use egg::{Analysis, DidMerge, EGraph, Id};
use smallvec::SmallVec;
use ttpu_ir::{DType, Literal, Op, Scalar, TensorType, infer};

use crate::lang::{FNode, Head};

/// Constants with at most this many elements are kept whole and may be folded.
pub(crate) const SMALL_CONSTANT: usize = 64;

/// The e-graph type of this crate.
pub(crate) type FuseGraph = EGraph<FNode, FuseAnalysis>;

/// The analysis: it knows the input types so `Input` leaves have a type.
#[derive(Debug, Default)]
pub(crate) struct FuseAnalysis {
    pub(crate) input_types: Vec<TensorType>,
}

/// Facts about one e-class.
#[derive(Debug, Clone)]
pub(crate) struct Data {
    /// The type every node of the class produces.
    pub(crate) ty: TensorType,
    /// The whole value, when the class is a constant of at most [`SMALL_CONSTANT`] elements.
    pub(crate) value: Option<Literal>,
    /// The raw bytes of the one element, when every element of the class is the same.
    pub(crate) splat: Option<SmallVec<[u8; 8]>>,
}

impl Data {
    /// The splat element decoded as a scalar of the class's dtype.
    pub(crate) fn splat_scalar(&self) -> Option<Scalar> {
        self.splat.as_ref().map(|bytes| Scalar::from_bytes(self.ty.dtype, bytes))
    }

    /// Whether every element is bitwise the float `value` (floats) or equals it (integers, bool).
    pub(crate) fn is_splat(&self, value: f64) -> bool {
        match self.splat_scalar() {
            Some(Scalar::Float(element)) => element.to_bits() == value.to_bits(),
            Some(Scalar::Int(element)) => element as f64 == value && value.fract() == 0.0,
            Some(Scalar::Bool(element)) => f64::from(u8::from(element)) == value,
            None => false,
        }
    }

    /// The dtype.
    pub(crate) fn dtype(&self) -> DType {
        self.ty.dtype
    }
}

fn splat_of(literal: &Literal) -> Option<SmallVec<[u8; 8]>> {
    let size = literal.dtype().byte_size();
    let bytes = literal.bytes();
    let first = bytes.get(..size)?;
    bytes.chunks_exact(size).all(|chunk| chunk == first).then(|| first.into())
}

impl Analysis<FNode> for FuseAnalysis {
    type Data = Data;

    fn make(egraph: &mut FuseGraph, enode: &FNode) -> Data {
        let (op, index) = match &enode.head {
            Head::Input(index) => {
                let ty = egraph.analysis.input_types[*index as usize].clone();
                return Data { ty, value: None, splat: None };
            }
            Head::Op(key) => (key.op(), 0),
            Head::Result(index, key) => (key.op(), *index as usize),
        };
        let operand_types: SmallVec<[&TensorType; 4]> = enode.children.iter().map(|&id| &egraph[id].data.ty).collect();
        let ty = infer(op, &operand_types)
            .expect("nodes are type-checked before they are added")
            .into_iter()
            .nth(index)
            .expect("the op has this result");
        if matches!(enode.head, Head::Result(..)) {
            return Data { ty, value: None, splat: None };
        }
        let (value, splat) = match op {
            Op::Constant(literal) => ((literal.len() <= SMALL_CONSTANT).then(|| literal.clone()), splat_of(literal)),
            Op::BroadcastInDim { .. } | Op::Reshape(_) | Op::Transpose(_) => {
                (None, egraph[enode.children[0]].data.splat.clone())
            }
            Op::Slice { .. } if ty.shape.num_elements().is_some_and(|count| count > 0) => {
                (None, egraph[enode.children[0]].data.splat.clone())
            }
            _ => (None, None),
        };
        Data { ty, value, splat }
    }

    fn merge(&mut self, to: &mut Data, from: Data) -> DidMerge {
        debug_assert_eq!(to.ty, from.ty, "rules only union classes of one type");
        let mut changed_to = false;
        let mut changed_from = false;
        match (&to.value, from.value) {
            (None, Some(value)) => {
                to.value = Some(value);
                changed_to = true;
            }
            (Some(_), None) => changed_from = true,
            _ => {}
        }
        match (&to.splat, from.splat) {
            (None, Some(splat)) => {
                to.splat = Some(splat);
                changed_to = true;
            }
            (Some(_), None) => changed_from = true,
            _ => {}
        }
        DidMerge(changed_to, changed_from)
    }
}

/// The facts of class `id`.
pub(crate) fn data(egraph: &FuseGraph, id: Id) -> &Data {
    &egraph[id].data
}
