//! Elementwise ops: arithmetic and comparisons with PyTorch's promotion and broadcasting, float
//! math, rounding, `clamp`, Python's remainder, logic, and selection (`where`, `masked_fill`).
//!
//! Binary ops take a tensor or a Rust scalar (`add` / `add_scalar`); a scalar promotes like a
//! Python number. Float math on integer and bool tensors gives `f32`, as PyTorch's default dtype.

use ttpu_ir::{BinaryOp, CompareDirection, DType, Scalar, UnaryOp};

use super::Tensor;
use crate::element::Element;
use crate::promote::{Priority, broadcast_shapes, result_type, scalar_dtype};
use crate::tape::{Bits, FloatFn, TapeOp};
use crate::{Error, Result};

/// The second operand of an elementwise op.
#[derive(Clone, Copy)]
enum Operand<'a> {
    Tensor(&'a Tensor),
    Scalar(Scalar, DType),
}

impl Tensor {
    /// Records an elementwise op of `self` and `rhs`: both are promoted to a dtype (from the
    /// common dtype through `compute_dtype`) and broadcast to one shape, then `make` gives the
    /// op on that dtype and the scalar operand, if any.
    fn elementwise(
        &self,
        rhs: Operand<'_>,
        op: &'static str,
        compute_dtype: impl FnOnce(DType) -> Option<DType>,
        make: impl FnOnce(DType, Option<Bits>) -> TapeOp,
    ) -> Result<Tensor> {
        let scalar_shape;
        let (rhs_dtype, rhs_priority, rhs_shape) = match rhs {
            Operand::Tensor(tensor) => (tensor.dtype(), tensor.priority(), tensor.shape()),
            Operand::Scalar(_, dtype) => {
                scalar_shape = ttpu_ir::Shape::scalar();
                (dtype, Priority::Wrapped, &scalar_shape)
            }
        };
        // Two tensors of one dtype promote to it whatever their priorities; most ops are such.
        let common = if matches!(rhs, Operand::Tensor(_)) && rhs_dtype == self.dtype() {
            rhs_dtype
        } else {
            result_type(&[(self.dtype(), self.priority()), (rhs_dtype, rhs_priority)])
        };
        let dtype = compute_dtype(common).ok_or(Error::UnsupportedDType { op, dtype: common })?;
        // Checked here so that the error names both shapes; the tape builds the broadcast.
        if self.shape() != rhs_shape {
            broadcast_shapes(self.shape(), rhs_shape)?;
        }
        match rhs {
            Operand::Tensor(tensor) => self.node.device.record(&[self, tensor], make(dtype, None)),
            Operand::Scalar(value, _) => self.node.device.record(&[self], make(dtype, Some(Bits(value)))),
        }
    }

    fn binary(&self, rhs: Operand<'_>, op: &'static str, binary: BinaryOp) -> Result<Tensor> {
        let compute_dtype = |dtype: DType| match binary {
            // True division: integers divide as the default float dtype, like `torch.div`.
            BinaryOp::Divide if !dtype.is_float() => Some(DType::F32),
            BinaryOp::Subtract | BinaryOp::Power if dtype.is_bool() => None,
            _ => Some(dtype),
        };
        self.elementwise(rhs, op, compute_dtype, |dtype, scalar| TapeOp::Binary { op: binary, dtype, scalar })
    }

    fn compare(&self, rhs: Operand<'_>, op: &'static str, direction: CompareDirection) -> Result<Tensor> {
        self.elementwise(rhs, op, Some, |dtype, scalar| TapeOp::Compare { direction, dtype, scalar })
    }

    /// `self + other`, broadcasting and promoting like PyTorch.
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "add", BinaryOp::Add)
    }

    /// `self - other`.
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "sub", BinaryOp::Subtract)
    }

    /// `self * other`.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "mul", BinaryOp::Multiply)
    }

    /// `self / other`, true division (integers give `f32`).
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "div", BinaryOp::Divide)
    }

    /// `self ** other`.
    pub fn pow(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "pow", BinaryOp::Power)
    }

    /// Elementwise maximum (`torch.maximum`).
    pub fn maximum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "maximum", BinaryOp::Maximum)
    }

    /// Elementwise minimum (`torch.minimum`).
    pub fn minimum(&self, other: &Tensor) -> Result<Tensor> {
        self.binary(Operand::Tensor(other), "minimum", BinaryOp::Minimum)
    }

    /// `self + value`; the scalar promotes like a Python number.
    pub fn add_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "add", BinaryOp::Add)
    }

    /// `self - value`.
    pub fn sub_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "sub", BinaryOp::Subtract)
    }

    /// `self * value`.
    pub fn mul_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "mul", BinaryOp::Multiply)
    }

    /// `self / value`, true division.
    pub fn div_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(value.to_scalar(), T::DTYPE), "div", BinaryOp::Divide)
    }

    /// `self ** exponent`.
    pub fn pow_scalar<T: Element>(&self, exponent: T) -> Result<Tensor> {
        self.binary(Operand::Scalar(exponent.to_scalar(), T::DTYPE), "pow", BinaryOp::Power)
    }

    /// `self * self`, as `torch.square` (which is `pow(self, 2)`, so bool gives `i64`).
    pub fn square(&self) -> Result<Tensor> {
        let dtype = result_type(&[(self.dtype(), self.priority()), (DType::I64, Priority::Wrapped)]);
        self.node.device.record(&[self, self], TapeOp::Binary { op: BinaryOp::Multiply, dtype, scalar: None })
    }

    /// `self % other` with Python's sign convention (the result has the divisor's sign), as
    /// `torch.remainder`; not defined for bool. Integer division by zero gives whatever XLA's
    /// remainder does (PyTorch raises instead; the divisor's values are on the device).
    pub fn remainder(&self, other: &Tensor) -> Result<Tensor> {
        self.remainder_of(Operand::Tensor(other))
    }

    /// `self % value` with Python's sign convention; the scalar promotes like a Python number.
    pub fn remainder_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.remainder_of(Operand::Scalar(value.to_scalar(), T::DTYPE))
    }

    fn remainder_of(&self, rhs: Operand<'_>) -> Result<Tensor> {
        let compute_dtype = |dtype: DType| (!dtype.is_bool()).then_some(dtype);
        // The tape derives the dtype again from the operands' types when it builds the op.
        self.elementwise(rhs, "remainder", compute_dtype, |_, scalar| TapeOp::Remainder { scalar })
    }

    /// `self == other`, as bool.
    pub fn eq(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "eq", CompareDirection::Eq)
    }

    /// `self != other`.
    pub fn ne(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "ne", CompareDirection::Ne)
    }

    /// `self < other`.
    pub fn lt(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "lt", CompareDirection::Lt)
    }

    /// `self <= other`.
    pub fn le(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "le", CompareDirection::Le)
    }

    /// `self > other`.
    pub fn gt(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "gt", CompareDirection::Gt)
    }

    /// `self >= other`.
    pub fn ge(&self, other: &Tensor) -> Result<Tensor> {
        self.compare(Operand::Tensor(other), "ge", CompareDirection::Ge)
    }

    /// `self == value`.
    pub fn eq_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "eq", CompareDirection::Eq)
    }

    /// `self < value`.
    pub fn lt_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "lt", CompareDirection::Lt)
    }

    /// `self > value`.
    pub fn gt_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "gt", CompareDirection::Gt)
    }

    /// `self != value`.
    pub fn ne_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "ne", CompareDirection::Ne)
    }

    /// `self <= value`.
    pub fn le_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "le", CompareDirection::Le)
    }

    /// `self >= value`.
    pub fn ge_scalar<T: Element>(&self, value: T) -> Result<Tensor> {
        self.compare(Operand::Scalar(value.to_scalar(), T::DTYPE), "ge", CompareDirection::Ge)
    }

    /// A float function; integer and bool tensors give `f32`, as PyTorch does for `exp`, `log`,
    /// `erf`, ...
    fn float_unary(&self, function: FloatFn) -> Result<Tensor> {
        self.node.device.record(&[self], TapeOp::FloatUnary(function))
    }

    /// `exp(self)`.
    pub fn exp(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Exponential))
    }

    /// `exp(self) - 1`, accurate near zero.
    pub fn expm1(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::ExponentialMinusOne))
    }

    /// Natural logarithm.
    pub fn log(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Log))
    }

    /// `log(1 + self)`, accurate near zero.
    pub fn log1p(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::LogPlusOne))
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Tanh))
    }

    /// `1 / (1 + exp(-self))`.
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Logistic))
    }

    /// Square root.
    pub fn sqrt(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Sqrt))
    }

    /// `1 / sqrt(self)`.
    pub fn rsqrt(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Rsqrt))
    }

    /// Sine, in radians.
    pub fn sin(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Sine))
    }

    /// Cosine, in radians.
    pub fn cos(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Unary(UnaryOp::Cosine))
    }

    /// The error function, computed as the `.fx` importer computes it (`ttpu_ir::composite`):
    /// a rational approximation to a few ulp in `f32` and `f64`.
    pub fn erf(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Erf)
    }

    /// `1 / self`.
    pub fn reciprocal(&self) -> Result<Tensor> {
        self.float_unary(FloatFn::Reciprocal)
    }

    /// `-self`; not defined for bool.
    pub fn neg(&self) -> Result<Tensor> {
        self.signed_unary("neg", UnaryOp::Negate)
    }

    /// `|self|`; not defined for bool.
    pub fn abs(&self) -> Result<Tensor> {
        self.signed_unary("abs", UnaryOp::Abs)
    }

    fn signed_unary(&self, op: &'static str, unary: UnaryOp) -> Result<Tensor> {
        if matches!(self.dtype(), DType::Bool | DType::U8) {
            return Err(Error::UnsupportedDType { op, dtype: self.dtype() });
        }
        self.node.device.record(&[self], TapeOp::Unary(unary))
    }

    /// -1, 0 or 1 by the sign of each element, in the tensor's dtype, as `torch.sign`: NaN and
    /// `-0.0` give `0.0` there, and a bool tensor is its own sign.
    pub fn sign(&self) -> Result<Tensor> {
        if self.dtype().is_bool() {
            return Ok(self.clone());
        }
        self.node.device.record(&[self], TapeOp::Sign)
    }

    /// Rounds down. Integer tensors are returned as they are, as PyTorch does; bool is refused.
    pub fn floor(&self) -> Result<Tensor> {
        self.rounding("floor", UnaryOp::Floor)
    }

    /// Rounds up. Integer tensors are returned as they are; bool is refused.
    pub fn ceil(&self) -> Result<Tensor> {
        self.rounding("ceil", UnaryOp::Ceil)
    }

    /// Rounds to the nearest integer, halves to even (`round(2.5) == 2`), as `torch.round`.
    /// Integer tensors are returned as they are; bool is refused.
    pub fn round(&self) -> Result<Tensor> {
        self.rounding("round", UnaryOp::RoundNearestEven)
    }

    fn rounding(&self, op: &'static str, unary: UnaryOp) -> Result<Tensor> {
        match self.dtype() {
            DType::Bool => Err(Error::UnsupportedDType { op, dtype: DType::Bool }),
            dtype if !dtype.is_float() => Ok(self.clone()),
            _ => self.node.device.record(&[self], TapeOp::Unary(unary)),
        }
    }

    /// Limits every element to `[min, max]`, as `torch.clamp`; either bound may be `None`, not
    /// both. The bounds promote like Python numbers (an integer tensor clamped by a float gives
    /// `f32`). A NaN element stays NaN, and `min > max` gives `max` everywhere, as in PyTorch.
    pub fn clamp<T: Element>(&self, min: Option<T>, max: Option<T>) -> Result<Tensor> {
        if min.is_none() && max.is_none() {
            return Err(Error::ClampWithoutBounds);
        }
        let (min, max) = (min.map(Element::to_scalar), max.map(Element::to_scalar));
        let mut operands = vec![(self.dtype(), self.priority())];
        operands.extend(min.iter().chain(max.iter()).map(|&bound| (scalar_dtype(bound), Priority::Wrapped)));
        let dtype = result_type(&operands);
        if dtype.is_bool() {
            return Err(Error::UnsupportedDType { op: "clamp", dtype });
        }
        self.node.device.record(&[self], TapeOp::Clamp { min: min.map(Bits), max: max.map(Bits) })
    }

    /// `!self` as bool: true where an element is zero (`torch.logical_not`, any dtype).
    pub fn logical_not(&self) -> Result<Tensor> {
        // `x == 0` in the tensor's own dtype: NaN is nonzero, so it gives false, as in PyTorch.
        let op = TapeOp::Compare {
            direction: CompareDirection::Eq,
            dtype: self.dtype(),
            scalar: Some(Bits(Scalar::Int(0))),
        };
        self.node.device.record(&[self], op)
    }

    /// `self && other` as bool, nonzero elements counting as true (`torch.logical_and`).
    pub fn logical_and(&self, other: &Tensor) -> Result<Tensor> {
        self.logical(other, "logical_and", BinaryOp::And)
    }

    /// `self || other` as bool, nonzero elements counting as true (`torch.logical_or`).
    pub fn logical_or(&self, other: &Tensor) -> Result<Tensor> {
        self.logical(other, "logical_or", BinaryOp::Or)
    }

    fn logical(&self, other: &Tensor, op: &'static str, binary: BinaryOp) -> Result<Tensor> {
        // Converting to bool maps zero to false and everything else, NaN included, to true.
        let as_bool = |_| Some(DType::Bool);
        self.elementwise(Operand::Tensor(other), op, as_bool, |dtype, scalar| TapeOp::Binary {
            op: binary,
            dtype,
            scalar,
        })
    }

    /// Elementwise conversion to `dtype` (`tensor.to(dtype)`).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        self.node.device.record(&[self], TapeOp::Convert(dtype))
    }

    /// `torch.where(self, on_true, on_false)`: `self` must be bool; all three broadcast.
    pub fn where_(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        if !self.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: "where condition", dtype: self.dtype() });
        }
        let dtype = result_type(&[(on_true.dtype(), on_true.priority()), (on_false.dtype(), on_false.priority())]);
        broadcast_shapes(&broadcast_shapes(self.shape(), on_true.shape())?, on_false.shape())?;
        self.node.device.record(&[self, on_true, on_false], TapeOp::Where { dtype })
    }

    /// `value` where the bool `mask` is set and `self` elsewhere, as `torch.masked_fill`: the
    /// result keeps `self`'s dtype (`value` is converted to it, a float truncated toward zero for
    /// an integer tensor) and has the broadcast shape of `self` and `mask`.
    pub fn masked_fill<T: Element>(&self, mask: &Tensor, value: T) -> Result<Tensor> {
        if !mask.dtype().is_bool() {
            return Err(Error::UnsupportedDType { op: "masked_fill mask", dtype: mask.dtype() });
        }
        broadcast_shapes(self.shape(), mask.shape())?;
        self.node.device.record(&[self, mask], TapeOp::MaskedFill { value: Bits(value.to_scalar()) })
    }
}
