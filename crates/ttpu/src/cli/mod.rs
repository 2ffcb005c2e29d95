//! Commands of the `ttpu` CLI that live in modules of their own.

pub(crate) mod launch;
pub mod llm;
