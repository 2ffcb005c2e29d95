//! Tokens of the `.fx` text.
