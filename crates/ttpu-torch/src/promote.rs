//! PyTorch's type promotion (`torch.result_type`), which decides the dtype every elementwise op
//! computes in before the IR sees explicit `convert`s.
//!
//! Two pieces: [`promote_types`], the lattice on dtypes (`torch.promote_types`), and
//! [`result_type`], which applies it over operands in three tiers: tensors with dims, zero-dim
//! tensors and Python scalars. A lower tier only matters when it is of a higher *category*
//! (bool < integer < float) than every tier above it, so `i32_tensor + 1.5` is `f32` but
//! `f16_tensor + f64_zero_dim` stays `f16`. Scalars stand for the default dtypes: int → `i64`,
//! float → `f32` (the default float dtype), bool → `bool`.

use ttpu_ir::{DType, Scalar};

/// The dtype PyTorch's CPU kernels compute `dtype` in ("opmath"): `f32` for `f16` and `bf16`,
/// every other dtype itself.
pub fn opmath(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        DType::C32 => DType::C64,
        other => other,
    }
}

/// The dtype PyTorch uses for float results with no float input (`torch.get_default_dtype()`).
pub const DEFAULT_FLOAT: DType = DType::F32;

/// The coarse kind of a dtype or scalar; promotion never goes down a category.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    /// `bool`.
    Bool,
    /// Signed and unsigned integers.
    Integer,
    /// Floating point.
    Float,
    /// Complex (`c64`, `c128`).
    Complex,
}

/// The category of `dtype`.
pub fn category(dtype: DType) -> Category {
    if dtype.is_float() {
        Category::Float
    } else if dtype.is_complex() {
        Category::Complex
    } else if dtype.is_bool() {
        Category::Bool
    } else {
        Category::Integer
    }
}

/// The category of a Python scalar.
pub fn scalar_category(value: Scalar) -> Category {
    match value {
        Scalar::Bool(_) => Category::Bool,
        Scalar::Int(_) => Category::Integer,
        Scalar::Float(_) => Category::Float,
    }
}

/// The dtype a Python scalar stands for when it decides a result type.
pub fn scalar_dtype(value: Scalar) -> DType {
    match value {
        Scalar::Bool(_) => DType::Bool,
        Scalar::Int(_) => DType::I64,
        Scalar::Float(_) => DEFAULT_FLOAT,
    }
}

/// `torch.promote_types(a, b)`: the smallest dtype both convert to without losing their category.
pub fn promote_types(a: DType, b: DType) -> DType {
    use DType::*;
    if a == b {
        return a;
    }
    match (a, b) {
        (Bool, other) | (other, Bool) => other,
        // Complex wins; its parts are the promotion of both sides' real dtypes (`c64` with `f64`
        // is `c128`, `c32` with `f16` or an integer stays `c32`, `c32` with `bf16` is `c64`).
        (x, y) if x.is_complex() || y.is_complex() => {
            let part = |dtype: DType| dtype.complex_part().unwrap_or(dtype);
            match promote_types(part(x), part(y)) {
                F64 => C128,
                F16 => C32,
                _ => C64,
            }
        }
        // Float wins over integers; among floats the wider one, and f16 with bf16 meet at f32.
        (F16, BF16) | (BF16, F16) => F32,
        (x, y) if x.is_float() && y.is_float() => {
            if float_rank(x) >= float_rank(y) {
                x
            } else {
                y
            }
        }
        (x, _) if x.is_float() => x,
        (_, y) if y.is_float() => y,
        // u8 with a signed type needs the next signed type that holds both ranges.
        (U8, I8) | (I8, U8) => I16,
        (U8, other) | (other, U8) => other,
        (x, y) => {
            if x.byte_size() >= y.byte_size() {
                x
            } else {
                y
            }
        }
    }
}

fn float_rank(dtype: DType) -> u8 {
    match dtype {
        DType::F16 | DType::BF16 => 1,
        DType::F32 => 2,
        _ => 3,
    }
}

/// One operand of an op, as type promotion sees it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Participant {
    /// A tensor with at least one dim.
    Dim(DType),
    /// A zero-dim tensor.
    ZeroDim(DType),
    /// A Python number (a "wrapped number").
    Scalar(Category),
}

impl Participant {
    /// A tensor of `dtype` with `rank` dims.
    pub fn tensor(dtype: DType, rank: usize) -> Participant {
        if rank == 0 { Participant::ZeroDim(dtype) } else { Participant::Dim(dtype) }
    }
}

/// `torch.result_type` over `operands`; `None` when there are none.
pub fn result_type(operands: &[Participant]) -> Option<DType> {
    let fold = |pick: &dyn Fn(&Participant) -> Option<DType>| {
        operands
            .iter()
            .filter_map(pick)
            .fold(None, |acc: Option<DType>, dtype| Some(acc.map_or(dtype, |acc| promote_types(acc, dtype))))
    };
    let dim = fold(&|operand| match operand {
        Participant::Dim(dtype) => Some(*dtype),
        _ => None,
    });
    let zero_dim = fold(&|operand| match operand {
        Participant::ZeroDim(dtype) => Some(*dtype),
        _ => None,
    });
    let scalar = fold(&|operand| match operand {
        Participant::Scalar(Category::Bool) => Some(DType::Bool),
        Participant::Scalar(Category::Integer) => Some(DType::I64),
        Participant::Scalar(Category::Float) => Some(DEFAULT_FLOAT),
        _ => None,
    });
    combine_tiers(dim, combine_tiers(zero_dim, scalar))
}

/// PyTorch's `combine_categories`: the higher tier keeps its dtype unless the lower tier is of a
/// higher category, in which case the two are promoted.
fn combine_tiers(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, lower) => lower,
        (higher, None) => higher,
        (Some(higher), Some(lower)) => {
            if category(lower) > category(higher) {
                Some(promote_types(higher, lower))
            } else {
                Some(higher)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use DType::*;

    use super::*;

    /// `torch.promote_types` on pairs, from PyTorch's promotion table.
    #[test]
    fn promote_types_table() {
        let table = [
            (Bool, Bool, Bool),
            (Bool, U8, U8),
            (Bool, I64, I64),
            (Bool, F16, F16),
            (U8, I8, I16),
            (U8, I16, I16),
            (U8, I32, I32),
            (U8, I64, I64),
            (I8, I16, I16),
            (I8, I64, I64),
            (I32, I64, I64),
            (I64, F16, F16),
            (I64, BF16, BF16),
            (I32, F32, F32),
            (U8, F64, F64),
            (F16, BF16, F32),
            (F16, F32, F32),
            (BF16, F64, F64),
            (F32, F64, F64),
            (C64, F32, C64),
            (C64, F64, C128),
            (C64, C128, C128),
            (C64, I64, C64),
            (Bool, C128, C128),
            (BF16, C64, C64),
            // `torch.promote_types` with `complex32`, as PyTorch 2.15 gives them.
            (C32, F16, C32),
            (C32, BF16, C64),
            (C32, I64, C32),
            (C32, U8, C32),
            (C32, Bool, C32),
            (C32, F32, C64),
            (C32, F64, C128),
            (C32, C64, C64),
            (C32, C128, C128),
        ];
        for (a, b, expected) in table {
            assert_eq!(promote_types(a, b), expected, "{a} with {b}");
            assert_eq!(promote_types(b, a), expected, "{b} with {a}");
        }
    }

    /// `torch.result_type` cases, as (operands, result); from the examples in PyTorch's type
    /// promotion documentation plus the scalar and zero-dim corner cases.
    #[test]
    fn result_type_table() {
        use Participant::{Dim as T, Scalar as S, ZeroDim as Z};
        let cases: &[(&[Participant], DType)] = &[
            // Same category: the dimensioned tensor decides.
            (&[T(F32), S(Category::Float)], F32),
            (&[T(F16), S(Category::Float)], F16),
            (&[T(I32), S(Category::Integer)], I32),
            (&[T(U8), S(Category::Integer)], U8),
            (&[T(F32), Z(F64)], F32),
            (&[T(I32), Z(I64)], I32),
            // A higher category from a scalar or zero-dim tensor promotes.
            (&[T(I32), S(Category::Float)], F32),
            (&[T(I64), S(Category::Float)], F32),
            (&[T(I32), Z(F64)], F64),
            (&[T(Bool), S(Category::Integer)], I64),
            (&[T(Bool), Z(U8)], U8),
            (&[T(Bool), S(Category::Bool)], Bool),
            (&[T(U8), Z(F16)], F16),
            // Dimensioned tensors promote among themselves.
            (&[T(I32), T(I64)], I64),
            (&[T(F16), T(BF16)], F32),
            (&[T(I64), T(F16)], F16),
            (&[T(Bool), T(F32)], F32),
            // Zero-dim tensors beat scalars of the same category.
            (&[Z(I32), S(Category::Integer)], I32),
            (&[Z(F16), S(Category::Float)], F16),
            (&[Z(I32), S(Category::Float)], F32),
            (&[Z(I32), Z(I64)], I64),
            // Only scalars: their default dtypes.
            (&[S(Category::Integer), S(Category::Float)], F32),
            (&[S(Category::Integer)], I64),
            (&[S(Category::Bool)], Bool),
        ];
        for (operands, expected) in cases {
            assert_eq!(result_type(operands), Some(*expected), "{operands:?}");
        }
        assert_eq!(result_type(&[]), None);
    }
}
