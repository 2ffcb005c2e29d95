//! Integration tests of the eager API on the CPU plugin: values against hand-computed
//! expectations, DeferAndFuse against DeferNever, promotion and broadcasting, exact error
//! messages, the compile cache, and many threads on one device.

mod cache;
mod common;
mod modes;
mod ops;
mod threads;
