//! The decomposition table: one entry per ATen overload, the single list of what the importer
//! supports ([`crate::supported_ops`] and `docs/ops.md` are generated from it).
//!
//! Each entry names the overload, its parameters in ATen schema order (`*` starts keyword-only
//! ones; device/layout/memory-format parameters are listed so they are accepted, and ignored) and
//! the function that builds its IR. Families of overloads share one function through small
//! non-capturing closures.

mod backward;
mod bins;
mod cephes;
mod complex;
mod copies;
mod counting;
mod creation;
mod data;
mod elementwise;
mod gcd;
mod grid3d;
mod householder;
mod igamma;
mod index;
mod jacobi;
mod layout;
mod ldl;
mod linalg;
mod linalg_decomp;
mod linear_cross_entropy;
mod loops;
mod matrix_exp;
mod nn;
mod norm_update;
pub mod notes;
mod optim;
mod order_stats;
mod polar;
mod polynomials;
mod pool;
mod pool_windows;
mod prims;
mod products;
mod quant;
mod random;
mod reduce;
mod resample;
mod scan;
mod segment;
mod special;
mod strided;

use std::collections::HashMap;
use std::sync::OnceLock;

use ttpu_ir::{BinaryOp, CompareDirection, ReduceKind, ScatterKind, UnaryOp};

use crate::args::Args;
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// Builds the IR for one call.
pub type Decompose = fn(&mut Cx<'_>, &Args) -> Result<Imported>;

/// One supported overload.
pub struct OpDef {
    /// `aten.add.Tensor`.
    pub name: &'static str,
    /// Parameter names in schema order; `*` separates keyword-only ones.
    pub params: &'static str,
    /// The decomposition.
    pub run: Decompose,
}

impl OpDef {
    /// Whether the overload has a parameter `name`.
    pub fn has_param(&self, name: &str) -> bool {
        self.params.split(',').map(str::trim).any(|param| param == name)
    }
}

impl std::fmt::Debug for OpDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Overloads are one entry each: equal names are the same entry.
impl PartialEq for OpDef {
    fn eq(&self, other: &OpDef) -> bool {
        self.name == other.name
    }
}

const fn def(name: &'static str, params: &'static str, run: Decompose) -> OpDef {
    OpDef { name, params, run }
}

/// Keyword-only parameters of factory functions, accepted and ignored.
macro_rules! factory {
    () => {
        "dtype, layout, device, pin_memory"
    };
}

use elementwise as ew;
use optim::From::{Each, Whole};

/// Every supported overload.
pub static TABLE: &[OpDef] = &[
    // ---- arithmetic ----
    def("aten.add.Tensor", "self, other, *, alpha", |cx, a| ew::add_sub(cx, a, BinaryOp::Add)),
    def("aten.add.Scalar", "self, other, alpha", |cx, a| ew::add_sub(cx, a, BinaryOp::Add)),
    def("aten.sub.Tensor", "self, other, *, alpha", |cx, a| ew::add_sub(cx, a, BinaryOp::Subtract)),
    def("aten.sub.Scalar", "self, other, alpha", |cx, a| ew::add_sub(cx, a, BinaryOp::Subtract)),
    def("aten.rsub.Tensor", "self, other, *, alpha", ew::rsub),
    def("aten.rsub.Scalar", "self, other, alpha", ew::rsub),
    def("aten.mul.Tensor", "self, other", |cx, a| ew::arith_args(cx, a, BinaryOp::Multiply)),
    def("aten.mul.Scalar", "self, other", |cx, a| ew::arith_args(cx, a, BinaryOp::Multiply)),
    def("aten.div.Tensor", "self, other", ew::div),
    def("aten.div.Scalar", "self, other", ew::div),
    def("aten.div.Tensor_mode", "self, other, *, rounding_mode", ew::div),
    def("aten.div.Scalar_mode", "self, other, *, rounding_mode", ew::div),
    def("aten.floor_divide.default", "self, other", ew::floor_divide),
    def("aten.remainder.Tensor", "self, other", ew::remainder),
    def("aten.remainder.Scalar", "self, other", ew::remainder),
    def("aten.fmod.Tensor", "self, other", ew::fmod),
    def("aten.fmod.Scalar", "self, other", ew::fmod),
    def("aten.pow.Tensor_Scalar", "self, exponent", ew::pow),
    def("aten.pow.Tensor_Tensor", "self, exponent", ew::pow),
    def("aten.pow.Scalar", "self, exponent", ew::pow),
    def("aten.maximum.default", "self, other", |cx, a| ew::max_min(cx, a, BinaryOp::Maximum)),
    def("aten.minimum.default", "self, other", |cx, a| ew::max_min(cx, a, BinaryOp::Minimum)),
    def("aten.fmax.default", "self, other", |cx, a| ew::fmax_fmin(cx, a, BinaryOp::Maximum)),
    def("aten.fmin.default", "self, other", |cx, a| ew::fmax_fmin(cx, a, BinaryOp::Minimum)),
    def("aten.hypot.default", "self, other", ew::hypot),
    def("aten.atan2.default", "self, other", ew::atan2),
    def("aten.atan2.out", "self, other, *, out", ew::atan2_out),
    def("aten.neg.default", "self", ew::neg),
    def("aten.abs.default", "self", ew::abs),
    def("aten.sign.default", "self", ew::sign),
    def("aten.reciprocal.default", "self", ew::reciprocal),
    def("aten.clamp.default", "self, min, max", ew::clamp),
    def("aten.clamp.Tensor", "self, min, max", ew::clamp),
    def("aten.clamp_min.default", "self, min", ew::clamp),
    def("aten.clamp_min.Tensor", "self, min", ew::clamp),
    def("aten.clamp_max.default", "self, max", ew::clamp),
    def("aten.clamp_max.Tensor", "self, max", ew::clamp),
    // ---- float math (integer inputs compute in the default float dtype) ----
    def("aten.exp.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Exponential)),
    def("aten.expm1.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::ExponentialMinusOne)),
    def("aten.exp2.default", "self", ew::exp2),
    def("aten.log.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Log)),
    def("aten.log1p.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::LogPlusOne)),
    def("aten.log2.default", "self", |cx, a| ew::log_base(cx, a, std::f64::consts::LN_2)),
    def("aten.log10.default", "self", |cx, a| ew::log_base(cx, a, std::f64::consts::LN_10)),
    def("aten.sqrt.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Sqrt)),
    def("aten.rsqrt.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Rsqrt)),
    def("aten.tanh.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Tanh)),
    def("aten.sigmoid.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Logistic)),
    def("aten.sin.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Sine)),
    def("aten.cos.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Cosine)),
    def("aten.tan.default", "self", |cx, a| ew::float_unary(cx, a, UnaryOp::Tan)),
    def("aten.erf.default", "self", ew::erf_op),
    def("aten.asin.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Asin)),
    def("aten.acos.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Acos)),
    def("aten.atan.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Atan)),
    def("aten.sinh.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Sinh)),
    def("aten.cosh.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Cosh)),
    def("aten.asinh.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Asinh)),
    def("aten.acosh.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Acosh)),
    def("aten.atanh.default", "self", |cx, a| ew::inverse_trig(cx, a, ew::Inverse::Atanh)),
    def("aten.floor.default", "self", |cx, a| ew::rounding(cx, a, UnaryOp::Floor)),
    def("aten.ceil.default", "self", |cx, a| ew::rounding(cx, a, UnaryOp::Ceil)),
    def("aten.round.default", "self", |cx, a| ew::rounding(cx, a, UnaryOp::RoundNearestEven)),
    def("aten.round.decimals", "self, *, decimals", ew::round_decimals),
    def("aten.trunc.default", "self", ew::trunc_op),
    // ---- comparisons and selection ----
    def("aten.eq.Tensor", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Eq)),
    def("aten.eq.Scalar", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Eq)),
    def("aten.ne.Tensor", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Ne)),
    def("aten.ne.Scalar", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Ne)),
    def("aten.lt.Tensor", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Lt)),
    def("aten.lt.Scalar", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Lt)),
    def("aten.le.Tensor", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Le)),
    def("aten.le.Scalar", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Le)),
    def("aten.gt.Tensor", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Gt)),
    def("aten.gt.Scalar", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Gt)),
    def("aten.ge.Tensor", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Ge)),
    def("aten.ge.Scalar", "self, other", |cx, a| ew::compare(cx, a, CompareDirection::Ge)),
    def("aten.isnan.default", "self", ew::isnan),
    def("aten.isinf.default", "self", ew::isinf),
    def("aten.signbit.default", "self", ew::signbit),
    def("aten.copysign.Tensor", "self, other", ew::copysign),
    def("aten.copysign.Scalar", "self, other", ew::copysign),
    def("aten.ldexp.Tensor", "self, other", ew::ldexp),
    def("aten.where.self", "condition, self, other", ew::where_),
    def("aten.where.ScalarSelf", "condition, self, other", ew::where_),
    def("aten.where.ScalarOther", "condition, self, other", ew::where_),
    def("aten.where.Scalar", "condition, self, other", ew::where_),
    def("aten.masked_fill.Scalar", "self, mask, value", ew::masked_fill),
    def("aten.masked_fill.Tensor", "self, mask, value", ew::masked_fill),
    // ---- bitwise and logical ----
    def("aten.bitwise_and.Tensor", "self, other", |cx, a| ew::bitwise(cx, a, BinaryOp::And)),
    def("aten.bitwise_and.Scalar", "self, other", |cx, a| ew::bitwise(cx, a, BinaryOp::And)),
    def("aten.bitwise_or.Tensor", "self, other", |cx, a| ew::bitwise(cx, a, BinaryOp::Or)),
    def("aten.bitwise_or.Scalar", "self, other", |cx, a| ew::bitwise(cx, a, BinaryOp::Or)),
    def("aten.bitwise_xor.Tensor", "self, other", |cx, a| ew::bitwise(cx, a, BinaryOp::Xor)),
    def("aten.bitwise_xor.Scalar", "self, other", |cx, a| ew::bitwise(cx, a, BinaryOp::Xor)),
    def("aten.bitwise_left_shift.Tensor", "self, other", |cx, a| ew::shift(cx, a, true)),
    def("aten.bitwise_left_shift.Tensor_Scalar", "self, other", |cx, a| ew::shift(cx, a, true)),
    def("aten.bitwise_left_shift.Scalar_Tensor", "self, other", |cx, a| ew::shift(cx, a, true)),
    def("aten.bitwise_right_shift.Tensor", "self, other", |cx, a| ew::shift(cx, a, false)),
    def("aten.bitwise_right_shift.Tensor_Scalar", "self, other", |cx, a| ew::shift(cx, a, false)),
    def("aten.bitwise_right_shift.Scalar_Tensor", "self, other", |cx, a| ew::shift(cx, a, false)),
    def("aten.__lshift__.Tensor", "self, other", |cx, a| ew::shift(cx, a, true)),
    def("aten.__lshift__.Scalar", "self, other", |cx, a| ew::shift(cx, a, true)),
    def("aten.__rshift__.Tensor", "self, other", |cx, a| ew::shift(cx, a, false)),
    def("aten.__rshift__.Scalar", "self, other", |cx, a| ew::shift(cx, a, false)),
    def("aten.bitwise_not.default", "self", ew::bitwise_not),
    def("aten.logical_and.default", "self, other", |cx, a| ew::logical(cx, a, BinaryOp::And)),
    def("aten.logical_or.default", "self, other", |cx, a| ew::logical(cx, a, BinaryOp::Or)),
    def("aten.logical_xor.default", "self, other", |cx, a| ew::logical(cx, a, BinaryOp::Xor)),
    def("aten.logical_not.default", "self", ew::logical_not),
    // ---- activations ----
    def("aten.relu.default", "self", nn::relu),
    def("aten.gelu.default", "self, *, approximate", nn::gelu),
    def("aten.silu.default", "self", nn::silu),
    def("aten.hardtanh.default", "self, min_val, max_val", nn::hardtanh),
    def("aten.leaky_relu.default", "self, negative_slope", nn::leaky_relu),
    // ---- linear algebra (static matrix sizes, unrolled) ----
    def("aten._linalg_det.default", "A", linalg::det),
    def("aten._linalg_slogdet.default", "A", linalg::slogdet),
    def("aten.linalg_inv_ex.default", "A, *, check_errors", linalg::inv_ex),
    def("aten._linalg_solve_ex.default", "A, B, *, left, check_errors", linalg::solve_ex),
    def("aten.linalg_solve_ex.default", "A, B, *, left, check_errors", linalg::solve_ex_pair),
    def("aten.linalg_cholesky_ex.default", "self, *, upper, check_errors", linalg::cholesky_ex),
    def("aten.triangular_solve.default", "self, A, upper, transpose, unitriangular", linalg::triangular_solve),
    def("aten.linalg_solve_triangular.default", "self, B, *, upper, left, unitriangular", linalg::solve_triangular),
    def("aten.conv_tbc.default", "self, weight, bias, pad", nn::conv_tbc),
    def("aten._trilinear.default", "i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim", nn::trilinear),
    def("aten.hardsigmoid.default", "self", nn::hardsigmoid),
    def("aten.hardswish.default", "self", nn::hardswish),
    def("aten.elu.default", "self, alpha, scale, input_scale", nn::elu),
    def("aten._softmax.default", "self, dim, half_to_float", |cx, a| nn::softmax(cx, a, false)),
    def("aten._log_softmax.default", "self, dim, half_to_float", |cx, a| nn::softmax(cx, a, true)),
    // ---- linear algebra ----
    def("aten.mm.default", "self, mat2", nn::mm),
    def("aten.bmm.default", "self, mat2", nn::bmm),
    def("aten._grouped_mm.default", "self, mat2, offs, bias, out_dtype", nn::grouped_mm),
    def("transformers.grouped_mm_fallback.default", "input, weight, offs", nn::grouped_mm_fallback),
    def(
        "transformers.grouped_mm_fallback_backward.default",
        "input, weight, offs, grad_output",
        nn::grouped_mm_fallback_backward,
    ),
    def("aten.addmm.default", "self, mat1, mat2, *, beta, alpha", nn::addmm),
    def("aten.baddbmm.default", "self, batch1, batch2, *, beta, alpha", nn::baddbmm),
    // ---- normalisation, convolution, pooling, embedding ----
    def("aten.native_layer_norm.default", "input, normalized_shape, weight, bias, eps", nn::layer_norm),
    def(
        "aten._native_batch_norm_legit_no_training.default",
        "input, weight, bias, running_mean, running_var, momentum, eps",
        nn::batch_norm_inference,
    ),
    def(
        "aten._native_batch_norm_legit.default",
        "input, weight, bias, running_mean, running_var, training, momentum, eps",
        nn::batch_norm_legit,
    ),
    def("aten._native_batch_norm_legit.no_stats", "input, weight, bias, training, momentum, eps", nn::batch_norm_legit),
    def(
        "aten._native_batch_norm_legit_functional.default",
        "input, weight, bias, running_mean, running_var, training, momentum, eps",
        nn::batch_norm_functional,
    ),
    def("aten._cdist_forward.default", "x1, x2, p, compute_mode", nn::cdist),
    def("aten._cdist_backward.default", "grad, x1, x2, p, cdist", nn::cdist_backward),
    def("aten._pdist_forward.default", "self, p", nn::pdist),
    def("aten._pdist_backward.default", "grad, self, p, pdist", nn::pdist_backward),
    def("aten._weight_norm_interface.default", "v, g, dim", backward::weight_norm),
    def(
        "aten._weight_norm_interface_backward.default",
        "grad_w, saved_v, saved_g, saved_norms, dim",
        backward::weight_norm_backward,
    ),
    def(
        "aten.convolution.default",
        "input, weight, bias, stride, padding, dilation, transposed, output_padding, groups",
        nn::convolution,
    ),
    // The older signature: the trailing backend flags only choose kernels, never values.
    def(
        "aten._convolution.default",
        "input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, benchmark, \
         deterministic, cudnn_enabled, allow_tf32",
        nn::convolution,
    ),
    def("aten.max_pool2d_with_indices.default", "self, kernel_size, stride, padding, dilation, ceil_mode", |cx, a| {
        pool::max_pool_with_indices(cx, a, 2)
    }),
    def("aten.max_pool3d_with_indices.default", "self, kernel_size, stride, padding, dilation, ceil_mode", |cx, a| {
        pool::max_pool_with_indices(cx, a, 3)
    }),
    def("aten.avg_pool1d.default", "self, kernel_size, stride, padding, ceil_mode, count_include_pad", |cx, a| {
        pool::avg_pool(cx, a, 1)
    }),
    def(
        "aten.avg_pool2d.default",
        "self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override",
        |cx, a| pool::avg_pool(cx, a, 2),
    ),
    def(
        "aten.avg_pool3d.default",
        "self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override",
        |cx, a| pool::avg_pool(cx, a, 3),
    ),
    def("aten._adaptive_avg_pool2d.default", "self, output_size", |cx, a| pool::adaptive_avg_pool(cx, a, 2)),
    def("aten._adaptive_avg_pool3d.default", "self, output_size", |cx, a| pool::adaptive_avg_pool(cx, a, 3)),
    def("aten.upsample_bilinear2d.vec", "input, output_size, align_corners, scale_factors", pool::upsample_bilinear),
    def(
        "aten.upsample_bilinear2d.default",
        "self, output_size, align_corners, scales_h, scales_w",
        pool::upsample_bilinear,
    ),
    def("aten.upsample_nearest1d.vec", "input, output_size, scale_factors", |cx, a| pool::upsample_nearest(cx, a, 1)),
    def("aten.upsample_nearest2d.vec", "input, output_size, scale_factors", |cx, a| pool::upsample_nearest(cx, a, 2)),
    def("aten.upsample_nearest3d.vec", "input, output_size, scale_factors", |cx, a| pool::upsample_nearest(cx, a, 3)),
    def("aten.upsample_nearest1d.default", "self, output_size, scales", |cx, a| pool::upsample_nearest(cx, a, 1)),
    def("aten.upsample_nearest2d.default", "self, output_size, scales_h, scales_w", |cx, a| {
        pool::upsample_nearest(cx, a, 2)
    }),
    def("aten.upsample_nearest3d.default", "self, output_size, scales_d, scales_h, scales_w", |cx, a| {
        pool::upsample_nearest(cx, a, 3)
    }),
    def("aten._upsample_nearest_exact1d.vec", "input, output_size, scale_factors", |cx, a| {
        pool::upsample_nearest_exact(cx, a, 1)
    }),
    def("aten._upsample_nearest_exact2d.vec", "input, output_size, scale_factors", |cx, a| {
        pool::upsample_nearest_exact(cx, a, 2)
    }),
    def("aten._upsample_nearest_exact3d.vec", "input, output_size, scale_factors", |cx, a| {
        pool::upsample_nearest_exact(cx, a, 3)
    }),
    def("aten._upsample_nearest_exact1d.default", "self, output_size, scales", |cx, a| {
        pool::upsample_nearest_exact(cx, a, 1)
    }),
    def("aten._upsample_nearest_exact2d.default", "self, output_size, scales_h, scales_w", |cx, a| {
        pool::upsample_nearest_exact(cx, a, 2)
    }),
    def("aten._upsample_nearest_exact3d.default", "self, output_size, scales_d, scales_h, scales_w", |cx, a| {
        pool::upsample_nearest_exact(cx, a, 3)
    }),
    def("aten.native_group_norm.default", "input, weight, bias, N, C, HxW, group, eps", nn::group_norm),
    def("aten.embedding.default", "weight, indices, padding_idx, scale_grad_by_freq, sparse", nn::embedding),
    def(
        "aten._embedding_bag.default",
        "weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset, padding_idx",
        nn::embedding_bag,
    ),
    def(
        "aten._embedding_bag_forward_only.default",
        "weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights, include_last_offset, padding_idx",
        nn::embedding_bag,
    ),
    def("aten.adaptive_max_pool2d.default", "self, output_size", pool::adaptive_max_pool),
    // ---- gradients ----
    def(
        "aten._embedding_bag_backward.default",
        "grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode, sparse, \
         per_sample_weights, padding_idx",
        |cx, a| backward::embedding_bag_backward(cx, a, false),
    ),
    def(
        "aten._embedding_bag_dense_backward.default",
        "grad, indices, offset2bag, bag_size, maximum_indices, num_weights, scale_grad_by_freq, mode, \
         per_sample_weights, padding_idx",
        |cx, a| backward::embedding_bag_backward(cx, a, true),
    ),
    def(
        "aten._embedding_bag_per_sample_weights_backward.default",
        "grad, weight, indices, offsets, offset2bag, mode, padding_idx",
        backward::embedding_bag_per_sample_weights_backward,
    ),
    def(
        "aten.embedding_dense_backward.default",
        "grad_output, indices, num_weights, padding_idx, scale_grad_by_freq",
        backward::embedding_dense_backward,
    ),
    def(
        "aten.max_pool2d_with_indices_backward.default",
        "grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices",
        |cx, a| backward::max_pool_backward(cx, a, 2, "max_pool2d_with_indices_backward"),
    ),
    def(
        "aten.max_pool3d_with_indices_backward.default",
        "grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices",
        |cx, a| backward::max_pool_backward(cx, a, 3, "max_pool3d_with_indices_backward"),
    ),
    def("aten.adaptive_max_pool2d_backward.default", "grad_output, self, indices", |cx, a| {
        backward::max_pool_backward(cx, a, 2, "adaptive_max_pool2d_backward")
    }),
    def("aten.adaptive_max_pool3d_backward.default", "grad_output, self, indices", |cx, a| {
        backward::max_pool_backward(cx, a, 3, "adaptive_max_pool3d_backward")
    }),
    def(
        "aten.fractional_max_pool2d_backward.default",
        "grad_output, self, kernel_size, output_size, indices",
        |cx, a| backward::max_pool_backward(cx, a, 2, "fractional_max_pool2d_backward"),
    ),
    def(
        "aten.fractional_max_pool3d_backward.default",
        "grad_output, self, kernel_size, output_size, indices",
        |cx, a| backward::max_pool_backward(cx, a, 3, "fractional_max_pool3d_backward"),
    ),
    def(
        "aten.avg_pool2d_backward.default",
        "grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override",
        |cx, a| pool::avg_pool_backward(cx, a, 2),
    ),
    def(
        "aten.avg_pool3d_backward.default",
        "grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override",
        |cx, a| pool::avg_pool_backward(cx, a, 3),
    ),
    def("aten._adaptive_avg_pool2d_backward.default", "grad_output, self", |cx, a| {
        backward::adaptive_avg_pool_backward(cx, a, 2)
    }),
    def("aten._adaptive_avg_pool3d_backward.default", "grad_output, self", |cx, a| {
        backward::adaptive_avg_pool_backward(cx, a, 3)
    }),
    def(
        "aten.native_layer_norm_backward.default",
        "grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask",
        backward::layer_norm_backward,
    ),
    def(
        "aten.native_group_norm_backward.default",
        "grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask",
        backward::group_norm_backward,
    ),
    def(
        "aten.convolution_backward.default",
        "grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, \
         output_mask",
        backward::convolution_backward,
    ),
    // ---- reductions ----
    def("aten.sum.default", "self, *, dtype", reduce::sum),
    def("aten.sum.dim_IntList", "self, dim, keepdim, *, dtype", reduce::sum),
    def("aten.mean.default", "self, *, dtype", reduce::mean),
    def("aten.mean.dim", "self, dim, keepdim, *, dtype", reduce::mean),
    def("aten.prod.default", "self, *, dtype", reduce::prod),
    def("aten.prod.dim_int", "self, dim, keepdim, *, dtype", reduce::prod),
    def("aten.amax.default", "self, dim, keepdim", |cx, a| reduce::extremum(cx, a, ReduceKind::Max)),
    def("aten.amin.default", "self, dim, keepdim", |cx, a| reduce::extremum(cx, a, ReduceKind::Min)),
    def("aten.any.default", "self", |cx, a| reduce::any_all(cx, a, ReduceKind::Or)),
    def("aten.any.dim", "self, dim, keepdim", |cx, a| reduce::any_all(cx, a, ReduceKind::Or)),
    def("aten.any.dims", "self, dim, keepdim", |cx, a| reduce::any_all(cx, a, ReduceKind::Or)),
    def("aten.all.default", "self", |cx, a| reduce::any_all(cx, a, ReduceKind::And)),
    def("aten.all.dim", "self, dim, keepdim", |cx, a| reduce::any_all(cx, a, ReduceKind::And)),
    def("aten.all.dims", "self, dim, keepdim", |cx, a| reduce::any_all(cx, a, ReduceKind::And)),
    def("aten.argmax.default", "self, dim, keepdim", |cx, a| reduce::arg_extremum(cx, a, ReduceKind::Max)),
    def("aten.argmin.default", "self, dim, keepdim", |cx, a| reduce::arg_extremum(cx, a, ReduceKind::Min)),
    def("aten.max.default", "self", |cx, a| reduce::extremum_all(cx, a, ReduceKind::Max)),
    def("aten.min.default", "self", |cx, a| reduce::extremum_all(cx, a, ReduceKind::Min)),
    def("aten.max.dim", "self, dim, keepdim", |cx, a| reduce::extremum_dim(cx, a, ReduceKind::Max)),
    def("aten.min.dim", "self, dim, keepdim", |cx, a| reduce::extremum_dim(cx, a, ReduceKind::Min)),
    def("aten.cumsum.default", "self, dim, *, dtype", reduce::cumsum),
    def("aten.cumprod.default", "self, dim, *, dtype", reduce::cumprod),
    def("aten.logcumsumexp.default", "self, dim", reduce::logcumsumexp),
    def("aten.cummax.default", "self, dim", |cx, a| reduce::cumulative_extreme(cx, a, ReduceKind::Max)),
    def("aten.cummin.default", "self, dim", |cx, a| reduce::cumulative_extreme(cx, a, ReduceKind::Min)),
    def("aten.var.correction", "self, dim, *, correction, keepdim", |cx, a| reduce::var(cx, a, false)),
    def("aten.std.correction", "self, dim, *, correction, keepdim", |cx, a| reduce::var(cx, a, true)),
    def("aten.var.dim", "self, dim, unbiased, keepdim", |cx, a| reduce::var(cx, a, false)),
    def("aten.var_mean.correction", "self, dim, *, correction, keepdim", reduce::var_mean),
    // ---- shape and layout ----
    def("aten.permute.default", "self, dims", layout::permute),
    def("aten.t.default", "self", layout::t),
    def("aten.transpose.int", "self, dim0, dim1", layout::transpose),
    def("aten.view.default", "self, size", layout::view),
    def("aten.view.dtype", "self, dtype", layout::view_dtype),
    // ---- complex numbers and Fourier transforms ----
    def("aten.view_as_real.default", "self", complex::view_as_real),
    def("aten.view_as_complex.default", "self", complex::view_as_complex),
    def("aten.real.default", "self", complex::real),
    def("aten.imag.default", "self", complex::imag),
    def("aten.complex.default", "real, imag", complex::complex),
    def("aten.angle.default", "self", complex::angle),
    def("aten._fft_r2c.default", "self, dim, normalization, onesided", complex::fft_r2c),
    def("aten._fft_c2r.default", "self, dim, normalization, last_dim_size", complex::fft_c2r),
    def("aten._fft_c2c.default", "self, dim, normalization, forward", complex::fft_c2c),
    def("aten._unsafe_view.default", "self, size", layout::view),
    def("aten._reshape_alias.default", "self, size, stride", layout::view),
    def("aten.reshape.default", "self, shape", layout::reshape),
    def("aten.expand.default", "self, size, *, implicit", layout::expand),
    def("aten.unsqueeze.default", "self, dim", layout::unsqueeze),
    def("aten.squeeze.default", "self", layout::squeeze),
    def("aten.squeeze.dim", "self, dim", layout::squeeze),
    def("aten.squeeze.dims", "self, dim", layout::squeeze),
    def("aten.slice.Tensor", "self, dim, start, end, step", layout::slice),
    def("aten.select.int", "self, dim, index", layout::select),
    def("aten.cat.default", "tensors, dim", layout::cat),
    def("aten.split_with_sizes.default", "self, split_sizes, dim", layout::split_with_sizes),
    def("aten.split.Tensor", "self, split_size, dim", layout::split),
    def("aten.unbind.int", "self, dim", layout::unbind),
    def("aten.constant_pad_nd.default", "self, pad, value", layout::constant_pad_nd),
    def("aten.reflection_pad1d.default", "self, padding", |cx, a| layout::index_pad(cx, a, 1, true)),
    def("aten.reflection_pad2d.default", "self, padding", |cx, a| layout::index_pad(cx, a, 2, true)),
    def("aten.reflection_pad3d.default", "self, padding", |cx, a| layout::index_pad(cx, a, 3, true)),
    def("aten.replication_pad1d.default", "self, padding", |cx, a| layout::index_pad(cx, a, 1, false)),
    def("aten.replication_pad2d.default", "self, padding", |cx, a| layout::index_pad(cx, a, 2, false)),
    def("aten.replication_pad3d.default", "self, padding", |cx, a| layout::index_pad(cx, a, 3, false)),
    def("aten.flip.default", "self, dims", layout::flip),
    def("aten.index_select.default", "self, dim, index", layout::index_select),
    def("aten.histc.default", "self, bins, min, max", counting::histc),
    def("aten.repeat_interleave.Tensor", "repeats, *, output_size", counting::repeat_interleave),
    def("aten.nonzero.default", "self", data::nonzero),
    def("aten.nonzero_static.default", "self, *, size, fill_value", data::nonzero_static),
    def("aten.masked_select.default", "self, mask", data::masked_select),
    def("aten._unique.default", "self, sorted, return_inverse", data::unique),
    def("aten._unique2.default", "self, sorted, return_inverse, return_counts", data::unique2),
    def("aten.unique_dim.default", "self, dim, sorted, return_inverse, return_counts", data::unique_dim),
    def("aten.unique_consecutive.default", "self, return_inverse, return_counts, dim", data::unique_consecutive),
    def(
        "aten.unique_dim_consecutive.default",
        "self, dim, return_inverse, return_counts",
        data::unique_dim_consecutive,
    ),
    def("aten.bincount.default", "self, weights, minlength", data::bincount),
    def("aten._local_scalar_dense.default", "self", data::local_scalar_dense),
    def("aten.item.default", "self", data::local_scalar_dense),
    def("aten.repeat.default", "self, repeats", layout::repeat),
    def("aten.triu.default", "self, diagonal", |cx, a| layout::triangle(cx, a, true)),
    def("aten.tril.default", "self, diagonal", |cx, a| layout::triangle(cx, a, false)),
    def("aten.sym_size.int", "self, dim", layout::sym_size),
    def("aten.sym_numel.default", "self", layout::sym_numel),
    def("aten.sym_stride.int", "self, dim", layout::sym_stride),
    def("aten.sym_storage_offset.default", "self", layout::sym_storage_offset),
    def("aten.as_strided.default", "self, size, stride, storage_offset", layout::as_strided),
    def("aten.as_strided_scatter.default", "self, src, size, stride, storage_offset", strided::as_strided_scatter),
    def("aten.diagonal.default", "self, offset, dim1, dim2", index::diagonal),
    // ---- indexing, gather and scatter, sorting ----
    def("aten.gather.default", "self, dim, index, *, sparse_grad", index::gather),
    def("aten.scatter.src", "self, dim, index, src", |cx, a| index::scatter(cx, a, ScatterKind::Replace)),
    def("aten.scatter.value", "self, dim, index, value", |cx, a| index::scatter(cx, a, ScatterKind::Replace)),
    def("aten.scatter_add.default", "self, dim, index, src", |cx, a| {
        index::scatter(cx, a, ScatterKind::Combine(ReduceKind::Sum))
    }),
    def("aten.scatter_reduce.two", "self, dim, index, src, reduce, *, include_self", index::scatter_reduce),
    def("aten.index.Tensor", "self, indices", index::index),
    def("aten.index_put.default", "self, indices, values, accumulate", index::index_put),
    def("aten.slice_scatter.default", "self, src, dim, start, end, step", index::slice_scatter),
    def("aten.select_scatter.default", "self, src, dim, index", index::select_scatter),
    def("aten.col2im.default", "self, output_size, kernel_size, dilation, padding, stride", index::col2im),
    def("aten.masked_scatter.default", "self, mask, source", index::masked_scatter),
    def("aten.masked_scatter_backward.default", "grad_output, mask, sizes", index::masked_scatter_backward),
    def("aten.sort.default", "self, dim, descending", index::sort),
    def("aten.sort.stable", "self, *, stable, dim, descending", index::sort),
    def(
        "aten.grid_sampler_2d.default",
        "input, grid, interpolation_mode, padding_mode, align_corners",
        index::grid_sampler_2d,
    ),
    def("aten.unfold.default", "self, dimension, size, step", layout::unfold),
    def("aten.topk.default", "self, k, dim, largest, sorted", index::topk),
    def("aten.kthvalue.default", "self, k, dim, keepdim", index::kthvalue),
    // ---- quantization (PT2E's `quantized_decomposed` ops, fake quantization, int8 products) ----
    def(
        "quantized_decomposed.quantize_per_tensor.default",
        "input, scale, zero_point, quant_min, quant_max, dtype",
        quant::quantize_per_tensor,
    ),
    def(
        "quantized_decomposed.quantize_per_tensor.tensor",
        "input, scale, zero_point, quant_min, quant_max, dtype",
        quant::quantize_per_tensor,
    ),
    def(
        "quantized_decomposed.quantize_per_tensor.tensor2",
        "input, scale, zero_point, quant_min, quant_max, dtype",
        quant::quantize_per_tensor,
    ),
    def(
        "quantized_decomposed.dequantize_per_tensor.default",
        "input, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype",
        quant::dequantize_per_tensor,
    ),
    def(
        "quantized_decomposed.dequantize_per_tensor.tensor",
        "input, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype",
        quant::dequantize_per_tensor,
    ),
    def(
        "quantized_decomposed.dequantize_per_tensor.tensor2",
        "input, scale, zero_point, quant_min, quant_max, dtype, *, out_dtype",
        quant::dequantize_per_tensor,
    ),
    def(
        "quantized_decomposed.quantize_per_channel.default",
        "input, scales, zero_points, axis, quant_min, quant_max, dtype",
        quant::quantize_per_channel,
    ),
    def(
        "quantized_decomposed.dequantize_per_channel.default",
        "input, scales, zero_points, axis, quant_min, quant_max, dtype, *, out_dtype",
        quant::dequantize_per_channel,
    ),
    def("quantized_decomposed.choose_qparams.tensor", "input, quant_min, quant_max, eps, dtype", |cx, a| {
        quant::choose_qparams(cx, a, false)
    }),
    def("quantized_decomposed.choose_qparams_symmetric.tensor", "input, quant_min, quant_max, eps, dtype", |cx, a| {
        quant::choose_qparams(cx, a, true)
    }),
    def(
        "aten.fake_quantize_per_tensor_affine_cachemask.default",
        "self, scale, zero_point, quant_min, quant_max",
        quant::fake_quantize_per_tensor_cachemask,
    ),
    def(
        "aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default",
        "self, scale, zero_point, fake_quant_enabled, quant_min, quant_max",
        quant::fake_quantize_per_tensor_cachemask_tensor_qparams,
    ),
    def(
        "aten.fake_quantize_per_channel_affine_cachemask.default",
        "self, scale, zero_point, axis, quant_min, quant_max",
        quant::fake_quantize_per_channel_cachemask,
    ),
    def("aten._int_mm.default", "self, mat2", quant::int_mm),
    // ---- optimizers: pointwise steps, foreach lists (each element through its own overload), fused Adam(W) ----
    def("aten.addcmul.default", "self, tensor1, tensor2, *, value", |cx, a| optim::addc(cx, a, BinaryOp::Multiply)),
    def("aten.addcdiv.default", "self, tensor1, tensor2, *, value", |cx, a| optim::addc(cx, a, BinaryOp::Divide)),
    def("aten.lerp.Scalar", "self, end, weight", optim::lerp),
    def("aten.lerp.Tensor", "self, end, weight", optim::lerp),
    def("aten.zero.default", "self", optim::zero),
    def("aten.linalg_vector_norm.default", "self, ord, dim, keepdim, *, dtype", optim::vector_norm),
    def(
        "aten._fused_adam.default",
        "self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf",
        |cx, a| optim::fused_adam(cx, a, false),
    ),
    def(
        "aten._fused_adam.tensor_lr",
        "self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf",
        |cx, a| optim::fused_adam(cx, a, false),
    ),
    def(
        "aten._fused_adamw.default",
        "self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf",
        |cx, a| optim::fused_adam(cx, a, true),
    ),
    def(
        "aten._fused_adamw.tensor_lr",
        "self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf",
        |cx, a| optim::fused_adam(cx, a, true),
    ),
    def("aten._amp_foreach_non_finite_check_and_unscale.default", "self, found_inf, inv_scale", optim::amp_unscale),
    def(
        "aten._amp_update_scale.default",
        "self, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor, growth_interval",
        optim::amp_update_scale,
    ),
    def("aten._foreach_add.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.add.Tensor", &[("self", Each("self")), ("other", Whole("scalar"))])
    }),
    def("aten._foreach_add.List", "self, other, *, alpha", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.add.Tensor",
            &[("self", Each("self")), ("other", Each("other")), ("alpha", Whole("alpha"))],
        )
    }),
    def("aten._foreach_add.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.add.Tensor", &[("self", Each("self")), ("other", Each("scalars"))])
    }),
    def("aten._foreach_sub.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.sub.Tensor", &[("self", Each("self")), ("other", Whole("scalar"))])
    }),
    def("aten._foreach_sub.List", "self, other, *, alpha", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.sub.Tensor",
            &[("self", Each("self")), ("other", Each("other")), ("alpha", Whole("alpha"))],
        )
    }),
    def("aten._foreach_sub.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.sub.Tensor", &[("self", Each("self")), ("other", Each("scalars"))])
    }),
    def("aten._foreach_add.Tensor", "self, other, *, alpha", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.add.Tensor",
            &[("self", Each("self")), ("other", Whole("other")), ("alpha", Whole("alpha"))],
        )
    }),
    def("aten._foreach_mul.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.mul.Tensor", &[("self", Each("self")), ("other", Whole("scalar"))])
    }),
    def("aten._foreach_mul.List", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.mul.Tensor", &[("self", Each("self")), ("other", Each("other"))])
    }),
    def("aten._foreach_mul.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.mul.Tensor", &[("self", Each("self")), ("other", Each("scalars"))])
    }),
    def("aten._foreach_mul.Tensor", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.mul.Tensor", &[("self", Each("self")), ("other", Whole("other"))])
    }),
    def("aten._foreach_div.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.div.Tensor", &[("self", Each("self")), ("other", Whole("scalar"))])
    }),
    def("aten._foreach_div.List", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.div.Tensor", &[("self", Each("self")), ("other", Each("other"))])
    }),
    def("aten._foreach_div.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.div.Tensor", &[("self", Each("self")), ("other", Each("scalars"))])
    }),
    def("aten._foreach_div.Tensor", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.div.Tensor", &[("self", Each("self")), ("other", Whole("other"))])
    }),
    def("aten._foreach_clamp_min.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_min.default", &[("self", Each("self")), ("min", Whole("scalar"))])
    }),
    def("aten._foreach_clamp_min.List", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_min.Tensor", &[("self", Each("self")), ("min", Each("other"))])
    }),
    def("aten._foreach_clamp_min.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_min.default", &[("self", Each("self")), ("min", Each("scalars"))])
    }),
    def("aten._foreach_clamp_max.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_max.default", &[("self", Each("self")), ("max", Whole("scalar"))])
    }),
    def("aten._foreach_clamp_max.List", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_max.Tensor", &[("self", Each("self")), ("max", Each("other"))])
    }),
    def("aten._foreach_clamp_max.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_max.default", &[("self", Each("self")), ("max", Each("scalars"))])
    }),
    def("aten._foreach_maximum.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_min.default", &[("self", Each("self")), ("min", Whole("scalar"))])
    }),
    def("aten._foreach_maximum.List", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.maximum.default", &[("self", Each("self")), ("other", Each("other"))])
    }),
    def("aten._foreach_maximum.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_min.default", &[("self", Each("self")), ("min", Each("scalars"))])
    }),
    def("aten._foreach_minimum.Scalar", "self, scalar", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_max.default", &[("self", Each("self")), ("max", Whole("scalar"))])
    }),
    def("aten._foreach_minimum.List", "self, other", |cx, a| {
        optim::foreach(cx, a, "aten.minimum.default", &[("self", Each("self")), ("other", Each("other"))])
    }),
    def("aten._foreach_minimum.ScalarList", "self, scalars", |cx, a| {
        optim::foreach(cx, a, "aten.clamp_max.default", &[("self", Each("self")), ("max", Each("scalars"))])
    }),
    def("aten._foreach_addcmul.Scalar", "self, tensor1, tensor2, value", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.addcmul.default",
            &[
                ("self", Each("self")),
                ("tensor1", Each("tensor1")),
                ("tensor2", Each("tensor2")),
                ("value", Whole("value")),
            ],
        )
    }),
    def("aten._foreach_addcmul.ScalarList", "self, tensor1, tensor2, scalars", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.addcmul.default",
            &[
                ("self", Each("self")),
                ("tensor1", Each("tensor1")),
                ("tensor2", Each("tensor2")),
                ("value", Each("scalars")),
            ],
        )
    }),
    def("aten._foreach_addcdiv.Scalar", "self, tensor1, tensor2, value", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.addcdiv.default",
            &[
                ("self", Each("self")),
                ("tensor1", Each("tensor1")),
                ("tensor2", Each("tensor2")),
                ("value", Whole("value")),
            ],
        )
    }),
    def("aten._foreach_addcdiv.ScalarList", "self, tensor1, tensor2, scalars", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.addcdiv.default",
            &[
                ("self", Each("self")),
                ("tensor1", Each("tensor1")),
                ("tensor2", Each("tensor2")),
                ("value", Each("scalars")),
            ],
        )
    }),
    def("aten._foreach_lerp.List", "self, tensors1, weights", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.lerp.Tensor",
            &[("self", Each("self")), ("end", Each("tensors1")), ("weight", Each("weights"))],
        )
    }),
    def("aten._foreach_lerp.Scalar", "self, tensors1, weight", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.lerp.Scalar",
            &[("self", Each("self")), ("end", Each("tensors1")), ("weight", Whole("weight"))],
        )
    }),
    def("aten._foreach_lerp.ScalarList", "self, tensors1, weight", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.lerp.Scalar",
            &[("self", Each("self")), ("end", Each("tensors1")), ("weight", Each("weight"))],
        )
    }),
    def("aten._foreach_pow.List", "self, exponent", |cx, a| {
        optim::foreach(cx, a, "aten.pow.Tensor_Tensor", &[("self", Each("self")), ("exponent", Each("exponent"))])
    }),
    def("aten._foreach_pow.Scalar", "self, exponent", |cx, a| {
        optim::foreach(cx, a, "aten.pow.Tensor_Scalar", &[("self", Each("self")), ("exponent", Whole("exponent"))])
    }),
    def("aten._foreach_pow.ScalarList", "self, exponent", |cx, a| {
        optim::foreach(cx, a, "aten.pow.Tensor_Scalar", &[("self", Each("self")), ("exponent", Each("exponent"))])
    }),
    def("aten._foreach_pow.ScalarAndTensor", "self, exponent", |cx, a| {
        optim::foreach(cx, a, "aten.pow.Scalar", &[("self", Whole("self")), ("exponent", Each("exponent"))])
    }),
    def("aten._foreach_clone.default", "self, *, memory_format", |cx, a| {
        optim::foreach(cx, a, "aten.clone.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_mm.default", "self, mat2", |cx, a| {
        optim::foreach(cx, a, "aten.mm.default", &[("self", Each("self")), ("mat2", Each("mat2"))])
    }),
    def("aten._foreach_norm.Scalar", "self, ord, dtype", |cx, a| {
        optim::foreach(
            cx,
            a,
            "aten.linalg_vector_norm.default",
            &[("self", Each("self")), ("ord", Whole("ord")), ("dtype", Whole("dtype"))],
        )
    }),
    def("aten._foreach_copy.default", "self, src, non_blocking", |cx, a| {
        optim::foreach(cx, a, "aten.copy.default", &[("self", Each("self")), ("src", Each("src"))])
    }),
    def("aten._foreach_max.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.max.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_abs.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.abs.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_acos.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.acos.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_asin.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.asin.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_atan.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.atan.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_ceil.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.ceil.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_cos.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.cos.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_cosh.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.cosh.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_erf.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.erf.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_exp.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.exp.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_expm1.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.expm1.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_floor.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.floor.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_log.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.log.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_log10.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.log10.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_log1p.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.log1p.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_log2.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.log2.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_neg.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.neg.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_reciprocal.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.reciprocal.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_round.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.round.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_rsqrt.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.rsqrt.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_sigmoid.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.sigmoid.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_sign.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.sign.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_sin.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.sin.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_sinh.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.sinh.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_sqrt.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.sqrt.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_tan.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.tan.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_tanh.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.tanh.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_trunc.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.trunc.default", &[("self", Each("self"))])
    }),
    def("aten._foreach_zero.default", "self", |cx, a| {
        optim::foreach(cx, a, "aten.zero.default", &[("self", Each("self"))])
    }),
    // ---- copies, casts, no-ops ----
    def("aten.clone.default", "self, *, memory_format", layout::identity),
    def("aten.alias.default", "self", layout::identity),
    // ---- prims ----
    def("prims.convert_element_type.default", "a, dtype", prims::convert_element_type),
    def("prims.collapse.default", "a, start, end", prims::collapse),
    def("prims.iota.default", "length, *, start, step, dtype, device, requires_grad", prims::iota),
    def("prims.sum.default", "inp, dims, *, output_dtype", |cx, a| prims::reduction(cx, a, ReduceKind::Sum)),
    def("prims.prod.default", "inp, dims, *, output_dtype", |cx, a| prims::reduction(cx, a, ReduceKind::Product)),
    def("prims.amax.default", "inp, dims, *, output_dtype", |cx, a| prims::reduction(cx, a, ReduceKind::Max)),
    def("prims.amin.default", "inp, dims, *, output_dtype", |cx, a| prims::reduction(cx, a, ReduceKind::Min)),
    def("prims.var.default", "inp, dims, correction, *, output_dtype", prims::var),
    def("prims.reshape.default", "a, shape", prims::reshape),
    def("prims.where.default", "pred, a, b", prims::where_),
    def("prims.fma.default", "a, b, c", prims::fma),
    def("aten.lift_fresh_copy.default", "self", layout::identity),
    def("aten.detach.default", "self", layout::identity),
    def("aten.copy.default", "self, src, non_blocking", layout::copy),
    def("aten.fill.Scalar", "self, value", layout::fill),
    def("aten.native_dropout.default", "input, p, train", layout::native_dropout),
    def("aten._to_copy.default", concat!("self, *, ", factory!(), ", non_blocking, memory_format"), layout::to_copy),
    def("aten.to.dtype", "self, dtype, non_blocking, copy, memory_format", layout::to_copy),
    def(
        "aten._assert_tensor_metadata.default",
        "a, size, stride, dtype, *, device, layout",
        layout::assert_tensor_metadata,
    ),
    def("aten._assert_scalar.default", "self, assert_msg", layout::assert_scalar),
    def("aten._assert_async.msg", "self, assert_msg", layout::assert_async),
    def("aten._assert_async.default", "self", layout::assert_async),
    def("aten.sym_constrain_range.default", "size, *, min, max", layout::nothing),
    def("aten.sym_constrain_range_for_size.default", "size, *, min, max", layout::nothing),
    // ---- creation ----
    def("aten.full.default", concat!("size, fill_value, *, ", factory!()), creation::full),
    def("aten.tril_indices.default", concat!("row, col, offset, *, ", factory!()), |cx, a| {
        creation::triangle_indices(cx, a, true)
    }),
    def("aten.triu_indices.default", concat!("row, col, offset, *, ", factory!()), |cx, a| {
        creation::triangle_indices(cx, a, false)
    }),
    def("aten.full_like.default", concat!("self, fill_value, *, ", factory!(), ", memory_format"), creation::full_like),
    def("aten.zeros.default", concat!("size, *, ", factory!()), |cx, a| creation::filled(cx, a, 0)),
    def("aten.ones.default", concat!("size, *, ", factory!()), |cx, a| creation::filled(cx, a, 1)),
    def("aten.empty.memory_format", concat!("size, *, ", factory!(), ", memory_format"), |cx, a| {
        creation::filled(cx, a, 0)
    }),
    def("aten.empty_permuted.default", concat!("size, physical_layout, *, ", factory!()), |cx, a| {
        creation::filled(cx, a, 0)
    }),
    def("aten.empty_strided.default", concat!("size, stride, *, ", factory!()), |cx, a| creation::filled(cx, a, 0)),
    def("aten.zeros_like.default", concat!("self, *, ", factory!(), ", memory_format"), |cx, a| {
        creation::filled_like(cx, a, 0)
    }),
    def("aten.ones_like.default", concat!("self, *, ", factory!(), ", memory_format"), |cx, a| {
        creation::filled_like(cx, a, 1)
    }),
    def("aten.empty_like.default", concat!("self, *, ", factory!(), ", memory_format"), |cx, a| {
        creation::filled_like(cx, a, 0)
    }),
    def("aten.new_zeros.default", concat!("self, size, *, ", factory!()), |cx, a| creation::new_filled(cx, a, 0)),
    def("aten.new_ones.default", concat!("self, size, *, ", factory!()), |cx, a| creation::new_filled(cx, a, 1)),
    def("aten.new_empty.default", concat!("self, size, *, ", factory!()), |cx, a| creation::new_filled(cx, a, 0)),
    // Values are immutable in the IR, so strides only describe a layout: the result is the same
    // zero-filled tensor of `size` as `new_empty`.
    def("aten.new_empty_strided.default", concat!("self, size, stride, *, ", factory!()), |cx, a| {
        creation::new_filled(cx, a, 0)
    }),
    def("aten.new_full.default", concat!("self, size, fill_value, *, ", factory!()), creation::new_full),
    def("aten.scalar_tensor.default", concat!("s, *, ", factory!()), creation::scalar_tensor),
    def("aten.arange.default", concat!("end, *, ", factory!()), creation::arange),
    def("aten.arange.start", concat!("start, end, *, ", factory!()), creation::arange),
    def("aten.arange.start_step", concat!("start, end, step, *, ", factory!()), creation::arange),
    // ---- random numbers (seeded by `ImportOptions::seed`; `generator` arguments are ignored) ----
    def("aten.rand.default", concat!("size, *, ", factory!()), random::rand),
    def("aten.rand_like.default", concat!("self, *, ", factory!(), ", memory_format"), random::rand),
    def("aten.randn.default", concat!("size, *, ", factory!()), random::randn),
    def("aten.randn_like.default", concat!("self, *, ", factory!(), ", memory_format"), random::randn),
    def("aten.randint.default", concat!("high, size, *, ", factory!()), random::randint),
    def("aten.randint.low", concat!("low, high, size, *, ", factory!()), random::randint),
    def("aten.randint_like.default", concat!("self, high, *, ", factory!(), ", memory_format"), random::randint),
    def("aten.randint_like.low_dtype", concat!("self, low, high, *, ", factory!(), ", memory_format"), random::randint),
    def("aten.randperm.default", concat!("n, *, ", factory!()), random::randperm),
    def("aten.uniform.default", "self, from, to, *, generator", random::uniform),
    def("aten.normal_functional.default", "self, mean, std, *, generator", random::normal_functional),
    def("aten.normal.Tensor_float", "mean, std, *, generator", random::normal),
    def("aten.normal.float_Tensor", "mean, std, *, generator", random::normal),
    def("aten.normal.Tensor_Tensor", "mean, std, *, generator", random::normal),
    def("aten.normal.float_float", concat!("mean, std, size, *, generator, ", factory!()), random::normal),
    def("aten.bernoulli.p", "self, p, *, generator", random::bernoulli),
    def(
        "aten.rrelu_with_noise_functional.default",
        "self, noise, lower, upper, training, generator",
        random::rrelu_with_noise,
    ),
    def("aten.exponential.default", "self, lambd, *, generator", random::exponential),
    def("aten.multinomial.default", "self, num_samples, replacement, *, generator", random::multinomial),
    // ---- copies of views (values are immutable, so each is its view, laid out contiguously) ----
    def("aten.view_copy.default", "self, size", layout::view),
    def("aten.view_copy.dtype", "self, dtype", layout::view_dtype),
    def("aten.permute_copy.default", "self, dims", layout::permute),
    def("aten.as_strided_copy.default", "self, size, stride, storage_offset", layout::as_strided),
    def("aten.narrow_copy.default", "self, dim, start, length", copies::narrow_copy),
    def("aten.unbind_copy.int", "self, dim", layout::unbind),
    def("aten.expand_copy.default", "self, size, *, implicit", layout::expand),
    def("aten.squeeze_copy.default", "self", layout::squeeze),
    def("aten.squeeze_copy.dim", "self, dim", layout::squeeze),
    def("aten.squeeze_copy.dims", "self, dim", layout::squeeze),
    def("aten.unsqueeze_copy.default", "self, dim", layout::unsqueeze),
    def("aten.transpose_copy.int", "self, dim0, dim1", layout::transpose),
    def("aten.select_copy.int", "self, dim, index", layout::select),
    def("aten.slice_copy.Tensor", "self, dim, start, end, step", layout::slice),
    def("aten.diagonal_copy.default", "self, offset, dim1, dim2", index::diagonal),
    def("aten.t_copy.default", "self", layout::t),
    def("aten.alias_copy.default", "self", layout::identity),
    def("aten.detach_copy.default", "self", layout::identity),
    def("aten.split_copy.Tensor", "self, split_size, dim", layout::split),
    def("aten.split_with_sizes_copy.default", "self, split_sizes, dim", layout::split_with_sizes),
    def("aten.unfold_copy.default", "self, dimension, size, step", layout::unfold),
    // ---- scatters through views ----
    def("aten.diagonal_scatter.default", "self, src, offset, dim1, dim2", copies::diagonal_scatter),
    def("aten.index_reduce.default", "self, dim, index, source, reduce, *, include_self", copies::index_reduce),
    def("aten.put.default", "self, index, source, accumulate", copies::put),
    def("aten.scatter.reduce", "self, dim, index, src, *, reduce", copies::scatter_reduce_legacy),
    def("aten.scatter.value_reduce", "self, dim, index, value, *, reduce", copies::scatter_reduce_legacy),
    def("aten.embedding_renorm.default", "self, indices, max_norm, norm_type", copies::embedding_renorm),
    // ---- order statistics, binning and segments ----
    def("aten.median.default", "self", |cx, a| order_stats::median_all(cx, a, false)),
    def("aten.median.dim", "self, dim, keepdim", |cx, a| order_stats::median_dim(cx, a, false)),
    def("aten.nanmedian.default", "self", |cx, a| order_stats::median_all(cx, a, true)),
    def("aten.nanmedian.dim", "self, dim, keepdim", |cx, a| order_stats::median_dim(cx, a, true)),
    def("aten.mode.default", "self, dim, keepdim", order_stats::mode),
    def("aten.searchsorted.Tensor", "sorted_sequence, self, *, out_int32, right, side, sorter", bins::searchsorted),
    def("aten.searchsorted.Scalar", "sorted_sequence, self, *, out_int32, right, side, sorter", bins::searchsorted),
    def("aten.bucketize.Tensor", "self, boundaries, *, out_int32, right", bins::bucketize),
    def("aten.bucketize.Scalar", "self, boundaries, *, out_int32, right", bins::bucketize),
    def("aten.histogram.bin_ct", "self, bins, *, range, weight, density", bins::histogram),
    def("aten.histogram.bins_tensor", "self, bins, *, weight, density", bins::histogram),
    def("aten._histogramdd_bin_edges.default", "self, bins, *, range, weight, density", bins::histogramdd_bin_edges),
    def(
        "aten._histogramdd_from_bin_cts.default",
        "self, bins, *, range, weight, density",
        bins::histogramdd_from_bin_cts,
    ),
    def(
        "aten._histogramdd_from_bin_tensors.default",
        "self, bins, *, weight, density",
        bins::histogramdd_from_bin_tensors,
    ),
    def(
        "aten.segment_reduce.default",
        "data, reduce, *, lengths, indices, offsets, axis, unsafe, initial",
        segment::segment_reduce,
    ),
    def("aten.dist.default", "self, other, p", products::dist),
    def("aten.addbmm.default", "self, batch1, batch2, *, beta, alpha", products::addbmm),
    def("aten.addmv.default", "self, mat, vec, *, beta, alpha", products::addmv),
    // ---- pooling over per-position windows ----
    def("aten.adaptive_max_pool3d.default", "self, output_size", pool_windows::adaptive_max_pool3d),
    def("aten.fractional_max_pool2d.default", "self, kernel_size, output_size, random_samples", |cx, a| {
        pool_windows::fractional_max_pool(cx, a, 2)
    }),
    def("aten.fractional_max_pool3d.default", "self, kernel_size, output_size, random_samples", |cx, a| {
        pool_windows::fractional_max_pool(cx, a, 3)
    }),
    def(
        "aten.grid_sampler_3d.default",
        "input, grid, interpolation_mode, padding_mode, align_corners",
        grid3d::grid_sampler_3d,
    ),
    // ---- special functions (CHLO) ----
    def("aten.lgamma.default", "self", |cx, a| special::chlo_unary(cx, a, UnaryOp::Lgamma)),
    def("aten.digamma.default", "self", special::digamma),
    def("aten.polygamma.default", "n, self", special::polygamma),
    def("aten.erfinv.default", "self", |cx, a| special::chlo_unary(cx, a, UnaryOp::ErfInv)),
    def("aten.erfc.default", "self", |cx, a| special::chlo_unary(cx, a, UnaryOp::Erfc)),
    def("aten.special_i1e.default", "self", |cx, a| special::chlo_unary(cx, a, UnaryOp::BesselI1e)),
    def("aten.special_i1.default", "self", special::i1),
    def("aten.special_zeta.default", "self, other", special::zeta),
    def("aten.special_zeta.other_scalar", "self, other", special::zeta),
    def("aten.special_zeta.self_scalar", "self, other", special::zeta),
    def("aten.nextafter.default", "self, other", special::nextafter),
    def("aten.frexp.Tensor", "self", special::frexp),
    // ---- special functions (Cephes) ----
    def("aten.i0.default", "self", |cx, a| cephes::bessel(cx, a, cephes::Bessel::I0)),
    def("aten.special_i0e.default", "self", |cx, a| cephes::bessel(cx, a, cephes::Bessel::I0e)),
    def("aten.special_modified_bessel_i0.default", "self", |cx, a| cephes::bessel(cx, a, cephes::Bessel::I0)),
    def("aten.special_modified_bessel_i1.default", "self", |cx, a| cephes::bessel(cx, a, cephes::Bessel::I1)),
    def("aten.special_modified_bessel_k0.default", "self", |cx, a| cephes::bessel(cx, a, cephes::Bessel::K0)),
    def("aten.special_modified_bessel_k1.default", "self", |cx, a| cephes::bessel(cx, a, cephes::Bessel::K1)),
    def("aten.special_scaled_modified_bessel_k0.default", "x", |cx, a| cephes::bessel(cx, a, cephes::Bessel::K0e)),
    def("aten.special_scaled_modified_bessel_k1.default", "x", |cx, a| cephes::bessel(cx, a, cephes::Bessel::K1e)),
    def("aten.special_ndtri.default", "self", cephes::ndtri),
    def("aten.special_bessel_j0.default", "self", |cx, a| cephes::bessel_jy(cx, a, cephes::Kind::J0)),
    def("aten.special_bessel_j1.default", "self", |cx, a| cephes::bessel_jy(cx, a, cephes::Kind::J1)),
    def("aten.special_bessel_y0.default", "self", |cx, a| cephes::bessel_jy(cx, a, cephes::Kind::Y0)),
    def("aten.special_bessel_y1.default", "self", |cx, a| cephes::bessel_jy(cx, a, cephes::Kind::Y1)),
    def("aten.special_spherical_bessel_j0.default", "x", cephes::spherical_j0),
    def("aten.special_airy_ai.default", "x", cephes::airy_ai),
    def("aten.special_erfcx.default", "self", cephes::erfcx),
    def("aten.igamma.default", "self, other", |cx, a| igamma::igamma(cx, a, false)),
    def("aten.igammac.default", "self, other", |cx, a| igamma::igamma(cx, a, true)),
    def("aten.gcd.default", "self, other", gcd::gcd),
    def("aten.lcm.default", "self, other", gcd::lcm),
    // ---- orthogonal polynomials (degrees given as numbers) ----
    def("aten.special_chebyshev_polynomial_t.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevT)
    }),
    def("aten.special_chebyshev_polynomial_u.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevU)
    }),
    def("aten.special_chebyshev_polynomial_v.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevV)
    }),
    def("aten.special_chebyshev_polynomial_w.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevW)
    }),
    def("aten.special_hermite_polynomial_h.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::HermiteH)
    }),
    def("aten.special_hermite_polynomial_he.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::HermiteHe)
    }),
    def("aten.special_laguerre_polynomial_l.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::LaguerreL)
    }),
    def("aten.special_legendre_polynomial_p.n_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::LegendreP)
    }),
    // ---- orthogonal polynomials (degrees given as tensors) ----
    def("aten.special_chebyshev_polynomial_t.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevT)
    }),
    def("aten.special_chebyshev_polynomial_t.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevT)
    }),
    def("aten.special_chebyshev_polynomial_u.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevU)
    }),
    def("aten.special_chebyshev_polynomial_u.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevU)
    }),
    def("aten.special_chebyshev_polynomial_v.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevV)
    }),
    def("aten.special_chebyshev_polynomial_v.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevV)
    }),
    def("aten.special_chebyshev_polynomial_w.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevW)
    }),
    def("aten.special_chebyshev_polynomial_w.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::ChebyshevW)
    }),
    def("aten.special_hermite_polynomial_h.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::HermiteH)
    }),
    def("aten.special_hermite_polynomial_h.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::HermiteH)
    }),
    def("aten.special_hermite_polynomial_he.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::HermiteHe)
    }),
    def("aten.special_hermite_polynomial_he.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::HermiteHe)
    }),
    def("aten.special_laguerre_polynomial_l.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::LaguerreL)
    }),
    def("aten.special_laguerre_polynomial_l.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::LaguerreL)
    }),
    def("aten.special_legendre_polynomial_p.default", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::LegendreP)
    }),
    def("aten.special_legendre_polynomial_p.x_scalar", "x, n", |cx, a| {
        polynomials::polynomial(cx, a, polynomials::Family::LegendreP)
    }),
    // ---- factorizations and solves (unrolled, static sizes) ----
    def("aten._linalg_check_errors.default", "info, api_name, *, is_matrix", linalg_decomp::check_errors),
    def("aten.linalg_lu_factor_ex.default", "A, *, pivot, check_errors", linalg_decomp::lu_factor_ex),
    def("aten.linalg_lu.default", "A, *, pivot", linalg_decomp::linalg_lu),
    def("aten.lu_unpack.default", "LU_data, LU_pivots, unpack_data, unpack_pivots", linalg_decomp::lu_unpack),
    def("aten.linalg_lu_solve.default", "LU, pivots, B, *, left, adjoint", linalg_decomp::lu_solve),
    def("aten.cholesky_solve.default", "self, input2, upper", linalg_decomp::cholesky_solve),
    def("aten.cholesky_inverse.default", "self, upper", linalg_decomp::cholesky_inverse),
    def("aten.linalg_ldl_factor_ex.default", "self, *, hermitian, check_errors", ldl::factor_ex),
    def("aten.linalg_ldl_solve.default", "LD, pivots, B, *, hermitian", ldl::solve),
    def("aten.geqrf.default", "self", householder::geqrf),
    def("aten.linalg_qr.default", "A, mode", householder::linalg_qr),
    def("aten.linalg_householder_product.default", "input, tau", householder::householder_product),
    def("aten.ormqr.default", "self, input2, input3, left, transpose", householder::ormqr),
    def("aten._linalg_eigh.default", "A, UPLO, compute_v", jacobi::eigh),
    def("aten._linalg_svd.default", "A, full_matrices, compute_uv, *, driver", jacobi::svd),
    def("aten.linalg_pinv.atol_rtol_tensor", "self, *, atol, rtol, hermitian", jacobi::pinv),
    def("aten.linalg_matrix_exp.default", "self", matrix_exp::matrix_exp),
    // ---- PyTorch's chunked linear cross entropy (custom ops of `torch.nn.functional`) ----
    def(
        "torch_nn._linear_cross_entropy_batch_chunked.default",
        "input, linear_weight, target, linear_bias, weight, reduction, ignore_index, label_smoothing, \
         batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph, compute_input_grad, \
         compute_linear_weight_grad, compute_linear_bias_grad",
        linear_cross_entropy::batch_chunked,
    ),
    def(
        "torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default",
        "input, linear_weight, target, linear_bias, weight, ignore_index, batch_chunk_size, acc_policy, acc_dtype",
        linear_cross_entropy::batch_chunked_no_reduction,
    ),
    // ---- complex conjugation and polar coordinates ----
    def("aten._conj.default", "self", polar::conj),
    def("aten._conj_physical.default", "self", polar::conj),
    def("aten.conj_physical.default", "self", polar::conj),
    def("aten.polar.default", "abs, angle", polar::polar),
    // ---- checks, training forms and random overloads the sweep met ----
    def("aten._is_all_true.default", "self", |cx, a| reduce::any_all(cx, a, ReduceKind::And)),
    def("aten._is_any_true.default", "self", |cx, a| reduce::any_all(cx, a, ReduceKind::Or)),
    def(
        "aten._batch_norm_with_update_functional.default",
        "input, weight, bias, running_mean, running_var, momentum, eps",
        norm_update::batch_norm_with_update,
    ),
    def("aten.randn.generator", concat!("size, *, generator, ", factory!()), random::randn),
    def("aten.rand.generator", concat!("size, *, generator, ", factory!()), random::rand),
    // ---- antialiased resampling ----
    def("aten._upsample_bilinear2d_aa.default", "self, output_size, align_corners, scales_h, scales_w", |cx, a| {
        resample::upsample_aa(cx, a, resample::Filter::Linear)
    }),
    def("aten._upsample_bilinear2d_aa.vec", "input, output_size, align_corners, scale_factors", |cx, a| {
        resample::upsample_aa(cx, a, resample::Filter::Linear)
    }),
    def("aten._upsample_bicubic2d_aa.default", "self, output_size, align_corners, scales_h, scales_w", |cx, a| {
        resample::upsample_aa(cx, a, resample::Filter::Cubic)
    }),
    def("aten._upsample_bicubic2d_aa.vec", "input, output_size, align_corners, scale_factors", |cx, a| {
        resample::upsample_aa(cx, a, resample::Filter::Cubic)
    }),
    def(
        "aten._upsample_bilinear2d_aa_backward.default",
        "grad_output, output_size, input_size, align_corners, scales_h, scales_w",
        |cx, a| resample::upsample_aa_backward(cx, a, resample::Filter::Linear),
    ),
    def(
        "aten._upsample_bicubic2d_aa_backward.default",
        "grad_output, output_size, input_size, align_corners, scales_h, scales_w",
        |cx, a| resample::upsample_aa_backward(cx, a, resample::Filter::Cubic),
    ),
];

/// The generator key of the `draw`-th random draw from `seed` (see `random.rs`).
pub fn random_key(seed: u64, draw: u64) -> u64 {
    random::splitmix64(seed, draw)
}

/// The entry for `name`.
pub fn lookup(name: &str) -> Option<&'static OpDef> {
    static INDEX: OnceLock<HashMap<&'static str, &'static OpDef>> = OnceLock::new();
    INDEX.get_or_init(|| TABLE.iter().map(|def| (def.name, def)).collect()).get(name).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for def in TABLE {
            assert!(seen.insert(def.name), "{} is listed twice", def.name);
            assert_eq!(def.name.split('.').count(), 3, "{} is not `namespace.op.overload`", def.name);
            assert!(
                ["aten.", "prims.", "quantized_decomposed.", "transformers.", "torch_nn."]
                    .iter()
                    .any(|namespace| def.name.starts_with(namespace)),
                "{}",
                def.name
            );
        }
    }
}
