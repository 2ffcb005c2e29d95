//! Errors of the frontend. Every variant carries the file, line and column it points at.

use std::sync::Arc;

/// A byte range into the source text.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// A position in a source file, computed once when an error is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The path of the program, as its frontend names it (the `.fx` file given to `ttpu_fx::parse`).
    pub path: Arc<str>,
    /// Byte range of the offending text.
    pub span: Span,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
}

impl Location {
    /// The location of `span` in `source`.
    pub fn new(path: &Arc<str>, source: &str, span: Span) -> Location {
        let start = span.start.min(source.len());
        let before = &source[..floor_char_boundary(source, start)];
        let line = before.matches('\n').count() as u32 + 1;
        let line_start = before.rfind('\n').map_or(0, |index| index + 1);
        let col = before[line_start..].chars().count() as u32 + 1;
        Location { path: path.clone(), span, line, col }
    }
}

fn floor_char_boundary(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.path, self.line, self.col)
    }
}

/// What went wrong while reading a `.fx` file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The text does not follow the grammar.
    #[error("{at}: expected {expected}, found `{found}`")]
    Syntax {
        /// Where.
        at: Location,
        /// What the grammar allows here.
        expected: String,
        /// The offending text (`end of file` at the end).
        found: String,
    },
    /// A name is used before any placeholder or node defines it.
    #[error("{at}: undefined name `{name}`")]
    UndefinedName {
        /// Where it is used.
        at: Location,
        /// The name.
        name: String,
    },
    /// The op has no decomposition.
    #[error("{at}: unsupported op `{op}` at node `{node}`")]
    UnsupportedOp {
        /// The call.
        at: Location,
        /// The overload, like `aten.foo.default`.
        op: String,
        /// The node's name.
        node: String,
    },
    /// The op is deliberately not supported; the reason comes from the ops table's notes.
    #[error("{at}: op `{op}` at node `{node}` is not supported: {reason}")]
    OpNotSupported {
        /// The call.
        at: Location,
        /// The overload.
        op: String,
        /// The node's name.
        node: String,
        /// Why it cannot be imported.
        reason: String,
    },
    /// The op is known but these arguments are not (a wrong count, kind or value).
    #[error("{at}: `{op}` at node `{node}`: {message}")]
    BadArguments {
        /// The call.
        at: Location,
        /// The overload.
        op: String,
        /// The node's name.
        node: String,
        /// What is wrong.
        message: String,
    },
    /// The decomposition's result type disagrees with the printed annotation.
    #[error("{at}: node `{node}` is annotated {annotated} but `{op}` produces {inferred}")]
    TypeMismatch {
        /// The statement.
        at: Location,
        /// The overload.
        op: String,
        /// The node's name.
        node: String,
        /// The printed type.
        annotated: String,
        /// What the decomposition produced.
        inferred: String,
    },
    /// The graph signature does not match the graph.
    #[error("{at}: {message}")]
    Signature {
        /// The signature line, or the `forward` header.
        at: Location,
        /// What is inconsistent.
        message: String,
    },
    /// The model has symbolic dims and no concrete sizes were given for them.
    #[error("{at}: needs static sizes: {message}")]
    DynamicDims {
        /// Where the symbolic dim appears.
        at: Location,
        /// Which symbol and why it matters.
        message: String,
    },
}

impl Error {
    /// Where the error points.
    pub fn location(&self) -> &Location {
        match self {
            Error::Syntax { at, .. }
            | Error::UndefinedName { at, .. }
            | Error::UnsupportedOp { at, .. }
            | Error::OpNotSupported { at, .. }
            | Error::BadArguments { at, .. }
            | Error::TypeMismatch { at, .. }
            | Error::Signature { at, .. }
            | Error::DynamicDims { at, .. } => at,
        }
    }
}

/// Result of the frontend.
pub type Result<T, E = Error> = std::result::Result<T, E>;
