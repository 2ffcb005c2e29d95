//! Integration tests of the eager API on the CPU plugin: values against hand-computed
//! expectations, DeferAndFuse against DeferNever, promotion and broadcasting, exact error
//! messages, whole fixture models against PyTorch's outputs, the compile cache, and many threads
//! on one device.

mod cache;
mod calls;
mod collectives;
mod common;
mod fixtures;
mod math;
mod mesh;
mod modes;
mod ops;
mod reduce;
mod shapes;
mod threads;
