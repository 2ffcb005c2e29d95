//! The graph: an arena of nodes and an arena of values, with inputs, outputs and symbols.
//!
//! Uses point at a `ValueId`, never at a node slot. Nodes are kept in creation order, which is
//! always a topological order because the builder only takes operands that already exist.

use smallvec::SmallVec;

use crate::id::{IdVec, entity_id};
use crate::{Op, SymbolTable, TensorType};

entity_id!(
    /// Index of a node in its graph.
    NodeId,
    "node"
);
entity_id!(
    /// Index of a value in its graph.
    ValueId,
    "%"
);

/// Where a node came from, for messages and debugging; carried through every pass.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Loc {
    /// The FX node name (`addmm_1`), if the node came from one.
    pub name: Option<String>,
    /// The origin, like `aten.addmm.default @ model.fx:12`.
    pub origin: Option<String>,
}

/// How a value is defined.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueDef {
    /// The graph's input number `n`.
    Input(u32),
    /// Result `n` of a node.
    Result(NodeId, u32),
}

/// Facts about one value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ValueData {
    /// Its type.
    pub ty: TensorType,
    /// Its single definition.
    pub def: ValueDef,
    /// A readable name (the FX name of inputs), if any.
    pub name: Option<String>,
}

/// One application of an op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Node {
    /// The primitive and its attributes.
    pub op: Op,
    /// Operands, in the op's order.
    pub operands: SmallVec<[ValueId; 4]>,
    /// Results.
    pub results: SmallVec<[ValueId; 1]>,
    /// Where it came from.
    pub loc: Loc,
}

/// A tensor graph: a function from inputs to outputs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Graph {
    pub(crate) nodes: IdVec<NodeId, Node>,
    pub(crate) values: IdVec<ValueId, ValueData>,
    /// Symbols used by dims, with their ranges.
    pub symbols: SymbolTable,
    /// Graph inputs, in calling order.
    pub inputs: SmallVec<[ValueId; 4]>,
    /// Graph outputs, in return order.
    pub outputs: SmallVec<[ValueId; 4]>,
}

impl Graph {
    /// An empty graph.
    pub fn new() -> Graph {
        Graph::default()
    }

    /// Nodes in creation (topological) order.
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = (NodeId, &Node)> + '_ {
        self.nodes.iter()
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Facts about `value`.
    pub fn value(&self, value: ValueId) -> &ValueData {
        &self.values[value]
    }

    /// Number of values.
    pub fn value_count(&self) -> usize {
        self.values.len()
    }

    /// The type of `value`.
    pub fn ty(&self, value: ValueId) -> &TensorType {
        &self.values[value].ty
    }

    /// The node defining `value`, if it is not an input.
    pub fn producer(&self, value: ValueId) -> Option<&Node> {
        match self.values[value].def {
            ValueDef::Input(_) => None,
            ValueDef::Result(node, _) => Some(&self.nodes[node]),
        }
    }

    /// Input and output types, for signatures and caches.
    pub fn signature(&self) -> (Vec<TensorType>, Vec<TensorType>) {
        (
            self.inputs.iter().map(|&value| self.ty(value).clone()).collect(),
            self.outputs.iter().map(|&value| self.ty(value).clone()).collect(),
        )
    }

    /// Removes every node, value, input, output and symbol but keeps the allocations, so a graph
    /// that is rebuilt again and again (an eager device's pending graph) does not regrow its
    /// arenas each time.
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.values.clear();
        self.symbols = SymbolTable::default();
        self.inputs.clear();
        self.outputs.clear();
    }

    /// Appends an input of type `ty`.
    pub fn add_input(&mut self, ty: TensorType, name: Option<String>) -> ValueId {
        let index = u32::try_from(self.inputs.len()).expect("fewer than 2^32 inputs");
        let value = self.values.push(ValueData { ty, def: ValueDef::Input(index), name });
        self.inputs.push(value);
        value
    }

    /// Appends a node whose result types were already inferred. Callers outside this crate go
    /// through [`crate::GraphBuilder`], which infers them.
    pub(crate) fn push_node(
        &mut self,
        op: Op,
        operands: &[ValueId],
        result_types: impl IntoIterator<Item = TensorType>,
        loc: Loc,
    ) -> NodeId {
        let node_id = NodeId::new_from(self.nodes.len());
        let mut results = SmallVec::new();
        for (slot, ty) in result_types.into_iter().enumerate() {
            let slot = u32::try_from(slot).expect("few results per node");
            results.push(self.values.push(ValueData { ty, def: ValueDef::Result(node_id, slot), name: None }));
        }
        let pushed = self.nodes.push(Node { op, operands: operands.into(), results, loc });
        debug_assert_eq!(pushed, node_id);
        node_id
    }

    /// Removes nodes whose results are unused, then renumbers ids densely. Inputs stay.
    pub fn compact(&mut self) {
        let mut live = vec![false; self.values.len()];
        for &output in &self.outputs {
            live[output.index_usize()] = true;
        }
        let mut keep = vec![false; self.nodes.len()];
        for (node_id, node) in self.nodes.iter().collect::<Vec<_>>().into_iter().rev() {
            if node.results.iter().any(|result| live[result.index_usize()]) {
                keep[node_id.index_usize()] = true;
                for operand in &node.operands {
                    live[operand.index_usize()] = true;
                }
            }
        }
        let mut rebuilt = Graph { symbols: self.symbols.clone(), ..Graph::default() };
        let mut map: Vec<Option<ValueId>> = vec![None; self.values.len()];
        for &input in &self.inputs {
            let data = &self.values[input];
            map[input.index_usize()] = Some(rebuilt.add_input(data.ty.clone(), data.name.clone()));
        }
        for (node_id, node) in self.nodes.iter() {
            if !keep[node_id.index_usize()] {
                continue;
            }
            let operands: SmallVec<[ValueId; 4]> = node
                .operands
                .iter()
                .map(|operand| map[operand.index_usize()].expect("operands precede users"))
                .collect();
            let types = node.results.iter().map(|&result| self.values[result].ty.clone());
            let new_node = rebuilt.push_node(node.op.clone(), &operands, types, node.loc.clone());
            for (old, &new) in node.results.iter().zip(rebuilt.nodes[new_node].results.iter()) {
                map[old.index_usize()] = Some(new);
                rebuilt.values[new].name = self.values[*old].name.clone();
            }
        }
        rebuilt.outputs =
            self.outputs.iter().map(|output| map[output.index_usize()].expect("outputs are live")).collect();
        *self = rebuilt;
    }
}

impl NodeId {
    fn new_from(index: usize) -> NodeId {
        <NodeId as crate::id::EntityId>::new(index)
    }
}

impl ValueId {
    /// The raw index, for side tables indexed by value.
    pub fn index_usize(self) -> usize {
        <ValueId as crate::id::EntityId>::index(self)
    }
}

impl NodeId {
    /// The raw index, for side tables indexed by node.
    pub fn index_usize(self) -> usize {
        <NodeId as crate::id::EntityId>::index(self)
    }
}
