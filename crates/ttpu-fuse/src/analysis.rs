//! Per-e-class facts: the type, and constant values small enough to fold.
//!
//! Every e-class has exactly one [`TensorType`]: rules only union classes of equal type (the
//! applier checks before it adds anything), so merging never has to choose. Constant facts come
//! from `constant` nodes and travel through data movement that keeps a splat a splat
//! (`broadcast_in_dim`, `reshape`, `transpose`, `slice`). A class is *resident* when its value
//! can be computed from resident inputs (weights that calls do not change, `FuseOptions::resident_inputs`)
//! and constants alone: the driver computes such values once, at load. Side conditions of rules read
//! these facts, never printed text.

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
    /// Per input, whether calls leave it unchanged (`FuseOptions::resident_inputs`, padded with
    /// `false`).
    pub(crate) resident_inputs: Vec<bool>,
}

impl FuseAnalysis {
    /// Whether resident work is counted as done once (some input is resident).
    pub(crate) fn prepares(&self) -> bool {
        self.resident_inputs.contains(&true)
    }
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
    /// Whether some node of the class reads only resident inputs and constants (transitively).
    pub(crate) resident: bool,
    /// Whether some such node reads at least one resident input: work the driver's load-time
    /// split does once (constant-only work is left to XLA's constant folding).
    pub(crate) weighty: bool,
    /// Whether the class holds a `broadcast_in_dim`: an expansion, which the driver keeps per call.
    pub(crate) expanded: bool,
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
                let resident = egraph.analysis.resident_inputs.get(*index as usize).copied().unwrap_or(false);
                return Data { ty, value: None, splat: None, resident, weighty: resident, expanded: false };
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
        // A loop's results are never prepared, and no rule reads them.
        if matches!(enode.head, Head::Result(..)) {
            return Data { ty, value: None, splat: None, resident: false, weighty: false, expanded: false };
        }
        let resident = enode.children.iter().all(|&child| egraph[child].data.resident);
        let weighty = resident && enode.children.iter().any(|&child| egraph[child].data.weighty);
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
        let expanded = matches!(op, Op::BroadcastInDim { .. });
        Data { ty, value, splat, resident, weighty, expanded }
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
        // Equal values: if one node of either class is resident, the merged class is.
        let flags =
            [(&mut to.resident, from.resident), (&mut to.weighty, from.weighty), (&mut to.expanded, from.expanded)];
        for (to_flag, from_flag) in flags {
            if !*to_flag && from_flag {
                *to_flag = true;
                changed_to = true;
            } else if *to_flag && !from_flag {
                changed_from = true;
            }
        }
        DidMerge(changed_to, changed_from)
    }
}

/// The facts of class `id`.
pub(crate) fn data(egraph: &FuseGraph, id: Id) -> &Data {
    &egraph[id].data
}
