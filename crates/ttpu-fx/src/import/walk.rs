//! The walk over a parsed program: symbols, placeholders, nodes in order, outputs.
//!
//! Every node's result is kept by name ([`Imported`]); after decomposing a node its result type is
//! compared with the printed annotation, so a wrong decomposition fails at the node that caused it
//! rather than as a numerical difference at the end.

use std::collections::{HashMap, HashSet};

use ttpu_ir::{GraphBuilder, Loc, SymbolRange, TensorType, ValueId};

use ttpu_aten::args::{self, Val};
use ttpu_aten::ctx::{Cx, Imported, MAX_ELEMENTS, Site, element_count};
use ttpu_aten::storage::{self, Layout};
use ttpu_aten::{ops, sym};

use super::syntax_args;
use super::{ImportOptions, Module, signature};
use crate::ast::{Arg, Expr, FxType, InputKind, Node, Program, Span, Submodule, SymExpr};
use crate::{Error, Result};

/// Imports `program`; see [`super::import`].
pub(crate) fn import(program: &Program, options: &ImportOptions) -> Result<Module> {
    let mut walk = Walk {
        cx: Cx {
            b: GraphBuilder::new(),
            site: Site {
                path: program.path.clone(),
                source: program.source.clone(),
                op: String::new(),
                node: String::new(),
                span: Span::default(),
            },
            symbol_values: &options.symbol_values,
            seed: options.seed,
            rng_draws: 0,
            annotated: None,
            input_layouts: Vec::new(),
            annotated_elements: Vec::new(),
            every_result_read: false,
            annotated_sym: None,
            input_symbols: HashSet::new(),
            pending: Vec::new(),
            rng_inputs: None,
            data_symbols: None,
        },
        program,
        env: HashMap::new(),
        element_types: element_types(&program.nodes),
        layouts: HashMap::new(),
        scope: &program.submodules,
        kernels: &options.kernels,
        learned: HashMap::new(),
    };
    walk.symbols()?;
    let input_types = walk.placeholders()?;
    let inputs = signature::inputs(program, &input_types)?;
    for node in &program.nodes {
        walk.node(node)?;
    }
    let mut left_out = HashMap::new();
    for returned in &program.outputs {
        if let Arg::Name(name, _) = returned
            && walk.env.get(name) == Some(&Imported::Skipped)
        {
            left_out.insert(name.clone(), walk_annotation(program, &mut walk.cx, name));
        }
    }
    let env = &walk.env;
    let mut annotated = |name: &str| {
        left_out.remove(name).unwrap_or_else(|| Err(walk.cx.site.bad(format!("output `{name}` has no value"))))
    };
    let (values, outputs) = signature::outputs(program, &inputs, &mut walk.cx.b, |name| env.get(name), &mut annotated)?;
    let pending = std::mem::take(&mut walk.cx.pending);
    let values = if pending.is_empty() {
        values
    } else {
        // A size program: it returns the sizes the data decides, and the rest waits for them.
        pending.iter().map(|(_, value)| *value).collect()
    };
    let mut graph = walk.cx.b.finish(&values);
    // Multi-output ops build every result (layer norm's mean and rstd, pooling indices); drop the
    // ones nothing uses so the graph holds only what the model computes.
    graph.compact();
    Ok(Module {
        graph,
        signature: super::ModelSignature { inputs, outputs },
        pending: pending.into_iter().map(|(size, _)| size).collect(),
    })
}

/// The printed type of output `name` that a size program leaves out. A dim the IR cannot hold
/// (`Min(8, u0)`) stays as its text: only the dtype and rank of such an output are read before
/// the sizes have values.
fn walk_annotation(program: &Program, cx: &mut Cx<'_>, name: &str) -> Result<TensorType> {
    let node = program.nodes.iter().find(|node| node.name == name);
    let Some(Node { ty: Some(FxType::Tensor { dtype, dims }), .. }) = node else {
        return Err(cx.bad(format!("output `{name}` is left out of a size program and has no tensor annotation")));
    };
    let shape = dims
        .iter()
        .map(|dim| {
            let folded = sym::fold(dim, cx.symbol_values);
            cx.intern_dim(&folded)
                .unwrap_or_else(|| ttpu_ir::Dim::Sym(std::sync::Arc::from(sym::Show(&folded).to_string())))
        })
        .collect();
    Ok(TensorType::new(*dtype, shape))
}

/// For each node, the annotations of the `getitem` nodes that select its results, by index.
fn element_types(nodes: &[Node]) -> HashMap<String, Vec<(i64, FxType)>> {
    let mut res: HashMap<String, Vec<(i64, FxType)>> = HashMap::new();
    for node in nodes {
        let Some(ty @ FxType::Tensor { .. }) = &node.ty else { continue };
        let (base, index) = match &node.expr {
            Expr::Index { base, index } => (base, *index),
            Expr::Call { target, args, .. } if target == "operator.getitem" => match args.as_slice() {
                [Arg::Name(base, _), Arg::Int(index)] => (base, *index),
                _ => continue,
            },
            _ => continue,
        };
        res.entry(base.clone()).or_default().push((index, ty.clone()));
    }
    res
}

/// Whether `arg` names a node left out of a size program.
fn reads_skipped(env: &HashMap<String, Imported>, arg: &Arg) -> bool {
    match arg {
        Arg::Name(name, _) => matches!(env.get(name), Some(Imported::Skipped)),
        Arg::List(items) | Arg::Tuple(items) => items.iter().any(|item| reads_skipped(env, item)),
        _ => false,
    }
}

struct Walk<'a> {
    cx: Cx<'a>,
    program: &'a Program,
    env: HashMap<String, Imported>,
    /// The annotations of `getitem` nodes, by the node they select from (see [`element_types`]).
    element_types: HashMap<String, Vec<(i64, FxType)>>,
    /// How each node's result sits in memory, by node name, where it is not contiguous.
    layouts: HashMap<String, Layout>,
    /// The submodules the graph being imported can read (`self.NAME`).
    scope: &'a [Submodule],
    /// User kernels, for calls of ops outside the table.
    kernels: &'a ttpu_aten::Kernels,
    /// Sizes the data decides that the export names with a symbol of their own (the length of a
    /// slice whose bounds are `.item()` values) and that the import has computed: each such symbol
    /// must stand for one size wherever it appears.
    learned: HashMap<String, i64>,
}

impl<'a> Walk<'a> {
    fn location(&self, span: Span) -> crate::Location {
        self.cx.site.location(span)
    }

    /// Declares the symbols that stay symbolic and checks the values given for the others.
    fn symbols(&mut self) -> Result<()> {
        let values = self.cx.symbol_values;
        let from_inputs = self.program.input_symbols();
        for (name, &value) in values {
            let Some(constraint) =
                self.program.range_constraints.iter().find(|rc| rc.derived.is_none() && &rc.symbol == name)
            else {
                if !from_inputs.contains(name) && self.annotations_mention(name) {
                    // A size the data decides that the export gave no range.
                    continue;
                }
                // No constraint to point at: point at the first one, or the top of the file.
                let span = self.program.range_constraints.first().map(|rc| rc.span).unwrap_or_default();
                return Err(Error::Signature {
                    at: self.location(span),
                    message: format!("a value is given for symbol `{name}`, but the model has no such symbol"),
                });
            };
            if value < constraint.min || constraint.max.is_some_and(|max| value > max) {
                let max = constraint.max.map_or_else(|| "inf".to_string(), |max| max.to_string());
                return Err(Error::Signature {
                    at: self.location(constraint.span),
                    message: format!("symbol `{name}` = {value} is outside its range [{}, {max}]", constraint.min),
                });
            }
        }
        for constraint in &self.program.range_constraints {
            if let Some(expr) = &constraint.derived {
                // Implied by the symbols' own ranges when PyTorch derives a dim (`2*k`); checked
                // wherever the symbols have values, so a size outside it is never run.
                if let SymExpr::Int(value) = sym::fold(expr, values)
                    && (value < constraint.min || constraint.max.is_some_and(|max| value > max))
                {
                    let max = constraint.max.map_or_else(|| "inf".to_string(), |max| max.to_string());
                    return Err(Error::Signature {
                        at: self.location(constraint.span),
                        message: format!(
                            "`{}` = {value} is outside its range [{}, {max}]",
                            constraint.symbol, constraint.min
                        ),
                    });
                }
                continue;
            }
            if !values.contains_key(&constraint.symbol) {
                let range = SymbolRange { min: constraint.min, max: constraint.max };
                self.cx.b.graph_mut().symbols.declare(&constraint.symbol, range);
            }
        }
        // A symbol in no input's type is one the data decides (PyTorch's unbacked `u0`): a node
        // such as `nonzero` or `.item()` defines it while the program runs.
        self.cx.input_symbols = from_inputs;
        Ok(())
    }

    /// Whether any node's annotation mentions `symbol`.
    fn annotations_mention(&self, symbol: &str) -> bool {
        let mention = |nodes: &[Node]| {
            nodes.iter().any(|node| match &node.ty {
                Some(FxType::Tensor { dims, .. }) => dims.iter().any(|dim| dim.symbols().iter().any(|s| s == symbol)),
                Some(FxType::SymInt(expr)) => expr.symbols().iter().any(|s| s == symbol),
                _ => false,
            })
        };
        mention(&self.program.nodes) || self.program.submodules.iter().any(|submodule| mention(&submodule.nodes))
    }

    /// The IR type of an annotation; compound dims need symbol values.
    fn tensor_type(&mut self, dtype: ttpu_ir::DType, dims: &[SymExpr], what: &str, span: Span) -> Result<TensorType> {
        let mut shape = Vec::with_capacity(dims.len());
        for dim in dims {
            let folded = sym::fold(dim, self.cx.symbol_values);
            let Some(dim) = self.cx.intern_dim(&folded) else {
                let names = folded.symbols().join(", ");
                return Err(Error::DynamicDims {
                    at: self.location(span),
                    message: format!(
                        "{what} has the dim `{}`; give a value to {names} (symbol_values) to import it",
                        sym::Show(&folded)
                    ),
                });
            };
            if let ttpu_ir::Dim::Static(size) = dim
                && size < 0
            {
                return Err(Error::Signature {
                    at: self.location(span),
                    message: format!("{what} has the negative dim {size}"),
                });
            }
            shape.push(dim);
        }
        let ty = TensorType::new(dtype, shape.into_iter().collect());
        self.bounded(&ty, what, span)?;
        Ok(ty)
    }

    /// Checks that a static type has at most [`MAX_ELEMENTS`] elements, so the products of its
    /// dims that decompositions compute cannot overflow.
    fn bounded(&self, ty: &TensorType, what: &str, span: Span) -> Result<()> {
        if let Some(dims) = ty.shape.as_static()
            && element_count(&dims).is_none()
        {
            return Err(Error::Signature {
                at: self.location(span),
                message: format!("{what} is {ty}, more than the {MAX_ELEMENTS} elements a tensor may have"),
            });
        }
        Ok(())
    }

    /// Graph inputs from the placeholders, typed by their annotations. A placeholder printed
    /// without a type is a Python value of a user input (a number, bool, string or `None`) that
    /// the export specialized: the graph computes with its exported value, so it becomes no graph
    /// input (its type is `None` here) and a node that reads it is an error.
    fn placeholders(&mut self) -> Result<Vec<Option<TensorType>>> {
        let mut types = Vec::with_capacity(self.program.placeholders.len());
        for placeholder in &self.program.placeholders {
            if self.is_token(&placeholder.name) {
                // An effect token: no data, so no graph input; it reads as the empty tensor
                // PyTorch prints for it (`f32[0]`), which nothing computes with.
                let token =
                    self.cx.b.constant(ttpu_ir::Literal::splat(ttpu_ir::DType::F32, &[0], ttpu_ir::Scalar::Int(0)));
                self.env.insert(placeholder.name.clone(), Imported::Tensor(token));
                types.push(None);
                continue;
            }
            if matches!(&placeholder.ty, FxType::Other(text) if text.is_empty())
                && self.is_user_input(&placeholder.name)
            {
                self.env.insert(placeholder.name.clone(), Imported::None);
                types.push(None);
                continue;
            }
            let FxType::Tensor { dtype, dims } = &placeholder.ty else {
                return Err(Error::Signature {
                    at: self.location(placeholder.span),
                    message: format!(
                        "input `{}` is not a tensor; only a USER_INPUT may be a Python value the export \
                         specialized (printed without a type), and symbolic-int inputs are not supported",
                        placeholder.name
                    ),
                });
            };
            let what = format!("input `{}`", placeholder.name);
            let ty = self.tensor_type(*dtype, dims, &what, placeholder.span)?;
            let value = self.cx.b.input(ty.clone(), Some(placeholder.name.clone()));
            self.env.insert(placeholder.name.clone(), Imported::Tensor(value));
            types.push(Some(ty));
        }
        Ok(types)
    }

    /// Whether the graph signature lists `name` as an effect `TOKEN`.
    fn is_token(&self, name: &str) -> bool {
        self.program.signature.inputs.iter().any(|spec| {
            self.program.names_placeholder(&spec.name, name)
                && matches!(&spec.kind, InputKind::Other(kind) if kind == "TOKEN")
        })
    }

    /// Whether the graph signature lists `name` as a `USER_INPUT`.
    fn is_user_input(&self, name: &str) -> bool {
        self.program
            .signature
            .inputs
            .iter()
            .any(|spec| self.program.names_placeholder(&spec.name, name) && spec.kind == InputKind::UserInput)
    }

    /// Decomposes one node and records its result.
    fn node(&mut self, node: &Node) -> Result<()> {
        // A node that reads one left out of a size program is left out too.
        let skipped = match &node.expr {
            Expr::Call { args, kwargs, .. } => {
                args.iter().chain(kwargs.iter().map(|(_, arg)| arg)).any(|arg| reads_skipped(&self.env, arg))
            }
            Expr::Index { base, .. } | Expr::Alias { source: base } => {
                matches!(self.env.get(base), Some(Imported::Skipped))
            }
            Expr::SymBinary { lhs, rhs, .. } => reads_skipped(&self.env, lhs) || reads_skipped(&self.env, rhs),
            Expr::Attr { .. } => false,
        };
        if skipped {
            self.env.insert(node.name.clone(), Imported::Skipped);
            return Ok(());
        }
        let (op, span) = match &node.expr {
            Expr::Call { target, target_span, .. } => (target.clone(), *target_span),
            Expr::Index { .. } => ("operator.getitem".to_string(), node.span),
            Expr::Attr { .. } => ("a submodule".to_string(), node.span),
            Expr::Alias { .. } => ("an alias".to_string(), node.span),
            Expr::SymBinary { op, .. } => (format!("`{op}` on symbolic ints"), node.span),
        };
        self.cx.site.op = op.clone();
        self.cx.site.node = node.name.clone();
        self.cx.site.span = span;
        self.cx.b.set_loc(Loc {
            name: Some(node.name.clone()),
            origin: Some(format!("{op} @ {}:{}", self.program.path, node.line)),
        });
        // Convert the annotation first: a compound symbolic dim is a clearer error than whatever
        // the decomposition would hit.
        let annotated = match &node.ty {
            Some(FxType::Tensor { dtype, dims }) => {
                let what = format!("node `{}`", node.name);
                Some(Annotated::Tensor(self.tensor_type(*dtype, dims, &what, node.span)?))
            }
            Some(FxType::SymInt(expr)) => Some(Annotated::SymInt(sym::fold(expr, self.cx.symbol_values))),
            Some(FxType::Other(_)) | None => None,
        };
        self.cx.annotated = match &annotated {
            Some(Annotated::Tensor(ty)) => Some(ty.clone()),
            _ => None,
        };
        self.cx.annotated_sym = match &annotated {
            Some(Annotated::SymInt(expr)) => Some(expr.clone()),
            _ => None,
        };
        self.cx.annotated_elements.clear();
        if let Some(elements) = self.element_types.get(&node.name) {
            for (index, ty) in elements.clone() {
                let FxType::Tensor { dtype, dims } = ty else { continue };
                let Ok(index) = usize::try_from(index) else { continue };
                // An element whose type the IR cannot hold is simply not read from.
                let Ok(ty) = self.tensor_type(dtype, &dims, "an element", node.span) else { continue };
                if self.cx.annotated_elements.len() <= index {
                    self.cx.annotated_elements.resize(index.saturating_add(1).min(1 << 16), None);
                }
                if let Some(slot) = self.cx.annotated_elements.get_mut(index) {
                    *slot = Some(ty);
                }
            }
        }
        let mut layout = Layout::Contiguous;
        let value = match &node.expr {
            Expr::Call { target, args, kwargs, target_span } => {
                let (value, made) = self.call(target, args, kwargs, *target_span)?;
                layout = made;
                value
            }
            Expr::Attr { name } => {
                if !self.scope.iter().any(|submodule| submodule.name == *name) {
                    return Err(self.cx.bad(format!("the graph has no submodule `{name}`")));
                }
                Imported::Submodule(name.clone())
            }
            Expr::Alias { source } => {
                layout = self.layout(source);
                self.env
                    .get(source)
                    .cloned()
                    .ok_or_else(|| Error::UndefinedName { at: self.location(node.span), name: source.clone() })?
            }
            Expr::Index { base, index } => {
                let tuple = self
                    .env
                    .get(base)
                    .ok_or_else(|| Error::UndefinedName { at: self.location(node.span), name: base.clone() })?;
                layout = element_layout(self.layout(base), *index);
                element(&self.cx.site, base, tuple, *index)?
            }
            Expr::SymBinary { op, lhs, rhs } if matches!(op.as_str(), "&" | "|" | "^") => {
                // Conjunctions of runtime assertions: three-valued, a side with no value yet
                // decides only when the other settles it.
                let (lhs, rhs) = (self.sym_bool_operand(lhs)?, self.sym_bool_operand(rhs)?);
                Imported::SymBool(match (op.as_str(), lhs, rhs) {
                    ("&", Some(false), _) | ("&", _, Some(false)) => Some(false),
                    ("|", Some(true), _) | ("|", _, Some(true)) => Some(true),
                    (_, Some(a), Some(b)) => Some(match op.as_str() {
                        "&" => a && b,
                        "|" => a || b,
                        _ => a != b,
                    }),
                    _ => None,
                })
            }
            Expr::SymBinary { op, lhs, rhs } => {
                let lhs = self.sym_operand(lhs)?;
                let rhs = self.sym_operand(rhs)?;
                if let Some(truth) = sym::compare(op, &lhs, &rhs) {
                    Imported::SymBool(truth)
                } else {
                    let folded = sym::combine(op, lhs, rhs)
                        .ok_or_else(|| self.cx.bad(format!("unknown operator `{op}` on symbolic ints")))?;
                    Imported::SymInt(folded)
                }
            }
        };
        if let Some(annotated) = annotated
            && value != Imported::Skipped
        {
            self.check(node, &op, &value, annotated)?;
        }
        let mut results = vec![&value];
        while let Some(result) = results.pop() {
            match result {
                Imported::Tensor(tensor) => {
                    let ty = self.cx.b.ty(*tensor).clone();
                    self.bounded(&ty, &format!("node `{}`", node.name), node.span)?;
                }
                Imported::Tuple(items) => results.extend(items),
                _ => {}
            }
        }
        self.env.insert(node.name.clone(), value);
        if layout == Layout::Contiguous {
            self.layouts.remove(&node.name);
        } else {
            self.layouts.insert(node.name.clone(), layout);
        }
        Ok(())
    }

    /// The memory layout of the node `name`.
    fn layout(&self, name: &str) -> Layout {
        self.layouts.get(name).cloned().unwrap_or(Layout::Contiguous)
    }

    /// A call and the memory layout of its result.
    fn call(&mut self, target: &str, args: &[Arg], kwargs: &[(String, Arg)], span: Span) -> Result<(Imported, Layout)> {
        if target == "operator.getitem"
            && let [Arg::Name(base, _), Arg::Int(index)] = args
        {
            let layout = element_layout(self.layout(base), *index);
            return Ok((self.call_outside_table(target, args, kwargs, span)?, layout));
        }
        let Some(def) = ops::lookup(target) else {
            let value = self.call_outside_table(target, args, kwargs, span)?;
            // `cond` results and the like: their own values, but not necessarily contiguous ones.
            let layout = match &value {
                Imported::Tensor(_) | Imported::Tuple(_) => {
                    Layout::Unknown(format!("it is a result of `{target}`, whose layout is not tracked").into())
                }
                _ => Layout::Contiguous,
            };
            return Ok((value, layout));
        };
        self.cx.input_layouts = syntax_args::param_sources(def.params, args, kwargs)
            .into_iter()
            .filter_map(|(param, name)| {
                let layout = self.layouts.get(name)?;
                Some((param, layout.clone()))
            })
            .collect();
        let result = self.bind(def, args, kwargs).and_then(|bound| {
            let value = (def.run)(&mut self.cx, &bound)?;
            let layout = storage::propagate(&mut self.cx, target, &bound, &value);
            Ok((value, layout))
        });
        self.cx.input_layouts.clear();
        result
    }

    /// A call of something outside the op table: symbolic-int checks and `min`/`max`, `cond`,
    /// `getitem`, or the refusal of an unknown op.
    fn call_outside_table(
        &mut self,
        target: &str,
        args: &[Arg],
        kwargs: &[(String, Arg)],
        span: Span,
    ) -> Result<Imported> {
        if matches!(target, "torch._check" | "torch._check_is_size") {
            // Runtime checks on symbolic values: only a statically false one is an error.
            if let [Arg::Name(name, _), ..] = args
                && let Some(Imported::SymBool(Some(false))) = self.env.get(name)
            {
                return Err(self.cx.bad(format!("`{name}` is false for the given symbol values")));
            }
            return Ok(Imported::None);
        }
        if matches!(target, "torch.sym_min" | "torch.sym_max") {
            // `min(x.shape[0], y.shape[0])` on symbolic sizes.
            let ([lhs, rhs], []) = (args, kwargs) else {
                return Err(self.cx.bad("expects two symbolic ints"));
            };
            let (lhs, rhs) = (self.sym_operand(lhs)?, self.sym_operand(rhs)?);
            let make = if target == "torch.sym_min" { SymExpr::Min } else { SymExpr::Max };
            return Ok(Imported::SymInt(sym::fold(&make(Box::new(lhs), Box::new(rhs)), self.cx.symbol_values)));
        }
        if target == "torch.sym_not" {
            // `not` of a symbolic bool in a runtime assertion.
            let ([operand], []) = (args, kwargs) else {
                return Err(self.cx.bad("expects one symbolic bool"));
            };
            return Ok(Imported::SymBool(self.sym_bool_operand(operand)?.map(|value| !value)));
        }
        if target == "higher_order.with_effects" {
            return self.with_effects(args, kwargs, span);
        }
        if target == "higher_order.cond" {
            return self.cond(args, kwargs);
        }
        if target == "higher_order.while_loop" {
            return self.while_loop(args, kwargs);
        }
        if target == "operator.getitem" {
            let ([Arg::Name(base, base_span), Arg::Int(index)], []) = (args, kwargs) else {
                return Err(self.cx.bad("expects a node name and an int index"));
            };
            let tuple = self
                .env
                .get(base)
                .ok_or_else(|| Error::UndefinedName { at: self.location(*base_span), name: base.clone() })?;
            return element(&self.cx.site, base, tuple, *index);
        }
        if let Some(kernel) = self.kernels.for_overload(target) {
            return self.kernel_call(kernel, target, args, kwargs);
        }
        // Nothing else is in the table (the caller runs table entries): a refusal.
        if let Some(ops::notes::Note::Unsupported(reason)) = ops::notes::note(target) {
            return Err(Error::OpNotSupported {
                at: self.location(span),
                op: target.to_string(),
                node: self.cx.site.node.clone(),
                reason: reason.to_string(),
            });
        }
        Err(Error::UnsupportedOp { at: self.location(span), op: target.to_string(), node: self.cx.site.node.clone() })
    }

    /// A call of a user kernel: every argument a tensor node, passed positionally.
    fn kernel_call(
        &mut self,
        kernel: &std::sync::Arc<ttpu_ir::Kernel>,
        target: &str,
        args: &[Arg],
        kwargs: &[(String, Arg)],
    ) -> Result<Imported> {
        if let Some((name, _)) = kwargs.first() {
            return Err(self.cx.bad(format!("kernel `{}` takes tensors positionally, not `{name}=`", kernel.name)));
        }
        let mut operands = Vec::with_capacity(args.len());
        for (index, arg) in args.iter().enumerate() {
            let Arg::Name(name, span) = arg else {
                return Err(self.cx.bad(format!("argument {index} of kernel `{}` is not a tensor", kernel.name)));
            };
            match self.env.get(name) {
                Some(Imported::Tensor(value)) => operands.push(*value),
                Some(_) => {
                    return Err(self
                        .cx
                        .bad(format!("argument {index} of kernel `{}` (`{name}`) is not a tensor", kernel.name)));
                }
                None => return Err(Error::UndefinedName { at: self.location(*span), name: name.clone() }),
            }
        }
        ttpu_aten::kernels::call(&mut self.cx, kernel, target, &operands)
    }

    /// Binds a call's arguments to the parameters of `def`.
    fn bind(&mut self, def: &ops::OpDef, args: &[Arg], kwargs: &[(String, Arg)]) -> Result<args::Args> {
        let site = self.cx.site.clone();
        let env = &self.env;
        let mut resolve = |name: &str, span: Span| -> Result<Val> {
            match env.get(name) {
                Some(imported) => args::imported_val(&site, name, imported),
                None => Err(Error::UndefinedName { at: site.location(span), name: name.to_string() }),
            }
        };
        let positional =
            args.iter().map(|arg| syntax_args::resolve_arg(arg, &mut resolve)).collect::<Result<Vec<_>>>()?;
        let keywords = kwargs
            .iter()
            .map(|(name, arg)| Ok((name.clone(), syntax_args::resolve_arg(arg, &mut resolve)?)))
            .collect::<Result<Vec<_>>>()?;
        let mut bound = args::bind(site.clone(), def.params, positional, keywords)?;
        for (name, expr) in bound.sym_args() {
            if let Some(value) = self.cx.sym_tensor(&expr)? {
                bound.set_sym_tensor(name, value);
            }
        }
        Ok(bound)
    }

    /// `with_effects(token, op, *args, **kwargs)`: PyTorch's wrapper around an op with a side
    /// effect (a run-time check such as `_linalg_check_errors`), threading an effect token through
    /// the graph to keep effects in order. The graph has no effects to order: the op runs as a
    /// plain call, and the result is the (empty) token followed by the op's results.
    fn with_effects(&mut self, args: &[Arg], kwargs: &[(String, Arg)], span: Span) -> Result<Imported> {
        let [Arg::Name(token, token_span), Arg::Op(target), rest @ ..] = args else {
            return Err(self.cx.bad("expects an effect token, an op and the op's arguments"));
        };
        let token = self
            .env
            .get(token)
            .cloned()
            .ok_or_else(|| Error::UndefinedName { at: self.location(*token_span), name: token.clone() })?;
        let (value, _) = self.call(target, rest, kwargs, span)?;
        let mut items = vec![token];
        match value {
            Imported::None => {}
            Imported::Tuple(results) => items.extend(results),
            other => items.push(other),
        }
        Ok(Imported::Tuple(items))
    }

    /// `torch.cond(pred, true_graph, false_graph, operands)`. Both branches are pure graphs with
    /// results of one type (`torch.cond` requires it), so the op is both branches computed, each
    /// result chosen by the predicate with `select`; a predicate known at import time imports only
    /// its branch. Computing both costs the untaken branch's work, never its effects: a NaN or an
    /// infinity there is discarded by the select.
    fn cond(&mut self, args: &[Arg], kwargs: &[(String, Arg)]) -> Result<Imported> {
        let ([Arg::Name(pred, pred_span), Arg::Name(on_true, _), Arg::Name(on_false, _), Arg::Tuple(operands)], []) =
            (args, kwargs)
        else {
            return Err(self.cx.bad("expects a predicate, two submodules and a tuple of operands"));
        };
        let lookup = |walk: &Self, name: &str, span: Span| {
            walk.env
                .get(name)
                .cloned()
                .ok_or_else(|| Error::UndefinedName { at: walk.location(span), name: name.to_string() })
        };
        let pred = lookup(self, pred, *pred_span)?;
        let operands = operands
            .iter()
            .map(|operand| match operand {
                Arg::Name(name, span) => lookup(self, name, *span),
                Arg::Int(value) => Ok(Imported::SymInt(SymExpr::Int(*value))),
                _ => Err(self.cx.bad("cond operands must be names or ints")),
            })
            .collect::<Result<Vec<_>>>()?;
        let (on_true, on_false) = (self.submodule(on_true)?, self.submodule(on_false)?);
        let pred = match pred {
            Imported::SymBool(Some(known)) => {
                let taken = if known { on_true } else { on_false };
                return Ok(Imported::Tuple(self.subgraph(taken, &operands)?));
            }
            Imported::Tensor(pred) if self.cx.b.ty(pred).shape.rank() == 0 => {
                if self.cx.dtype(pred).is_bool() {
                    pred
                } else {
                    let zero = self.cx.splat_like(pred, ttpu_ir::Scalar::Int(0))?;
                    self.cx.compare(ttpu_ir::CompareDirection::Ne, pred, zero)?
                }
            }
            _ => {
                return Err(self.cx.bad("the predicate must be a one-element tensor or a bool known at import time"));
            }
        };
        let when_true = self.subgraph(on_true, &operands)?;
        let when_false = self.subgraph(on_false, &operands)?;
        if when_true.len() != when_false.len() {
            return Err(self.cx.bad(format!(
                "the branches return {} and {} values; `cond` needs the same number",
                when_true.len(),
                when_false.len()
            )));
        }
        let mut results = Vec::with_capacity(when_true.len());
        for (index, (a, b)) in when_true.into_iter().zip(when_false).enumerate() {
            let (Imported::Tensor(a), Imported::Tensor(b)) = (a, b) else {
                return Err(self.cx.bad(format!("result {index} of a branch is not a tensor")));
            };
            if self.cx.b.ty(a) != self.cx.b.ty(b) {
                return Err(self.cx.bad(format!(
                    "result {index} is {} in one branch and {} in the other; `cond` needs one type",
                    self.cx.b.ty(a),
                    self.cx.b.ty(b)
                )));
            }
            results.push(Imported::Tensor(self.cx.select(pred, a, b)?));
        }
        Ok(Imported::Tuple(results))
    }

    /// Imports `submodule`'s graph inline on `operands` (its placeholders, in order) and returns
    /// what it returns. Its names are its own: the enclosing graph's are set aside meanwhile, and
    /// the caller's node is again the one errors and new nodes point at afterwards.
    /// The submodule the node `name` reads (`name = self.true_graph_0`).
    fn submodule(&self, name: &str) -> Result<&'a Submodule> {
        match self.env.get(name) {
            Some(Imported::Submodule(submodule)) => self
                .scope
                .iter()
                .find(|candidate| candidate.name == *submodule)
                .ok_or_else(|| self.cx.bad(format!("the graph has no submodule `{submodule}`"))),
            _ => Err(self.cx.bad(format!("`{name}` is not a submodule"))),
        }
    }

    /// `while_loop(cond_fn, body_fn, carried_inputs, additional_inputs)`: one IR `while` whose
    /// state is the carried inputs followed by the additional ones (which the body passes through
    /// unchanged); its results are the final carried values. The two submodules become the
    /// loop's own graphs, so the loop runs on the device for as many steps as the data asks.
    fn while_loop(&mut self, args: &[Arg], kwargs: &[(String, Arg)]) -> Result<Imported> {
        let ([Arg::Name(cond_name, _), Arg::Name(body_name, _), Arg::Tuple(carried), Arg::Tuple(additional)], []) =
            (args, kwargs)
        else {
            return Err(self
                .cx
                .bad("expects two submodules, a tuple of carried inputs and a tuple of additional inputs"));
        };
        let (cond_module, body_module) = (self.submodule(cond_name)?, self.submodule(body_name)?);
        let mut state = Vec::with_capacity(carried.len() + additional.len());
        for (index, operand) in carried.iter().chain(additional).enumerate() {
            let what = if index < carried.len() { "carried input" } else { "additional input" };
            match operand {
                Arg::Name(name, span) => match self.env.get(name) {
                    Some(Imported::Tensor(value)) => state.push(*value),
                    Some(_) => {
                        return Err(self.cx.bad(format!(
                            "{what} `{name}` is not a tensor; a loop's state must be tensors (carry an int as a \
                             0-d tensor)"
                        )));
                    }
                    None => return Err(Error::UndefinedName { at: self.location(*span), name: name.clone() }),
                },
                _ => return Err(self.cx.bad(format!("{what} {index} is not a tensor"))),
            }
        }
        if carried.is_empty() {
            return Err(self.cx.bad("a loop needs at least one carried input"));
        }
        let types: Vec<TensorType> = state.iter().map(|&value| self.cx.b.ty(value).clone()).collect();
        let cond = self.loop_graph(cond_module, &types, |walk, _, outputs| match outputs[..] {
            [Imported::Tensor(pred)] if *walk.cx.b.ty(pred) == TensorType::scalar(ttpu_ir::DType::Bool) => {
                Ok(vec![pred])
            }
            [Imported::Tensor(pred)] => Err(walk.cx.bad(format!(
                "`{}` returns {}; a loop condition must be a bool[] tensor",
                cond_module.name,
                walk.cx.b.ty(pred)
            ))),
            _ => Err(walk.cx.bad(format!("`{}` must return one bool[] tensor", cond_module.name))),
        })?;
        let carried_count = carried.len();
        let body = self.loop_graph(body_module, &types, |walk, inputs, outputs| {
            if outputs.len() != carried_count {
                return Err(walk.cx.bad(format!(
                    "`{}` returns {} values for {carried_count} carried inputs",
                    body_module.name,
                    outputs.len()
                )));
            }
            let mut next = Vec::with_capacity(inputs.len());
            for (index, output) in outputs.iter().enumerate() {
                let Imported::Tensor(value) = output else {
                    return Err(walk.cx.bad(format!("result {index} of `{}` is not a tensor", body_module.name)));
                };
                let (found, wanted) = (walk.cx.b.ty(*value), walk.cx.b.ty(inputs[index]));
                if found != wanted {
                    return Err(walk.cx.bad(format!(
                        "result {index} of `{}` is {found} but carried input {index} is {wanted}; a loop keeps \
                         its state's types",
                        body_module.name
                    )));
                }
                next.push(*value);
            }
            // The additional inputs pass through unchanged.
            next.extend_from_slice(&inputs[carried_count..]);
            Ok(next)
        })?;
        let results = self.cx.b.while_loop(cond, body, &state).map_err(|error| self.cx.bad(error.to_string()))?;
        Ok(Imported::Tuple(results[..carried_count].iter().map(|&value| Imported::Tensor(value)).collect()))
    }

    /// One graph of a loop: `submodule` imported into a graph of its own whose inputs are the
    /// loop state (`types`); `outputs` turns the submodule's results into the graph's outputs.
    fn loop_graph(
        &mut self,
        submodule: &'a Submodule,
        types: &[TensorType],
        outputs: impl FnOnce(&Self, &[ValueId], Vec<Imported>) -> Result<Vec<ValueId>>,
    ) -> Result<ttpu_ir::Graph> {
        let mut inner = GraphBuilder::new();
        inner.graph_mut().symbols = self.cx.b.graph().symbols.clone();
        inner.set_loc(self.cx.b.loc().clone());
        let inputs: Vec<ValueId> = types.iter().map(|ty| inner.input(ty.clone(), None)).collect();
        let outer = std::mem::replace(&mut self.cx.b, inner);
        let (draws, pending) = (self.cx.rng_draws, self.cx.pending.len());
        let operands: Vec<Imported> = inputs.iter().map(|&value| Imported::Tensor(value)).collect();
        let result = self.subgraph(submodule, &operands).and_then(|results| {
            if self.cx.rng_draws != draws {
                // One generator state per op is fixed at import: every step would draw the same numbers.
                return Err(self
                    .cx
                    .bad(format!("`{}` draws random numbers, which a loop cannot do yet", submodule.name)));
            }
            if self.cx.pending.len() != pending {
                return Err(self
                    .cx
                    .bad(format!("`{}` has a size the data decides, which a loop cannot carry", submodule.name)));
            }
            outputs(self, &inputs, results)
        });
        let inner = std::mem::replace(&mut self.cx.b, outer);
        Ok(inner.finish(&result?))
    }

    fn subgraph(&mut self, submodule: &'a Submodule, operands: &[Imported]) -> Result<Vec<Imported>> {
        if submodule.placeholders.len() != operands.len() {
            return Err(self.cx.bad(format!(
                "`{}` takes {} inputs but is given {}",
                submodule.name,
                submodule.placeholders.len(),
                operands.len()
            )));
        }
        let env =
            submodule.placeholders.iter().map(|placeholder| placeholder.name.clone()).zip(operands.iter().cloned());
        let outer_env = std::mem::replace(&mut self.env, env.collect());
        let outer_elements = std::mem::replace(&mut self.element_types, element_types(&submodule.nodes));
        // A branch's names are its own; its inputs' layouts are not tracked across the call.
        let layouts = submodule.placeholders.iter().map(|placeholder| {
            let reason = "it is an operand of `cond`, whose layout is not tracked into the branch";
            (placeholder.name.clone(), Layout::Unknown(reason.into()))
        });
        let outer_layouts = std::mem::replace(&mut self.layouts, layouts.collect());
        let outer_scope = std::mem::replace(&mut self.scope, &submodule.submodules);
        let (outer_site, outer_loc) = (self.cx.site.clone(), self.cx.b.loc().clone());
        let result = self.subgraph_body(submodule);
        self.env = outer_env;
        self.element_types = outer_elements;
        self.layouts = outer_layouts;
        self.scope = outer_scope;
        if result.is_ok() {
            // On an error the site stays at the failing node inside the branch, where it points.
            self.cx.site = outer_site;
            self.cx.b.set_loc(outer_loc);
        }
        result
    }

    fn subgraph_body(&mut self, submodule: &'a Submodule) -> Result<Vec<Imported>> {
        for node in &submodule.nodes {
            self.node(node)?;
        }
        submodule
            .outputs
            .iter()
            .map(|output| match output {
                Arg::Name(name, span) => self
                    .env
                    .get(name)
                    .cloned()
                    .ok_or_else(|| Error::UndefinedName { at: self.location(*span), name: name.clone() }),
                _ => Err(self.cx.bad(format!("`{}` returns a value that is not a name", submodule.name))),
            })
            .collect()
    }

    /// An operand of a `SymBinary`: an int literal or a symbolic-int node.
    /// A symbolic bool operand (a comparison of symbolic ints, or a Python bool): its value, when
    /// known.
    fn sym_bool_operand(&self, arg: &Arg) -> Result<Option<bool>> {
        match arg {
            Arg::Bool(value) => Ok(Some(*value)),
            Arg::Name(name, span) => match self.env.get(name) {
                Some(Imported::SymBool(value)) => Ok(*value),
                Some(_) => Err(self.cx.bad(format!("`{name}` is not a symbolic bool"))),
                None => Err(Error::UndefinedName { at: self.location(*span), name: name.clone() }),
            },
            _ => Err(self.cx.bad("operands of symbolic-bool logic must be bools or symbolic bools")),
        }
    }

    fn sym_operand(&self, arg: &Arg) -> Result<SymExpr> {
        match arg {
            Arg::Int(value) => Ok(SymExpr::Int(*value)),
            Arg::Name(name, span) => match self.env.get(name) {
                Some(Imported::SymInt(expr)) => Ok(expr.clone()),
                Some(_) => Err(self.cx.bad(format!("`{name}` is not a symbolic int"))),
                None => Err(Error::UndefinedName { at: self.location(*span), name: name.clone() }),
            },
            _ => Err(self.cx.bad("operands of symbolic-int arithmetic must be ints or symbolic ints")),
        }
    }

    /// Compares a node's result with its annotation.
    fn check(&mut self, node: &Node, op: &str, value: &Imported, annotated: Annotated) -> Result<()> {
        let inferred = match (value, &annotated) {
            (Imported::Tensor(value), Annotated::Tensor(expected)) => {
                let ty = self.cx.b.ty(*value).clone();
                if &ty == expected || self.learn(&ty, expected) || self.saved_statistics(node, &ty, expected) {
                    return Ok(());
                }
                ty.to_string()
            }
            (Imported::SymInt(expr), Annotated::SymInt(expected)) => {
                // Different spellings of one expression are fine; only differing literals are not.
                match (expr, expected) {
                    (SymExpr::Int(a), SymExpr::Int(b)) if a != b => format!("Sym({a})"),
                    _ => return Ok(()),
                }
            }
            (Imported::Tensor(value), _) => self.cx.b.ty(*value).to_string(),
            (Imported::SymInt(expr), _) => format!("Sym({})", sym::Show(expr)),
            (Imported::Tuple(items), _) => format!("a tuple of {}", items.len()),
            (Imported::SymBool(_), _) => "a symbolic bool".to_string(),
            (Imported::None, _) => "nothing".to_string(),
            (Imported::Submodule(name), _) => format!("the submodule `{name}`"),
            (Imported::Skipped, _) => return Ok(()),
        };
        let annotated = match annotated {
            Annotated::Tensor(ty) => ty.to_string(),
            Annotated::SymInt(expr) => format!("Sym({})", sym::Show(&expr)),
        };
        Err(Error::TypeMismatch {
            at: self.location(node.span),
            op: op.to_string(),
            node: node.name.clone(),
            annotated,
            inferred,
        })
    }
}

impl Walk<'_> {
    /// Whether `node` selects the saved mean or invstd of a batch norm whose annotation names the
    /// other float type. PyTorch's shape function of `_native_batch_norm_legit_functional` gives a
    /// half input's saved statistics the input's dtype even where its CPU kernel saves them in
    /// `float` (parameters of another dtype: the "mixed type" kernels), and the exported program,
    /// run by PyTorch, returns the kernel's; the import follows the kernel.
    fn saved_statistics(&self, node: &Node, inferred: &TensorType, expected: &TensorType) -> bool {
        let Expr::Index { base, index: 1 | 2 } = &node.expr else { return false };
        let batch_norm = self.program.nodes.iter().any(|other| {
            other.name == *base
                && matches!(&other.expr, Expr::Call { target, .. }
                    if target.starts_with("aten._native_batch_norm_legit") || target.starts_with("aten.native_batch_norm"))
        });
        batch_norm && inferred.shape == expected.shape && inferred.dtype.is_float() && expected.dtype.is_float()
    }

    /// Whether `inferred` matches `expected` once each dim the export names with a size the data
    /// decides (a symbol without a value, such as the `u2` of a slice up to an `.item()` value)
    /// stands for the static size the import computed there; a symbol keeps the first size it
    /// meets, and a later different one is a mismatch.
    fn learn(&mut self, inferred: &TensorType, expected: &TensorType) -> bool {
        use ttpu_ir::Dim;
        if inferred.dtype != expected.dtype || inferred.rank() != expected.rank() {
            return false;
        }
        let mut found = Vec::new();
        for (have, want) in inferred.shape.dims().iter().zip(expected.shape.dims()) {
            match (have, want) {
                _ if have == want => {}
                (Dim::Static(size), Dim::Sym(name)) if self.cx.is_data_symbol(name) => {
                    let earlier = found.iter().find(|(seen, _)| seen == name.as_ref()).map(|(_, size)| size);
                    match earlier.or_else(|| self.learned.get(name.as_ref())) {
                        Some(known) if known != size => return false,
                        _ => found.push((name.to_string(), *size)),
                    }
                }
                _ => return false,
            }
        }
        self.learned.extend(found);
        true
    }
}

/// A node's annotation, converted.
enum Annotated {
    Tensor(TensorType),
    SymInt(SymExpr),
}

/// The layout of element `index` of a multi-output result.
fn element_layout(layout: Layout, index: i64) -> Layout {
    match layout {
        Layout::Tuple(items) => {
            let position = if index < 0 { index + items.len() as i64 } else { index };
            usize::try_from(position)
                .ok()
                .and_then(|position| items.get(position).cloned())
                .unwrap_or(Layout::Contiguous)
        }
        Layout::Contiguous => Layout::Contiguous,
        other => other,
    }
}

/// Element `index` of a multi-output result (Python indexing: negative counts from the end).
fn element(site: &Site, base: &str, tuple: &Imported, index: i64) -> Result<Imported> {
    let Imported::Tuple(items) = tuple else {
        return Err(site.bad(format!("`{base}` is not a tuple")));
    };
    let position = if index < 0 { index + items.len() as i64 } else { index };
    usize::try_from(position)
        .ok()
        .and_then(|position| items.get(position))
        .cloned()
        .ok_or_else(|| site.bad(format!("index {index} is out of range for `{base}` of {} results", items.len())))
}
