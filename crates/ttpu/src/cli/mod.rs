//! Commands of the `ttpu` CLI that live in modules of their own.

pub mod llm;
pub(crate) mod launch;
