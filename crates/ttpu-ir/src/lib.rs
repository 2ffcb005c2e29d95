//! The tensor graph IR of ttpu.
//!
//! A [`Graph`] is a function from typed inputs to outputs built from a closed set of tensor
//! primitives ([`Op`]) at StableHLO granularity. The frontend decomposes ATen ops into these, the
//! optimizer rewrites them and the StableHLO crate lowers them one to one.
//!
//! ```
//! use ttpu_ir::{BinaryOp, DType, GraphBuilder, TensorType, verify};
//! let mut builder = GraphBuilder::new();
//! let x = builder.input(TensorType::from_static(DType::F32, &[2, 3]), Some("x".into()));
//! let doubled = builder.binary(BinaryOp::Add, x, x).unwrap();
//! let graph = builder.finish(&[doubled]);
//! verify(&graph).unwrap();
//! assert!(ttpu_ir::text::print(&graph).contains("%1: f32[2, 3] = add(%0, %0)"));
//! ```
//!
//! This crate knows nothing about PyTorch, MLIR, egg or PJRT, and does no I/O.

#![warn(missing_docs)]

mod builder;
pub mod composite;
mod dim_expr;
mod dtype;
mod graph;
mod id;
mod infer;
mod kernel;
mod literal;
mod op;
mod padding;
mod shape;
mod sharding;
pub mod text;
mod verify;

pub use builder::GraphBuilder;
pub use dim_expr::{Atom, DimExpr};
pub use dtype::{DType, UnknownDType};
pub use graph::{Graph, Loc, Node, NodeId, ValueData, ValueDef, ValueId};
pub use id::{EntityId, IdVec};
pub use infer::{InferError, MAX_LOOP_NESTING, infer};
pub use kernel::{Kernel, KernelBody};
pub use literal::{Literal, LiteralSizeError, Scalar, c64_as_complex32_bytes, complex32_as_c64_bytes};
pub use op::{
    BinaryOp, Collective, CompareDirection, ConvDims, DotDims, FftType, GatherDims, Op, ReduceKind, RngAlgorithm,
    ScatterDims, ScatterKind, UnaryOp, WhileLoop, Window,
};
pub use padding::{PaddingVerdict, PaddingVerdicts, padding_verdicts};
pub use shape::{Compound, Dim, Shape, SymbolRange, SymbolTable, TensorType};
pub use sharding::{Mesh, ProgramSharding, Sharding, ShardingError};
pub use verify::{VerifyErrors, verify};
