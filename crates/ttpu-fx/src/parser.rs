//! Parser of the `.fx` text (`str(ep)` of a `torch.export.ExportedProgram`) into
//! [`crate::ast::Program`].
//!
//! A recursive-descent parser over the tokens of [`crate::lexer`]. The format is line-oriented, so
//! line breaks are significant everywhere except inside `def forward(...)`; indentation is not
//! checked (the keywords already say which section a line belongs to). Type annotations are strings
//! whose inside is lexed again in place, so errors point at the exact character of a bad dim. The
//! parser knows no ATen op; it only checks what the syntax tree needs to be self-consistent: every
//! referenced name is defined earlier and no name is defined twice. The accepted grammar is written
//! down in `docs/fx-format.md`. It never panics: nesting is bounded and every error carries the
//! file, line, column, the offending token and what was expected there.

use std::collections::HashMap;
use std::sync::Arc;

use ttpu_ir::DType;

use crate::ast::{
    Arg, Expr, FxType, InputKind, InputSpec, Node, OutputKind, OutputSpec, Placeholder, Program, RangeConstraint,
    Signature, Span, Submodule, SymExpr,
};
use crate::lexer::{Token, TokenKind, tokenize, unquote};
use crate::{Error, Location, Result};

/// Deepest nesting of brackets (in arguments and dim expressions) and unary operators accepted.
/// Real programs nest two or three levels; the bound keeps recursion far from the stack limit on
/// hostile input.
const MAX_DEPTH: usize = 64;

/// Most operator nodes one dim expression may build. Sums chain to the left, so without a bound
/// `s0+s0+...` would build a tree deep enough to overflow the stack when dropped; real dims have a
/// handful of operators.
const SYM_BUDGET: usize = 256;

/// Longest `found` text quoted in a message, in characters.
const FOUND_MAX_CHARS: usize = 40;

/// What an unknown dtype code in an annotation is reported against.
const EXPECTED_DTYPE_CODE: &str =
    "a dtype (f64, f32, f16, bf16, i64, i32, i16, i8, u8, u16, u32, u64, b8, c32, c64, c128)";

/// What an unsupported `torch.<dtype>` argument is reported against.
const EXPECTED_TORCH_DTYPE: &str = "a supported dtype (torch.float64, torch.float32, torch.float16, torch.bfloat16, \
     torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.bool, \
     torch.complex32, torch.complex64, torch.complex128)";

/// What a bad argument value is reported against.
const EXPECTED_ARG: &str =
    "an argument (a name, number, string, `[...]`, `(...)`, `None`, `True`, `False`, `torch.<dtype>` or `device(...)`)";

/// What a bad dim is reported against.
const EXPECTED_DIM: &str = "a dim like `8`, `s0` or `2*s0`";

/// Infix operators accepted between symbolic values (`mul = sym_size_int * 3`). Only the first five
/// are integer arithmetic; the rest (SymFloat and SymBool arithmetic) are kept so the importer can
/// reject them by name instead of the parser failing on a well-formed program.
const SYM_BINARY_OPS: &[&str] = &["+", "-", "*", "//", "%", "/", "**", "==", "!=", "<", "<=", ">", ">=", "&", "|"];

/// A binary [`SymExpr`] variant, used as a constructor.
type SymCtor = fn(Box<SymExpr>, Box<SymExpr>) -> SymExpr;

/// Positional and keyword arguments of a call.
type CallArgs = (Vec<Arg>, Vec<(String, Arg)>);

/// Parses `.fx` text read from `path` (used only in messages).
pub fn parse(source: &str, path: &str) -> Result<Program> {
    let path: Arc<str> = Arc::from(path);
    // A byte-order mark (written by some Windows editors) is not part of the grammar.
    let start = if source.starts_with('\u{feff}') { '\u{feff}'.len_utf8() } else { 0 };
    let tokens = tokenize(source, start, source.len(), 1);
    let mut parser = Parser { cur: Cursor::new(source, &path, tokens, "end of file"), defined: HashMap::new() };
    let mut program = parser.program()?;
    program.source = Arc::from(source);
    Ok(program)
}

/// A position in a token list, with the helpers every grammar rule needs. Annotations get their
/// own cursor over the tokens inside the quotes.
struct Cursor<'s> {
    src: &'s str,
    path: &'s Arc<str>,
    tokens: Vec<Token>,
    pos: usize,
    /// How the end of this token list reads in messages (`end of file`, `end of annotation`).
    eof_name: &'static str,
    /// Operator nodes dim expressions may still build (see [`SYM_BUDGET`]).
    sym_budget: usize,
}

impl<'s> Cursor<'s> {
    fn new(src: &'s str, path: &'s Arc<str>, tokens: Vec<Token>, eof_name: &'static str) -> Cursor<'s> {
        Cursor { src, path, tokens, pos: 0, eof_name, sym_budget: SYM_BUDGET }
    }

    /// The token `n` ahead of the current one (the final `Eof` repeats forever).
    fn peek_at(&self, n: usize) -> Token {
        let last = self.tokens.len().saturating_sub(1);
        self.tokens.get((self.pos + n).min(last)).copied().unwrap_or(Token {
            kind: TokenKind::Eof,
            span: Span { start: self.src.len(), end: self.src.len() },
            line: 1,
        })
    }

    fn peek(&self) -> Token {
        self.peek_at(0)
    }

    /// Consumes and returns the current token (never moves past `Eof`).
    fn bump(&mut self) -> Token {
        let token = self.peek();
        if token.kind != TokenKind::Eof {
            self.pos += 1;
        }
        token
    }

    /// End of the last consumed token, for spans that cover a whole construct.
    fn prev_end(&self) -> usize {
        match self.pos.checked_sub(1).and_then(|index| self.tokens.get(index)) {
            Some(token) => token.span.end,
            None => self.peek().span.start,
        }
    }

    fn text(&self, token: Token) -> &'s str {
        self.src.get(token.span.start..token.span.end).unwrap_or("")
    }

    /// Whether `token` is the identifier or punct `text` (never a string that happens to match).
    fn is(&self, token: Token, text: &str) -> bool {
        matches!(token.kind, TokenKind::Ident | TokenKind::Punct) && self.text(token) == text
    }

    fn at(&self, text: &str) -> bool {
        self.is(self.peek(), text)
    }

    fn eat(&mut self, text: &str) -> bool {
        let found = self.at(text);
        if found {
            self.bump();
        }
        found
    }

    /// Consumes `text` or fails with `expected`.
    fn expect(&mut self, text: &str, expected: &str) -> Result<Token> {
        if self.at(text) { Ok(self.bump()) } else { Err(self.error(self.peek(), expected)) }
    }

    /// Consumes an identifier or fails with `expected`.
    fn expect_ident(&mut self, expected: &str) -> Result<Token> {
        if self.peek().kind == TokenKind::Ident { Ok(self.bump()) } else { Err(self.error(self.peek(), expected)) }
    }

    /// Consumes a line break; the end of the input also ends a line.
    fn end_of_line(&mut self, expected: &str) -> Result<()> {
        match self.peek().kind {
            TokenKind::Newline => {
                self.bump();
                Ok(())
            }
            TokenKind::Eof => Ok(()),
            _ => Err(self.error(self.peek(), expected)),
        }
    }

    /// The 0-based column of `token`'s first byte within its line.
    fn column(&self, token: Token) -> usize {
        let before = self.src.get(..token.span.start).unwrap_or("");
        before.len() - before.rfind('\n').map_or(0, |newline| newline + 1)
    }

    fn skip_newlines(&mut self) {
        while self.peek().kind == TokenKind::Newline {
            self.bump();
        }
    }

    /// Skips blank lines and `#` comment lines.
    fn skip_trivia(&mut self) {
        while matches!(self.peek().kind, TokenKind::Newline | TokenKind::Comment) {
            self.bump();
        }
    }

    /// A syntax error at `token`. An unterminated string reports itself, whatever was expected.
    fn error(&self, token: Token, expected: &str) -> Error {
        if token.kind == TokenKind::Unterminated {
            let quote = self.text(token).chars().next().unwrap_or('"');
            let at_end = token.span.end >= self.tokens.last().map_or(self.src.len(), |eof| eof.span.start);
            let found = if at_end { self.eof_name } else { "end of line" };
            let at = Span { start: token.span.end, end: token.span.end };
            return self.error_at(at, &format!("a closing `{quote}`"), found.to_owned());
        }
        self.error_at(token.span, expected, self.found(token))
    }

    fn error_at(&self, span: Span, expected: &str, found: String) -> Error {
        Error::Syntax { at: Location::new(self.path, self.src, span), expected: expected.to_owned(), found }
    }

    /// How `token` reads in a message: its text, shortened, or what it stands for.
    fn found(&self, token: Token) -> String {
        match token.kind {
            TokenKind::Eof => self.eof_name.to_owned(),
            TokenKind::Newline => "end of line".to_owned(),
            _ => shorten(self.text(token).trim_end()),
        }
    }

    /// Accounts for `nodes` more operator nodes in a dim expression, failing at `token` once the
    /// budget is spent.
    fn charge(&mut self, token: Token, nodes: usize) -> Result<()> {
        match self.sym_budget.checked_sub(nodes) {
            Some(left) => {
                self.sym_budget = left;
                Ok(())
            }
            None => {
                let expected = format!("a dim expression with at most {SYM_BUDGET} operators");
                Err(self.error(token, &expected))
            }
        }
    }

    /// Parses a decimal integer token, with an optional sign already consumed.
    fn int_value(&self, token: Token, negative: bool, start: usize) -> Result<i64> {
        let digits = self.text(token);
        let value = digits.parse::<i128>().ok().map(|value| if negative { -value } else { value });
        value.and_then(|value| i64::try_from(value).ok()).ok_or_else(|| {
            let span = Span { start, end: token.span.end };
            let text = self.src.get(start..token.span.end).unwrap_or(digits);
            self.error_at(span, "an integer from -9223372036854775808 to 9223372036854775807", shorten(text))
        })
    }
}

/// `text` cut to [`FOUND_MAX_CHARS`] characters, marking the cut.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(FOUND_MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The grammar rules of the whole file, plus the names defined so far.
struct Parser<'s> {
    cur: Cursor<'s>,
    /// Placeholders and nodes defined so far, with the line that defines them.
    defined: HashMap<&'s str, u32>,
}

impl<'s> Parser<'s> {
    /// `ExportedProgram:` header, `GraphModule`, signature and range constraints.
    fn program(&mut self) -> Result<Program> {
        self.cur.skip_trivia();
        self.keywords(&["ExportedProgram", ":"], "`ExportedProgram:`")?;
        self.cur.end_of_line("end of line after `ExportedProgram:`")?;
        self.cur.skip_trivia();
        self.class_header()?;
        self.cur.skip_trivia();
        let placeholders = self.forward_header()?;
        let (nodes, outputs, return_span) = self.body()?;
        let submodules = self.submodules()?;
        let signature = self.signature()?;
        let range_constraints = self.range_constraints()?;
        Ok(Program {
            path: self.cur.path.clone(),
            source: Arc::from(""),
            placeholders,
            nodes,
            outputs,
            return_span,
            signature,
            range_constraints,
            submodules,
        })
    }

    /// The `class NAME(torch.nn.Module):` blocks after the main `forward`, nested by their
    /// indentation: a class indented deeper than the one before it belongs to that one. Each
    /// `forward` has its own names, so the names defined so far are set aside while it is read.
    fn submodules(&mut self) -> Result<Vec<Submodule>> {
        // (indentation, submodule, index of the enclosing submodule) in printed order.
        let mut flat: Vec<(usize, Submodule, Option<usize>)> = Vec::new();
        loop {
            self.cur.skip_trivia();
            let token = self.cur.peek();
            if !self.cur.is(token, "class") {
                break;
            }
            let indent = self.cur.column(token);
            self.cur.bump();
            let name = self.cur.expect_ident("a class name")?;
            self.cur.expect("(", "`(`")?;
            self.dotted()?;
            self.cur.expect(")", "`)`")?;
            self.cur.expect(":", "`:`")?;
            self.cur.end_of_line("end of line after the class header")?;
            self.cur.skip_trivia();
            let outer = std::mem::take(&mut self.defined);
            let placeholders = self.forward_header()?;
            let (nodes, outputs, return_span) = self.body()?;
            self.defined = outer;
            let mut parent = flat.len().checked_sub(1);
            while let Some(index) = parent
                && flat[index].0 >= indent
            {
                parent = flat[index].2;
            }
            let submodule = Submodule {
                name: self.cur.text(name).to_owned(),
                placeholders,
                nodes,
                outputs,
                return_span,
                submodules: Vec::new(),
                span: name.span,
            };
            flat.push((indent, submodule, parent));
        }
        // Children come after their parent, so attaching from the back moves each one complete.
        let mut roots = Vec::new();
        while let Some((_, submodule, parent)) = flat.pop() {
            match parent {
                Some(index) => flat[index].1.submodules.insert(0, submodule),
                None => roots.insert(0, submodule),
            }
        }
        Ok(roots)
    }

    /// Consumes a fixed sequence of identifiers and puncts, reporting the first mismatch against
    /// the whole phrase.
    fn keywords(&mut self, words: &[&str], expected: &str) -> Result<()> {
        for word in words {
            self.cur.expect(word, expected)?;
        }
        Ok(())
    }

    /// `class GraphModule(torch.nn.Module):`; the class and base names are not checked.
    fn class_header(&mut self) -> Result<()> {
        const EXPECTED: &str = "`class GraphModule(torch.nn.Module):`";
        self.cur.expect("class", EXPECTED)?;
        self.cur.expect_ident(EXPECTED)?;
        self.cur.expect("(", EXPECTED)?;
        self.cur.expect_ident(EXPECTED)?;
        while self.cur.eat(".") {
            self.cur.expect_ident(EXPECTED)?;
        }
        self.cur.expect(")", EXPECTED)?;
        self.cur.expect(":", EXPECTED)?;
        self.cur.end_of_line("end of line after the class header")
    }

    /// `def forward(self, name: "type", ...):`. Line breaks inside the parentheses are allowed, as
    /// in Python.
    fn forward_header(&mut self) -> Result<Vec<Placeholder>> {
        const EXPECTED: &str = "`def forward(self, ...):`";
        self.cur.expect("def", EXPECTED)?;
        self.cur.expect("forward", EXPECTED)?;
        self.cur.expect("(", EXPECTED)?;
        self.cur.skip_trivia();
        self.cur.expect("self", "`self`, the first parameter of `forward`")?;
        let mut placeholders = Vec::new();
        loop {
            self.cur.skip_trivia();
            if self.cur.eat(")") {
                break;
            }
            self.cur.expect(",", "`,` or `)`")?;
            self.cur.skip_trivia();
            if self.cur.eat(")") {
                break;
            }
            let name = self.cur.expect_ident("a parameter name")?;
            self.check_new(name)?;
            self.defined.insert(self.cur.text(name), name.line);
            // An input without a recorded value prints without annotation; keep it as an empty
            // `Other` so the importer can say which input it cannot type.
            let ty = if self.cur.eat(":") {
                let annotation = self.annotation_token()?;
                self.annotation(annotation)?
            } else {
                FxType::Other(String::new())
            };
            let span = Span { start: name.span.start, end: self.cur.prev_end() };
            placeholders.push(Placeholder { name: self.cur.text(name).to_owned(), ty, span });
        }
        self.cur.expect(":", "`:` after `def forward(...)`")?;
        self.cur.end_of_line("end of line after `def forward(...):`")?;
        Ok(placeholders)
    }

    /// Rejects a name defined before; the caller records the definition once it is complete.
    fn check_new(&self, name: Token) -> Result<()> {
        let text = self.cur.text(name);
        match self.defined.get(text) {
            Some(line) => {
                let expected = format!("a name not defined before (`{text}` is already defined on line {line})");
                Err(self.cur.error(name, &expected))
            }
            None => Ok(()),
        }
    }

    /// The text of a reference to an earlier placeholder or node.
    fn defined_name(&self, name: Token) -> Result<String> {
        let text = self.cur.text(name);
        if !self.defined.contains_key(text) {
            return Err(Error::UndefinedName {
                at: Location::new(self.cur.path, self.cur.src, name.span),
                name: text.to_owned(),
            });
        }
        Ok(text.to_owned())
    }

    /// A reference to an earlier placeholder or node, as an argument.
    fn name_ref(&self, name: Token) -> Result<Arg> {
        Ok(Arg::Name(self.defined_name(name)?, name.span))
    }

    /// The string token of an annotation.
    fn annotation_token(&mut self) -> Result<Token> {
        let token = self.cur.peek();
        if token.kind != TokenKind::Str {
            return Err(self.cur.error(token, "a type annotation like \"f32[2, 3]\""));
        }
        Ok(self.cur.bump())
    }

    /// Parses the inside of an annotation string token.
    fn annotation(&self, token: Token) -> Result<FxType> {
        let inner =
            Span { start: token.span.start + 1, end: token.span.end.saturating_sub(1).max(token.span.start + 1) };
        let tokens = tokenize(self.cur.src, inner.start, inner.end, token.line);
        let mut cursor = Cursor::new(self.cur.src, self.cur.path, tokens, "end of annotation");
        let text = self.cur.src.get(inner.start..inner.end).unwrap_or("");
        fx_type(&mut cursor, text)
    }

    /// Statements up to and including `return (...)`.
    fn body(&mut self) -> Result<(Vec<Node>, Vec<Arg>, Span)> {
        let mut nodes = Vec::new();
        loop {
            self.cur.skip_trivia();
            let token = self.cur.peek();
            if self.cur.is(token, "return") {
                let (outputs, span) = self.return_statement()?;
                return Ok((nodes, outputs, span));
            }
            if self.cur.is(token, "Graph") && self.cur.is(self.cur.peek_at(1), "signature") {
                return Err(self.cur.error(token, "`return (...)` before `Graph signature:`"));
            }
            if token.kind != TokenKind::Ident {
                return Err(self.cur.error(token, "a statement like `name = ...` or `return (...)`"));
            }
            nodes.push(self.statement()?);
        }
    }

    /// `name: "type" = rhs;  a = b = None`.
    fn statement(&mut self) -> Result<Node> {
        let name = self.cur.bump();
        self.check_new(name)?;
        let ty = if self.cur.eat(":") {
            let annotation = self.annotation_token()?;
            Some(self.annotation(annotation)?)
        } else {
            None
        };
        self.cur.expect("=", if ty.is_some() { "`=`" } else { "`:` or `=`" })?;
        let expr = self.rhs()?;
        let span = Span { start: name.span.start, end: self.cur.prev_end() };
        if self.cur.eat(";") {
            self.skip_deletions()?;
        }
        self.cur.end_of_line("`;` or end of line")?;
        // Defined only now: a statement cannot use its own result.
        self.defined.insert(self.cur.text(name), name.line);
        Ok(Node { name: self.cur.text(name).to_owned(), ty, expr, span, line: name.line })
    }

    /// The `a = b = None` suffix that frees values: ignored up to the end of the line.
    fn skip_deletions(&mut self) -> Result<()> {
        loop {
            let token = self.cur.peek();
            match token.kind {
                TokenKind::Newline | TokenKind::Eof => return Ok(()),
                TokenKind::Unterminated => return Err(self.cur.error(token, "")),
                _ => {
                    self.cur.bump();
                }
            }
        }
    }

    /// A call, `base[index]`, or an infix operation on symbolic values.
    fn rhs(&mut self) -> Result<Expr> {
        let token = self.cur.peek();
        let is_literal_word = matches!(self.cur.text(token), "True" | "False" | "None" | "inf" | "nan");
        if token.kind == TokenKind::Ident && !is_literal_word {
            let start = token.span.start;
            let (target, parts) = self.dotted()?;
            let target_span = Span { start, end: self.cur.prev_end() };
            if self.cur.eat("(") {
                let (args, kwargs) = self.call_args()?;
                return Ok(Expr::Call { target: normalize_target(target), args, kwargs, target_span });
            }
            if parts == 2 && self.cur.text(token) == "self" {
                let name = target.strip_prefix("self.").unwrap_or(&target).to_owned();
                return Ok(Expr::Attr { name });
            }
            if parts == 1 && self.cur.at("[") {
                self.cur.bump();
                let base = self.defined_name(token)?;
                let index = self.signed_int("an integer index")?;
                self.cur.expect("]", "`]`")?;
                return Ok(Expr::Index { base, index });
            }
            if parts == 1 && self.at_sym_op() {
                let lhs = self.name_ref(token)?;
                return self.sym_binary(lhs);
            }
            if parts == 1 && self.at_line_end() {
                return Ok(Expr::Alias { source: self.defined_name(token)? });
            }
            let expected = if parts == 1 { "`(`, `[` or an operator like `*`" } else { "`(` after the callee" };
            return Err(self.cur.error(self.cur.peek(), expected));
        }
        if self.cur.at("-") && !is_number_start(&self.cur, self.cur.peek_at(1)) {
            // `neg = -sym_size_int`: kept as `0 - x`, the same integer.
            self.cur.bump();
            let operand = self.arg(0)?;
            return Ok(Expr::SymBinary { op: "-".to_owned(), lhs: Arg::Int(0), rhs: operand });
        }
        let lhs = self.arg(0)?;
        if !self.at_sym_op() {
            return Err(self.cur.error(self.cur.peek(), "an operator like `*` after the operand"));
        }
        self.sym_binary(lhs)
    }

    /// Whether the statement ends here (`;` starts the deletions that end it too).
    fn at_line_end(&self) -> bool {
        let token = self.cur.peek();
        matches!(token.kind, TokenKind::Newline | TokenKind::Eof) || self.cur.is(token, ";")
    }

    fn at_sym_op(&self) -> bool {
        let token = self.cur.peek();
        token.kind == TokenKind::Punct && SYM_BINARY_OPS.contains(&self.cur.text(token))
    }

    /// The operator and right operand of `lhs op rhs`.
    fn sym_binary(&mut self, lhs: Arg) -> Result<Expr> {
        let op_token = self.cur.bump();
        let op = self.cur.text(op_token).to_owned();
        let rhs = self.arg(0)?;
        Ok(Expr::SymBinary { op, lhs, rhs })
    }

    /// `a.b.c`, returning the joined name and the number of parts.
    fn dotted(&mut self) -> Result<(String, usize)> {
        let first = self.cur.expect_ident("a name")?;
        let mut name = self.cur.text(first).to_owned();
        let mut parts = 1;
        while self.cur.eat(".") {
            let part = self.cur.expect_ident("a name after `.`")?;
            name.push('.');
            name.push_str(self.cur.text(part));
            parts += 1;
        }
        Ok((name, parts))
    }

    /// Arguments after `(` up to and including `)`: positional ones, then `name = value` ones.
    fn call_args(&mut self) -> Result<CallArgs> {
        let mut args = Vec::new();
        let mut kwargs = Vec::new();
        loop {
            if self.cur.eat(")") {
                return Ok((args, kwargs));
            }
            let token = self.cur.peek();
            if token.kind == TokenKind::Ident && self.cur.is(self.cur.peek_at(1), "=") {
                self.cur.bump();
                self.cur.bump();
                let value = self.arg(0)?;
                kwargs.push((self.cur.text(token).to_owned(), value));
            } else if !kwargs.is_empty() {
                return Err(self.cur.error(token, "a keyword argument `name = value` or `)`"));
            } else {
                args.push(self.arg(0)?);
            }
            if !self.cur.eat(",") && !self.cur.at(")") {
                return Err(self.cur.error(self.cur.peek(), "`,` or `)`"));
            }
        }
    }

    /// One argument value.
    fn arg(&mut self, depth: usize) -> Result<Arg> {
        let token = self.cur.peek();
        match token.kind {
            TokenKind::Int => {
                self.cur.bump();
                Ok(Arg::Int(self.cur.int_value(token, false, token.span.start)?))
            }
            TokenKind::Float => {
                self.cur.bump();
                Ok(Arg::Float(self.float_value(token, false)?))
            }
            TokenKind::Str => {
                self.cur.bump();
                Ok(Arg::Str(unquote(self.cur.text(token))))
            }
            TokenKind::Punct => match self.cur.text(token) {
                "-" => self.negative_number(),
                "[" => {
                    self.enter(depth)?;
                    self.cur.bump();
                    Ok(Arg::List(self.items("]", depth + 1)?.0))
                }
                "(" => {
                    self.enter(depth)?;
                    self.cur.bump();
                    let (mut items, trailing_comma) = self.items(")", depth + 1)?;
                    // `(x)` is just `x`; only a comma makes a tuple, as in Python.
                    if items.len() == 1 && !trailing_comma {
                        return Ok(items.pop().unwrap_or(Arg::None));
                    }
                    Ok(Arg::Tuple(items))
                }
                _ => Err(self.cur.error(token, EXPECTED_ARG)),
            },
            TokenKind::Ident => self.word_arg(depth),
            _ => Err(self.cur.error(token, EXPECTED_ARG)),
        }
    }

    /// Fails once arguments nest deeper than [`MAX_DEPTH`].
    fn enter(&self, depth: usize) -> Result<()> {
        if depth >= MAX_DEPTH {
            let expected = format!("at most {MAX_DEPTH} nested brackets");
            return Err(self.cur.error(self.cur.peek(), &expected));
        }
        Ok(())
    }

    /// Comma-separated arguments up to and including `close`; also says whether a comma trailed.
    fn items(&mut self, close: &str, depth: usize) -> Result<(Vec<Arg>, bool)> {
        let mut items = Vec::new();
        let mut trailing_comma = false;
        loop {
            if self.cur.eat(close) {
                return Ok((items, trailing_comma));
            }
            items.push(self.arg(depth)?);
            trailing_comma = self.cur.eat(",");
            if !trailing_comma && !self.cur.at(close) {
                let expected = format!("`,` or `{close}`");
                return Err(self.cur.error(self.cur.peek(), &expected));
            }
        }
    }

    /// `-1`, `-1e-05`, `-inf`.
    fn negative_number(&mut self) -> Result<Arg> {
        let minus = self.cur.bump();
        let token = self.cur.peek();
        match token.kind {
            TokenKind::Int => {
                self.cur.bump();
                Ok(Arg::Int(self.cur.int_value(token, true, minus.span.start)?))
            }
            TokenKind::Float => {
                self.cur.bump();
                Ok(Arg::Float(self.float_value(token, true)?))
            }
            _ if self.cur.is(token, "inf") => {
                self.cur.bump();
                Ok(Arg::Float(f64::NEG_INFINITY))
            }
            _ => Err(self.cur.error(token, "a number after `-`")),
        }
    }

    fn float_value(&self, token: Token, negative: bool) -> Result<f64> {
        match self.cur.text(token).parse::<f64>() {
            Ok(value) => Ok(if negative { -value } else { value }),
            Err(_) => Err(self.cur.error(token, "a float like `1.5` or `1e-05`")),
        }
    }

    /// An argument starting with an identifier: a keyword literal, `device(...)`, `torch.<attr>`
    /// or a name.
    fn word_arg(&mut self, depth: usize) -> Result<Arg> {
        let token = self.cur.peek();
        let next = self.cur.peek_at(1);
        let literal = match self.cur.text(token) {
            "True" => Some(Arg::Bool(true)),
            "False" => Some(Arg::Bool(false)),
            "None" => Some(Arg::None),
            "inf" => Some(Arg::Float(f64::INFINITY)),
            "nan" => Some(Arg::Float(f64::NAN)),
            "device" if self.cur.is(next, "(") => return self.device(depth),
            "complex" if self.cur.is(next, "(") => return self.complex_number(depth),
            "torch" if self.cur.is(next, ".") => return self.torch_attr(),
            _ => None,
        };
        self.cur.bump();
        match literal {
            Some(literal) => Ok(literal),
            None => self.name_ref(token),
        }
    }

    /// `complex(1.5, 0.0)`, as FX prints a Python complex scalar (a fill value of a complex
    /// tensor). The op table's scalars are real, so only a zero imaginary part is accepted: the
    /// real part is then the whole value.
    fn complex_number(&mut self, depth: usize) -> Result<Arg> {
        let start = self.cur.peek();
        self.cur.bump();
        self.cur.bump();
        let (parts, _) = self.items(")", depth + 1)?;
        let number = |arg: &Arg| match *arg {
            Arg::Int(value) => Some(value as f64),
            Arg::Float(value) => Some(value),
            _ => None,
        };
        match parts.as_slice() {
            [re, im] if number(re).is_some() && number(im) == Some(0.0) => Ok(Arg::Float(number(re).unwrap_or(0.0))),
            [re, im] if number(re).is_some() && number(im).is_some() => Err(self.cur.error(
                start,
                "a complex number with a zero imaginary part (scalars with an imaginary part are not supported: \
                 build them with `torch.complex`)",
            )),
            _ => Err(self.cur.error(start, "`complex(<real>, <imaginary>)` of two numbers")),
        }
    }

    /// `device(type='cpu')`, `device(type='cuda', index=0)`, `device('cpu')`.
    fn device(&mut self, depth: usize) -> Result<Arg> {
        const EXPECTED: &str = "`type='...'` in `device(...)`";
        self.cur.bump();
        self.cur.bump();
        let mut device_type = None;
        loop {
            if self.cur.at(")") && device_type.is_some() {
                self.cur.bump();
                break;
            }
            let token = self.cur.peek();
            if token.kind == TokenKind::Str && device_type.is_none() {
                self.cur.bump();
                device_type = Some(unquote(self.cur.text(token)));
            } else if token.kind == TokenKind::Ident && self.cur.is(self.cur.peek_at(1), "=") {
                let key = self.cur.text(token);
                self.cur.bump();
                self.cur.bump();
                if key == "type" {
                    let value = self.cur.peek();
                    if value.kind != TokenKind::Str {
                        return Err(self.cur.error(value, "a string like 'cpu'"));
                    }
                    self.cur.bump();
                    device_type = Some(unquote(self.cur.text(value)));
                } else {
                    // `index=0` and future fields do not matter to a compiler that picks its own
                    // device; they are read and dropped.
                    self.enter(depth)?;
                    self.arg(depth + 1)?;
                }
            } else {
                return Err(self.cur.error(token, if device_type.is_some() { "`,` or `)`" } else { EXPECTED }));
            }
            if !self.cur.eat(",") && !self.cur.at(")") {
                return Err(self.cur.error(self.cur.peek(), "`,` or `)`"));
            }
        }
        Ok(Arg::Device(device_type.unwrap_or_default()))
    }

    /// `torch.float32` (a dtype) or `torch.contiguous_format` (any other attribute, as an enum).
    fn torch_attr(&mut self) -> Result<Arg> {
        let start = self.cur.peek().span.start;
        let (name, parts) = self.dotted()?;
        let span = Span { start, end: self.cur.prev_end() };
        let attr = name.strip_prefix("torch.").unwrap_or(&name);
        if let Some(target) = name.strip_prefix("torch.ops.")
            && parts == 5
        {
            // `torch.ops.<namespace>.<op>.<overload>`, an op handed to `with_effects`.
            return Ok(Arg::Op(target.to_owned()));
        }
        if parts != 2 {
            let expected = "an argument (`torch.<name>` must be a dtype, an enum like `torch.contiguous_format` or an op \
                            like `torch.ops.aten.add.Tensor`)";
            return Err(self.cur.error_at(span, expected, shorten(&name)));
        }
        if let Some(dtype) = torch_dtype(attr) {
            return Ok(Arg::DType(dtype));
        }
        if is_unsupported_torch_dtype(attr) {
            return Err(self.cur.error_at(span, EXPECTED_TORCH_DTYPE, shorten(&name)));
        }
        Ok(Arg::Enum(attr.to_owned()))
    }

    /// An integer literal with an optional `-`.
    fn signed_int(&mut self, expected: &str) -> Result<i64> {
        let start = self.cur.peek().span.start;
        let negative = self.cur.eat("-");
        let token = self.cur.peek();
        if token.kind != TokenKind::Int {
            return Err(self.cur.error(token, expected));
        }
        self.cur.bump();
        self.cur.int_value(token, negative, start)
    }

    /// `return (a, b)`, `return (a,)`, `return ()` or `return a`.
    fn return_statement(&mut self) -> Result<(Vec<Arg>, Span)> {
        let keyword = self.cur.bump();
        let value = self.arg(0)?;
        let span = Span { start: keyword.span.start, end: self.cur.prev_end() };
        self.cur.end_of_line("end of line after `return (...)`")?;
        let outputs = match value {
            Arg::Tuple(items) | Arg::List(items) => items,
            single => vec![single],
        };
        Ok((outputs, span))
    }

    /// `Graph signature:` with its `# inputs` and `# outputs` sections.
    fn signature(&mut self) -> Result<Signature> {
        self.cur.skip_trivia();
        self.keywords(&["Graph", "signature", ":"], "`Graph signature:`")?;
        self.cur.end_of_line("end of line after `Graph signature:`")?;
        self.cur.skip_newlines();
        let marker = self.cur.peek();
        if !self.is_marker(marker, "inputs") {
            return Err(self.cur.error(marker, "`# inputs`"));
        }
        self.cur.bump();
        let mut signature = Signature::default();
        loop {
            self.cur.skip_newlines();
            let token = self.cur.peek();
            if token.kind == TokenKind::Comment {
                self.cur.bump();
                if self.is_marker(token, "outputs") {
                    break;
                }
                continue;
            }
            if token.kind == TokenKind::Eof || self.at_range_constraints() {
                return Err(self.cur.error(token, "an input like `x: USER_INPUT`, or `# outputs`"));
            }
            signature.inputs.push(self.input_spec()?);
        }
        loop {
            self.cur.skip_trivia();
            let token = self.cur.peek();
            if self.at_range_constraints() {
                return Ok(signature);
            }
            if token.kind == TokenKind::Eof {
                return Err(self.cur.error(token, "an output like `y: USER_OUTPUT`, or `Range constraints:`"));
            }
            signature.outputs.push(self.output_spec()?);
        }
    }

    /// Whether `token` is the comment `# inputs` / `# outputs`.
    fn is_marker(&self, token: Token, section: &str) -> bool {
        token.kind == TokenKind::Comment
            && self.cur.text(token).strip_prefix('#').is_some_and(|rest| rest.trim() == section)
    }

    fn at_range_constraints(&self) -> bool {
        self.cur.at("Range") && self.cur.is(self.cur.peek_at(1), "constraints")
    }

    /// The name before `:` in a signature line: a graph name, or a printed constant (or nothing,
    /// which is how PyTorch prints a constant output).
    fn spec_name(&mut self, expected: &str) -> Result<(String, usize)> {
        let token = self.cur.peek();
        let start = token.span.start;
        match token.kind {
            _ if self.cur.is(token, ":") => {}
            TokenKind::Ident | TokenKind::Int | TokenKind::Float | TokenKind::Str => {
                self.cur.bump();
            }
            _ if self.cur.is(token, "-") && is_number_start(&self.cur, self.cur.peek_at(1)) => {
                self.cur.bump();
                self.cur.bump();
            }
            _ => return Err(self.cur.error(token, expected)),
        }
        let name = self.cur.src.get(start..self.cur.prev_end().max(start)).unwrap_or("").to_owned();
        self.cur.expect(":", "`:` after the name")?;
        Ok((name, start))
    }

    /// An upper-case kind like `PARAMETER`.
    fn spec_kind(&mut self, expected: &str) -> Result<&'s str> {
        let token = self.cur.peek();
        let text = self.cur.text(token);
        let is_kind = token.kind == TokenKind::Ident
            && text.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !is_kind {
            return Err(self.cur.error(token, expected));
        }
        self.cur.bump();
        Ok(text)
    }

    /// `target='...'` if present.
    fn spec_target(&mut self, kind: &str, required: bool) -> Result<Option<String>> {
        if !self.cur.at("target") {
            if required {
                let expected = format!("`target='...'` after `{kind}`");
                return Err(self.cur.error(self.cur.peek(), &expected));
            }
            return Ok(None);
        }
        self.cur.bump();
        self.cur.expect("=", "`=` after `target`")?;
        let value = self.cur.peek();
        if value.kind != TokenKind::Str {
            return Err(self.cur.error(value, "a quoted target like 'fc.weight'"));
        }
        self.cur.bump();
        Ok(Some(unquote(self.cur.text(value))))
    }

    /// `name: KIND [target='...'] [persistent=True|False]`.
    fn input_spec(&mut self) -> Result<InputSpec> {
        let (name, start) = self.spec_name("an input like `x: USER_INPUT`, or `# outputs`")?;
        let kind_text = self.spec_kind("an input kind like `USER_INPUT`, `PARAMETER` or `BUFFER`")?;
        let needs_target = matches!(kind_text, "PARAMETER" | "BUFFER" | "CONSTANT_TENSOR" | "CUSTOM_OBJ");
        let target = self.spec_target(kind_text, needs_target)?;
        let persistent = if self.cur.at("persistent") {
            self.cur.bump();
            self.cur.expect("=", "`=` after `persistent`")?;
            let value = self.cur.peek();
            let flag = match self.cur.text(value) {
                "True" if value.kind == TokenKind::Ident => true,
                "False" if value.kind == TokenKind::Ident => false,
                _ => return Err(self.cur.error(value, "`True` or `False`")),
            };
            self.cur.bump();
            Some(flag)
        } else {
            None
        };
        let kind = match kind_text {
            "PARAMETER" => InputKind::Parameter,
            "BUFFER" => match persistent {
                Some(persistent) => InputKind::Buffer { persistent },
                None => return Err(self.cur.error(self.cur.peek(), "`persistent=True` or `persistent=False`")),
            },
            "CONSTANT_TENSOR" => InputKind::ConstantTensor,
            "USER_INPUT" => InputKind::UserInput,
            other => InputKind::Other(other.to_owned()),
        };
        let span = Span { start, end: self.cur.prev_end() };
        self.cur.end_of_line("end of line")?;
        Ok(InputSpec { name, kind, target, span })
    }

    /// `name: KIND [target='...']`.
    fn output_spec(&mut self) -> Result<OutputSpec> {
        let (name, start) = self.spec_name("an output like `y: USER_OUTPUT`, or `Range constraints:`")?;
        let kind_text = self.spec_kind("an output kind like `USER_OUTPUT` or `BUFFER_MUTATION`")?;
        let needs_target = matches!(
            kind_text,
            "BUFFER_MUTATION"
                | "USER_INPUT_MUTATION"
                | "PARAMETER_MUTATION"
                | "GRADIENT_TO_PARAMETER"
                | "GRADIENT_TO_USER_INPUT"
        );
        let target = self.spec_target(kind_text, needs_target)?;
        let kind = match kind_text {
            "USER_OUTPUT" => OutputKind::UserOutput,
            "BUFFER_MUTATION" => OutputKind::BufferMutation,
            "USER_INPUT_MUTATION" => OutputKind::UserInputMutation,
            "LOSS_OUTPUT" => OutputKind::LossOutput,
            "GRADIENT_TO_PARAMETER" => OutputKind::GradientToParameter,
            "GRADIENT_TO_USER_INPUT" => OutputKind::GradientToUserInput,
            other => OutputKind::Other(other.to_owned()),
        };
        let span = Span { start, end: self.cur.prev_end() };
        self.cur.end_of_line("end of line")?;
        Ok(OutputSpec { name, kind, target, span })
    }

    /// `Range constraints: {s77: VR[2, 1024], s0: VR[2, int_oo]}`, then the end of the file.
    fn range_constraints(&mut self) -> Result<Vec<RangeConstraint>> {
        self.keywords(&["Range", "constraints", ":"], "`Range constraints:`")?;
        self.cur.expect("{", "`{`")?;
        let mut constraints = Vec::new();
        loop {
            if self.cur.eat("}") {
                break;
            }
            let symbol = self.cur.peek();
            let key_start = symbol.span.start;
            let key = if symbol.kind == TokenKind::Ident && self.cur.is(self.cur.peek_at(1), ":") {
                self.cur.bump();
                None
            } else {
                Some(sym_expr(&mut self.cur, 0)?)
            };
            let key_end = self.cur.prev_end();
            self.cur.expect(":", "`:` after the symbol")?;
            self.cur.expect("VR", "a range like `VR[2, 1024]`")?;
            self.cur.expect("[", "`[`")?;
            let min = self.bound("a lower bound (an integer or `-int_oo`)", false)?.unwrap_or(i64::MIN);
            self.cur.expect(",", "`,`")?;
            let max = self.bound("an upper bound (an integer or `int_oo`)", true)?;
            self.cur.expect("]", "`]`")?;
            let span = Span { start: symbol.span.start, end: self.cur.prev_end() };
            let (name, derived) = match key {
                // A bare symbol in parentheses is still a symbol.
                Some(SymExpr::Symbol(name)) => (name, None),
                Some(expr) => (self.cur.src.get(key_start..key_end).unwrap_or_default().to_owned(), Some(expr)),
                None => (self.cur.text(symbol).to_owned(), None),
            };
            constraints.push(RangeConstraint { symbol: name, derived, min, max, span });
            if !self.cur.eat(",") && !self.cur.at("}") {
                return Err(self.cur.error(self.cur.peek(), "`,` or `}`"));
            }
        }
        self.cur.skip_trivia();
        let token = self.cur.peek();
        if token.kind != TokenKind::Eof {
            return Err(self.cur.error(token, "end of file after `Range constraints:`"));
        }
        Ok(constraints)
    }

    /// An integer bound; `None` for infinity (`int_oo` or `oo`, signed as the side requires).
    fn bound(&mut self, expected: &str, upper: bool) -> Result<Option<i64>> {
        let start = self.cur.peek().span.start;
        let negative = self.cur.eat("-");
        let token = self.cur.peek();
        if token.kind == TokenKind::Int {
            self.cur.bump();
            return self.cur.int_value(token, negative, start).map(Some);
        }
        // Only `-int_oo` below and `int_oo` above are infinite bounds.
        let infinite_here = if upper { !negative } else { negative };
        if token.kind == TokenKind::Ident && matches!(self.cur.text(token), "int_oo" | "oo") && infinite_here {
            self.cur.bump();
            return Ok(None);
        }
        Err(self.cur.error(token, expected))
    }
}

/// Whether `token` starts a number (after a `-`).
fn is_number_start(cur: &Cursor<'_>, token: Token) -> bool {
    matches!(token.kind, TokenKind::Int | TokenKind::Float) || cur.is(token, "inf")
}

/// `torch.ops.aten.view.default` → `aten.view.default`; `_operator.getitem` → `operator.getitem`.
fn normalize_target(target: String) -> String {
    if let Some(rest) = target.strip_prefix("torch.ops.") {
        return rest.to_owned();
    }
    if let Some(rest) = target.strip_prefix("_operator.") {
        return format!("operator.{rest}");
    }
    target
}

/// The dtype named by `torch.<name>`, including the legacy aliases.
fn torch_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "float64" | "double" => DType::F64,
        "float32" | "float" => DType::F32,
        "float16" | "half" => DType::F16,
        "bfloat16" => DType::BF16,
        "int64" | "long" => DType::I64,
        "int32" | "int" => DType::I32,
        "int16" | "short" => DType::I16,
        "int8" => DType::I8,
        "uint8" => DType::U8,
        "uint16" => DType::U16,
        "uint32" => DType::U32,
        "uint64" => DType::U64,
        "bool" => DType::Bool,
        "complex32" | "chalf" => DType::C32,
        "complex64" | "cfloat" => DType::C64,
        "complex128" | "cdouble" => DType::C128,
        _ => return None,
    })
}

/// Whether `torch.<name>` is a dtype the IR cannot hold (float8, float4, quantized, bits,
/// sub-byte ints), which must not be mistaken for an enum.
fn is_unsupported_torch_dtype(name: &str) -> bool {
    let sub_byte_int = |prefix: &str| {
        name.strip_prefix(prefix).is_some_and(|bits| matches!(bits, "1" | "2" | "3" | "4" | "5" | "6" | "7"))
    };
    ["complex", "float8", "float4", "qint", "quint", "bits"].iter().any(|prefix| name.starts_with(prefix))
        || matches!(name, "cfloat" | "cdouble" | "chalf")
        || sub_byte_int("int")
        || sub_byte_int("uint")
}

/// The inside of an annotation: `f32[2, s0]`, `f32[]`, `Sym(s0)`, `Sym(Eq(s0, 4))`.
fn fx_type(cur: &mut Cursor<'_>, text: &str) -> Result<FxType> {
    let token = cur.peek();
    if token.kind != TokenKind::Ident {
        return Err(cur.error(token, "a type annotation like \"f32[2, 3]\" or \"Sym(s0)\""));
    }
    if cur.is(token, "Sym") && cur.is(cur.peek_at(1), "(") {
        cur.bump();
        cur.bump();
        let parsed = sym_expr(cur, 0).and_then(|expr| {
            cur.expect(")", "`)`")?;
            expect_annotation_end(cur)?;
            Ok(expr)
        });
        return match parsed {
            Ok(expr) => Ok(FxType::SymInt(expr)),
            // A SymFloat or SymBool (`Sym(0.5*s0)`, `Sym(Eq(s0, 4))`) is kept as text.
            Err(_) if text.trim_end().ends_with(')') => Ok(FxType::Other(text.to_owned())),
            Err(error) => Err(error),
        };
    }
    let Some(dtype) = cur.text(token).parse::<DType>().ok() else {
        return Err(cur.error(token, EXPECTED_DTYPE_CODE));
    };
    cur.bump();
    cur.expect("[", "`[` after the dtype")?;
    let mut dims = Vec::new();
    loop {
        if cur.eat("]") {
            break;
        }
        dims.push(sym_expr(cur, 0)?);
        if !cur.eat(",") && !cur.at("]") {
            return Err(cur.error(cur.peek(), "`,` or `]`"));
        }
    }
    expect_annotation_end(cur)?;
    Ok(FxType::Tensor { dtype, dims })
}

fn expect_annotation_end(cur: &mut Cursor<'_>) -> Result<()> {
    let token = cur.peek();
    if token.kind == TokenKind::Eof { Ok(()) } else { Err(cur.error(token, "the closing `\"` of the annotation")) }
}

/// `a + b`, `a - b` (lowest precedence).
fn sym_expr(cur: &mut Cursor<'_>, depth: usize) -> Result<SymExpr> {
    let mut lhs = sym_term(cur, depth)?;
    loop {
        let make: SymCtor = if cur.at("+") {
            SymExpr::Add
        } else if cur.at("-") {
            SymExpr::Sub
        } else {
            return Ok(lhs);
        };
        let op = cur.bump();
        cur.charge(op, 1)?;
        let rhs = sym_term(cur, depth)?;
        lhs = make(Box::new(lhs), Box::new(rhs));
    }
}

/// `a * b`, `a // b`, `a % b`.
fn sym_term(cur: &mut Cursor<'_>, depth: usize) -> Result<SymExpr> {
    let mut lhs = sym_unary(cur, depth)?;
    loop {
        let make: SymCtor = if cur.at("*") {
            SymExpr::Mul
        } else if cur.at("//") {
            SymExpr::FloorDiv
        } else if cur.at("%") {
            SymExpr::Mod
        } else {
            return Ok(lhs);
        };
        let op = cur.bump();
        cur.charge(op, 1)?;
        let rhs = sym_unary(cur, depth)?;
        lhs = make(Box::new(lhs), Box::new(rhs));
    }
}

/// `-a` (sympy prints `-s0 + 4`); a negated literal stays a literal.
fn sym_unary(cur: &mut Cursor<'_>, depth: usize) -> Result<SymExpr> {
    if !cur.at("-") {
        return sym_power(cur, depth);
    }
    let minus = cur.bump();
    if depth >= MAX_DEPTH {
        let expected = format!("at most {MAX_DEPTH} nested operators");
        return Err(cur.error(minus, &expected));
    }
    let token = cur.peek();
    if token.kind == TokenKind::Int && !cur.is(cur.peek_at(1), "**") {
        cur.bump();
        return Ok(SymExpr::Int(cur.int_value(token, true, minus.span.start)?));
    }
    cur.charge(minus, 1)?;
    let operand = sym_unary(cur, depth + 1)?;
    Ok(SymExpr::Mul(Box::new(SymExpr::Int(-1)), Box::new(operand)))
}

/// `a**n` with a small literal exponent, expanded into products (the AST has no power).
fn sym_power(cur: &mut Cursor<'_>, depth: usize) -> Result<SymExpr> {
    let base = sym_atom(cur, depth)?;
    if !cur.eat("**") {
        return Ok(base);
    }
    let token = cur.peek();
    let exponent = if token.kind == TokenKind::Int { cur.text(token).parse::<u32>().ok() } else { None };
    let Some(exponent) = exponent.filter(|&exponent| exponent <= 8) else {
        return Err(cur.error(token, "an integer exponent from 0 to 8"));
    };
    cur.bump();
    if exponent == 0 {
        return Ok(SymExpr::Int(1));
    }
    // Each extra factor copies the base; the copies count against the budget too.
    let copies = (exponent as usize - 1).saturating_mul(sym_nodes(&base));
    cur.charge(token, copies)?;
    let mut product = base.clone();
    for _ in 1..exponent {
        product = SymExpr::Mul(Box::new(product), Box::new(base.clone()));
    }
    Ok(product)
}

/// Nodes in `expr` (its depth is bounded by the budget and nesting limits, so recursion is safe).
fn sym_nodes(expr: &SymExpr) -> usize {
    match expr {
        SymExpr::Int(_) | SymExpr::Symbol(_) => 1,
        SymExpr::Add(lhs, rhs)
        | SymExpr::Sub(lhs, rhs)
        | SymExpr::Mul(lhs, rhs)
        | SymExpr::FloorDiv(lhs, rhs)
        | SymExpr::Mod(lhs, rhs)
        | SymExpr::Min(lhs, rhs)
        | SymExpr::Max(lhs, rhs) => 1 + sym_nodes(lhs) + sym_nodes(rhs),
    }
}

/// A literal, a symbol, `(expr)`, `FloorDiv(a, b)` / `Mod(a, b)`-style calls, or `Min(a, b, ...)`
/// / `Max(a, b, ...)` of two or more arguments (nested pairwise).
fn sym_atom(cur: &mut Cursor<'_>, depth: usize) -> Result<SymExpr> {
    let token = cur.peek();
    if depth >= MAX_DEPTH {
        let expected = format!("at most {MAX_DEPTH} nested parentheses");
        return Err(cur.error(token, &expected));
    }
    match token.kind {
        TokenKind::Int => {
            cur.bump();
            Ok(SymExpr::Int(cur.int_value(token, false, token.span.start)?))
        }
        TokenKind::Punct if cur.is(token, "(") => {
            cur.bump();
            let inner = sym_expr(cur, depth + 1)?;
            cur.expect(")", "`)`")?;
            Ok(inner)
        }
        TokenKind::Ident => {
            let text = cur.text(token);
            let function: Option<SymCtor> = match text {
                "FloorDiv" | "CleanDiv" => Some(SymExpr::FloorDiv),
                "Mod" | "PythonMod" => Some(SymExpr::Mod),
                _ => None,
            };
            let extremum: Option<SymCtor> = match text {
                "Min" => Some(SymExpr::Min),
                "Max" => Some(SymExpr::Max),
                _ => None,
            };
            if let Some(make) = extremum.filter(|_| cur.is(cur.peek_at(1), "(")) {
                cur.bump();
                cur.bump();
                cur.charge(token, 1)?;
                let mut value = sym_expr(cur, depth + 1)?;
                cur.expect(",", "`,`")?;
                loop {
                    let next = sym_expr(cur, depth + 1)?;
                    value = make(Box::new(value), Box::new(next));
                    if cur.eat(")") {
                        return Ok(value);
                    }
                    cur.expect(",", "`,` or `)`")?;
                    cur.charge(token, 1)?;
                }
            }
            if let Some(make) = function.filter(|_| cur.is(cur.peek_at(1), "(")) {
                cur.bump();
                cur.bump();
                cur.charge(token, 1)?;
                let lhs = sym_expr(cur, depth + 1)?;
                cur.expect(",", "`,`")?;
                let rhs = sym_expr(cur, depth + 1)?;
                cur.expect(")", "`)`")?;
                return Ok(make(Box::new(lhs), Box::new(rhs)));
            }
            // Words sympy prints for non-integers are not symbols.
            if matches!(text, "True" | "False" | "None" | "oo" | "int_oo" | "zoo" | "nan") {
                return Err(cur.error(token, EXPECTED_DIM));
            }
            if cur.is(cur.peek_at(1), "(") {
                // `Max(1, s0)` and other sympy functions have no AST form.
                return Err(cur.error(token, EXPECTED_DIM));
            }
            cur.bump();
            Ok(SymExpr::Symbol(text.to_owned()))
        }
        _ => Err(cur.error(token, EXPECTED_DIM)),
    }
}
