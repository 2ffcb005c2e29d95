//! Helpers shared by the integration tests of `ttpu-fuse`.

#[allow(dead_code)]
pub mod interp;
