//! Binding a call's arguments to an overload's parameters, and typed access to them.
//!
//! Each table entry lists its parameters like ATen's schema (`"self, other, *, alpha"`: positional
//! ones before `*`, keyword-only after). [`bind`] matches the printed positional and keyword
//! arguments to those names, rejecting extra or unknown ones, and resolves every name to what it
//! imported to, so decompositions ask for `args.int("dim")` and never see syntax.

use ttpu_ir::{DType, Scalar, ValueId};

use crate::ctx::{Imported, Operand, Site};
use crate::error::{Error, Result};
use crate::sym::SymExpr;

/// A resolved argument value.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    /// Not passed: the parameter's default applies.
    Missing,
    /// `None`.
    None,
    /// An int literal, or a symbolic int that folded to one.
    Int(i64),
    /// A float literal.
    Float(f64),
    /// `True` / `False`.
    Bool(bool),
    /// A string literal.
    Str(String),
    /// `torch.float32` and friends.
    DType(DType),
    /// A device, layout or memory format: accepted and ignored.
    Opaque(String),
    /// A list or tuple.
    List(Vec<Val>),
    /// A tensor.
    Tensor(ValueId),
    /// A symbolic int that is not a literal.
    Sym(SymExpr),
}

impl Val {
    /// A short description for messages.
    fn describe(&self) -> String {
        match self {
            Val::Missing => "nothing".into(),
            Val::None => "None".into(),
            Val::Int(value) => format!("int {value}"),
            Val::Float(value) => format!("float {value}"),
            Val::Bool(value) => format!("bool {value}"),
            Val::Str(text) => format!("string {text:?}"),
            Val::DType(dtype) => format!("dtype {dtype}"),
            Val::Opaque(text) => text.clone(),
            Val::List(items) => format!("a list of {}", items.len()),
            Val::Tensor(_) => "a tensor".into(),
            Val::Sym(expr) => format!("symbolic int {}", crate::sym::Show(expr)),
        }
    }
}

/// The value an imported node stands for as an argument.
pub fn imported_val(site: &Site, name: &str, imported: &Imported) -> Result<Val> {
    match imported {
        Imported::Tensor(value) => Ok(Val::Tensor(*value)),
        Imported::SymInt(SymExpr::Int(value)) => Ok(Val::Int(*value)),
        Imported::SymInt(expr) => Ok(Val::Sym(expr.clone())),
        Imported::SymBool(Some(value)) => Ok(Val::Bool(*value)),
        Imported::SymBool(None) => Ok(Val::Opaque("a symbolic bool".into())),
        Imported::Tuple(_) => Err(site.bad(format!("`{name}` is a tuple; select an element with getitem first"))),
        Imported::Submodule(_) => {
            Err(site.bad(format!("`{name}` is a submodule; only higher-order ops such as `cond` take one")))
        }
        Imported::Skipped => Err(site.bad(format!("`{name}` needs a size the data decides, which has no value yet"))),
        Imported::None => Err(site.bad(format!(
            "`{name}` has no value (a check's result, or a non-tensor input whose value the export specialized)"
        ))),
    }
}

/// A call's arguments bound to an overload's parameters.
pub struct Args {
    site: Site,
    bound: Vec<(&'static str, Val)>,
    /// For each symbolic-int argument that the graph can compute (its symbols are sizes of
    /// input dims), the `i64` scalar holding its value at run time.
    sym_tensors: Vec<(&'static str, ValueId)>,
}

/// Binds positional and keyword arguments to `params` (`"self, dim, *, dtype"`).
pub fn bind(site: Site, params: &'static str, positional: Vec<Val>, keywords: Vec<(String, Val)>) -> Result<Args> {
    let mut bound: Vec<(&'static str, Val)> = Vec::new();
    let mut positional_count = None;
    for param in params.split(',').map(str::trim).filter(|param| !param.is_empty()) {
        if param == "*" {
            positional_count = Some(bound.len());
        } else {
            bound.push((param, Val::Missing));
        }
    }
    let positional_count = positional_count.unwrap_or(bound.len());
    if positional.len() > positional_count {
        return Err(
            site.bad(format!("takes at most {positional_count} positional arguments, found {}", positional.len()))
        );
    }
    for (slot, value) in bound.iter_mut().zip(positional) {
        slot.1 = value;
    }
    for (name, value) in keywords {
        let Some(slot) = bound.iter_mut().find(|(param, _)| *param == name) else {
            return Err(site.bad(format!("unexpected keyword argument `{name}`")));
        };
        if slot.1 != Val::Missing {
            return Err(site.bad(format!("argument `{name}` given twice")));
        }
        slot.1 = value;
    }
    Ok(Args { site, bound, sym_tensors: Vec::new() })
}

impl Args {
    /// The symbolic-int arguments, for [`Args::set_sym_tensor`].
    pub fn sym_args(&self) -> Vec<(&'static str, SymExpr)> {
        self.bound
            .iter()
            .filter_map(|(name, value)| match value {
                Val::Sym(expr) => Some((*name, expr.clone())),
                _ => None,
            })
            .collect()
    }

    /// Records the run-time value of the symbolic-int argument `name`.
    pub fn set_sym_tensor(&mut self, name: &'static str, value: ValueId) {
        self.sym_tensors.push((name, value));
    }

    /// Every tensor argument, by parameter (lists included).
    pub fn tensor_params(&self) -> Vec<(&'static str, ValueId)> {
        fn walk(param: &'static str, value: &Val, out: &mut Vec<(&'static str, ValueId)>) {
            match value {
                Val::Tensor(tensor) => out.push((param, *tensor)),
                Val::List(items) => items.iter().for_each(|item| walk(param, item, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        for (param, value) in &self.bound {
            walk(param, value, &mut out);
        }
        out
    }

    /// Bad arguments at this call.
    pub fn bad(&self, message: impl Into<String>) -> Error {
        self.site.bad(message)
    }

    /// The bound value of `name` (a programming error if `name` is not a parameter).
    pub fn get(&self, name: &str) -> &Val {
        &self.bound.iter().find(|(param, _)| *param == name).expect("decompositions ask for declared parameters").1
    }

    /// Whether this overload has a parameter `name` (families share decompositions).
    pub fn has_param(&self, name: &str) -> bool {
        self.bound.iter().any(|(param, _)| *param == name)
    }

    /// Whether `name` was passed as something other than `None`.
    pub fn given(&self, name: &str) -> bool {
        !matches!(self.get(name), Val::Missing | Val::None)
    }

    fn wrong(&self, name: &str, expected: &str) -> Error {
        self.bad(format!("argument `{name}` must be {expected}, found {}", self.get(name).describe()))
    }

    /// A required tensor.
    pub fn tensor(&self, name: &str) -> Result<ValueId> {
        match self.get(name) {
            Val::Tensor(value) => Ok(*value),
            _ => Err(self.wrong(name, "a tensor")),
        }
    }

    /// An optional tensor (missing or `None` gives `None`).
    pub fn opt_tensor(&self, name: &str) -> Result<Option<ValueId>> {
        match self.get(name) {
            Val::Missing | Val::None => Ok(None),
            Val::Tensor(value) => Ok(Some(*value)),
            _ => Err(self.wrong(name, "a tensor or None")),
        }
    }

    /// A list of tensors.
    pub fn tensors(&self, name: &str) -> Result<Vec<ValueId>> {
        match self.get(name) {
            Val::List(items) => items
                .iter()
                .map(|item| match item {
                    Val::Tensor(value) => Ok(*value),
                    _ => Err(self.wrong(name, "a list of tensors")),
                })
                .collect(),
            _ => Err(self.wrong(name, "a list of tensors")),
        }
    }

    /// A tensor or a number.
    pub fn operand(&self, name: &str) -> Result<Operand> {
        match self.get(name) {
            Val::Tensor(value) => Ok(Operand::Tensor(*value)),
            // A symbolic int the graph computes joins in as a zero-dim `i64` tensor, which
            // promotes like the Python int it is.
            Val::Sym(_) if let Some((_, value)) = self.sym_tensors.iter().find(|(param, _)| *param == name) => {
                Ok(Operand::Tensor(*value))
            }
            Val::Sym(expr) => Err(self.site.dynamic(format!(
                "argument `{name}` is the symbolic int {}; give its symbols values to compute with it",
                crate::sym::Show(expr)
            ))),
            _ => self.scalar(name).map(Operand::Scalar),
        }
    }

    /// A required number.
    pub fn scalar(&self, name: &str) -> Result<Scalar> {
        self.opt_scalar(name)?.ok_or_else(|| self.wrong(name, "a number"))
    }

    /// A number, or `default` when missing.
    pub fn scalar_or(&self, name: &str, default: Scalar) -> Result<Scalar> {
        Ok(self.opt_scalar(name)?.unwrap_or(default))
    }

    /// An optional number.
    pub fn opt_scalar(&self, name: &str) -> Result<Option<Scalar>> {
        match self.get(name) {
            Val::Missing | Val::None => Ok(None),
            Val::Int(value) => Ok(Some(Scalar::Int(*value))),
            Val::Float(value) => Ok(Some(Scalar::Float(*value))),
            Val::Bool(value) => Ok(Some(Scalar::Bool(*value))),
            // As for ints: a value known only at run time, so importing at concrete sizes can
            // still succeed.
            Val::Sym(expr) => Err(self.site.dynamic(format!(
                "argument `{name}` is the symbolic int {}; give its symbols values",
                crate::sym::Show(expr)
            ))),
            _ => Err(self.wrong(name, "a number")),
        }
    }

    /// A size argument that may be symbolic: `Some` for an int or a symbolic int, `None` for
    /// anything else (a float, a bool), which callers read with [`Args::scalar`].
    pub fn opt_sym_int(&self, name: &str) -> Option<SymExpr> {
        match self.get(name) {
            Val::Int(value) => Some(SymExpr::Int(*value)),
            Val::Sym(expr) => Some(expr.clone()),
            _ => None,
        }
    }

    /// A required int.
    pub fn int(&self, name: &str) -> Result<i64> {
        self.opt_int(name)?.ok_or_else(|| self.wrong(name, "an int"))
    }

    /// An int, or `default` when missing or `None`.
    pub fn int_or(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.opt_int(name)?.unwrap_or(default))
    }

    /// An optional int.
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>> {
        match self.get(name) {
            Val::Missing | Val::None => Ok(None),
            Val::Int(value) => Ok(Some(*value)),
            Val::Bool(value) => Ok(Some(i64::from(*value))),
            Val::Sym(expr) => Err(self.site.dynamic(format!(
                "argument `{name}` is the symbolic int {}; give its symbols values",
                crate::sym::Show(expr)
            ))),
            _ => Err(self.wrong(name, "an int")),
        }
    }

    /// A list of ints (a bare int counts as a one-element list, as in `int[2] stride=1`).
    pub fn ints(&self, name: &str) -> Result<Vec<i64>> {
        self.opt_ints(name)?.ok_or_else(|| self.wrong(name, "a list of ints"))
    }

    /// A list of ints, or `default` when missing or `None`.
    pub fn ints_or(&self, name: &str, default: &[i64]) -> Result<Vec<i64>> {
        Ok(self.opt_ints(name)?.unwrap_or_else(|| default.to_vec()))
    }

    /// An optional list of ints.
    pub fn opt_ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.get(name) {
            Val::Missing | Val::None => Ok(None),
            Val::Int(value) => Ok(Some(vec![*value])),
            Val::List(items) => items
                .iter()
                .map(|item| match item {
                    Val::Int(value) => Ok(*value),
                    Val::Sym(expr) => Err(self.site.dynamic(format!(
                        "argument `{name}` holds the symbolic int {}; give its symbols values",
                        crate::sym::Show(expr)
                    ))),
                    _ => Err(self.wrong(name, "a list of ints")),
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            _ => Err(self.wrong(name, "a list of ints")),
        }
    }

    /// A list of sizes that may be symbolic.
    pub fn sym_ints(&self, name: &str) -> Result<Vec<SymExpr>> {
        match self.get(name) {
            Val::Int(value) => Ok(vec![SymExpr::Int(*value)]),
            Val::List(items) => items
                .iter()
                .map(|item| match item {
                    Val::Int(value) => Ok(SymExpr::Int(*value)),
                    Val::Sym(expr) => Ok(expr.clone()),
                    _ => Err(self.wrong(name, "a list of ints")),
                })
                .collect(),
            _ => Err(self.wrong(name, "a list of ints")),
        }
    }

    /// A bool, or `default` when missing or `None`.
    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool> {
        match self.get(name) {
            Val::Missing | Val::None => Ok(default),
            Val::Bool(value) => Ok(*value),
            Val::Int(value @ (0 | 1)) => Ok(*value == 1),
            _ => Err(self.wrong(name, "a bool")),
        }
    }

    /// An optional dtype.
    pub fn opt_dtype(&self, name: &str) -> Result<Option<DType>> {
        match self.get(name) {
            Val::Missing | Val::None => Ok(None),
            Val::DType(dtype) => Ok(Some(*dtype)),
            _ => Err(self.wrong(name, "a dtype")),
        }
    }

    /// An optional string.
    pub fn opt_str(&self, name: &str) -> Result<Option<&str>> {
        match self.get(name) {
            Val::Missing | Val::None => Ok(None),
            Val::Str(text) => Ok(Some(text)),
            _ => Err(self.wrong(name, "a string")),
        }
    }
}
