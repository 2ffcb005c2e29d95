//! Tokens of the `.fx` text: a hand-written lexer over a byte range of the source.
//!
//! The lexer never fails: text it cannot close (a string cut by the end of the line) becomes an
//! [`TokenKind::Unterminated`] token, so the parser reports it in source order with its own
//! context. Whitespace (spaces, tabs, `\r`) is skipped, so CRLF files read like LF files; line
//! breaks are tokens because the `.fx` format is line-oriented. The same lexer also reads the inside
//! of a type annotation string (`"f32[s0 + 1, 8]"`), which is why it works on a sub-range with
//! spans kept relative to the whole source.

use crate::ast::Span;

/// What a token is. The token's text is always `&source[span]`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// `[A-Za-z_][A-Za-z0-9_]*` (Unicode letters and digits are accepted too).
    Ident,
    /// Decimal digits only: `0`, `9223372036854775807` (a sign is a separate token).
    Int,
    /// Digits with a fraction and/or exponent: `1.0`, `1e-05`, `2.8284271247461903`.
    Float,
    /// A quoted string, quotes included in the span.
    Str,
    /// An operator or bracket: one character, or one of `//`, `**`, `==`, `!=`, `<=`, `>=`, `->`.
    /// Characters the grammar never uses (`@`, `$`, `?`) are single-character puncts too, so the
    /// parser rejects them with its own expectation.
    Punct,
    /// `#` up to the end of the line (excluded).
    Comment,
    /// A `\n`.
    Newline,
    /// A string whose closing quote is missing before the end of the line; the span is the string so
    /// far.
    Unterminated,
    /// The end of the lexed range; the span is empty.
    Eof,
}

/// One token.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    /// Its kind.
    pub kind: TokenKind,
    /// Its bytes in the whole source.
    pub span: Span,
    /// 1-based line of its first byte (only counted for whole-file lexing; sub-ranges report the
    /// line they start on).
    pub line: u32,
}

/// Splits `source[start..end]` into tokens, ending with one [`TokenKind::Eof`].
///
/// `start` and `end` must lie on char boundaries (the parser only passes token boundaries).
pub(crate) fn tokenize(source: &str, start: usize, end: usize, first_line: u32) -> Vec<Token> {
    let bytes = source.as_bytes();
    let end = end.min(source.len());
    let mut tokens = Vec::with_capacity((end.saturating_sub(start)) / 4 + 1);
    let mut pos = start;
    let mut line = first_line;
    while pos < end {
        let byte = bytes[pos];
        let token_start = pos;
        let kind = match byte {
            b' ' | b'\t' | b'\r' | b'\x0c' => {
                pos += 1;
                continue;
            }
            b'\n' => {
                pos += 1;
                TokenKind::Newline
            }
            b'#' => {
                pos = find_line_end(bytes, pos, end);
                TokenKind::Comment
            }
            b'"' | b'\'' => {
                let (after, closed) = scan_string(bytes, pos, end);
                pos = after;
                if closed { TokenKind::Str } else { TokenKind::Unterminated }
            }
            b'0'..=b'9' => {
                let (after, is_float) = scan_number(bytes, pos, end);
                pos = after;
                if is_float { TokenKind::Float } else { TokenKind::Int }
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                pos = scan_ident(source, pos, end);
                TokenKind::Ident
            }
            _ if byte >= 0x80 => {
                // A non-ASCII character: part of an identifier if it is a letter, else a lone punct.
                let ch = source[pos..].chars().next().unwrap_or('\u{fffd}');
                if ch.is_alphabetic() {
                    pos = scan_ident(source, pos, end);
                    TokenKind::Ident
                } else {
                    pos += ch.len_utf8();
                    TokenKind::Punct
                }
            }
            _ => {
                let two = if pos + 1 < end { &bytes[pos..pos + 2] } else { &bytes[pos..pos + 1] };
                pos += match two {
                    b"//" | b"**" | b"==" | b"!=" | b"<=" | b">=" | b"->" => 2,
                    _ => 1,
                };
                TokenKind::Punct
            }
        };
        tokens.push(Token { kind, span: Span { start: token_start, end: pos }, line });
        if kind == TokenKind::Newline {
            line += 1;
        }
    }
    tokens.push(Token { kind: TokenKind::Eof, span: Span { start: end, end }, line });
    tokens
}

/// The index of the next `\n` at or after `pos`, or `end`.
fn find_line_end(bytes: &[u8], pos: usize, end: usize) -> usize {
    bytes[pos..end].iter().position(|&b| b == b'\n').map_or(end, |offset| pos + offset)
}

/// Scans a quoted string starting at its quote; returns the index after it and whether it closed.
/// Strings never span lines: an unclosed one stops at the line break (excluded).
fn scan_string(bytes: &[u8], pos: usize, end: usize) -> (usize, bool) {
    let quote = bytes[pos];
    let mut index = pos + 1;
    while index < end {
        match bytes[index] {
            b'\n' => return (index, false),
            b'\\' if index + 1 < end && bytes[index + 1] != b'\n' => index += 2,
            byte if byte == quote => return (index + 1, true),
            _ => index += 1,
        }
    }
    (end.max(pos + 1), false)
}

/// Scans `digits[.digits][(e|E)[+-]digits]`; returns the index after it and whether it is a float.
/// An `e` not followed by digits is left for the next token, so `1e` lexes as `1` then `e`.
fn scan_number(bytes: &[u8], pos: usize, end: usize) -> (usize, bool) {
    let digits = |mut index: usize| {
        while index < end && bytes[index].is_ascii_digit() {
            index += 1;
        }
        index
    };
    let mut index = digits(pos);
    let mut is_float = false;
    if index + 1 < end && bytes[index] == b'.' && bytes[index + 1].is_ascii_digit() {
        index = digits(index + 1);
        is_float = true;
    }
    if index < end && (bytes[index] == b'e' || bytes[index] == b'E') {
        let mut exponent = index + 1;
        if exponent < end && (bytes[exponent] == b'+' || bytes[exponent] == b'-') {
            exponent += 1;
        }
        if exponent < end && bytes[exponent].is_ascii_digit() {
            index = digits(exponent);
            is_float = true;
        }
    }
    (index, is_float)
}

/// Scans an identifier (ASCII or Unicode letters, digits and `_`).
fn scan_ident(source: &str, pos: usize, end: usize) -> usize {
    let mut index = pos;
    for ch in source[pos..end].chars() {
        if ch == '_' || ch.is_alphanumeric() {
            index += ch.len_utf8();
        } else {
            break;
        }
    }
    index
}

/// The value of a string token's text (quotes included), with Python escapes resolved.
///
/// Unknown escapes keep their backslash, as Python does; a bad `\x`/`\u` escape is kept verbatim.
pub(crate) fn unquote(text: &str) -> String {
    let inner = text.get(1..text.len().saturating_sub(1)).unwrap_or("");
    if !inner.contains('\\') {
        return inner.to_owned();
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(ch) = chars.next() {
        if ch != '\\' {
            out.push(ch);
            continue;
        }
        let Some(escaped) = chars.next() else {
            out.push('\\');
            break;
        };
        let hex_digits = match escaped {
            'n' => {
                out.push('\n');
                continue;
            }
            't' => {
                out.push('\t');
                continue;
            }
            'r' => {
                out.push('\r');
                continue;
            }
            '0' => {
                out.push('\0');
                continue;
            }
            '\\' | '\'' | '"' => {
                out.push(escaped);
                continue;
            }
            'x' => 2,
            'u' => 4,
            'U' => 8,
            other => {
                out.push('\\');
                out.push(other);
                continue;
            }
        };
        let rest = chars.as_str();
        let decoded = rest
            .get(..hex_digits)
            .filter(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|digits| u32::from_str_radix(digits, 16).ok())
            .and_then(char::from_u32);
        match decoded {
            Some(value) => {
                out.push(value);
                chars = rest[hex_digits..].chars();
            }
            None => {
                out.push('\\');
                out.push(escaped);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(TokenKind, &str)> {
        tokenize(text, 0, text.len(), 1).iter().map(|t| (t.kind, &text[t.span.start..t.span.end])).collect()
    }

    #[test]
    fn lexes_a_statement() {
        use TokenKind::*;
        assert_eq!(
            kinds("a: \"f32[2]\" = f(x, -1e-05, 2.5, 9, 'y');  a = None # c\r\n"),
            vec![
                (Ident, "a"),
                (Punct, ":"),
                (Str, "\"f32[2]\""),
                (Punct, "="),
                (Ident, "f"),
                (Punct, "("),
                (Ident, "x"),
                (Punct, ","),
                (Punct, "-"),
                (Float, "1e-05"),
                (Punct, ","),
                (Float, "2.5"),
                (Punct, ","),
                (Int, "9"),
                (Punct, ","),
                (Str, "'y'"),
                (Punct, ")"),
                (Punct, ";"),
                (Ident, "a"),
                (Punct, "="),
                (Ident, "None"),
                (Comment, "# c\r"),
                (Newline, "\n"),
                (Eof, ""),
            ]
        );
    }

    #[test]
    fn two_char_operators_and_odd_text() {
        use TokenKind::*;
        assert_eq!(kinds("s//2"), vec![(Ident, "s"), (Punct, "//"), (Int, "2"), (Eof, "")]);
        assert_eq!(kinds("1e x"), vec![(Int, "1"), (Ident, "e"), (Ident, "x"), (Eof, "")]);
        assert_eq!(kinds("'ab\nc"), vec![(Unterminated, "'ab"), (Newline, "\n"), (Ident, "c"), (Eof, "")]);
        assert_eq!(kinds("'"), vec![(Unterminated, "'"), (Eof, "")]);
        assert_eq!(kinds("é→"), vec![(Ident, "é"), (Punct, "→"), (Eof, "")]);
    }

    #[test]
    fn unquotes_python_escapes() {
        assert_eq!(unquote("'tanh'"), "tanh");
        assert_eq!(unquote(r"'a\'b\\c\n\x41\u00e9\q'"), "a'b\\c\nAé\\q");
        assert_eq!(unquote(r"'\x4'"), "\\x4");
    }
}
