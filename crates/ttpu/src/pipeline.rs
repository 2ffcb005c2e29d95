//! The pass pipeline over the IR, as a list of named passes. The pipeline spans crates, so the
//! driver owns the list; each pass is a free function and the graph is verified after each one.

use ttpu_ir::Graph;

use crate::{Error, Result};

/// One named graph-to-graph pass.
pub struct Pass {
    /// Kebab-case name, as used in reports and flags.
    pub name: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// The pass.
    pub run: fn(&mut Graph),
}

/// The default pipeline.
pub const PASSES: &[Pass] =
    &[Pass { name: "dce", summary: "remove nodes whose results are unused", run: Graph::compact }];

/// Runs `passes` in order, verifying after each.
pub fn run_passes(graph: &mut Graph, passes: &[Pass]) -> Result<()> {
    for pass in passes {
        let _span = tracing::debug_span!("pass", name = pass.name).entered();
        (pass.run)(graph);
        ttpu_ir::verify(graph).map_err(|errors| Error::Internal { pass: pass.name, errors })?;
    }
    Ok(())
}
