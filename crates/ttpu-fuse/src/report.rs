//! What a fuse run did: rules fired with counts, e-graph sizes, iterations and why it stopped.

use std::fmt;

/// Why equality saturation stopped.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum StopReason {
    /// No rule could add anything new: the result is the best the rules can find.
    Saturated,
    /// `FuseOptions::iter_limit` iterations ran.
    IterationLimit(usize),
    /// The e-graph reached `FuseOptions::node_limit` e-nodes.
    NodeLimit(usize),
    /// `FuseOptions::time_limit` passed.
    TimeLimit,
    /// Anything else egg reported.
    Other(String),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Saturated => f.write_str("saturated"),
            StopReason::IterationLimit(limit) => write!(f, "iteration limit {limit}"),
            StopReason::NodeLimit(limit) => write!(f, "e-node limit {limit}"),
            StopReason::TimeLimit => f.write_str("time limit"),
            StopReason::Other(reason) => f.write_str(reason),
        }
    }
}

/// A summary of one [`crate::fuse`] run.
#[derive(Clone, Debug, PartialEq)]
pub struct FuseReport {
    /// Rules that changed the e-graph, with how many unions each made, in rule-list order.
    pub rules_fired: Vec<(&'static str, usize)>,
    /// E-nodes after loading the graph.
    pub enodes_before: usize,
    /// E-nodes when saturation stopped.
    pub enodes_after: usize,
    /// E-classes after loading the graph.
    pub eclasses_before: usize,
    /// E-classes when saturation stopped.
    pub eclasses_after: usize,
    /// Iterations run.
    pub iterations: usize,
    /// Why saturation stopped.
    pub stop_reason: StopReason,
    /// Nodes in the input graph.
    pub ops_before: usize,
    /// Nodes in the output graph.
    pub ops_after: usize,
    /// The input graph's cost (bytes moved plus flops, each node once).
    pub cost_before: u64,
    /// The output graph's cost; never above `cost_before`.
    pub cost_after: u64,
}

impl fmt::Display for FuseReport {
    /// Two lines: sizes and stop reason, then the rules that fired.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fuse: {} -> {} ops, cost {} -> {}; {} iterations ({}); e-nodes {} -> {}, e-classes {} -> {}",
            self.ops_before,
            self.ops_after,
            self.cost_before,
            self.cost_after,
            self.iterations,
            self.stop_reason,
            self.enodes_before,
            self.enodes_after,
            self.eclasses_before,
            self.eclasses_after
        )?;
        f.write_str("rules fired:")?;
        if self.rules_fired.is_empty() {
            return f.write_str(" none");
        }
        for (index, (name, count)) in self.rules_fired.iter().enumerate() {
            write!(f, "{} {name} x{count}", if index == 0 { "" } else { "," })?;
        }
        Ok(())
    }
}
