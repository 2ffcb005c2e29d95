//! The verifier: every value defined once before use, every stored type equal to inference,
//! every symbol declared, every output defined. It collects all problems, not just the first.

use std::fmt;

use crate::infer::infer;
use crate::{Graph, TensorType, ValueDef, ValueId};

/// Everything wrong with a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct VerifyErrors(pub Vec<String>);

impl fmt::Display for VerifyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the graph is invalid: {}", self.0.join("; "))
    }
}

/// Checks the graph's invariants.
pub fn verify(graph: &Graph) -> Result<(), VerifyErrors> {
    let mut errors = Vec::new();
    let mut defined = vec![false; graph.value_count()];
    let check_symbols = |ty: &TensorType, what: &str, errors: &mut Vec<String>| {
        for dim in ty.shape.dims() {
            for name in dim.symbols() {
                if graph.symbols.range(&name).is_none() {
                    errors.push(format!("{what} uses undeclared symbol `{name}`"));
                }
            }
        }
    };
    for (index, &input) in graph.inputs.iter().enumerate() {
        match graph.values.get(input) {
            Some(data) if data.def == ValueDef::Input(index as u32) => {
                defined[input.index_usize()] = true;
                check_symbols(&data.ty, &format!("input {input}"), &mut errors);
            }
            _ => errors.push(format!("input {index} ({input}) is not defined as that input")),
        }
    }
    for (node_id, node) in graph.nodes() {
        let op = node.op.mnemonic();
        let mut operand_types = Vec::with_capacity(node.operands.len());
        for &operand in &node.operands {
            if defined.get(operand.index_usize()).copied().unwrap_or(false) {
                operand_types.push(graph.ty(operand));
            } else {
                errors.push(format!("`{op}` ({node_id}) uses {operand} before it is defined"));
            }
        }
        for (slot, &result) in node.results.iter().enumerate() {
            match graph.values.get(result) {
                Some(data) if data.def == ValueDef::Result(node_id, slot as u32) => {}
                _ => errors.push(format!("result {slot} of `{op}` ({node_id}) is not defined by it")),
            }
        }
        if let crate::Op::While(while_loop) = &node.op {
            for (part, graph) in [("cond", &while_loop.cond), ("body", &while_loop.body)] {
                if let Err(VerifyErrors(inner)) = verify(graph) {
                    errors.extend(inner.into_iter().map(|error| format!("`{op}` ({node_id}) {part}: {error}")));
                }
            }
        }
        if operand_types.len() == node.operands.len() {
            match infer(&node.op, &operand_types) {
                Ok(types) => {
                    for (&result, inferred) in node.results.iter().zip(&types) {
                        let stored = graph.ty(result);
                        if stored != inferred {
                            errors.push(format!("{result} of `{op}` is typed {stored} but infers {inferred}"));
                        }
                    }
                    if types.len() != node.results.len() {
                        errors.push(format!(
                            "`{op}` ({node_id}) has {} results, infers {}",
                            node.results.len(),
                            types.len()
                        ));
                    }
                }
                Err(error) => errors.push(format!("{node_id}: {error}")),
            }
        }
        for &result in &node.results {
            if let Some(slot) = defined.get_mut(result.index_usize()) {
                *slot = true;
            }
            if let Some(data) = graph.values.get(result) {
                check_symbols(&data.ty, &format!("{result}"), &mut errors);
            }
        }
    }
    for &output in &graph.outputs {
        if !defined.get(output.index_usize()).copied().unwrap_or(false) {
            errors.push(format!("output {output} is not defined"));
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(VerifyErrors(errors)) }
}

impl Graph {
    /// Users of each value, as a side table indexed by value.
    pub fn use_counts(&self) -> Vec<u32> {
        let mut counts = vec![0u32; self.value_count()];
        for (_, node) in self.nodes() {
            for operand in &node.operands {
                counts[operand.index_usize()] += 1;
            }
        }
        for output in &self.outputs {
            counts[output.index_usize()] += 1;
        }
        counts
    }

    /// Whether `value` is one of the graph's inputs.
    pub fn is_input(&self, value: ValueId) -> bool {
        matches!(self.value(value).def, ValueDef::Input(_))
    }
}
