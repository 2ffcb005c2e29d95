//! Symbolic integers: folding `SymExpr`s with the sizes a frontend gives, turning
//! them into IR dims, and the little algebra reshapes need (products of dims).
//!
//! A compound expression (`2*s77`, `(s0 - 1)//2`) becomes an IR [`DimExpr`]; only what the IR
//! cannot hold (a division by a symbol, a negative divisor) is an error when it has to be a dim.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use ttpu_ir::{Atom, Dim, DimExpr};

/// A dim or symbolic-int expression as PyTorch prints it: `8`, `s77`, `2*s77`, `s0 + 1`, `(s0//2)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymExpr {
    /// A literal size.
    Int(i64),
    /// A symbol (`s77`, `u0`).
    Symbol(String),
    /// `lhs + rhs`.
    Add(Box<SymExpr>, Box<SymExpr>),
    /// `lhs - rhs`.
    Sub(Box<SymExpr>, Box<SymExpr>),
    /// `lhs * rhs`.
    Mul(Box<SymExpr>, Box<SymExpr>),
    /// `lhs // rhs` (floor division).
    FloorDiv(Box<SymExpr>, Box<SymExpr>),
    /// `lhs % rhs`.
    Mod(Box<SymExpr>, Box<SymExpr>),
    /// `Min(lhs, rhs)` (sympy's `Min` of more arguments nests).
    Min(Box<SymExpr>, Box<SymExpr>),
    /// `Max(lhs, rhs)`.
    Max(Box<SymExpr>, Box<SymExpr>),
}

impl SymExpr {
    /// The symbols it mentions, each once, in order of appearance.
    pub fn symbols(&self) -> Vec<String> {
        fn walk(expr: &SymExpr, out: &mut Vec<String>) {
            match expr {
                SymExpr::Int(_) => {}
                SymExpr::Symbol(name) => {
                    if !out.contains(name) {
                        out.push(name.clone());
                    }
                }
                SymExpr::Add(a, b)
                | SymExpr::Sub(a, b)
                | SymExpr::Mul(a, b)
                | SymExpr::FloorDiv(a, b)
                | SymExpr::Mod(a, b)
                | SymExpr::Min(a, b)
                | SymExpr::Max(a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }
}

/// Substitutes the given symbol values into `expr` and folds every constant subtree, with
/// Python's floor division and modulo. Subtrees that would divide by zero stay unfolded.
pub fn fold(expr: &SymExpr, values: &IndexMap<String, i64>) -> SymExpr {
    let binary = |lhs: &SymExpr, rhs: &SymExpr, make: fn(Box<SymExpr>, Box<SymExpr>) -> SymExpr| {
        let (lhs, rhs) = (fold(lhs, values), fold(rhs, values));
        match (&lhs, &rhs) {
            (SymExpr::Int(a), SymExpr::Int(b)) => {
                let folded = make(Box::new(SymExpr::Int(*a)), Box::new(SymExpr::Int(*b)));
                eval_ints(&folded).map_or(folded, SymExpr::Int)
            }
            _ => make(Box::new(lhs), Box::new(rhs)),
        }
    };
    match expr {
        SymExpr::Int(value) => SymExpr::Int(*value),
        SymExpr::Symbol(name) => values.get(name).map_or_else(|| SymExpr::Symbol(name.clone()), |&v| SymExpr::Int(v)),
        SymExpr::Add(lhs, rhs) => binary(lhs, rhs, SymExpr::Add),
        SymExpr::Sub(lhs, rhs) => binary(lhs, rhs, SymExpr::Sub),
        SymExpr::Mul(lhs, rhs) => binary(lhs, rhs, SymExpr::Mul),
        SymExpr::FloorDiv(lhs, rhs) => binary(lhs, rhs, SymExpr::FloorDiv),
        SymExpr::Mod(lhs, rhs) => binary(lhs, rhs, SymExpr::Mod),
        SymExpr::Min(lhs, rhs) => binary(lhs, rhs, SymExpr::Min),
        SymExpr::Max(lhs, rhs) => binary(lhs, rhs, SymExpr::Max),
    }
}

/// Evaluates a binary node whose operands are both literals.
fn eval_ints(expr: &SymExpr) -> Option<i64> {
    let int = |expr: &SymExpr| match expr {
        SymExpr::Int(value) => Some(*value),
        _ => None,
    };
    match expr {
        SymExpr::Add(a, b) => int(a)?.checked_add(int(b)?),
        SymExpr::Sub(a, b) => int(a)?.checked_sub(int(b)?),
        SymExpr::Mul(a, b) => int(a)?.checked_mul(int(b)?),
        SymExpr::FloorDiv(a, b) => floor_div(int(a)?, int(b)?),
        SymExpr::Mod(a, b) => {
            let (a, b) = (int(a)?, int(b)?);
            floor_div(a, b).map(|quotient| a - quotient * b)
        }
        SymExpr::Min(a, b) => Some(int(a)?.min(int(b)?)),
        SymExpr::Max(a, b) => Some(int(a)?.max(int(b)?)),
        _ => None,
    }
}

/// Python's `//` on integers (rounds toward negative infinity).
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let quotient = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) { quotient - 1 } else { quotient })
}

/// Combines two symbolic ints with a `SymBinary` operator (`+`, `-`, `*`, `//`, `%`) and folds.
pub fn combine(op: &str, lhs: SymExpr, rhs: SymExpr) -> Option<SymExpr> {
    let (lhs, rhs) = (Box::new(lhs), Box::new(rhs));
    let expr = match op {
        "+" => SymExpr::Add(lhs, rhs),
        "-" => SymExpr::Sub(lhs, rhs),
        "*" => SymExpr::Mul(lhs, rhs),
        "//" => SymExpr::FloorDiv(lhs, rhs),
        "%" => SymExpr::Mod(lhs, rhs),
        _ => return None,
    };
    Some(fold(&expr, &IndexMap::new()))
}

/// The truth of a comparison operator (`>=`, `==`, ...) between folded symbolic ints: `Some(None)`
/// when it cannot be decided statically, `None` when `op` is not a comparison.
pub fn compare(op: &str, lhs: &SymExpr, rhs: &SymExpr) -> Option<Option<bool>> {
    let test: fn(i64, i64) -> bool = match op {
        "==" => |a, b| a == b,
        "!=" => |a, b| a != b,
        "<" => |a, b| a < b,
        "<=" => |a, b| a <= b,
        ">" => |a, b| a > b,
        ">=" => |a, b| a >= b,
        _ => return None,
    };
    Some(match (lhs, rhs) {
        (SymExpr::Int(a), SymExpr::Int(b)) => Some(test(*a, *b)),
        _ => None,
    })
}

/// The dim a folded expression stands for: a literal, a bare symbol or a [`DimExpr`]; `None` when
/// the IR cannot express it (division by a non-constant or non-positive divisor, overflow).
/// `intern` maps a symbol name to the graph's shared name.
pub fn to_dim(expr: &SymExpr, mut intern: impl FnMut(&str) -> Arc<str>) -> Option<Dim> {
    to_dim_expr(expr, &mut intern).map(DimExpr::into_dim)
}

fn to_dim_expr(expr: &SymExpr, intern: &mut impl FnMut(&str) -> Arc<str>) -> Option<DimExpr> {
    let constant = |expr: &SymExpr| match expr {
        SymExpr::Int(value) => Some(*value),
        _ => None,
    };
    Some(match expr {
        SymExpr::Int(value) => DimExpr::constant(*value),
        SymExpr::Symbol(name) => DimExpr::symbol(intern(name)),
        SymExpr::Add(a, b) => to_dim_expr(a, intern)?.checked_add(&to_dim_expr(b, intern)?)?,
        SymExpr::Sub(a, b) => to_dim_expr(a, intern)?.checked_sub(&to_dim_expr(b, intern)?)?,
        SymExpr::Mul(a, b) => to_dim_expr(a, intern)?.checked_mul(&to_dim_expr(b, intern)?)?,
        SymExpr::FloorDiv(a, b) => to_dim_expr(a, intern)?.floor_div(constant(b)?)?,
        SymExpr::Mod(a, b) => to_dim_expr(a, intern)?.modulo(constant(b)?)?,
        SymExpr::Min(a, b) => to_dim_expr(a, intern)?.minimum(&to_dim_expr(b, intern)?),
        SymExpr::Max(a, b) => to_dim_expr(a, intern)?.maximum(&to_dim_expr(b, intern)?),
    })
}

/// The expression a dim stands for.
pub fn from_dim(dim: &Dim) -> SymExpr {
    match dim {
        Dim::Static(size) => SymExpr::Int(*size),
        Dim::Sym(name) => SymExpr::Symbol(name.to_string()),
        Dim::Expr(expr) => from_dim_expr(expr),
    }
}

fn from_dim_expr(expr: &DimExpr) -> SymExpr {
    let atom = |atom: &Atom| match atom {
        Atom::Sym(name) => SymExpr::Symbol(name.to_string()),
        Atom::FloorDiv(inner, divisor) => {
            SymExpr::FloorDiv(Box::new(from_dim_expr(inner)), Box::new(SymExpr::Int(*divisor)))
        }
        Atom::Mod(inner, divisor) => SymExpr::Mod(Box::new(from_dim_expr(inner)), Box::new(SymExpr::Int(*divisor))),
        Atom::Min(a, b) => SymExpr::Min(Box::new(from_dim_expr(a)), Box::new(from_dim_expr(b))),
        Atom::Max(a, b) => SymExpr::Max(Box::new(from_dim_expr(a)), Box::new(from_dim_expr(b))),
    };
    let mut sum: Option<SymExpr> = None;
    for (coefficient, atoms) in expr.terms() {
        let mut term = SymExpr::Int(coefficient);
        for (factor, exponent) in atoms {
            for _ in 0..*exponent {
                term = match term {
                    SymExpr::Int(1) => atom(factor),
                    term => SymExpr::Mul(Box::new(term), Box::new(atom(factor))),
                };
            }
        }
        sum = Some(match sum {
            None => term,
            Some(sum) => SymExpr::Add(Box::new(sum), Box::new(term)),
        });
    }
    sum.unwrap_or(SymExpr::Int(0))
}

/// `total / known` when it divides exactly into a dim: the `-1` of a reshape. Products of bare
/// symbols divide as monomials; any polynomial divides by a constant that divides every
/// coefficient.
pub fn exact_quotient(total: &Dim, known: &Dim) -> Option<Dim> {
    if let Dim::Static(divisor) = known {
        let total_expr = DimExpr::of(total);
        if *divisor > 0 && total_expr.modulo(*divisor)?.as_constant() == Some(0) {
            return total.floor_div(*divisor);
        }
        return None;
    }
    let quotient = Monomial::of_expr(&DimExpr::of(total))?.divide_to_dim(&Monomial::of_expr(&DimExpr::of(known))?)?;
    (quotient.checked_mul(known).as_ref() == Some(total)).then_some(quotient)
}

/// Prints an expression the way PyTorch does (`2*s77`, `s0 + 1`, `(s0//2)`), for messages.
pub struct Show<'a>(pub &'a SymExpr);

impl fmt::Display for Show<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Parenthesise every compound operand: always unambiguous, and messages stay readable.
        let operand = |f: &mut fmt::Formatter<'_>, expr: &SymExpr| match expr {
            SymExpr::Int(_) | SymExpr::Symbol(_) => write!(f, "{}", Show(expr)),
            _ => write!(f, "({})", Show(expr)),
        };
        let (lhs, op, rhs) = match self.0 {
            SymExpr::Int(value) => return write!(f, "{value}"),
            SymExpr::Symbol(name) => return f.write_str(name),
            SymExpr::Min(a, b) => return write!(f, "Min({}, {})", Show(a), Show(b)),
            SymExpr::Max(a, b) => return write!(f, "Max({}, {})", Show(a), Show(b)),
            SymExpr::Add(a, b) => (a, " + ", b),
            SymExpr::Sub(a, b) => (a, " - ", b),
            SymExpr::Mul(a, b) => (a, "*", b),
            SymExpr::FloorDiv(a, b) => (a, "//", b),
            SymExpr::Mod(a, b) => (a, " % ", b),
        };
        operand(f, lhs)?;
        f.write_str(op)?;
        operand(f, rhs)
    }
}

/// A product of bare symbols with a static coefficient, the form `exact_quotient` divides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Monomial {
    /// The static factor.
    pub coefficient: i64,
    /// Symbol name to exponent.
    pub symbols: BTreeMap<Arc<str>, u32>,
}

impl Monomial {
    /// The monomial `expr` is, if it is one (a single term of bare symbols).
    fn of_expr(expr: &DimExpr) -> Option<Monomial> {
        let mut terms = expr.terms();
        let (coefficient, atoms) = terms.next()?;
        if terms.next().is_some() {
            return None;
        }
        let mut symbols = BTreeMap::new();
        for (atom, exponent) in atoms {
            let Atom::Sym(name) = atom else { return None };
            symbols.insert(name.clone(), *exponent);
        }
        Some(Monomial { coefficient, symbols })
    }

    /// `self / other` if it is exact.
    fn divide_to_dim(&self, other: &Monomial) -> Option<Dim> {
        if other.coefficient == 0 || self.coefficient % other.coefficient != 0 {
            return None;
        }
        let mut quotient = DimExpr::constant(self.coefficient / other.coefficient);
        let mut left = self.symbols.clone();
        for (name, &exponent) in &other.symbols {
            let have = left.get_mut(name)?;
            *have = have.checked_sub(exponent)?;
        }
        for (name, exponent) in left {
            for _ in 0..exponent {
                quotient = quotient.checked_mul(&DimExpr::symbol(name.clone()))?;
            }
        }
        Some(quotient.into_dim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str) -> SymExpr {
        SymExpr::Symbol(name.into())
    }

    #[test]
    fn folds_with_python_semantics() {
        let values: IndexMap<String, i64> = [("s0".to_string(), 7)].into_iter().collect();
        let expr = SymExpr::FloorDiv(
            Box::new(SymExpr::Sub(Box::new(SymExpr::Int(0)), Box::new(sym("s0")))),
            Box::new(SymExpr::Int(2)),
        );
        assert_eq!(fold(&expr, &values), SymExpr::Int(-4));
        let modulo = SymExpr::Mod(Box::new(SymExpr::Int(-7)), Box::new(SymExpr::Int(3)));
        assert_eq!(fold(&modulo, &values), SymExpr::Int(2));
        let open = SymExpr::Mul(Box::new(SymExpr::Int(2)), Box::new(sym("s1")));
        assert_eq!(fold(&open, &values), open);
        assert_eq!(Show(&open).to_string(), "2*s1");
    }

    #[test]
    fn divides_exactly_or_not_at_all() {
        let s: Arc<str> = Arc::from("s0");
        let t: Arc<str> = Arc::from("s1");
        let product = |dims: &[Dim]| dims.iter().try_fold(Dim::Static(1), |acc, dim| acc.checked_mul(dim)).unwrap();
        let all = product(&[Dim::Sym(s.clone()), Dim::Static(4), Dim::Static(8)]);
        assert_eq!(exact_quotient(&all, &Dim::Static(32)), Some(Dim::Sym(s.clone())));
        assert_eq!(exact_quotient(&all, &product(&[Dim::Sym(s.clone()), Dim::Static(8)])), Some(Dim::Static(4)));
        assert_eq!(exact_quotient(&all, &Dim::Static(8)).map(|dim| dim.to_string()), Some("4*s0".into()));
        assert_eq!(exact_quotient(&all, &Dim::Static(3)), None);
        let merged = product(&[Dim::Sym(s.clone()), Dim::Sym(t.clone()), Dim::Static(32)]);
        assert_eq!(exact_quotient(&merged, &Dim::Static(32)).map(|dim| dim.to_string()), Some("s0*s1".into()));
        assert_eq!(exact_quotient(&merged, &product(&[Dim::Sym(t), Dim::Static(32)])), Some(Dim::Sym(s)));
    }

    #[test]
    fn compound_expressions_become_dims_and_back() {
        let expr = SymExpr::Add(
            Box::new(SymExpr::FloorDiv(
                Box::new(SymExpr::Sub(Box::new(sym("s0")), Box::new(SymExpr::Int(1)))),
                Box::new(SymExpr::Int(2)),
            )),
            Box::new(SymExpr::Int(1)),
        );
        let dim = to_dim(&expr, |name: &str| Arc::from(name)).unwrap();
        // Canonical form: the multiples of the divisor come out, `(s0 - 1)//2 + 1 == (s0 + 1)//2`.
        assert_eq!(dim.to_string(), "(s0 + 1)//2");
        let values: IndexMap<String, i64> = [("s0".to_string(), 9)].into_iter().collect();
        assert_eq!(fold(&from_dim(&dim), &values), SymExpr::Int(5));
        let by_symbol = SymExpr::FloorDiv(Box::new(sym("s0")), Box::new(sym("s1")));
        assert_eq!(to_dim(&by_symbol, |name: &str| Arc::from(name)), None);
    }
}
