//! Symbolic integers: folding `SymExpr`s with the sizes given in [`super::ImportOptions`], turning
//! them into IR dims, and the little algebra reshapes need (products of dims).
//!
//! The IR only knows static dims and bare symbols, so a compound expression (`2*s77`) is fine as a
//! value flowing between `Sym` nodes but becomes an error the moment it has to be a dim.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use ttpu_ir::Dim;

use crate::ast::SymExpr;

/// Substitutes the given symbol values into `expr` and folds every constant subtree, with
/// Python's floor division and modulo. Subtrees that would divide by zero stay unfolded.
pub(crate) fn fold(expr: &SymExpr, values: &IndexMap<String, i64>) -> SymExpr {
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
        _ => None,
    }
}

/// Python's `//` on integers (rounds toward negative infinity).
pub(crate) fn floor_div(a: i64, b: i64) -> Option<i64> {
    if b == 0 {
        return None;
    }
    let quotient = a.checked_div(b)?;
    Some(if (a % b != 0) && ((a < 0) != (b < 0)) { quotient - 1 } else { quotient })
}

/// Combines two symbolic ints with a `SymBinary` operator (`+`, `-`, `*`, `//`, `%`) and folds.
pub(crate) fn combine(op: &str, lhs: SymExpr, rhs: SymExpr) -> Option<SymExpr> {
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
pub(crate) fn compare(op: &str, lhs: &SymExpr, rhs: &SymExpr) -> Option<Option<bool>> {
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

/// The dim a folded expression stands for: a literal or a bare symbol; `None` for compound ones.
/// `intern` maps a symbol name to the graph's shared name.
pub(crate) fn to_dim(expr: &SymExpr, intern: impl FnOnce(&str) -> Arc<str>) -> Option<Dim> {
    match expr {
        SymExpr::Int(value) => Some(Dim::Static(*value)),
        SymExpr::Symbol(name) => Some(Dim::Sym(intern(name))),
        _ => None,
    }
}

/// The expression a dim stands for.
pub(crate) fn from_dim(dim: &Dim) -> SymExpr {
    match dim {
        Dim::Static(size) => SymExpr::Int(*size),
        Dim::Sym(name) => SymExpr::Symbol(name.to_string()),
    }
}

/// The symbols named in `expr`, in order of appearance, each once.
pub(crate) fn symbols(expr: &SymExpr) -> Vec<String> {
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
            | SymExpr::Mod(a, b) => {
                walk(a, out);
                walk(b, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(expr, &mut out);
    out
}

/// Prints an expression the way PyTorch does (`2*s77`, `s0 + 1`, `(s0//2)`), for messages.
pub(crate) struct Show<'a>(pub &'a SymExpr);

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

/// A product of dims: a static coefficient times a multiset of symbols. Enough to infer the `-1`
/// of a reshape when some dims are symbolic (`[s0, 4, 8] -> [-1, 8]` gives `4*s0`, which is only a
/// valid dim if it is static or a bare symbol).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Monomial {
    /// The static factor.
    pub coefficient: i64,
    /// Symbol name to exponent.
    pub symbols: BTreeMap<Arc<str>, u32>,
}

impl Monomial {
    /// The product of `dims`.
    pub(crate) fn of<'a>(dims: impl IntoIterator<Item = &'a Dim>) -> Monomial {
        let mut product = Monomial { coefficient: 1, symbols: BTreeMap::new() };
        for dim in dims {
            match dim {
                Dim::Static(size) => product.coefficient = product.coefficient.saturating_mul(*size),
                Dim::Sym(name) => *product.symbols.entry(name.clone()).or_insert(0) += 1,
            }
        }
        product
    }

    /// `self / other` if it is exact and a single dim (a static size or one symbol).
    pub(crate) fn divide_to_dim(&self, other: &Monomial) -> Option<Dim> {
        if other.coefficient == 0 || self.coefficient % other.coefficient != 0 {
            return None;
        }
        let coefficient = self.coefficient / other.coefficient;
        let mut left = self.symbols.clone();
        for (name, &exponent) in &other.symbols {
            let have = left.get_mut(name)?;
            *have = have.checked_sub(exponent)?;
        }
        let remaining: Vec<_> = left.into_iter().filter(|(_, exponent)| *exponent > 0).collect();
        match remaining.as_slice() {
            [] => Some(Dim::Static(coefficient)),
            [(name, 1)] if coefficient == 1 => Some(Dim::Sym(name.clone())),
            _ => None,
        }
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
    fn divides_monomials() {
        let s: Arc<str> = Arc::from("s0");
        let all = Monomial::of(&[Dim::Sym(s.clone()), Dim::Static(4), Dim::Static(8)]);
        assert_eq!(all.divide_to_dim(&Monomial::of(&[Dim::Static(32)])), Some(Dim::Sym(s.clone())));
        assert_eq!(all.divide_to_dim(&Monomial::of(&[Dim::Sym(s.clone()), Dim::Static(8)])), Some(Dim::Static(4)));
        assert_eq!(all.divide_to_dim(&Monomial::of(&[Dim::Static(8)])), None);
    }
}
