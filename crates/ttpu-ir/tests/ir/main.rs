//! Unit and property tests of the IR through its public API: inference per op family, the
//! verifier and `compact`, inlining a graph, and property tests of the text form and literal encoding.

mod common;
mod infer;
mod inline;
mod padding;
mod props;
mod verify;
