//! Parser of the `.fx` text into [`crate::ast::Program`].

use crate::Result;
use crate::ast::Program;

/// Parses `.fx` text read from `path` (used only in messages).
pub fn parse(source: &str, path: &str) -> Result<Program> {
    let _ = (source, path);
    unimplemented!("the parser is being written")
}
