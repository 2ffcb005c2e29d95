//! The in-memory compile cache: executables keyed by the structure of the program they run.
//!
//! What a "program" is belongs to the caller, through [`ProgramKey`]: the driver keys by IR
//! graph (implemented here for [`Graph`]), the eager frontend by its recorded tape. A graph's
//! structure is its input types, then every node's op (with all its attributes and constant
//! bytes) and the definitions its operands read (input `n` or result `k` of node `i`), then the
//! outputs' definitions. Either captures ops, attributes, shapes and dtypes and nothing about
//! input values; result types follow from those by inference.
//!
//! Entries are found by a 64-bit hash of the structure and the [`CompileSpec`]. A hash alone
//! could collide, so every entry keeps its key and a hit is only taken when an exact comparison
//! ([`ProgramKey::same_program`]) confirms it: equal hashes of different programs cost a
//! comparison, never a wrong executable. Keys of different types never compare equal, even for
//! the same computation. The cache keeps at most `capacity` executables and evicts the least
//! recently used.

use std::any::Any;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ttpu_ir::{EntityId, Graph, Node, ValueId};

use crate::runtime::CompileSpec;

/// A program as a compile-cache key: a cheap structural hash plus an exact comparison.
///
/// Implement it for whatever a frontend records (the eager crate's tape, say); [`Graph`] has it
/// here. `same_program` must be an equivalence on programs that builds the same graph, and equal
/// programs must hash alike.
pub trait ProgramKey: Send + Sync + 'static {
    /// A 64-bit hash of the structure; equal programs hash alike.
    fn structure_hash(&self) -> u64;
    /// Whether `other` is the same program (false for keys of another type).
    fn same_program(&self, other: &dyn ProgramKey) -> bool;
    /// `self` as `Any`, so `same_program` can downcast the other key.
    fn as_any(&self) -> &dyn Any;
    /// An owned copy, kept by the cache to confirm later hits.
    fn boxed(&self) -> Box<dyn ProgramKey>;
}

impl ProgramKey for Graph {
    fn structure_hash(&self) -> u64 {
        graph_hash(self)
    }

    fn same_program(&self, other: &dyn ProgramKey) -> bool {
        other.as_any().downcast_ref::<Graph>().is_some_and(|other| same_structure(self, other))
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn boxed(&self) -> Box<dyn ProgramKey> {
        Box::new(self.clone())
    }
}

/// Executables by structure hash, each with the program it runs; least recently used evicted
/// first. Generic over the executable so that its bookkeeping is testable without a plugin.
pub(crate) struct CompileCache<E> {
    capacity: usize,
    /// Entries by hash. A bucket holds more than one entry only when different structures share
    /// a hash.
    entries: HashMap<u64, Vec<Entry<E>>>,
    len: usize,
    tick: u64,
}

struct Entry<E> {
    /// The program compiled, kept to confirm hits exactly.
    program: Box<dyn ProgramKey>,
    spec: CompileSpec,
    executable: Arc<E>,
    last_used: u64,
}

impl<E> CompileCache<E> {
    pub(crate) fn new(capacity: usize) -> CompileCache<E> {
        CompileCache { capacity, entries: HashMap::new(), len: 0, tick: 0 }
    }

    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.evict();
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The executable compiled for a program of `program`'s structure under `spec`, whose hash
    /// is `hash`.
    pub(crate) fn get(&mut self, hash: u64, program: &dyn ProgramKey, spec: &CompileSpec) -> Option<Arc<E>> {
        self.tick += 1;
        let entry = self
            .entries
            .get_mut(&hash)?
            .iter_mut()
            .find(|entry| entry.spec == *spec && entry.program.same_program(program))?;
        entry.last_used = self.tick;
        Some(Arc::clone(&entry.executable))
    }

    /// Keeps `executable` for programs of `program`'s structure under `spec`; `hash` must be
    /// their hash.
    pub(crate) fn insert(&mut self, hash: u64, program: Box<dyn ProgramKey>, spec: CompileSpec, executable: Arc<E>) {
        self.tick += 1;
        let bucket = self.entries.entry(hash).or_default();
        if let Some(entry) =
            bucket.iter_mut().find(|entry| entry.spec == spec && entry.program.same_program(program.as_ref()))
        {
            entry.executable = executable;
            entry.last_used = self.tick;
        } else {
            bucket.push(Entry { program, spec, executable, last_used: self.tick });
            self.len += 1;
        }
        self.evict();
    }

    fn evict(&mut self) {
        // Eviction scans every entry; caches hold hundreds of programs at most and a scan is far
        // cheaper than the compile that preceded it.
        while self.len > self.capacity {
            let oldest = self
                .entries
                .iter()
                .flat_map(|(&hash, bucket)| bucket.iter().enumerate().map(move |(index, entry)| (hash, index, entry)))
                .min_by_key(|(_, _, entry)| entry.last_used)
                .map(|(hash, index, _)| (hash, index));
            let Some((hash, index)) = oldest else {
                return;
            };
            if let Some(bucket) = self.entries.get_mut(&hash) {
                bucket.swap_remove(index);
                if bucket.is_empty() {
                    self.entries.remove(&hash);
                }
            }
            self.len -= 1;
        }
    }
}

/// Whether `a` and `b` have the same structure (see the module docs): same input types, and node
/// for node the same op with the same attributes reading the same definitions, and the same
/// outputs. Names and locations are ignored. Definitions compare directly when both graphs number their values alike, by
/// definition otherwise.
pub fn same_structure(a: &Graph, b: &Graph) -> bool {
    if a.inputs.len() != b.inputs.len()
        || a.node_count() != b.node_count()
        || !a.inputs.iter().zip(&b.inputs).all(|(&x, &y)| a.ty(x) == b.ty(y))
    {
        return false;
    }
    // Graphs recorded by the same code number their values alike (inputs land at the same places
    // between nodes). One sequential pass proves it, and then ids compare directly instead of
    // looking up both definitions of every operand.
    let same_numbering = a.value_count() == b.value_count()
        && (0..a.value_count()).all(|index| {
            let value = ValueId::new(index);
            a.value(value).def == b.value(value).def
        });
    let same_defs = |x: &[ValueId], y: &[ValueId]| {
        if same_numbering {
            x == y
        } else {
            x.len() == y.len() && x.iter().zip(y).all(|(&x, &y)| a.value(x).def == b.value(y).def)
        }
    };
    a.nodes().zip(b.nodes()).all(|((_, x), (_, y))| {
        // `Op`'s equality compares constants byte for byte (`Literal` holds raw bytes), so `-0.0`
        // and `0.0`, or two NaN payloads, stay different structures.
        x.results.len() == y.results.len() && x.op == y.op && same_defs(&x.operands, &y.operands)
    }) && same_defs(&a.outputs, &b.outputs)
}

/// The hash of a graph's structure, in the order [`same_structure`] compares it, so that graphs
/// of one structure always hash alike.
pub fn graph_hash(graph: &Graph) -> u64 {
    let mut hasher = FxHasher::default();
    hasher.write_usize(graph.inputs.len());
    for &input in &graph.inputs {
        graph.ty(input).hash(&mut hasher);
    }
    hasher.write_usize(graph.node_count());
    for (_, node) in graph.nodes() {
        hash_node(graph, node, &mut hasher);
    }
    hasher.write_usize(graph.outputs.len());
    for &output in &graph.outputs {
        graph.value(output).def.hash(&mut hasher);
    }
    hasher.finish()
}

fn hash_node(graph: &Graph, node: &Node, hasher: &mut FxHasher) {
    // `Op`'s derived hash: every attribute, and constants by dtype, dims and bytes.
    node.op.hash(hasher);
    hasher.write_usize(node.operands.len());
    for &operand in &node.operands {
        graph.value(operand).def.hash(hasher);
    }
}

/// A multiply-rotate hash over machine words (the scheme of rustc's `FxHasher`): a few cycles per
/// word, which matters because a warm read hashes every node and recording looks up buffers by
/// address. It is not collision resistant; [`same_structure`] makes the cache exact regardless.
#[derive(Clone, Debug, Default)]
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
        // The length keeps `[1]` and `[1, 0]` apart, whose padded words are equal.
        self.add(bytes.len() as u64);
    }

    fn write_u8(&mut self, value: u8) {
        self.add(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.add(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.add(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.add(value as u64);
    }

    fn finish(&self) -> u64 {
        // The multiply leaves the low bits depending on the low input bits only (all zero for
        // aligned addresses); hash tables index buckets by the low bits, so rotate the well-mixed
        // high bits down.
        self.hash.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use ttpu_ir::{BinaryOp, DType, GraphBuilder, Literal, ReduceKind, Scalar, Shape, TensorType, UnaryOp};

    use super::*;

    fn f32s(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, Shape::from_static(dims))
    }

    /// `op(x, y)` on two inputs of `ty`, returned.
    fn binary(op: BinaryOp, ty: TensorType) -> Graph {
        let mut builder = GraphBuilder::new();
        let x = builder.input(ty.clone(), None);
        let y = builder.input(ty, None);
        let z = builder.binary(op, x, y).unwrap();
        builder.finish(&[z])
    }

    fn assert_differ(a: &Graph, b: &Graph) {
        assert!(!same_structure(a, b) && !same_structure(b, a));
        assert_ne!(graph_hash(a), graph_hash(b));
    }

    fn assert_same(a: &Graph, b: &Graph) {
        assert!(same_structure(a, b) && same_structure(b, a));
        assert_eq!(graph_hash(a), graph_hash(b));
    }

    #[test]
    fn the_structure_tells_apart_ops_attributes_dtypes_and_shapes() {
        let base = binary(BinaryOp::Add, f32s(&[4]));
        assert_same(&base, &binary(BinaryOp::Add, f32s(&[4])));
        assert_differ(&base, &binary(BinaryOp::Multiply, f32s(&[4])));
        assert_differ(&base, &binary(BinaryOp::Add, f32s(&[5])));
        assert_differ(&base, &binary(BinaryOp::Add, f32s(&[2, 2])));
        assert_differ(&base, &binary(BinaryOp::Add, TensorType::new(DType::F64, Shape::from_static(&[4]))));

        let reduce = |dims: &[i64]| {
            let mut builder = GraphBuilder::new();
            let x = builder.input(f32s(&[2, 2]), None);
            let sum = builder.reduce(x, ReduceKind::Sum, dims).unwrap();
            builder.finish(&[sum])
        };
        assert_differ(&reduce(&[0]), &reduce(&[1]));
    }

    #[test]
    fn constants_compare_by_their_bytes() {
        let scaled = |value: f64| {
            let mut builder = GraphBuilder::new();
            let x = builder.input(f32s(&[]), None);
            let c = builder.constant(Literal::scalar(DType::F32, Scalar::Float(value)));
            let z = builder.binary(BinaryOp::Multiply, x, c).unwrap();
            builder.finish(&[z])
        };
        assert_same(&scaled(2.0), &scaled(2.0));
        assert_differ(&scaled(2.0), &scaled(3.0));
        // Equal as floats, different programs: `x * -0.0` and `x * 0.0` differ in sign.
        assert_differ(&scaled(0.0), &scaled(-0.0));
    }

    #[test]
    fn operand_order_and_outputs_are_part_of_the_structure() {
        let mut builder = GraphBuilder::new();
        let x = builder.input(f32s(&[3]), None);
        let y = builder.input(f32s(&[3]), None);
        let forward = builder.binary(BinaryOp::Subtract, x, y).unwrap();
        let backward = builder.binary(BinaryOp::Subtract, y, x).unwrap();
        let both = builder.finish(&[forward, backward]);
        let mut swapped = both.clone();
        swapped.outputs = [backward, forward].into_iter().collect();
        assert_differ(&both, &swapped);
        let mut one = both.clone();
        one.outputs = [forward].into_iter().collect();
        assert_differ(&both, &one);
    }

    #[test]
    fn inputs_declared_in_another_order_among_nodes_give_the_same_structure() {
        // Inputs declared between nodes number the values differently; the structure is the same.
        let mut builder = GraphBuilder::new();
        let x = builder.input(f32s(&[8]), None);
        let e = builder.unary(UnaryOp::Exponential, x).unwrap();
        let y = builder.input(f32s(&[8]), None);
        let z = builder.binary(BinaryOp::Add, e, y).unwrap();
        let t = builder.unary(UnaryOp::Tanh, z).unwrap();
        let graph = builder.finish(&[t]);

        let mut builder = GraphBuilder::new();
        let x = builder.input(f32s(&[8]), None);
        let y = builder.input(f32s(&[8]), None);
        let e = builder.unary(UnaryOp::Exponential, x).unwrap();
        let z = builder.binary(BinaryOp::Add, e, y).unwrap();
        let t = builder.unary(UnaryOp::Tanh, z).unwrap();
        assert_same(&graph, &builder.finish(&[t]));
    }

    #[test]
    fn entries_sharing_a_hash_stay_apart() {
        let add = binary(BinaryOp::Add, f32s(&[4]));
        let mul = binary(BinaryOp::Multiply, f32s(&[4]));
        let sub = binary(BinaryOp::Subtract, f32s(&[4]));
        let mut cache = CompileCache::<&str>::new(8);
        // One hash for all three, as a collision would give.
        cache.insert(7, Box::new(add.clone()), CompileSpec::default(), Arc::new("add"));
        cache.insert(7, Box::new(mul.clone()), CompileSpec::default(), Arc::new("mul"));
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get(7, &add, &CompileSpec::default()).as_deref(), Some(&"add"));
        assert_eq!(cache.get(7, &mul, &CompileSpec::default()).as_deref(), Some(&"mul"));
        assert_eq!(cache.get(7, &sub, &CompileSpec::default()), None);
        assert_eq!(cache.get(8, &add, &CompileSpec::default()), None);
        // Inserting an existing structure replaces its executable instead of adding an entry.
        cache.insert(7, Box::new(add.clone()), CompileSpec::default(), Arc::new("add again"));
        assert_eq!((cache.len(), cache.get(7, &add, &CompileSpec::default()).as_deref()), (2, Some(&"add again")));
    }

    #[test]
    fn eviction_drops_the_least_recently_used_across_buckets() {
        let graphs: Vec<Graph> =
            [BinaryOp::Add, BinaryOp::Multiply, BinaryOp::Subtract].map(|op| binary(op, f32s(&[4]))).into();
        let mut cache = CompileCache::<usize>::new(2);
        let program = |index: usize| Box::new(graphs[index].clone());
        let key = |index: usize| &graphs[index];
        cache.insert(1, program(0), CompileSpec::default(), Arc::new(0));
        cache.insert(1, program(1), CompileSpec::default(), Arc::new(1));
        assert!(cache.get(1, key(0), &CompileSpec::default()).is_some());
        cache.insert(2, program(2), CompileSpec::default(), Arc::new(2));
        assert_eq!(cache.len(), 2);
        assert!(cache.get(1, key(1), &CompileSpec::default()).is_none(), "the least recently used entry leaves");
        assert!(
            cache.get(1, key(0), &CompileSpec::default()).is_some()
                && cache.get(2, key(2), &CompileSpec::default()).is_some()
        );
        cache.set_capacity(0);
        assert_eq!(cache.len(), 0);
    }
}
