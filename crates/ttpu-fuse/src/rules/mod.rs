//! The rule sets and the machinery that runs them.
//!
//! A [`Rule`] is a kebab-case name plus a function that looks at one e-node (and the facts of its
//! operand classes) and proposes equal expressions ([`Rhs`]). The function is both the searcher
//! and the side condition: it reads analysis data and attributes, never printed text. Proposed
//! expressions are type-checked with `ttpu_ir::infer` before they are added, so a rule can never
//! union classes of different types; a rule that tries is a bug and trips a debug assertion.
//!
//! [`exact_rules`] keep every result bit-identical and run by default. [`fast_math_rules`] may
//! change rounding and run only with `FuseOptions::fast_math`: `fast_math` (reassociation with
//! constants, division as a product) and `channel` (per-channel scales and shifts folded into the
//! convolution or dot_general before them, which creates weight-only work).

mod channel;
mod convert;
mod fast_math;
mod fold;
mod layout;
mod neutral;
mod slice;

use std::borrow::Cow;

use egg::{Applier, ENodeOrVar, Id, PatternAst, RecExpr, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use smallvec::SmallVec;
use ttpu_ir::{Literal, Op, TensorType, infer};

use crate::analysis::{FuseAnalysis, FuseGraph};
use crate::lang::FNode;

/// One rewrite: `search` proposes right-hand sides equal to `node`.
#[derive(Clone, Copy)]
pub(crate) struct Rule {
    pub(crate) name: &'static str,
    pub(crate) search: fn(&FuseGraph, &FNode, &mut Vec<Rhs>),
}

/// The rules that keep results bit-identical.
pub(crate) fn exact_rules() -> Vec<Rule> {
    [neutral::RULES, layout::RULES, slice::RULES, convert::RULES, fold::RULES].concat()
}

/// The rules that may change rounding; only with `FuseOptions::fast_math`.
pub(crate) fn fast_math_rules() -> Vec<Rule> {
    [fast_math::RULES, channel::RULES].concat()
}

/// An expression to union with the matched class: new nodes over existing classes.
pub(crate) struct Rhs {
    ast: RecExpr<ENodeOrVar<FNode>>,
    subst: Subst,
    n_vars: u32,
}

/// Index of a node inside an [`Rhs`] under construction.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Part(Id);

impl Rhs {
    fn new() -> Rhs {
        Rhs { ast: RecExpr::default(), subst: Subst::default(), n_vars: 0 }
    }

    /// The existing class `id`, unchanged: the matched node equals one of its operands.
    pub(crate) fn class(id: Id) -> Rhs {
        let mut rhs = Rhs::new();
        rhs.existing(id);
        rhs
    }

    /// A new `op` over existing classes.
    pub(crate) fn op(op: Op, operands: &[Id]) -> Rhs {
        let mut rhs = Rhs::new();
        let parts: SmallVec<[Part; 4]> = operands.iter().map(|&id| rhs.existing(id)).collect();
        rhs.node(op, &parts);
        rhs
    }

    /// A new constant.
    pub(crate) fn constant(literal: Literal) -> Rhs {
        Rhs::op(Op::Constant(literal), &[])
    }

    /// Refers to the existing class `id`.
    pub(crate) fn existing(&mut self, id: Id) -> Part {
        let var = Var::from_u32(self.n_vars);
        self.n_vars += 1;
        self.subst.insert(var, id);
        Part(self.ast.add(ENodeOrVar::Var(var)))
    }

    /// Adds `op` over earlier parts; the last node added is the root.
    pub(crate) fn node(&mut self, op: Op, operands: &[Part]) -> Part {
        let children: SmallVec<[Id; 4]> = operands.iter().map(|part| part.0).collect();
        Part(self.ast.add(ENodeOrVar::ENode(FNode::op(op, &children))))
    }
}

/// Searches with a rule function; each proposal becomes its own match carrying its expression.
///
/// Only layout and slice rules (which move elements, never compute with them) see nodes that
/// touch complex values: the arithmetic rules and folds reason about real numbers (`x * 1 = x`
/// is not exact for complex infinities, a complex literal's imaginary parts are `+0.0`, and
/// `log` of a negative constant is not NaN in complex arithmetic).
struct RuleSearcher {
    search: fn(&FuseGraph, &FNode, &mut Vec<Rhs>),
    complex_ok: bool,
}

/// Whether `node` (in class `eclass`) reads or gives a complex value.
fn touches_complex(egraph: &FuseGraph, eclass: Id, node: &FNode) -> bool {
    egraph[eclass].data.ty.dtype.is_complex()
        || node.children.iter().any(|&child| egraph[child].data.ty.dtype.is_complex())
}

impl RuleSearcher {
    fn matches_in(&self, egraph: &FuseGraph, eclass: Id, out: &mut Vec<SearchMatches<'static, FNode>>, limit: usize) {
        let mut proposals = Vec::new();
        for node in &egraph[eclass].nodes {
            if !self.complex_ok && touches_complex(egraph, eclass, node) {
                continue;
            }
            (self.search)(egraph, node, &mut proposals);
        }
        for rhs in proposals {
            if out.len() >= limit {
                return;
            }
            // A proposal that is the matched class itself teaches nothing.
            if let [ENodeOrVar::Var(var)] = rhs.ast.as_ref()
                && egraph.find(rhs.subst[*var]) == egraph.find(eclass)
            {
                continue;
            }
            out.push(SearchMatches { eclass, substs: vec![rhs.subst], ast: Some(Cow::Owned(rhs.ast)) });
        }
    }
}

impl Searcher<FNode, FuseAnalysis> for RuleSearcher {
    fn search_eclass_with_limit(
        &self,
        egraph: &FuseGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, FNode>> {
        let mut out = Vec::new();
        self.matches_in(egraph, eclass, &mut out, limit.min(1));
        out.pop()
    }

    fn search_with_limit(&self, egraph: &FuseGraph, limit: usize) -> Vec<SearchMatches<'_, FNode>> {
        let mut out = Vec::new();
        for class in egraph.classes() {
            self.matches_in(egraph, class.id, &mut out, limit);
            if out.len() >= limit {
                break;
            }
        }
        out
    }

    fn vars(&self) -> Vec<Var> {
        Vec::new()
    }
}

/// Adds each match's expression and unions it with the matched class.
struct RuleApplier;

/// The type of the root of `ast`, or why one of its nodes does not type-check.
fn infer_root(egraph: &FuseGraph, ast: &PatternAst<FNode>, subst: &Subst) -> Result<TensorType, String> {
    let mut types: Vec<TensorType> = Vec::with_capacity(ast.len());
    for node in ast.as_ref() {
        let ty = match node {
            ENodeOrVar::Var(var) => egraph[subst[*var]].data.ty.clone(),
            ENodeOrVar::ENode(node) => {
                let op = node.ir_op().expect("right-hand sides build ops, not inputs");
                let operand_types: SmallVec<[&TensorType; 4]> =
                    node.children.iter().map(|&child| &types[usize::from(child)]).collect();
                let mut inferred = infer(op, &operand_types).map_err(|error| error.to_string())?;
                inferred.swap_remove(0)
            }
        };
        types.push(ty);
    }
    types.pop().ok_or_else(|| "empty right-hand side".to_owned())
}

impl RuleApplier {
    fn apply(
        egraph: &mut FuseGraph,
        eclass: Id,
        ast: &PatternAst<FNode>,
        subst: &Subst,
        rule_name: Symbol,
    ) -> Option<Id> {
        let expected = &egraph[eclass].data.ty;
        match infer_root(egraph, ast, subst) {
            Ok(ty) if &ty == expected => {}
            Ok(ty) => {
                debug_assert!(false, "rule `{rule_name}` proposed {ty} for a class of {expected}");
                tracing::warn!(rule = %rule_name, "proposed {ty} for a class of {expected}; skipped");
                return None;
            }
            Err(error) => {
                debug_assert!(false, "rule `{rule_name}` proposed an ill-typed expression: {error}");
                tracing::warn!(rule = %rule_name, "proposed an ill-typed expression: {error}; skipped");
                return None;
            }
        }
        let id = egraph.add_instantiation(ast, subst);
        egraph.union(eclass, id).then_some(id)
    }
}

impl Applier<FNode, FuseAnalysis> for RuleApplier {
    fn apply_matches(&self, egraph: &mut FuseGraph, matches: &[SearchMatches<FNode>], rule_name: Symbol) -> Vec<Id> {
        let mut changed = Vec::new();
        for mat in matches {
            let ast = mat.ast.as_ref().expect("rule searchers always attach their expression");
            for subst in &mat.substs {
                changed.extend(RuleApplier::apply(egraph, mat.eclass, ast, subst, rule_name));
            }
        }
        changed
    }

    fn apply_one(
        &self,
        egraph: &mut FuseGraph,
        eclass: Id,
        subst: &Subst,
        searcher_ast: Option<&PatternAst<FNode>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        searcher_ast.and_then(|ast| RuleApplier::apply(egraph, eclass, ast, subst, rule_name)).into_iter().collect()
    }
}

/// The egg rewrites for `rules`.
pub(crate) fn rewrites(rules: &[Rule]) -> Vec<Rewrite<FNode, FuseAnalysis>> {
    rules
        .iter()
        .map(|rule| {
            let complex_ok = layout::RULES.iter().chain(slice::RULES).any(|known| known.name == rule.name);
            let searcher = RuleSearcher { search: rule.search, complex_ok };
            Rewrite::new(rule.name, searcher, RuleApplier).expect("rule appliers bind no variables")
        })
        .collect()
}

/// The IR nodes of class `id` (inputs skipped), each as its op and operands.
pub(crate) fn nodes_of<'a>(egraph: &'a FuseGraph, id: Id) -> impl Iterator<Item = (&'a Op, &'a [Id])> + 'a {
    egraph[id].nodes.iter().filter_map(|node| node.ir_op().map(|op| (op, node.children.as_slice())))
}

/// Splits `node` into its op and operands, unless it is an input.
pub(crate) fn split(node: &FNode) -> Option<(&Op, &[Id])> {
    node.ir_op().map(|op| (op, node.children.as_slice()))
}
