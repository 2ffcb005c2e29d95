//! `Graph` -> e-graph and extracted e-graph -> `Graph`, carrying names and locations through.
//!
//! Graph inputs become `Input(index)` leaves and constants become leaves holding their literal, so
//! every IR value maps to one e-class. Each e-class remembers the [`Loc`] of the first IR node (in
//! graph order) that landed in it; a node that a rule created in a class of its own takes the loc of
//! the node that uses it. The rebuilt graph goes through [`GraphBuilder`], so every type is inferred
//! again, and it has the original inputs (order, types, names) and symbols.

use std::collections::HashMap;

use egg::{CostFunction, Extractor, Id};
use smallvec::SmallVec;
use ttpu_ir::{Graph, GraphBuilder, Loc, Op, ValueId, WhileLoop};

use crate::FuseOptions;
use crate::analysis::{FuseAnalysis, FuseGraph};
use crate::error::{Error, Result};
use crate::lang::{FNode, Head, OpKey};

/// A graph loaded into an e-graph.
pub(crate) struct Loaded {
    pub(crate) egraph: FuseGraph,
    /// The class of each graph output.
    pub(crate) outputs: Vec<Id>,
    /// Locations of the IR nodes, in graph order.
    pub(crate) locs: Vec<(Id, Loc)>,
}

/// Adds every node of `graph` to a fresh e-graph. A loop's own graphs are fused first, with
/// `options`: nothing outside a loop rewrites what is inside it.
pub(crate) fn load(graph: &Graph, options: &FuseOptions) -> Result<Loaded> {
    let input_types = graph.inputs.iter().map(|&input| graph.ty(input).clone()).collect();
    let resident_inputs = options.resident_inputs.clone();
    let mut egraph = FuseGraph::new(FuseAnalysis { input_types, resident_inputs });
    // A loop's graphs have inputs of their own (the loop state), none of them resident.
    let loop_options = FuseOptions { resident_inputs: Vec::new(), ..options.clone() };
    let mut classes: Vec<Option<Id>> = vec![None; graph.value_count()];
    for (index, &input) in graph.inputs.iter().enumerate() {
        let index = u32::try_from(index).expect("fewer than 2^32 inputs");
        classes[input.index_usize()] = Some(egraph.add(FNode::input(index)));
    }
    let mut locs = Vec::with_capacity(graph.node_count());
    for (_, node) in graph.nodes() {
        let operands: Vec<Id> = node
            .operands
            .iter()
            .map(|operand| classes[operand.index_usize()].expect("a verified graph defines operands before use"))
            .collect();
        if let Op::While(while_loop) = &node.op {
            let cond = crate::fuse(&while_loop.cond, &loop_options)?.0;
            let body = crate::fuse(&while_loop.body, &loop_options)?.0;
            let op = Op::While(Box::new(WhileLoop { cond, body }));
            for (index, &result) in node.results.iter().enumerate() {
                let index = u32::try_from(index).expect("fewer than 2^32 results");
                let id = egraph.add(FNode::result(op.clone(), index, &operands));
                classes[result.index_usize()] = Some(id);
                locs.push((id, node.loc.clone()));
            }
            continue;
        }
        if let Op::Kernel(_) = &node.op {
            // A kernel is opaque: its results are result heads, which no rule reads.
            for (index, &result) in node.results.iter().enumerate() {
                let index = u32::try_from(index).expect("fewer than 2^32 results");
                let id = egraph.add(FNode::result(node.op.clone(), index, &operands));
                classes[result.index_usize()] = Some(id);
                locs.push((id, node.loc.clone()));
            }
            continue;
        }
        if node.results.len() != 1 {
            return Err(Error::MultiResult { op: node.op.mnemonic(), results: node.results.len() });
        }
        let id = egraph.add(FNode::op(node.op.clone(), &operands));
        classes[node.results[0].index_usize()] = Some(id);
        locs.push((id, node.loc.clone()));
    }
    let outputs = graph
        .outputs
        .iter()
        .map(|output| classes[output.index_usize()].expect("a verified graph defines its outputs"))
        .collect();
    Ok(Loaded { egraph, outputs, locs })
}

/// A copy of `egraph` whose e-classes are numbered in a topological order, and the map from the
/// old canonical ids to the new ones.
///
/// egg's [`Extractor`] sweeps the classes in storage order until no cost improves. Unions reorder
/// that storage and rules append classes at the end, so on a long chain each sweep would only
/// settle a few more links. Re-adding the classes in an order where some node of each class has
/// all operands already added lets the sweeps settle at once.
pub(crate) fn topological(egraph: &FuseGraph) -> (FuseGraph, HashMap<Id, Id>) {
    let input_types = egraph.analysis.input_types.clone();
    let resident_inputs = egraph.analysis.resident_inputs.clone();
    let mut ordered = FuseGraph::new(FuseAnalysis { input_types, resident_inputs });
    let mut map: HashMap<Id, Id> = HashMap::new();
    let mut ready: Vec<Id> = Vec::new();
    let add_ready_node = |class: Id, ordered: &mut FuseGraph, map: &HashMap<Id, Id>| -> Option<Id> {
        egraph[class].nodes.iter().find_map(|node| {
            let children: Option<smallvec::SmallVec<[Id; 3]>> =
                node.children.iter().map(|child| map.get(&egraph.find(*child)).copied()).collect();
            children.map(|children| ordered.add(FNode { head: node.head.clone(), children }))
        })
    };
    for class in egraph.classes() {
        if class.nodes.iter().any(|node| node.children.is_empty()) {
            let id = add_ready_node(class.id, &mut ordered, &map).expect("a leaf is always ready");
            map.insert(class.id, id);
            ready.push(class.id);
        }
    }
    while let Some(class) = ready.pop() {
        for parent in egraph[class].parents() {
            let parent = egraph.find(parent);
            if map.contains_key(&parent) {
                continue;
            }
            if let Some(id) = add_ready_node(parent, &mut ordered, &map) {
                map.insert(parent, id);
                ready.push(parent);
            }
        }
    }
    for class in egraph.classes() {
        let Some(&target) = map.get(&class.id) else { continue };
        for node in &class.nodes {
            let children: Option<smallvec::SmallVec<[Id; 3]>> =
                node.children.iter().map(|child| map.get(&egraph.find(*child)).copied()).collect();
            if let Some(children) = children {
                let id = ordered.add(FNode { head: node.head.clone(), children });
                ordered.union(target, id);
            }
        }
    }
    ordered.rebuild();
    (ordered, map)
}

/// Builds the graph of the cheapest nodes reachable from `outputs`.
pub(crate) fn extract<CF: CostFunction<FNode>>(
    original: &Graph,
    extractor: &Extractor<'_, CF, FNode, FuseAnalysis>,
    egraph: &FuseGraph,
    outputs: &[Id],
    locs: &[(Id, Loc)],
) -> Result<Graph> {
    let mut class_locs: HashMap<Id, &Loc> = HashMap::new();
    for (id, loc) in locs {
        class_locs.entry(egraph.find(*id)).or_insert(loc);
    }
    let mut builder = GraphBuilder::new();
    builder.graph_mut().symbols = original.symbols.clone();
    for &input in &original.inputs {
        let data = original.value(input);
        builder.input(data.ty.clone(), data.name.clone());
    }
    let mut built: HashMap<Id, ValueId> = HashMap::new();
    // The results of each several-result op built so far, by op and operands: the op is built
    // once, when its first result is needed.
    let mut multi: HashMap<(&OpKey, Vec<ValueId>), SmallVec<[ValueId; 1]>> = HashMap::new();
    // An explicit stack: chains of thousands of nodes must not overflow the call stack.
    enum Visit<'a> {
        Enter(Id, &'a Loc),
        Build(Id, &'a Loc),
    }
    let no_loc = Loc::default();
    for &output in outputs {
        let mut stack = vec![Visit::Enter(egraph.find(output), &no_loc)];
        while let Some(visit) = stack.pop() {
            match visit {
                Visit::Enter(id, inherited) => {
                    if built.contains_key(&id) {
                        continue;
                    }
                    let loc = class_locs.get(&id).copied().unwrap_or(inherited);
                    stack.push(Visit::Build(id, loc));
                    for &child in extractor.find_best_node(id).children.iter().rev() {
                        let child = egraph.find(child);
                        if !built.contains_key(&child) {
                            stack.push(Visit::Enter(child, loc));
                        }
                    }
                }
                Visit::Build(id, loc) => {
                    if built.contains_key(&id) {
                        continue;
                    }
                    let node = extractor.find_best_node(id);
                    let value = match &node.head {
                        Head::Input(index) => builder.graph().inputs[*index as usize],
                        Head::Op(key) => {
                            let operands: Vec<ValueId> =
                                node.children.iter().map(|child| built[&egraph.find(*child)]).collect();
                            builder.set_loc(loc.clone());
                            builder
                                .op(key.op().clone(), &operands)
                                .map_err(|source| Error::Rebuild { op: key.op().mnemonic(), source })?
                        }
                        Head::Result(index, key) => {
                            let operands: Vec<ValueId> =
                                node.children.iter().map(|child| built[&egraph.find(*child)]).collect();
                            let results = match multi.entry((key, operands)) {
                                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                                std::collections::hash_map::Entry::Vacant(entry) => {
                                    builder.set_loc(loc.clone());
                                    let results = builder
                                        .op_results(key.op().clone(), &entry.key().1)
                                        .map_err(|source| Error::Rebuild { op: key.op().mnemonic(), source })?;
                                    entry.insert(results)
                                }
                            };
                            results[*index as usize]
                        }
                    };
                    built.insert(id, value);
                }
            }
        }
    }
    let outputs: Vec<ValueId> = outputs.iter().map(|output| built[&egraph.find(*output)]).collect();
    Ok(builder.finish(&outputs))
}
