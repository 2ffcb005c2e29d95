//! Printing a graph as IR text. Deterministic: the same graph always prints the same bytes.

use std::fmt::Write;

use super::attrs::{Attr, op_attrs};
use crate::{Graph, Op, ValueId};

/// Prints `graph` in the IR text form. The graphs of its loops come first, each named
/// `@whileN_cond` / `@whileN_body` (numbered in print order, inner loops before outer ones), and
/// `@main` last.
pub fn print(graph: &Graph) -> String {
    let mut out = String::new();
    for (symbol, range) in graph.symbols.iter() {
        match range.max {
            Some(max) => writeln!(out, "symbol {symbol} in [{}, {max}]", range.min),
            None => writeln!(out, "symbol {symbol} in [{}, inf]", range.min),
        }
        .expect("writing to a String cannot fail");
    }
    let mut loops = 0;
    print_graph(graph, "main", &mut loops, &mut out);
    out
}

/// Prints the loop graphs `graph` uses, then `graph` itself as `@name`.
fn print_graph(graph: &Graph, graph_name: &str, loops: &mut usize, out: &mut String) {
    let mut loop_names: Vec<Option<usize>> = vec![None; graph.node_count()];
    for (node_id, node) in graph.nodes() {
        if let Op::While(while_loop) = &node.op {
            let number = *loops;
            *loops += 1;
            print_graph(&while_loop.cond, &format!("while{number}_cond"), loops, out);
            print_graph(&while_loop.body, &format!("while{number}_body"), loops, out);
            loop_names[node_id.index_usize()] = Some(number);
        }
    }
    let mut numbers = vec![u32::MAX; graph.value_count()];
    let mut next = 0u32;
    let mut number = |value: ValueId, numbers: &mut Vec<u32>| {
        numbers[value.index_usize()] = next;
        next += 1;
    };
    for &input in &graph.inputs {
        number(input, &mut numbers);
    }
    for (_, node) in graph.nodes() {
        for &result in &node.results {
            number(result, &mut numbers);
        }
    }
    let name = |value: ValueId| format!("%{}", numbers[value.index_usize()]);

    write!(out, "graph @{graph_name}(").expect("writing to a String cannot fail");
    for (index, &input) in graph.inputs.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        let data = graph.value(input);
        write!(out, "{}: {}", name(input), data.ty).expect("writing to a String cannot fail");
        if let Some(input_name) = &data.name {
            write!(out, " {input_name:?}").expect("writing to a String cannot fail");
        }
    }
    out.push_str(") -> (");
    for (index, &output) in graph.outputs.iter().enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        write!(out, "{}", graph.ty(output)).expect("writing to a String cannot fail");
    }
    out.push_str(") {\n");
    for (node_id, node) in graph.nodes() {
        out.push_str("  ");
        for (index, &result) in node.results.iter().enumerate() {
            if index > 0 {
                out.push_str(", ");
            }
            write!(out, "{}: {}", name(result), graph.ty(result)).expect("writing to a String cannot fail");
        }
        write!(out, " = {}(", node.op.mnemonic()).expect("writing to a String cannot fail");
        for (index, &operand) in node.operands.iter().enumerate() {
            if index > 0 {
                out.push_str(", ");
            }
            out.push_str(&name(operand));
        }
        out.push(')');
        let mut attrs = op_attrs(&node.op);
        if let Some(number) = loop_names[node_id.index_usize()] {
            attrs.push(("cond", Attr::Graph(format!("while{number}_cond"))));
            attrs.push(("body", Attr::Graph(format!("while{number}_body"))));
        }
        if !attrs.is_empty() {
            out.push_str(" {");
            for (index, (key, value)) in attrs.iter().enumerate() {
                if index > 0 {
                    out.push_str(", ");
                }
                write!(out, "{key} = {value}").expect("writing to a String cannot fail");
            }
            out.push('}');
        }
        match (&node.loc.name, &node.loc.origin) {
            (Some(loc_name), Some(origin)) => write!(out, "  # {loc_name}: {origin}"),
            (Some(loc_name), None) => write!(out, "  # {loc_name}"),
            (None, Some(origin)) => write!(out, "  # : {origin}"),
            (None, None) => Ok(()),
        }
        .expect("writing to a String cannot fail");
        out.push('\n');
    }
    out.push_str("  return");
    for (index, &output) in graph.outputs.iter().enumerate() {
        out.push_str(if index == 0 { " " } else { ", " });
        out.push_str(&name(output));
    }
    out.push_str("\n}\n");
}
