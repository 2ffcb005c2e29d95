//! The textual form of the IR: one node per line, values renumbered densely in print order.
//!
//! ```text
//! symbol s77 in [2, 1024]
//! graph @main(%0: f32[s77, 16] "x", %1: f32[8, 16] "fc.weight") -> (f32[s77, 8]) {
//!   %2: f32[16, 8] = transpose(%1) {permutation = [1, 0]}  # permute: aten.permute.default @ model.fx:7
//!   %3: f32[s77, 8] = dot_general(%0, %2) {lhs_batch = [], rhs_batch = [], lhs_contracting = [1], rhs_contracting = [0]}
//!   return %3
//! }
//! ```
//!
//! Attributes are a flat `name = value` dictionary per op (`attrs.rs`); the printer and the parser
//! both go through it, so one table decides the spelling of every op. Types the result already
//! carries (the shape of `reshape`, the dtype of `convert`) are not repeated as attributes.

mod attrs;
mod parse;
mod print;

pub use parse::{ParseError, parse};
pub use print::print;
