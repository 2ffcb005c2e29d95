//! Equality saturation over the tensor IR: `Graph` in, a cheaper equal `Graph` out.
//!
//! [`fuse`] loads a [`ttpu_ir::Graph`] into an [`egg`] e-graph (one e-node per op, attributes
//! included in its identity, inputs and constants as leaves), applies rewrite rules until nothing
//! new appears or a limit is hit, extracts the cheapest equal graph under a bytes-moved-plus-flops
//! cost, and rebuilds it through [`ttpu_ir::GraphBuilder`] with the original inputs, names and
//! locations. Common subexpressions merge for free on the way in.
//!
//! ```
//! use ttpu_fuse::{FuseOptions, fuse};
//! let graph = ttpu_ir::text::parse(
//!     "graph @main(%0: f32[4, 8] \"x\") -> (f32[4, 8]) {\n\
//!        %1: f32[8, 4] = transpose(%0) {permutation = [1, 0]}\n\
//!        %2: f32[4, 8] = transpose(%1) {permutation = [1, 0]}\n\
//!        return %2\n\
//!      }\n",
//! )
//! .unwrap();
//! let (fused, report) = fuse(&graph, &FuseOptions::default()).unwrap();
//! assert_eq!(fused.node_count(), 0);
//! assert!(report.to_string().contains("transpose-transpose"));
//! ```
//!
//! Where a rewrite belongs:
//! - Local algebra (one op and its operands, decided by types and small constants) is an egg rule
//!   here, in `rules/`, with a kebab-case name and a comment saying why it is exact.
//! - A structural change that needs the whole graph (dead code, scheduling, layout assignment) is a
//!   pass in the driver's pipeline, not a rule.
//! - Decomposing ATen ops happens in `ttpu-fx`, never here: this crate sees only IR primitives.
//!
//! Exact rules keep every result bit-identical (up to NaN payloads) and always run; rules that change
//! rounding run only with [`FuseOptions::fast_math`]. No egg type is public.

#![warn(missing_docs)]

mod analysis;
mod convert;
mod cost;
mod error;
mod lang;
mod report;
mod rules;

use std::time::Duration;

use egg::{Extractor, Runner, SimpleScheduler};
use ttpu_ir::Graph;

pub use error::{Error, Result};
pub use report::{FuseReport, StopReason};

/// Options of one [`fuse`] run.
#[derive(Clone, Debug, PartialEq)]
pub struct FuseOptions {
    /// Also run rules that change rounding (reassociation, division by a constant as a product).
    pub fast_math: bool,
    /// Stop when the e-graph holds this many e-nodes.
    pub node_limit: usize,
    /// Stop after this many iterations.
    pub iter_limit: usize,
    /// Stop after this much time, if set. Off by default: a time limit makes the result depend
    /// on the machine's speed, while the node and iteration limits make the same graph always
    /// fuse to the same bytes.
    pub time_limit: Option<Duration>,
    /// Per graph input, whether its value stays the same from call to call (a weight that no call
    /// mutates); missing entries are `false`. Work that reads only such inputs and constants is
    /// done once, when the weights are bound (the driver's load-time split), so when any input is
    /// resident the cost model counts that work as free and prefers forms that move arithmetic
    /// onto weights. Empty (the default): every op is priced as running on every call.
    pub resident_inputs: Vec<bool>,
}

impl Default for FuseOptions {
    fn default() -> FuseOptions {
        FuseOptions {
            fast_math: false,
            node_limit: 200_000,
            iter_limit: 30,
            time_limit: None,
            resident_inputs: Vec::new(),
        }
    }
}

/// The names of the rules a run with `fast_math` uses, exact rules first.
pub fn rule_names(fast_math: bool) -> Vec<&'static str> {
    active_rules(fast_math).iter().map(|rule| rule.name).collect()
}

fn active_rules(fast_math: bool) -> Vec<rules::Rule> {
    let mut res = rules::exact_rules();
    if fast_math {
        res.extend(rules::fast_math_rules());
    }
    res
}

/// Rewrites `graph` into an equal graph that is no more expensive, and reports what happened.
///
/// The result has the same inputs (order, types, names) and output types, and verifies.
pub fn fuse(graph: &Graph, options: &FuseOptions) -> Result<(Graph, FuseReport)> {
    let _span = tracing::debug_span!("fuse", ops = graph.node_count()).entered();
    ttpu_ir::verify(graph).map_err(Error::InvalidInput)?;
    let loaded = convert::load(graph, options)?;
    let enodes_before = loaded.egraph.total_number_of_nodes();
    let eclasses_before = loaded.egraph.number_of_classes();
    let active = active_rules(options.fast_math);
    let rewrites = rules::rewrites(&active);
    let runner = Runner::default()
        .with_egraph(loaded.egraph)
        .with_scheduler(SimpleScheduler)
        .with_node_limit(options.node_limit)
        .with_iter_limit(options.iter_limit)
        // egg's own default is five seconds; without a limit of ours, time never decides.
        .with_time_limit(options.time_limit.unwrap_or(Duration::MAX))
        .run(&rewrites);
    let (ordered, map) = convert::topological(&runner.egraph);
    let outputs: Vec<egg::Id> = loaded.outputs.iter().map(|&id| map[&runner.egraph.find(id)]).collect();
    let locs: Vec<(egg::Id, ttpu_ir::Loc)> =
        loaded.locs.into_iter().map(|(id, loc)| (map[&runner.egraph.find(id)], loc)).collect();
    let extractor = Extractor::new(&ordered, cost::FuseCost { egraph: &ordered });
    let extracted = convert::extract(graph, &extractor, &ordered, &outputs, &locs)?;
    ttpu_ir::verify(&extracted).map_err(Error::Internal)?;
    // Extraction costs trees, so a shared value can make the chosen graph dearer than the input
    // when each node is counted once; the input is kept then, so fusing never costs more.
    let cost_before = cost::graph_cost(graph, &options.resident_inputs);
    let extracted_cost = cost::graph_cost(&extracted, &options.resident_inputs);
    let (fused, cost_after) =
        if extracted_cost <= cost_before { (extracted, extracted_cost) } else { (graph.clone(), cost_before) };
    let egraph = &runner.egraph;

    let rules_fired = active
        .iter()
        .filter_map(|rule| {
            let count: usize = runner
                .iterations
                .iter()
                .filter_map(|iteration| iteration.applied.iter().find(|(name, _)| name.as_str() == rule.name))
                .map(|(_, count)| *count)
                .sum();
            (count > 0).then_some((rule.name, count))
        })
        .collect();
    let stop_reason = match runner.stop_reason.clone() {
        Some(egg::StopReason::Saturated) | None => StopReason::Saturated,
        Some(egg::StopReason::IterationLimit(limit)) => StopReason::IterationLimit(limit),
        Some(egg::StopReason::NodeLimit(_)) => StopReason::NodeLimit(options.node_limit),
        Some(egg::StopReason::TimeLimit(_)) => StopReason::TimeLimit,
        Some(egg::StopReason::Other(reason)) => StopReason::Other(reason),
    };
    let report = FuseReport {
        rules_fired,
        enodes_before,
        enodes_after: egraph.total_number_of_nodes(),
        eclasses_before,
        eclasses_after: egraph.number_of_classes(),
        iterations: runner.iterations.len(),
        stop_reason,
        ops_before: graph.node_count(),
        ops_after: fused.node_count(),
        cost_before,
        cost_after,
    };
    tracing::debug!(%report, "fused");
    Ok((fused, report))
}
