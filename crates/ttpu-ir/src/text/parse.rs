//! Parsing IR text back into a graph (used by tests and filetests).
//!
//! The grammar is exactly what [`super::print`] writes; blank lines are also accepted:
//!
//! ```text
//! text   := symbol* graph* main
//! graph  := "graph" GLOBAL "(" params? ")" "->" "(" types? ")" "{" NL node* return "}" NL?
//! main   := a graph named "@main", last
//! symbol := "symbol" NAME "in" "[" INT "," (INT | "inf") "]" NL
//! param  := VALUE ":" type STRING?
//! node   := VALUE ":" type ("," VALUE ":" type)* "=" NAME "(" values? ")" ("{" attrs? "}")? COMMENT? NL
//! return := "return" values? NL
//! type   := DTYPE "[" (INT | SYMBOL) ("," (INT | SYMBOL))* "]"
//! attr   := NAME "=" (INT | "true" | "false" | NAME | GLOBAL | "[" attr-values "]" | "dense<" scalar-or-list ">")
//! ```
//!
//! A `while` node names the graphs of its condition and body (`{cond = @while0_cond, body =
//! @while0_body}`), defined above it; the printer numbers them in print order.
//!
//! ```text
//! ```
//!
//! Value numbers are names: the text may number values any way it likes as long as every use
//! follows its definition. Nodes go through [`GraphBuilder::op`], so every result type is inferred
//! and then compared with the printed one; attributes go through the same table as the printer
//! ([`super::attrs`]). Positions in errors are 1-based lines and columns counted in characters.

use std::collections::HashMap;

use super::attrs::{Attr, AttrReader, kernel_from_attrs, op_from_attrs};
use crate::{
    DType, Dim, DimExpr, Graph, GraphBuilder, Literal, Loc, Op, Scalar, Shape, SymbolRange, TensorType, ValueId,
};

/// A syntax or type error in IR text, with its position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{col}: {message}")]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
    /// What was expected and what was found.
    pub message: String,
}

/// Parses IR text printed by [`super::print`].
pub fn parse(text: &str) -> Result<Graph, ParseError> {
    let tokens = lex(text)?;
    Parser { tokens, pos: 0, builder: GraphBuilder::new(), values: HashMap::new(), nesting: 0, graphs: HashMap::new() }
        .text()
}

/// How deeply attribute lists may nest; deeper input is rejected instead of exhausting the stack.
const MAX_NESTING: usize = 32;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// A bare word: keyword, dtype, mnemonic, symbol, attribute name or value.
    Ident(String),
    /// `@name`.
    Global(String),
    /// `%name`, without the `%`.
    Value(String),
    Int(i64),
    Float(f64),
    Str(String),
    /// The text after `#` up to the end of the line, less one leading space.
    Comment(String),
    Punct(char),
    Arrow,
    Newline,
    Eof,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    /// The source text, for messages.
    text: String,
    line: u32,
    col: u32,
}

impl Token {
    fn describe(&self) -> String {
        match self.tok {
            Tok::Newline => "end of line".into(),
            Tok::Eof => "end of input".into(),
            _ => {
                let text: String = self.text.chars().take(40).collect();
                if text.len() < self.text.len() { format!("`{text}...`") } else { format!("`{text}`") }
            }
        }
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError { line: self.line, col: self.col, message: message.into() }
    }

    fn is_punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }

    fn is_ident(&self, word: &str) -> bool {
        matches!(&self.tok, Tok::Ident(name) if name == word)
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

struct Lexer<'a> {
    chars: &'a [char],
    index: usize,
    line: u32,
    col: u32,
}

impl Lexer<'_> {
    fn peek_at(&self, offset: usize) -> Option<char> {
        self.chars.get(self.index + offset).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek_at(0)?;
        self.index += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn error(&self, message: impl Into<String>) -> ParseError {
        ParseError { line: self.line, col: self.col, message: message.into() }
    }

    fn name(&mut self) -> String {
        let mut name = String::new();
        while let Some(c) = self.peek_at(0).filter(|&c| is_name_char(c)) {
            name.push(c);
            self.bump();
        }
        name
    }

    fn digits(&mut self, text: &mut String) {
        while let Some(c) = self.peek_at(0).filter(char::is_ascii_digit) {
            text.push(c);
            self.bump();
        }
    }

    /// `-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?`; a fraction or exponent makes it a float.
    fn number(&mut self) -> Result<Tok, String> {
        let mut text = String::new();
        if self.peek_at(0) == Some('-') {
            text.push('-');
            self.bump();
        }
        self.digits(&mut text);
        let mut float = false;
        if self.peek_at(0) == Some('.') && self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) {
            float = true;
            text.push('.');
            self.bump();
            self.digits(&mut text);
        }
        if matches!(self.peek_at(0), Some('e' | 'E')) {
            let signed = matches!(self.peek_at(1), Some('+' | '-'));
            let digit_at = if signed { 2 } else { 1 };
            if self.peek_at(digit_at).is_some_and(|c| c.is_ascii_digit()) {
                float = true;
                for _ in 0..digit_at {
                    text.push(self.bump().expect("peeked"));
                }
                self.digits(&mut text);
            }
        }
        if self.peek_at(0).is_some_and(is_name_char) {
            let rest = self.name();
            return Err(format!("malformed number `{text}{rest}`"));
        }
        if float {
            text.parse().map(Tok::Float).map_err(|_| format!("malformed number `{text}`"))
        } else {
            text.parse().map(Tok::Int).map_err(|_| format!("integer `{text}` does not fit in 64 bits"))
        }
    }

    /// A string as Rust's `{:?}` writes it, opening quote already consumed.
    fn string(&mut self) -> Result<String, String> {
        let mut value = String::new();
        loop {
            match self.peek_at(0) {
                None | Some('\n') => return Err("unterminated string".into()),
                Some('"') => {
                    self.bump();
                    return Ok(value);
                }
                Some('\\') => {
                    self.bump();
                    let escaped = match self.bump() {
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('t') => '\t',
                        Some('0') => '\0',
                        Some(c @ ('\\' | '"' | '\'')) => c,
                        Some('u') => {
                            let mut hex = String::new();
                            if self.bump() != Some('{') {
                                return Err("expected `{` after `\\u`".into());
                            }
                            loop {
                                match self.bump() {
                                    Some('}') => break,
                                    Some(c) if c.is_ascii_hexdigit() && hex.len() < 6 => hex.push(c),
                                    _ => return Err("malformed `\\u{...}` escape".into()),
                                }
                            }
                            u32::from_str_radix(&hex, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| format!("`\\u{{{hex}}}` is not a character"))?
                        }
                        Some(c) => return Err(format!("unknown escape `\\{c}`")),
                        None => return Err("unterminated string".into()),
                    };
                    value.push(escaped);
                }
                Some(c) => {
                    value.push(c);
                    self.bump();
                }
            }
        }
    }
}

fn lex(text: &str) -> Result<Vec<Token>, ParseError> {
    let chars: Vec<char> = text.chars().collect();
    let mut lexer = Lexer { chars: &chars, index: 0, line: 1, col: 1 };
    let mut tokens = Vec::new();
    loop {
        let (start, line, col) = (lexer.index, lexer.line, lexer.col);
        let Some(c) = lexer.peek_at(0) else {
            tokens.push(Token { tok: Tok::Eof, text: String::new(), line, col });
            return Ok(tokens);
        };
        let at = |message: String| ParseError { line, col, message };
        let tok = match c {
            ' ' | '\t' | '\r' => {
                lexer.bump();
                continue;
            }
            '\n' => {
                lexer.bump();
                Tok::Newline
            }
            '#' => {
                lexer.bump();
                let mut comment = String::new();
                while let Some(c) = lexer.peek_at(0).filter(|&c| c != '\n') {
                    comment.push(c);
                    lexer.bump();
                }
                if comment.ends_with('\r') {
                    comment.pop();
                }
                Tok::Comment(comment.strip_prefix(' ').map(str::to_owned).unwrap_or(comment))
            }
            '"' => {
                lexer.bump();
                Tok::Str(lexer.string().map_err(|message| lexer.error(message))?)
            }
            '%' | '@' => {
                lexer.bump();
                let name = lexer.name();
                if name.is_empty() {
                    return Err(lexer.error(format!("expected a name after `{c}`")));
                }
                if c == '%' { Tok::Value(name) } else { Tok::Global(name) }
            }
            '-' if lexer.peek_at(1) == Some('>') => {
                lexer.bump();
                lexer.bump();
                Tok::Arrow
            }
            '-' if lexer.peek_at(1).is_some_and(|c| c.is_ascii_digit()) => lexer.number().map_err(at)?,
            c if c.is_ascii_digit() => lexer.number().map_err(at)?,
            c if c.is_ascii_alphabetic() || c == '_' => Tok::Ident(lexer.name()),
            '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>' | ',' | ':' | '=' | '-' | '+' | '*' | '/' => {
                lexer.bump();
                Tok::Punct(c)
            }
            other => return Err(at(format!("unexpected character `{}`", other.escape_debug()))),
        };
        let text = chars[start..lexer.index].iter().collect();
        tokens.push(Token { tok, text, line, col });
    }
}

struct Parser {
    /// Never empty: the last token is `Eof`, and the cursor never moves past it.
    tokens: Vec<Token>,
    pos: usize,
    builder: GraphBuilder,
    /// Value names in the text (without `%`) to values of the graph being built.
    values: HashMap<String, ValueId>,
    /// Parentheses open in the size expression being parsed: bounded, so hostile text cannot
    /// exhaust the stack.
    nesting: usize,
    /// The graphs parsed so far that a loop may still name, by name (without `@`). Each is
    /// taken by the one loop that names it.
    graphs: HashMap<String, (Graph, Token)>,
}

type Parsed<T> = Result<T, ParseError>;

/// A result being defined by a node line.
struct ResultDecl {
    token: Token,
    ty: TensorType,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.pos]
    }

    fn next(&mut self) -> Token {
        let token = self.tokens[self.pos].clone();
        if self.pos + 1 < self.tokens.len() {
            self.pos += 1;
        }
        token
    }

    fn expected<T>(&self, what: &str) -> Parsed<T> {
        let found = self.peek();
        Err(found.error(format!("expected {what}, found {}", found.describe())))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let found = self.peek().is_punct(c);
        if found {
            self.next();
        }
        found
    }

    fn expect_punct(&mut self, c: char) -> Parsed<Token> {
        if self.peek().is_punct(c) { Ok(self.next()) } else { self.expected(&format!("`{c}`")) }
    }

    fn expect_keyword(&mut self, word: &str) -> Parsed<Token> {
        if self.peek().is_ident(word) { Ok(self.next()) } else { self.expected(&format!("`{word}`")) }
    }

    fn expect_newline(&mut self) -> Parsed<()> {
        match self.peek().tok {
            Tok::Newline => {
                self.next();
                Ok(())
            }
            Tok::Eof => Ok(()),
            _ => self.expected("end of line"),
        }
    }

    fn skip_blank_lines(&mut self) {
        while self.peek().tok == Tok::Newline {
            self.next();
        }
    }

    fn int(&mut self, what: &str) -> Parsed<i64> {
        match self.peek().tok {
            Tok::Int(value) => {
                self.next();
                Ok(value)
            }
            _ => self.expected(what),
        }
    }

    /// The symbols, the loop graphs, then `@main`.
    fn text(mut self) -> Parsed<Graph> {
        self.skip_blank_lines();
        while self.peek().is_ident("symbol") {
            self.symbol()?;
            self.skip_blank_lines();
        }
        let symbols = self.builder.graph().symbols.clone();
        loop {
            self.expect_keyword("graph")?;
            let name_token = self.peek().clone();
            let Tok::Global(name) = &name_token.tok else {
                return self.expected("a graph name like `@main`");
            };
            self.next();
            if self.graphs.contains_key(name) {
                return Err(name_token.error(format!("graph `@{name}` is defined twice")));
            }
            // Every graph sees the symbols declared at the top.
            let mut builder = GraphBuilder::new();
            builder.graph_mut().symbols = symbols.clone();
            self.builder = builder;
            self.values.clear();
            let graph = self.graph()?;
            self.skip_blank_lines();
            if name == "main" {
                if self.peek().tok != Tok::Eof {
                    return self.expected("end of input after `@main`");
                }
                if let Some((unused, (_, token))) = self.graphs.iter().min_by_key(|(_, (_, token))| token.line) {
                    return Err(token.error(format!("graph `@{unused}` is defined but no loop uses it")));
                }
                return Ok(graph);
            }
            if self.peek().tok == Tok::Eof {
                return self.expected("`graph @main`");
            }
            self.graphs.insert(name.clone(), (graph, name_token.clone()));
        }
    }

    /// One graph after its name: parameters, signature and body.
    fn graph(&mut self) -> Parsed<Graph> {
        self.expect_punct('(')?;
        if !self.eat_punct(')') {
            loop {
                self.param()?;
                if self.eat_punct(')') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.expected("`,` or `)`");
                }
            }
        }
        if self.peek().tok != Tok::Arrow {
            return self.expected("`->`");
        }
        self.next();
        self.expect_punct('(')?;
        let mut signature = Vec::new();
        if !self.eat_punct(')') {
            loop {
                signature.push(self.ty()?);
                if self.eat_punct(')') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.expected("`,` or `)`");
                }
            }
        }
        self.expect_punct('{')?;
        self.expect_newline()?;
        loop {
            self.skip_blank_lines();
            match self.peek().tok {
                Tok::Value(_) => self.node()?,
                Tok::Ident(ref word) if word == "return" => break,
                _ => return self.expected("a node or `return`"),
            }
        }
        let outputs = self.return_line(&signature)?;
        self.skip_blank_lines();
        self.expect_punct('}')?;
        let builder = std::mem::take(&mut self.builder);
        Ok(builder.finish(&outputs))
    }

    /// `symbol s77 in [2, 1024]`, or `inf` for no upper bound.
    fn symbol(&mut self) -> Parsed<()> {
        self.expect_keyword("symbol")?;
        let token = self.peek().clone();
        let Tok::Ident(name) = &token.tok else {
            return self.expected("a symbol name");
        };
        self.next();
        if self.builder.graph().symbols.range(name).is_some() {
            return Err(token.error(format!("symbol `{name}` is declared twice")));
        }
        self.expect_keyword("in")?;
        self.expect_punct('[')?;
        let min = self.int("the smallest value of the symbol")?;
        self.expect_punct(',')?;
        let max = if self.peek().is_ident("inf") {
            self.next();
            None
        } else {
            Some(self.int("the largest value of the symbol or `inf`")?)
        };
        self.expect_punct(']')?;
        if let Some(max) = max
            && max < min
        {
            return Err(token.error(format!("symbol `{name}` has the empty range [{min}, {max}]")));
        }
        self.expect_newline()?;
        self.builder.graph_mut().symbols.declare(name, SymbolRange { min, max });
        Ok(())
    }

    /// `%0: f32[2, 3] "x"`.
    fn param(&mut self) -> Parsed<()> {
        let token = self.value_def()?;
        self.expect_punct(':')?;
        let ty = self.ty()?;
        let name = match &self.peek().tok {
            Tok::Str(name) => {
                let name = name.clone();
                self.next();
                Some(name)
            }
            _ => None,
        };
        let value = self.builder.input(ty, name);
        self.define(&token, value);
        Ok(())
    }

    /// A value token about to be defined; it must not be defined yet.
    fn value_def(&mut self) -> Parsed<Token> {
        match &self.peek().tok {
            Tok::Value(name) if self.values.contains_key(name) => {
                let token = self.peek();
                Err(token.error(format!("value {} is defined twice", token.text)))
            }
            Tok::Value(_) => Ok(self.next()),
            _ => self.expected("a value like `%0`"),
        }
    }

    fn define(&mut self, token: &Token, value: ValueId) {
        if let Tok::Value(name) = &token.tok {
            self.values.insert(name.clone(), value);
        }
    }

    /// A use of an already defined value.
    fn value_use(&mut self) -> Parsed<ValueId> {
        match &self.peek().tok {
            Tok::Value(name) => match self.values.get(name) {
                Some(&value) => {
                    self.next();
                    Ok(value)
                }
                None => {
                    let token = self.peek();
                    Err(token.error(format!("undefined value {}", token.text)))
                }
            },
            _ => self.expected("a value like `%0`"),
        }
    }

    /// `f32[2, s77]`, `bool[]`.
    fn ty(&mut self) -> Parsed<TensorType> {
        let dtype = match &self.peek().tok {
            Tok::Ident(name) => match name.parse::<DType>() {
                Ok(dtype) => dtype,
                Err(_) => return self.expected("a dtype"),
            },
            _ => return self.expected("a type like `f32[2, 3]`"),
        };
        self.next();
        self.expect_punct('[')?;
        let mut dims = Vec::new();
        if !self.eat_punct(']') {
            loop {
                dims.push(self.dim()?);
                if self.eat_punct(']') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.expected("`,` or `]`");
                }
            }
        }
        Ok(TensorType::new(dtype, Shape(dims.into_iter().collect())))
    }

    /// A dim: a size, a symbol, or an expression of them as the printer writes it
    /// (`2*s0 + 1`, `(s0 - 1)//2`, `s0**2`).
    fn dim(&mut self) -> Parsed<Dim> {
        let start = self.peek().clone();
        let expr = self.dim_sum()?;
        match expr.clone().into_dim() {
            Dim::Static(size) if size < 0 => Err(start.error(format!("negative dimension size `{expr}`"))),
            dim => Ok(dim),
        }
    }

    fn dim_sum(&mut self) -> Parsed<DimExpr> {
        let mut sum = self.dim_product()?;
        loop {
            let negate = if self.eat_punct('+') {
                false
            } else if self.eat_punct('-') {
                true
            } else {
                return Ok(sum);
            };
            let token = self.peek().clone();
            let term = self.dim_product()?;
            let next = if negate { sum.checked_sub(&term) } else { sum.checked_add(&term) };
            sum = next.ok_or_else(|| token.error("dimension expression overflows 64 bits".to_string()))?;
        }
    }

    fn dim_product(&mut self) -> Parsed<DimExpr> {
        let negate = self.eat_punct('-');
        let mut product = self.dim_power()?;
        while self.peek().tok == Tok::Punct('*') {
            self.next();
            let token = self.peek().clone();
            let factor = self.dim_power()?;
            product =
                product.checked_mul(&factor).ok_or_else(|| token.error("dimension expression overflows 64 bits"))?;
        }
        if negate {
            let token = self.peek().clone();
            product = DimExpr::constant(0)
                .checked_sub(&product)
                .ok_or_else(|| token.error("dimension expression overflows 64 bits"))?;
        }
        Ok(product)
    }

    /// `primary`, `primary**N` or `primary//N`.
    fn dim_power(&mut self) -> Parsed<DimExpr> {
        let base = self.dim_primary()?;
        let token = self.peek().clone();
        let operator = match (&token.tok, &self.tokens[(self.pos + 1).min(self.tokens.len() - 1)].tok) {
            (Tok::Punct('*'), Tok::Punct('*')) => "**",
            (Tok::Punct('/'), Tok::Punct('/')) => "//",
            _ => return Ok(base),
        };
        for _ in 0..operator.len() {
            self.next();
        }
        let amount = self.peek().clone();
        let Tok::Int(amount_value) = amount.tok else { return self.expected("an integer") };
        self.next();
        let result = match operator {
            // Sizes never need a high power; the bound keeps a typo from looping for long.
            "**" => u32::try_from(amount_value)
                .ok()
                .filter(|&exponent| exponent <= 64)
                .and_then(|exponent| (0..exponent).try_fold(DimExpr::constant(1), |acc, _| acc.checked_mul(&base))),
            _ => base.floor_div(amount_value),
        };
        result.ok_or_else(|| amount.error(format!("bad operand `{amount_value}` for `{operator}`")))
    }

    fn dim_primary(&mut self) -> Parsed<DimExpr> {
        let token = self.peek().clone();
        if matches!(&token.tok, Tok::Punct('(') | Tok::Ident(_)) {
            if self.nesting >= MAX_NESTING {
                return Err(token.error(format!("size expression nested more than {MAX_NESTING} deep")));
            }
            self.nesting += 1;
            let expr = self.dim_primary_nested(token);
            self.nesting -= 1;
            return expr;
        }
        self.dim_primary_nested(token)
    }

    fn dim_primary_nested(&mut self, token: Token) -> Parsed<DimExpr> {
        let expr = match &token.tok {
            Tok::Int(size) => DimExpr::constant(*size),
            // `Mod(expr, N)`, as PyTorch spells a modulo.
            Tok::Ident(name)
                if name == "Mod" && self.tokens[(self.pos + 1).min(self.tokens.len() - 1)].tok == Tok::Punct('(') =>
            {
                self.next();
                self.next();
                let inner = self.dim_sum()?;
                self.expect_punct(',')?;
                let divisor = self.peek().clone();
                let Tok::Int(value) = divisor.tok else { return self.expected("an integer") };
                self.next();
                self.expect_punct(')')?;
                return inner.modulo(value).ok_or_else(|| divisor.error(format!("bad divisor `{value}` for `Mod`")));
            }
            // `Min(a, b)` and `Max(a, b)`.
            Tok::Ident(name)
                if (name == "Min" || name == "Max")
                    && self.tokens[(self.pos + 1).min(self.tokens.len() - 1)].tok == Tok::Punct('(') =>
            {
                let largest = name == "Max";
                self.next();
                self.next();
                let a = self.dim_sum()?;
                self.expect_punct(',')?;
                let b = self.dim_sum()?;
                self.expect_punct(')')?;
                return Ok(if largest { a.maximum(&b) } else { a.minimum(&b) });
            }
            Tok::Ident(name) => match self.builder.graph().symbols.name(name) {
                Some(symbol) => DimExpr::symbol(symbol),
                None => return Err(token.error(format!("undeclared symbol `{name}`"))),
            },
            Tok::Punct('(') => {
                self.next();
                let inner = self.dim_sum()?;
                self.expect_punct(')')?;
                return Ok(inner);
            }
            _ => return self.expected("a dimension size or symbol"),
        };
        self.next();
        Ok(expr)
    }

    /// `%3: f32[2] = add(%1, %2) {attrs}  # name: origin`.
    fn node(&mut self) -> Parsed<()> {
        let mut results = Vec::new();
        loop {
            let token = self.value_def()?;
            if results.iter().any(|result: &ResultDecl| result.token.tok == token.tok) {
                return Err(token.error(format!("value {} is defined twice", token.text)));
            }
            self.expect_punct(':')?;
            let ty = self.ty()?;
            results.push(ResultDecl { token, ty });
            if !self.eat_punct(',') {
                break;
            }
        }
        self.expect_punct('=')?;
        let mnemonic_token = self.peek().clone();
        let Tok::Ident(mnemonic) = &mnemonic_token.tok else {
            return self.expected("an op name");
        };
        self.next();
        self.expect_punct('(')?;
        let mut operands = Vec::new();
        if !self.eat_punct(')') {
            loop {
                operands.push(self.value_use()?);
                if self.eat_punct(')') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.expected("`,` or `)`");
                }
            }
        }
        let result_type = &results[0].ty;
        let mut attrs = Vec::new();
        let mut keys = Vec::new();
        if self.eat_punct('{') && !self.eat_punct('}') {
            loop {
                let key_token = self.peek().clone();
                let Tok::Ident(key) = &key_token.tok else {
                    return self.expected("an attribute name");
                };
                if keys.iter().any(|(existing, _): &(String, Token)| existing == key) {
                    return Err(key_token.error(format!("attribute `{key}` is given twice")));
                }
                self.next();
                self.expect_punct('=')?;
                let value = self.attr(result_type.dtype, 0)?;
                attrs.push((key.clone(), value));
                keys.push((key.clone(), key_token));
                if self.eat_punct('}') {
                    break;
                }
                if !self.eat_punct(',') {
                    return self.expected("`,` or `}`");
                }
            }
        }
        let loc = match &self.peek().tok {
            Tok::Comment(comment) => {
                let loc = parse_loc(comment);
                self.next();
                loc
            }
            _ => Loc::default(),
        };
        self.expect_newline()?;

        let named: Vec<String> = attrs.iter().map(|(_, value)| format!("`{value}`")).collect();
        let op = if mnemonic == "while" {
            self.while_op(attrs, &keys, &mnemonic_token)?
        } else if mnemonic == "kernel" {
            // A kernel's types are its operands' and results': the text states them once.
            let inputs = operands
                .iter()
                .map(|&operand: &ValueId| {
                    if operand.index_usize() < self.builder.graph().value_count() {
                        Ok(self.builder.ty(operand).clone())
                    } else {
                        Err(mnemonic_token.error(format!("operand {operand} is not in this graph")))
                    }
                })
                .collect::<Parsed<Vec<_>>>()?;
            let results = results.iter().map(|result| result.ty.clone()).collect();
            kernel_from_attrs(AttrReader::new(attrs), inputs, results)
        } else {
            op_from_attrs(mnemonic, AttrReader::new(attrs), result_type)
        };
        let op = op.map_err(|message| {
            // Point at the attribute the message names, or whose value it quotes, if any.
            let token = keys
                .iter()
                .find(|(key, _)| message.contains(&format!("`{key}`")))
                .or_else(|| keys.iter().zip(&named).find(|(_, value)| message.contains(*value)).map(|(key, _)| key))
                .map_or(&mnemonic_token, |(_, token)| token);
            token.error(message)
        })?;
        self.builder.set_loc(loc);
        let node_results =
            self.builder.op_results(op, &operands).map_err(|error| mnemonic_token.error(error.to_string()))?;
        if node_results.len() != results.len() {
            return Err(mnemonic_token.error(format!(
                "`{mnemonic}` has {} results, the text names {}",
                node_results.len(),
                results.len()
            )));
        }
        for (declared, &value) in results.iter().zip(&node_results) {
            let inferred = self.builder.ty(value);
            if &declared.ty != inferred {
                return Err(declared.token.error(format!(
                    "{} is typed {} but `{mnemonic}` infers {inferred}",
                    declared.token.text, declared.ty
                )));
            }
            self.define(&declared.token, value);
        }
        Ok(())
    }

    /// `while` names its two graphs, `{cond = @..., body = @...}`; each must be defined above
    /// and is used by this loop alone.
    fn while_op(
        &mut self,
        attrs: Vec<(String, Attr)>,
        keys: &[(String, Token)],
        mnemonic: &Token,
    ) -> Parsed<Result<Op, String>> {
        let mut take = |part: &str| -> Parsed<Result<Graph, String>> {
            let Some((_, value)) = attrs.iter().find(|(key, _)| key == part) else {
                return Ok(Err(format!("`while` needs the attribute `{part}`")));
            };
            let token = keys.iter().find(|(key, _)| key == part).map_or(mnemonic, |(_, token)| token);
            let Attr::Graph(name) = value else {
                return Err(token.error(format!("attribute `{part}` must name a graph like `@while0_{part}`")));
            };
            match self.graphs.remove(name) {
                Some((graph, _)) => Ok(Ok(graph)),
                None => Err(token.error(format!("no graph `@{name}` is defined above (or another loop uses it)"))),
            }
        };
        let cond = take("cond")?;
        let body = take("body")?;
        if let Some((key, token)) = keys.iter().find(|(key, _)| key != "cond" && key != "body") {
            return Err(token.error(format!("`while` has no attribute `{key}`")));
        }
        Ok(cond.and_then(|cond| Ok(Op::While(Box::new(crate::WhileLoop { cond, body: body? })))))
    }

    /// One attribute value; `dtype` is the element type of `dense<...>` literals.
    fn attr(&mut self, dtype: DType, depth: usize) -> Parsed<Attr> {
        let token = self.peek().clone();
        let function = matches!(&token.tok, Tok::Ident(word) if ["Min", "Max", "Mod"].contains(&word.as_str()))
            && self.tokens.get(self.pos + 1).is_some_and(|next| next.is_punct('('));
        let symbol =
            function || matches!(&token.tok, Tok::Ident(word) if self.builder.graph().symbols.name(word).is_some());
        let operator_follows =
            matches!(self.tokens.get(self.pos + 1).map(|next| &next.tok), Some(Tok::Punct('*' | '+' | '-' | '/')));
        if symbol || (matches!(token.tok, Tok::Int(_)) && operator_follows) {
            // A size expression: `s0`, `2*s0 + 1`.
            return Ok(match self.dim_sum()?.into_dim() {
                Dim::Static(value) => Attr::Int(value),
                dim => Attr::Dim(dim),
            });
        }
        let attr = match &token.tok {
            Tok::Int(value) => Attr::Int(*value),
            Tok::Ident(word) if word == "true" || word == "false" => Attr::Bool(word == "true"),
            Tok::Ident(word) if word == "dense" && self.tokens.get(self.pos + 1).is_some_and(|t| t.is_punct('<')) => {
                self.next();
                self.next();
                return self.dense(dtype);
            }
            Tok::Ident(word) => Attr::Ident(word.clone()),
            Tok::Global(name) => Attr::Graph(name.clone()),
            Tok::Str(text) => Attr::Str(text.clone()),
            Tok::Punct('[') => {
                if depth >= MAX_NESTING {
                    return Err(token.error("attribute lists nest too deeply"));
                }
                self.next();
                let mut items = Vec::new();
                if !self.eat_punct(']') {
                    loop {
                        items.push(self.attr(dtype, depth + 1)?);
                        if self.eat_punct(']') {
                            break;
                        }
                        if !self.eat_punct(',') {
                            return self.expected("`,` or `]`");
                        }
                    }
                }
                return Ok(Attr::List(items));
            }
            _ => return self.expected("an attribute value"),
        };
        self.next();
        Ok(attr)
    }

    /// The rest of `dense<1.0>` or `dense<[1, 2]>` after `dense<`, as a literal of `dtype`.
    fn dense(&mut self, dtype: DType) -> Parsed<Attr> {
        let mut values = Vec::new();
        if self.eat_punct('[') {
            if !self.eat_punct(']') {
                loop {
                    values.push(self.scalar(dtype)?);
                    if self.eat_punct(']') {
                        break;
                    }
                    if !self.eat_punct(',') {
                        return self.expected("`,` or `]`");
                    }
                }
            }
        } else {
            values.push(self.scalar(dtype)?);
        }
        self.expect_punct('>')?;
        let count = i64::try_from(values.len()).expect("fewer than 2^63 values");
        let literal = Literal::from_scalars(dtype, &[count], &values).expect("one element per value");
        Ok(Attr::Literal(literal))
    }

    /// One element of a `dense<...>` literal, checked against `dtype`.
    fn scalar(&mut self, dtype: DType) -> Parsed<Scalar> {
        let token = self.peek().clone();
        let scalar = match &token.tok {
            Tok::Int(value) => Scalar::Int(*value),
            Tok::Float(value) => Scalar::Float(*value),
            Tok::Ident(word) if word == "inf" => Scalar::Float(f64::INFINITY),
            Tok::Ident(word) if word == "nan" => Scalar::Float(f64::NAN),
            Tok::Ident(word) if word == "true" || word == "false" => Scalar::Bool(word == "true"),
            Tok::Punct('-') if self.tokens.get(self.pos + 1).is_some_and(|next| next.is_ident("inf")) => {
                self.next();
                Scalar::Float(f64::NEG_INFINITY)
            }
            _ => return self.expected(&format!("an element of type {dtype}")),
        };
        self.next();
        let fits = match (scalar, dtype) {
            (Scalar::Float(value), DType::F64) => Ok(value),
            (Scalar::Float(value), DType::F32) => Ok(f64::from(value as f32)),
            (Scalar::Float(value), DType::F16) => Ok(crate::literal::to_f16(value).to_f64()),
            (Scalar::Float(value), DType::BF16) => Ok(crate::literal::to_bf16(value).to_f64()),
            (Scalar::Int(value), DType::I64) => Ok(value as f64),
            (Scalar::Int(value), DType::I32) => i32::try_from(value).map(f64::from).map_err(|_| value),
            (Scalar::Int(value), DType::I16) => i16::try_from(value).map(f64::from).map_err(|_| value),
            (Scalar::Int(value), DType::I8) => i8::try_from(value).map(f64::from).map_err(|_| value),
            (Scalar::Int(value), DType::U8) => u8::try_from(value).map(f64::from).map_err(|_| value),
            (Scalar::Int(value), DType::U16) => u16::try_from(value).map(f64::from).map_err(|_| value),
            (Scalar::Int(value), DType::U32) => u32::try_from(value).map(f64::from).map_err(|_| value),
            // u64 elements are spelled as the i64 of the same bits (integer tokens are i64), so
            // values of 2^63 and above print negative and every i64 fits.
            (Scalar::Int(value), DType::U64) => Ok(value as f64),
            (Scalar::Bool(_), DType::Bool) => Ok(0.0),
            // Complex literals hold real values (see `Scalar::to_bytes`), spelled as floats.
            (Scalar::Float(value), DType::C32) => Ok(crate::literal::to_f16(value).to_f64()),
            (Scalar::Float(value), DType::C64) => Ok(f64::from(value as f32)),
            (Scalar::Float(value), DType::C128) => Ok(value),
            _ => return Err(token.error(format!("expected an element of type {dtype}, found {}", token.describe()))),
        };
        match (fits, scalar) {
            (Ok(converted), Scalar::Float(value)) if value.is_finite() && !converted.is_finite() => {
                Err(token.error(format!("{value:?} is out of range for {dtype}")))
            }
            (Err(value), _) => Err(token.error(format!("{value} is out of range for {dtype}"))),
            _ => Ok(scalar),
        }
    }

    /// `return %a, %b`, checked against the signature.
    fn return_line(&mut self, signature: &[TensorType]) -> Parsed<Vec<ValueId>> {
        let keyword = self.expect_keyword("return")?;
        let mut outputs = Vec::new();
        if !matches!(self.peek().tok, Tok::Newline | Tok::Eof) {
            loop {
                let token = self.peek().clone();
                let value = self.value_use()?;
                if let Some(expected) = signature.get(outputs.len()) {
                    let actual = self.builder.ty(value);
                    if actual != expected {
                        return Err(token
                            .error(format!("{} is typed {actual} but the signature returns {expected}", token.text)));
                    }
                }
                outputs.push(value);
                if !self.eat_punct(',') {
                    break;
                }
            }
        }
        if !matches!(self.peek().tok, Tok::Newline | Tok::Eof) {
            return self.expected("`,` or end of line");
        }
        self.expect_newline()?;
        if outputs.len() != signature.len() {
            return Err(keyword.error(format!(
                "expected {} values after `return`, found {}",
                signature.len(),
                outputs.len()
            )));
        }
        Ok(outputs)
    }
}

/// `name: origin`, `: origin` (no name) or `name` (no origin).
fn parse_loc(comment: &str) -> Loc {
    if let Some(origin) = comment.strip_prefix(": ") {
        return Loc { name: None, origin: Some(origin.to_owned()) };
    }
    match comment.split_once(": ") {
        Some((name, origin)) => Loc { name: Some(name.to_owned()), origin: Some(origin.to_owned()) },
        None => Loc { name: Some(comment.to_owned()), origin: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> String {
        parse(text).expect_err("the text is invalid").to_string()
    }

    #[test]
    fn parses_the_module_example() {
        let text = "symbol s77 in [2, 1024]\n\
                    graph @main(%0: f32[s77, 16] \"x\", %1: f32[8, 16] \"fc.weight\") -> (f32[s77, 8]) {\n  \
                    %2: f32[16, 8] = transpose(%1) {permutation = [1, 0]}  # permute: aten.permute.default @ model.fx:7\n  \
                    %3: f32[s77, 8] = dot_general(%0, %2) {lhs_batch = [], rhs_batch = [], lhs_contracting = [1], rhs_contracting = [0]}\n  \
                    return %3\n\
                    }\n";
        let graph = parse(text).unwrap();
        assert_eq!(super::super::print(&graph), text);
        let (_, first) = graph.nodes().next().unwrap();
        assert_eq!(first.loc.name.as_deref(), Some("permute"));
        assert_eq!(first.loc.origin.as_deref(), Some("aten.permute.default @ model.fx:7"));
    }

    #[test]
    fn deep_size_expressions_are_an_error_not_a_stack_overflow() {
        let deep = |depth: usize| {
            format!(
                "symbol s0 in [2, 8]\ngraph @main(%0: f32[{}s0{}] \"x\") -> (f32[s0]) {{\n  return %0\n}}\n",
                "(".repeat(depth),
                ")".repeat(depth)
            )
        };
        assert!(parse(&deep(MAX_NESTING - 1)).is_ok());
        assert_eq!(
            error(&deep(100_000)),
            format!("2:{}: size expression nested more than {MAX_NESTING} deep", 21 + MAX_NESTING)
        );
    }

    #[test]
    fn deep_loop_nesting_is_an_error_not_a_stack_overflow() {
        // Loop `k` runs loop `k - 1` in its body; `@main` runs the outermost.
        let nested = |depth: usize| {
            let mut text = String::new();
            for k in 0..depth {
                text += &format!(
                    "graph @c{k}(%0: f32[2]) -> (bool[]) {{\n  %1: bool[2] = compare(%0, %0) {{direction = NE}}\n  \
                     %2: bool[] = reduce(%1) {{kind = or, dimensions = [0]}}\n  return %2\n}}\n"
                );
                text += &match k {
                    0 => "graph @b0(%0: f32[2]) -> (f32[2]) {\n  return %0\n}\n".to_owned(),
                    _ => format!(
                        "graph @b{k}(%0: f32[2]) -> (f32[2]) {{\n  %1: f32[2] = while(%0) {{cond = @c{}, body = @b{}}}\n  \
                         return %1\n}}\n",
                        k - 1,
                        k - 1
                    ),
                };
            }
            let last = depth - 1;
            text + &format!(
                "graph @main(%0: f32[2] \"x\") -> (f32[2]) {{\n  %1: f32[2] = while(%0) {{cond = @c{last}, body = \
                 @b{last}}}\n  return %1\n}}\n"
            )
        };
        let max = crate::MAX_LOOP_NESTING;
        let graph = parse(&nested(max)).unwrap();
        crate::verify(&graph).unwrap();
        let line = 9 * max + 10; // the loop of `@main`
        assert_eq!(error(&nested(max + 1)), format!("{line}:16: `while`: loops nest more than {max} deep"));
        assert!(error(&nested(5_000)).ends_with(&format!("`while`: loops nest more than {max} deep")));
    }

    #[test]
    fn locations() {
        assert_eq!(parse_loc(": x @ f:1"), Loc { name: None, origin: Some("x @ f:1".into()) });
        assert_eq!(parse_loc("add_1"), Loc { name: Some("add_1".into()), origin: None });
        assert_eq!(parse_loc("a: b: c"), Loc { name: Some("a".into()), origin: Some("b: c".into()) });
    }

    #[test]
    fn lexes_numbers_and_strings() {
        let tokens = lex("-12 1.5e-3 2e5 -> \"a\\\"b\\u{7f}\" 7x").unwrap_err();
        assert_eq!(tokens.to_string(), "1:32: malformed number `7x`");
        let tokens = lex("-12 1.5e-3 2e5 -> \"a\\\"b\\u{7f}\"").unwrap();
        let kinds: Vec<_> = tokens.into_iter().map(|token| token.tok).collect();
        assert_eq!(
            kinds,
            [Tok::Int(-12), Tok::Float(1.5e-3), Tok::Float(2e5), Tok::Arrow, Tok::Str("a\"b\u{7f}".into()), Tok::Eof]
        );
        assert_eq!(
            lex("99999999999999999999").unwrap_err().message,
            "integer `99999999999999999999` does not fit in 64 bits"
        );
    }

    #[test]
    fn reports_positions() {
        assert_eq!(error(""), "1:1: expected `graph`, found end of input");
        assert_eq!(error("graph @main(%0: f32[2]) -> (f32[2]) {\n  return %1\n}\n"), "2:10: undefined value %1");
        assert_eq!(
            error("graph @main(%0: f32[2]) -> (f32[3]) {\n  return %0\n}\n"),
            "2:10: %0 is typed f32[2] but the signature returns f32[3]"
        );
        assert_eq!(error("graph @main(%0: f33[2]) -> () {\n"), "1:17: expected a dtype, found `f33`");
        assert_eq!(error("graph @main(%0: f32[s1]) -> () {\n"), "1:21: undeclared symbol `s1`");
    }
}
