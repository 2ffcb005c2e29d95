//! The e-graph language: one e-node per IR op, with the op's attributes as part of its identity.
//!
//! An e-node is a [`Head`] plus the e-classes of its operands. The head is either a graph input
//! (`Input(index)`, a leaf) or an IR [`Op`] with its attributes, wrapped in [`OpKey`] so it can be
//! hashed and ordered: two e-nodes are the same only when the op, every attribute and (for
//! constants) every data byte agree. Constants compare by bytes, so `-0.0`, `0.0` and NaN payloads
//! stay distinct. Nodes print with the IR mnemonics.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use egg::{Id, Language};
use smallvec::SmallVec;
use ttpu_ir::Op;

/// An IR op with its attributes, hashable and totally ordered.
///
/// The hash is computed once with a fixed-key hasher, so hashing and ordering are cheap and do not
/// depend on the process.
#[derive(Clone)]
pub(crate) struct OpKey {
    op: Arc<Op>,
    hash: u64,
}

impl OpKey {
    pub(crate) fn new(op: Op) -> OpKey {
        // `Op`'s derived hash feeds every attribute, and constants by dtype, dims and bytes.
        let mut hasher = DefaultHasher::new();
        op.hash(&mut hasher);
        OpKey { op: Arc::new(op), hash: hasher.finish() }
    }

    pub(crate) fn op(&self) -> &Op {
        &self.op
    }
}

impl PartialEq for OpKey {
    fn eq(&self, other: &OpKey) -> bool {
        // `Op`'s equality compares literals by their bytes, so it is reflexive even for NaN.
        self.hash == other.hash && (Arc::ptr_eq(&self.op, &other.op) || self.op == other.op)
    }
}

impl Eq for OpKey {}

impl Hash for OpKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Ord for OpKey {
    /// By hash first; two different ops with the same hash fall back to their `Debug` form, which
    /// spells out every attribute and byte. This order only sorts e-nodes; no rule reads it.
    fn cmp(&self, other: &OpKey) -> Ordering {
        self.hash.cmp(&other.hash).then_with(|| {
            if self == other { Ordering::Equal } else { format!("{:?}", self.op).cmp(&format!("{:?}", other.op)) }
        })
    }
}

impl PartialOrd for OpKey {
    fn partial_cmp(&self, other: &OpKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for OpKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.op)
    }
}

/// What an e-node computes, without its operands.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Head {
    /// Graph input number `n`: a leaf.
    Input(u32),
    /// An IR op with its attributes.
    Op(OpKey),
    /// Result `n` of an op with several results (a loop's final state). Each result is an
    /// e-class of its own; the rebuilt graph has the op once. No rule looks inside, so the op
    /// stays as it is (its own graphs are fused on their own).
    Result(u32, OpKey),
}

/// An e-node: a head applied to operand e-classes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FNode {
    pub(crate) head: Head,
    pub(crate) children: SmallVec<[Id; 3]>,
}

impl FNode {
    pub(crate) fn input(index: u32) -> FNode {
        FNode { head: Head::Input(index), children: SmallVec::new() }
    }

    pub(crate) fn op(op: Op, children: &[Id]) -> FNode {
        FNode { head: Head::Op(OpKey::new(op)), children: children.into() }
    }

    /// One result of an op with several results.
    pub(crate) fn result(op: Op, index: u32, children: &[Id]) -> FNode {
        FNode { head: Head::Result(index, OpKey::new(op)), children: children.into() }
    }

    /// The IR op of a one-result node, which rules may read; none for input leaves and results
    /// of several-result ops.
    pub(crate) fn ir_op(&self) -> Option<&Op> {
        match &self.head {
            Head::Input(_) | Head::Result(..) => None,
            Head::Op(key) => Some(key.op()),
        }
    }
}

impl Language for FNode {
    type Discriminant = Head;

    fn discriminant(&self) -> Head {
        self.head.clone()
    }

    fn matches(&self, other: &FNode) -> bool {
        self.head == other.head && self.children.len() == other.children.len()
    }

    fn children(&self) -> &[Id] {
        &self.children
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.children
    }
}

impl fmt::Display for FNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.head {
            Head::Input(index) => write!(f, "input{index}"),
            Head::Op(key) => f.write_str(key.op().mnemonic()),
            Head::Result(index, key) => write!(f, "{}#{index}", key.op().mnemonic()),
        }
    }
}
