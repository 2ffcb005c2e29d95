//! Compound symbolic sizes (`s0*s1`, `2*s0 + 1`, `(s0 - 1)//2`) in a canonical form.
//!
//! A [`DimExpr`] is an integer polynomial over atoms, an atom being a symbol or a floor division /
//! modulo of a polynomial by a positive constant (what PyTorch prints for convolution and pooling
//! sizes; printed `(s0 - 1)//2` and `Mod(s0, 2)` as PyTorch does). Terms and atoms are kept sorted and merged, so two expressions that are equal as
//! polynomials are equal as values: shape checks compare dims with `==`, and a reshape's element
//! count check multiplies polynomials. Floor division and modulo take the divisor's multiples out
//! of their operand (`(s0 - 1)//2 + 1` becomes `(s0 + 1)//2`, `(4*s0 + 2)//4` becomes `s0`) and
//! keep the rest as an atom; equality is sound, and complete for the sizes
//! PyTorch's shape formulas produce, though not for every identity (`(s0//2)//2` is not
//! `s0//4`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use smallvec::SmallVec;

use crate::Dim;

/// An indivisible factor of a term.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    /// A symbol of the graph.
    Sym(Arc<str>),
    /// `expr // divisor` with Python's rounding toward negative infinity; `divisor > 1`.
    FloorDiv(Box<DimExpr>, i64),
    /// `expr % divisor` with Python's sign (that of the divisor); `divisor > 1`.
    Mod(Box<DimExpr>, i64),
    /// The smaller of two sizes whose difference is not a constant, in canonical order.
    Min(Box<DimExpr>, Box<DimExpr>),
    /// The larger of two sizes whose difference is not a constant, in canonical order.
    Max(Box<DimExpr>, Box<DimExpr>),
}

/// A product of atoms with exponents, sorted by atom; the empty product is the constant term.
type Monomial = SmallVec<[(Atom, u32); 2]>;

/// A polynomial in canonical form: terms sorted by monomial, no zero coefficient.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DimExpr {
    terms: Vec<(Monomial, i64)>,
}

impl DimExpr {
    /// The constant `value`.
    pub fn constant(value: i64) -> DimExpr {
        DimExpr::from_terms([(Monomial::new(), value)])
    }

    /// The symbol `name`.
    pub fn symbol(name: Arc<str>) -> DimExpr {
        DimExpr::atom(Atom::Sym(name))
    }

    fn atom(atom: Atom) -> DimExpr {
        DimExpr::from_terms([(smallvec::smallvec![(atom, 1)], 1)])
    }

    /// The expression a dim stands for.
    pub fn of(dim: &Dim) -> DimExpr {
        match dim {
            Dim::Static(size) => DimExpr::constant(*size),
            Dim::Sym(name) => DimExpr::symbol(name.clone()),
            Dim::Expr(expr) => (**expr).clone(),
        }
    }

    /// Sums like terms and drops zero ones. `None` on overflow.
    fn try_from_terms(terms: impl IntoIterator<Item = (Monomial, i64)>) -> Option<DimExpr> {
        let mut merged: BTreeMap<Monomial, i64> = BTreeMap::new();
        for (monomial, coefficient) in terms {
            let slot = merged.entry(monomial).or_insert(0);
            *slot = slot.checked_add(coefficient)?;
        }
        Some(DimExpr { terms: merged.into_iter().filter(|(_, coefficient)| *coefficient != 0).collect() })
    }

    fn from_terms(terms: impl IntoIterator<Item = (Monomial, i64)>) -> DimExpr {
        DimExpr::try_from_terms(terms).expect("a single term cannot overflow")
    }

    /// The value, if the expression is a constant.
    pub fn as_constant(&self) -> Option<i64> {
        match self.terms.as_slice() {
            [] => Some(0),
            [(monomial, coefficient)] if monomial.is_empty() => Some(*coefficient),
            _ => None,
        }
    }

    /// The symbol, if the expression is exactly one symbol.
    pub fn as_symbol(&self) -> Option<&Arc<str>> {
        match self.terms.as_slice() {
            [(monomial, 1)] => match monomial.as_slice() {
                [(Atom::Sym(name), 1)] => Some(name),
                _ => None,
            },
            _ => None,
        }
    }

    /// `self + other`; `None` on overflow.
    pub fn checked_add(&self, other: &DimExpr) -> Option<DimExpr> {
        DimExpr::try_from_terms(self.terms.iter().chain(&other.terms).cloned())
    }

    /// `self - other`; `None` on overflow.
    pub fn checked_sub(&self, other: &DimExpr) -> Option<DimExpr> {
        let negated: Option<Vec<_>> = other
            .terms
            .iter()
            .map(|(monomial, coefficient)| Some((monomial.clone(), coefficient.checked_neg()?)))
            .collect();
        DimExpr::try_from_terms(self.terms.iter().cloned().chain(negated?))
    }

    /// `self * other`; `None` on overflow.
    pub fn checked_mul(&self, other: &DimExpr) -> Option<DimExpr> {
        let mut products = Vec::with_capacity(self.terms.len() * other.terms.len());
        for (lhs, a) in &self.terms {
            for (rhs, b) in &other.terms {
                products.push((multiply_monomials(lhs, rhs), a.checked_mul(*b)?));
            }
        }
        DimExpr::try_from_terms(products)
    }

    /// Splits every coefficient `a` into `divisor * q + r` with `0 <= r < divisor`: returns the
    /// polynomials of the `q`s and of the `r`s, so `self == divisor * quotient + rest`.
    fn split_by(&self, divisor: i64) -> (DimExpr, DimExpr) {
        let quotient =
            self.terms.iter().map(|(monomial, coefficient)| (monomial.clone(), coefficient.div_euclid(divisor)));
        let rest = self.terms.iter().map(|(monomial, coefficient)| (monomial.clone(), coefficient.rem_euclid(divisor)));
        (DimExpr::from_terms(quotient), DimExpr::from_terms(rest))
    }

    /// `self // divisor` (Python rounding); `None` when `divisor` is not positive.
    ///
    /// `(divisor * q + r) // divisor == q + r // divisor` for integer polynomials `q`, so the
    /// multiples of the divisor come out of the atom and what stays inside has every coefficient
    /// in `[0, divisor)`: `(s0 - 1)//2 + 1` and `(s0 + 1)//2` are one canonical form.
    pub fn floor_div(&self, divisor: i64) -> Option<DimExpr> {
        if divisor <= 0 {
            return None;
        }
        if divisor == 1 {
            return Some(self.clone());
        }
        let (quotient, rest) = self.split_by(divisor);
        if rest.as_constant().is_some() {
            // `0 <= rest < divisor`, so `rest // divisor` is zero.
            return Some(quotient);
        }
        quotient.checked_add(&DimExpr::atom(Atom::FloorDiv(Box::new(rest), divisor)))
    }

    /// `self % divisor` (Python sign); `None` when `divisor` is not positive.
    pub fn modulo(&self, divisor: i64) -> Option<DimExpr> {
        if divisor <= 0 {
            return None;
        }
        let (_, rest) = self.split_by(divisor);
        if rest.as_constant().is_some() {
            return Some(rest);
        }
        Some(DimExpr::atom(Atom::Mod(Box::new(rest), divisor)))
    }

    /// `min(self, other)`: folded when the difference is a constant (`Min(s0, s0 + 2)` is `s0`).
    pub fn minimum(&self, other: &DimExpr) -> DimExpr {
        self.extreme(other, false)
    }

    /// `max(self, other)`: folded when the difference is a constant.
    pub fn maximum(&self, other: &DimExpr) -> DimExpr {
        self.extreme(other, true)
    }

    fn extreme(&self, other: &DimExpr, largest: bool) -> DimExpr {
        if let Some(difference) = self.checked_sub(other).and_then(|difference| difference.as_constant()) {
            let self_wins = if largest { difference >= 0 } else { difference <= 0 };
            return if self_wins { self.clone() } else { other.clone() };
        }
        // One spelling per pair, so `Min(a, b) == Min(b, a)`.
        let (first, second) = if self <= other { (self, other) } else { (other, self) };
        let (first, second) = (Box::new(first.clone()), Box::new(second.clone()));
        DimExpr::atom(if largest { Atom::Max(first, second) } else { Atom::Min(first, second) })
    }

    /// The value with every symbol given; `None` when one is missing or the arithmetic overflows.
    pub fn eval(&self, values: &IndexMap<String, i64>) -> Option<i64> {
        self.terms.iter().try_fold(0i64, |acc, (monomial, coefficient)| {
            let product = monomial.iter().try_fold(*coefficient, |acc, (atom, exponent)| {
                let value = atom.eval(values)?;
                acc.checked_mul(value.checked_pow(*exponent)?)
            })?;
            acc.checked_add(product)
        })
    }

    /// `q` with `self == symbol * q` and `symbol` nowhere in `q`, when there is one: every term
    /// holds the symbol once, outside any floor-division or modulo (`s0*s1 + s0` is `s0 * (s1 + 1)`).
    pub fn factor_out(&self, symbol: &str) -> Option<DimExpr> {
        let mut terms = Vec::with_capacity(self.terms.len());
        for (monomial, coefficient) in &self.terms {
            let position =
                monomial.iter().position(|(atom, _)| matches!(atom, Atom::Sym(name) if name.as_ref() == symbol))?;
            if monomial[position].1 != 1 {
                return None;
            }
            let mut rest = monomial.clone();
            rest.remove(position);
            terms.push((rest, *coefficient));
        }
        let quotient = DimExpr::try_from_terms(terms)?;
        (!self.terms.is_empty() && !quotient.symbols().iter().any(|name| name.as_ref() == symbol)).then_some(quotient)
    }

    /// `(a, rest)` with `self == a * symbol + rest`, `a != 0` and `symbol` nowhere in `rest`, when
    /// the expression is linear in the symbol (`2*s6`, `s0 + 2*s1 - 1`): a size that solves for it.
    pub fn linear_in(&self, symbol: &str) -> Option<(i64, DimExpr)> {
        let mut coefficient = None;
        let mut rest = Vec::with_capacity(self.terms.len());
        for (monomial, value) in &self.terms {
            match monomial.as_slice() {
                [(Atom::Sym(name), 1)] if name.as_ref() == symbol => coefficient = Some(*value),
                _ => rest.push((monomial.clone(), *value)),
            }
        }
        let rest = DimExpr::try_from_terms(rest)?;
        let coefficient = coefficient.filter(|&value| value != 0)?;
        (!rest.symbols().iter().any(|name| name.as_ref() == symbol)).then_some((coefficient, rest))
    }

    /// The symbols named anywhere in the expression, sorted, each once.
    pub fn symbols(&self) -> Vec<Arc<str>> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<Arc<str>>) {
        for (monomial, _) in &self.terms {
            for (atom, _) in monomial {
                match atom {
                    Atom::Sym(name) => out.push(name.clone()),
                    Atom::FloorDiv(inner, _) | Atom::Mod(inner, _) => inner.collect_symbols(out),
                    Atom::Min(a, b) | Atom::Max(a, b) => {
                        a.collect_symbols(out);
                        b.collect_symbols(out);
                    }
                }
            }
        }
    }

    /// The terms, each a coefficient times a product of atoms with exponents; the constant term
    /// has no atoms. Lowering walks these to compute the size at run time.
    pub fn terms(&self) -> impl Iterator<Item = (i64, &[(Atom, u32)])> + '_ {
        self.terms.iter().map(|(monomial, coefficient)| (*coefficient, monomial.as_slice()))
    }

    /// The simplest dim standing for this expression.
    pub fn into_dim(self) -> Dim {
        if let Some(value) = self.as_constant() {
            return Dim::Static(value);
        }
        if let Some(name) = self.as_symbol() {
            return Dim::Sym(name.clone());
        }
        Dim::Expr(crate::shape::Compound::new(self))
    }
}

impl Atom {
    fn eval(&self, values: &IndexMap<String, i64>) -> Option<i64> {
        match self {
            Atom::Sym(name) => values.get(name.as_ref()).copied(),
            Atom::FloorDiv(inner, divisor) => Some(inner.eval(values)?.div_euclid(*divisor)),
            Atom::Mod(inner, divisor) => Some(inner.eval(values)?.rem_euclid(*divisor)),
            Atom::Min(a, b) => Some(a.eval(values)?.min(b.eval(values)?)),
            Atom::Max(a, b) => Some(a.eval(values)?.max(b.eval(values)?)),
        }
    }
}

fn multiply_monomials(lhs: &Monomial, rhs: &Monomial) -> Monomial {
    let mut merged: BTreeMap<&Atom, u32> = BTreeMap::new();
    for (atom, exponent) in lhs.iter().chain(rhs) {
        *merged.entry(atom).or_insert(0) += exponent;
    }
    merged.into_iter().map(|(atom, exponent)| (atom.clone(), exponent)).collect()
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Sym(name) => f.write_str(name),
            Atom::FloorDiv(inner, divisor) => write!(f, "({inner})//{divisor}"),
            Atom::Mod(inner, divisor) => write!(f, "Mod({inner}, {divisor})"),
            Atom::Min(a, b) => write!(f, "Min({a}, {b})"),
            Atom::Max(a, b) => write!(f, "Max({a}, {b})"),
        }
    }
}

impl fmt::Display for DimExpr {
    /// PyTorch's spelling: `s0*s1`, `2*s0 + 1`, `s0 - 1`, `(s0 + 1)//2`, `Mod(s0, 3)`, `s0**2`. Terms of
    /// higher degree come first, the constant last.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        let mut ordered: Vec<&(Monomial, i64)> = self.terms.iter().collect();
        ordered.sort_by_key(|(monomial, _)| std::cmp::Reverse(monomial.iter().map(|(_, e)| *e).sum::<u32>()));
        for (index, (monomial, coefficient)) in ordered.into_iter().enumerate() {
            let magnitude = coefficient.unsigned_abs();
            match (index, *coefficient < 0) {
                (0, true) => f.write_str("-")?,
                (0, false) => {}
                (_, true) => f.write_str(" - ")?,
                (_, false) => f.write_str(" + ")?,
            }
            if monomial.is_empty() {
                write!(f, "{magnitude}")?;
                continue;
            }
            if magnitude != 1 {
                write!(f, "{magnitude}*")?;
            }
            for (position, (atom, exponent)) in monomial.iter().enumerate() {
                if position > 0 {
                    f.write_str("*")?;
                }
                write!(f, "{atom}")?;
                if *exponent > 1 {
                    write!(f, "**{exponent}")?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str) -> DimExpr {
        DimExpr::symbol(Arc::from(name))
    }

    fn c(value: i64) -> DimExpr {
        DimExpr::constant(value)
    }

    #[test]
    fn equal_polynomials_are_equal_values() {
        let (s0, s1) = (sym("s0"), sym("s1"));
        let ab = s0.checked_mul(&s1).unwrap();
        let ba = s1.checked_mul(&s0).unwrap();
        assert_eq!(ab, ba);
        let sum = s0.checked_add(&c(1)).unwrap().checked_mul(&c(2)).unwrap();
        let other = c(2).checked_add(&s0).unwrap().checked_add(&s0).unwrap();
        assert_eq!(sum, other);
        assert_eq!(s0.checked_sub(&s0).unwrap().into_dim(), Dim::Static(0));
        assert_eq!(s0.checked_add(&c(0)).unwrap().into_dim(), Dim::Sym(Arc::from("s0")));
    }

    #[test]
    fn min_and_max_fold_constant_differences_and_have_one_spelling() {
        let (s0, s1) = (sym("s0"), sym("s1"));
        let two_more = s0.checked_add(&c(2)).unwrap();
        assert_eq!(s0.minimum(&two_more), s0);
        assert_eq!(s0.maximum(&two_more), two_more);
        assert_eq!(c(3).minimum(&c(5)), c(3));
        assert_eq!(s0.minimum(&s1), s1.minimum(&s0));
        assert_eq!(s0.minimum(&s1).to_string(), "Min(s0, s1)");
        assert_eq!(s1.maximum(&s0).to_string(), "Max(s0, s1)");
        let values: IndexMap<String, i64> = [("s0".to_string(), 7), ("s1".to_string(), 4)].into_iter().collect();
        assert_eq!(s0.minimum(&s1).eval(&values), Some(4));
        assert_eq!(s0.maximum(&s1).checked_sub(&c(1)).unwrap().eval(&values), Some(6));
        assert_eq!(s0.minimum(&s1).symbols().len(), 2);
    }

    #[test]
    fn prints_like_pytorch() {
        let (s0, s1) = (sym("s0"), sym("s1"));
        assert_eq!(s0.checked_mul(&s1).unwrap().to_string(), "s0*s1");
        assert_eq!(s0.checked_mul(&c(2)).unwrap().checked_add(&c(1)).unwrap().to_string(), "2*s0 + 1");
        assert_eq!(s0.checked_sub(&c(1)).unwrap().to_string(), "s0 - 1");
        let pooled = s0.checked_sub(&c(1)).unwrap().floor_div(2).unwrap().checked_add(&c(1)).unwrap();
        assert_eq!(pooled.to_string(), "(s0 + 1)//2");
        assert_eq!(s0.modulo(3).unwrap().to_string(), "Mod(s0, 3)");
        assert_eq!(s0.checked_mul(&s0).unwrap().to_string(), "s0**2");
        assert_eq!(c(0).checked_sub(&s1).unwrap().to_string(), "-s1");
    }

    #[test]
    fn division_folds_only_when_exact_and_evaluates_like_python() {
        let s0 = sym("s0");
        assert_eq!(s0.checked_mul(&c(4)).unwrap().floor_div(2).unwrap(), s0.checked_mul(&c(2)).unwrap());
        assert_eq!(s0.checked_mul(&c(4)).unwrap().modulo(2).unwrap(), c(0));
        let open = s0.checked_add(&c(1)).unwrap().floor_div(2).unwrap();
        let values: IndexMap<String, i64> = [("s0".to_string(), 6)].into_iter().collect();
        assert_eq!(open.eval(&values), Some(3));
        let negative = c(0).checked_sub(&s0).unwrap().floor_div(4).unwrap();
        assert_eq!(negative.eval(&values), Some(-2));
        assert_eq!(s0.modulo(4).unwrap().eval(&values), Some(2));
        assert_eq!(open.symbols(), vec![Arc::from("s0")]);
        assert_eq!(s0.floor_div(0), None);
        let minus_one_plus_one = s0.checked_sub(&c(1)).unwrap().floor_div(2).unwrap().checked_add(&c(1)).unwrap();
        assert_eq!(minus_one_plus_one, s0.checked_add(&c(1)).unwrap().floor_div(2).unwrap());
        let four = s0.checked_mul(&c(4)).unwrap().checked_add(&c(2)).unwrap();
        assert_eq!(four.floor_div(4).unwrap(), s0);
        assert_eq!(four.modulo(4).unwrap(), c(2));
        for value in -7..7 {
            let values: IndexMap<String, i64> = [("s0".to_string(), value)].into_iter().collect();
            let expr = s0.checked_mul(&c(3)).unwrap().checked_sub(&c(5)).unwrap();
            assert_eq!(expr.floor_div(4).unwrap().eval(&values), Some((3 * value - 5).div_euclid(4)));
            assert_eq!(expr.modulo(4).unwrap().eval(&values), Some((3 * value - 5).rem_euclid(4)));
        }
    }
}
