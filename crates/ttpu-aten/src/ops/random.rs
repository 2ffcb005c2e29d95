//! Random ops: `rand`, `randn`, `randint`, `randperm` and their `_like` forms, `uniform`,
//! `normal`, `bernoulli.p`, `exponential` and dropout in training mode.
//!
//! Every draw is one IR `rng_bit_generator` (ThreeFry) of `u64` words with a state of its own:
//! the `k`-th draw of a graph takes the `k`-th output of SplitMix64 seeded with
//! the import's seed ([`Cx::seed`](crate::Cx::seed)) as its key and counter 0, so draws never
//! share a stream and the same seed gives the same numbers. The numbers follow PyTorch's
//! distributions, not its bits (PyTorch's CPU generator is a Mersenne Twister):
//!
//! - uniform `[0, 1)`: the top `d` bits of a word times `2^-d`, `d` the float's significand width
//!   (24 for `f32`, 53 for `f64`, 11 for `f16`, 8 for `bf16`), as PyTorch's
//!   `uniform_real_distribution` does; then `from + (to - from) * u` in the op-math dtype;
//! - normal: Box–Muller, `sqrt(-2 ln(1 - u1)) * cos(2π u2)`, in `f32` (`f64` for `f64`);
//! - integers in `[low, high)`: a word modulo `high - low`, plus `low` (the bias is below
//!   `(high - low) / 2^64`);
//! - `randperm(n)`: the order that sorts `n` random words (`argsort`), a uniformly random
//!   permutation;
//! - Bernoulli and dropout: `u < p`.
//!
//! Shapes must be static: a random draw's size is part of the compiled program.

use ttpu_ir::{BinaryOp, CompareDirection, DType, Literal, RngAlgorithm, Scalar, Shape, TensorType, UnaryOp, ValueId};

use super::elementwise::tensor;
use crate::args::Args;
use crate::ctx::{Cx, Imported, Operand, opmath};
use crate::error::Result;
use crate::promote::DEFAULT_FLOAT;

/// The `index`-th output of SplitMix64 seeded with `seed` (Steele, Lea and Flood, 2014): a
/// well-mixed 64-bit key per draw from one seed.
pub(super) fn splitmix64(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Random `u64` words of `shape`, from a fresh generator state.
fn bits(cx: &mut Cx<'_>, shape: &Shape) -> Result<ValueId> {
    let Some(dims) = shape.as_static() else {
        return Err(cx.site.dynamic(format!("random numbers need a static shape, found {shape}")));
    };
    let state = if let Some(inputs) = cx.rng_inputs.as_mut() {
        let state = cx.b.input(TensorType::from_static(DType::U64, &[2]), None);
        inputs.push(state);
        state
    } else {
        let key = splitmix64(cx.seed, cx.rng_draws);
        // The literal holds u64 words as the i64 of the same bits.
        let state = Literal::from_scalars(DType::U64, &[2], &[Scalar::Int(key as i64), Scalar::Int(0)])
            .expect("two words for two elements");
        cx.literal(state)
    };
    cx.rng_draws += 1;
    let built = cx.b.rng_bit_generator(RngAlgorithm::ThreeFry, state, TensorType::from_static(DType::U64, &dims));
    cx.ok(built)
}

/// The significand width of a float dtype: how many random bits a uniform sample of it holds.
fn digits(dtype: DType) -> u32 {
    match dtype {
        DType::F64 => 53,
        DType::F16 => 11,
        DType::BF16 => 8,
        _ => 24,
    }
}

/// Uniform samples in `[0, 1)` of `shape`, computed in float `dtype`: multiples of `2^-width`, so
/// exact in any float dtype of at least `width` significand bits.
fn unit_uniform(cx: &mut Cx<'_>, dtype: DType, width: u32, shape: &Shape) -> Result<ValueId> {
    if !dtype.is_float() {
        return Err(cx.bad(format!("uniform samples need a floating-point dtype, found {dtype}")));
    }
    let words = bits(cx, shape)?;
    let top = cx.binary_scalar(BinaryOp::ShiftRightLogical, words, Scalar::Int(i64::from(64 - width)))?;
    let float = cx.convert(top, dtype)?;
    cx.binary_scalar(BinaryOp::Multiply, float, Scalar::Float((-f64::from(width)).exp2()))
}

/// Uniform samples in `[from, to)` of `dtype`, computed in its op-math dtype from `dtype`'s
/// significand width of bits (so `[0, 1)` samples stay below 1 in `f16` and `bf16`).
fn uniform_in(cx: &mut Cx<'_>, dtype: DType, shape: &Shape, from: f64, to: f64) -> Result<ValueId> {
    let math = opmath(dtype);
    if !dtype.is_float() {
        return Err(cx.bad(format!("uniform samples need a floating-point dtype, found {dtype}")));
    }
    let u = unit_uniform(cx, math, digits(dtype), shape)?;
    let value = if (from, to) == (0.0, 1.0) {
        u
    } else {
        let scaled = cx.binary_scalar(BinaryOp::Multiply, u, Scalar::Float(to - from))?;
        cx.binary_scalar(BinaryOp::Add, scaled, Scalar::Float(from))?
    };
    cx.convert(value, dtype)
}

/// Standard normal samples of `shape` in the op-math dtype of `dtype` (Box–Muller).
fn standard_normal(cx: &mut Cx<'_>, dtype: DType, shape: &Shape) -> Result<ValueId> {
    let math = opmath(dtype);
    if !math.is_float() {
        return Err(cx.bad(format!("normal samples need a floating-point dtype, found {dtype}")));
    }
    let u1 = unit_uniform(cx, math, digits(math), shape)?;
    let u2 = unit_uniform(cx, math, digits(math), shape)?;
    // 1 - u1 lies in (0, 1], so the logarithm is finite.
    let one = cx.splat(math, Scalar::Float(1.0), shape)?;
    let positive = cx.binary(BinaryOp::Subtract, one, u1)?;
    let log = cx.unary(UnaryOp::Log, positive)?;
    let squared = cx.binary_scalar(BinaryOp::Multiply, log, Scalar::Float(-2.0))?;
    let radius = cx.unary(UnaryOp::Sqrt, squared)?;
    let angle = cx.binary_scalar(BinaryOp::Multiply, u2, Scalar::Float(std::f64::consts::TAU))?;
    let cosine = cx.unary(UnaryOp::Cosine, angle)?;
    cx.binary(BinaryOp::Multiply, radius, cosine)
}

/// The dtype of a factory: the `dtype` argument, else the `_like` tensor's, else `default`.
fn factory_dtype(args: &Args, like: Option<DType>, default: DType) -> Result<DType> {
    Ok(args.opt_dtype("dtype")?.or(like).unwrap_or(default))
}

/// The shape of a factory call: `size`, or `self`'s shape for the `_like` forms.
fn factory_shape(cx: &mut Cx<'_>, args: &Args) -> Result<(Shape, Option<DType>)> {
    if args.has_param("self") {
        let like = cx.ty(args.tensor("self")?);
        Ok((like.shape, Some(like.dtype)))
    } else {
        let sizes = args.sym_ints("size")?;
        Ok((cx.shape_of(&sizes)?, None))
    }
}

/// `rand(size)` / `rand_like(self)`: uniform in `[0, 1)`.
pub(super) fn rand(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (shape, like) = factory_shape(cx, args)?;
    let dtype = factory_dtype(args, like, DEFAULT_FLOAT)?;
    tensor(uniform_in(cx, dtype, &shape, 0.0, 1.0)?)
}

/// `randn(size)` / `randn_like(self)`: standard normal.
pub(super) fn randn(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (shape, like) = factory_shape(cx, args)?;
    let dtype = factory_dtype(args, like, DEFAULT_FLOAT)?;
    let z = standard_normal(cx, dtype, &shape)?;
    tensor(cx.convert(z, dtype)?)
}

/// `randint(high, size)`, `randint.low(low, high, size)` and `randint_like(self, [low,] high)`:
/// integers in `[low, high)`, `i64` unless a dtype (or the `_like` tensor) says otherwise.
pub(super) fn randint(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let (shape, like) = factory_shape(cx, args)?;
    let dtype = factory_dtype(args, like, DType::I64)?;
    let low = if args.has_param("low") { args.int("low")? } else { 0 };
    let high = args.int("high")?;
    let Some(range) = high.checked_sub(low).filter(|range| *range > 0) else {
        return Err(cx.bad(format!("randint needs low < high, found [{low}, {high})")));
    };
    if dtype.is_bool() {
        return Err(cx.bad("randint cannot produce bool tensors"));
    }
    let words = bits(cx, &shape)?;
    let offset = cx.binary_scalar(BinaryOp::Remainder, words, Scalar::Int(range))?;
    // Below `range`, so exact in i64.
    let offset = cx.convert(offset, DType::I64)?;
    let value = cx.binary_scalar(BinaryOp::Add, offset, Scalar::Int(low))?;
    tensor(cx.convert(value, dtype)?)
}

/// `randperm(n)`: a random permutation of `0..n`, `i64` unless a dtype says otherwise.
pub(super) fn randperm(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let n = args.int("n")?;
    let dtype = factory_dtype(args, None, DType::I64)?;
    if n < 0 {
        return Err(cx.bad(format!("randperm needs n >= 0, found {n}")));
    }
    if dtype.is_bool() {
        return Err(cx.bad("randperm cannot produce bool tensors"));
    }
    // The order that sorts `n` random words is a uniformly random permutation.
    let keys = bits(cx, &Shape::from_static(&[n]))?;
    let built = cx.b.argsort(keys, 0, false);
    let order = cx.ok(built)?;
    tensor(cx.convert(order, dtype)?)
}

/// `uniform(self, from, to)`: `self`'s shape and dtype, uniform in `[from, to)`.
pub(super) fn uniform(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let like = cx.ty(args.tensor("self")?);
    let from = args.scalar_or("from", Scalar::Float(0.0))?.as_f64();
    let to = args.scalar_or("to", Scalar::Float(1.0))?.as_f64();
    if from.is_nan() || from > to || !(to - from).is_finite() {
        return Err(cx.bad(format!("uniform needs from <= to and a finite range, found [{from}, {to})")));
    }
    tensor(uniform_in(cx, like.dtype, &like.shape, from, to)?)
}

/// `mean + std * z` in the op-math dtype of `dtype`, converted to `dtype`.
fn shift_scale(cx: &mut Cx<'_>, z: ValueId, mean: Operand, std: Operand, dtype: DType) -> Result<ValueId> {
    let math = cx.dtype(z);
    let [mean, std] = cx.prepare([mean, std], math)?;
    let scaled = cx.binary_bcast(BinaryOp::Multiply, z, std)?;
    let shifted = cx.binary_bcast(BinaryOp::Add, scaled, mean)?;
    cx.convert(shifted, dtype)
}

/// `normal_functional(self, mean, std)`: `self`'s shape and dtype.
pub(super) fn normal_functional(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let like = cx.ty(args.tensor("self")?);
    let mean = args.scalar_or("mean", Scalar::Float(0.0))?;
    let std = args.scalar_or("std", Scalar::Float(1.0))?;
    if std.as_f64().is_nan() || std.as_f64() < 0.0 {
        return Err(cx.bad(format!("normal needs std >= 0, found {}", std.as_f64())));
    }
    let z = standard_normal(cx, like.dtype, &like.shape)?;
    tensor(shift_scale(cx, z, Operand::Scalar(mean), Operand::Scalar(std), like.dtype)?)
}

/// `normal.Tensor_float`, `normal.float_Tensor`, `normal.Tensor_Tensor` (the broadcast shape of
/// the tensor arguments, in their dtype) and `normal.float_float(mean, std, size)`.
pub(super) fn normal(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let mean = args.operand("mean")?;
    // `normal.Tensor_float` defaults `std` to 1.
    let std = if args.given("std") { args.operand("std")? } else { Operand::Scalar(Scalar::Float(1.0)) };
    if let Operand::Scalar(std) = std
        && (std.as_f64().is_nan() || std.as_f64() < 0.0)
    {
        return Err(cx.bad(format!("normal needs std >= 0, found {}", std.as_f64())));
    }
    let tensors: Vec<ValueId> = [mean, std]
        .into_iter()
        .filter_map(|operand| match operand {
            Operand::Tensor(value) => Some(value),
            Operand::Scalar(_) => None,
        })
        .collect();
    let (shape, dtype) = if tensors.is_empty() {
        let sizes = args.sym_ints("size")?;
        (cx.shape_of(&sizes)?, factory_dtype(args, None, DEFAULT_FLOAT)?)
    } else {
        let shapes: Vec<Shape> = tensors.iter().map(|&value| cx.shape(value)).collect();
        (cx.broadcast_shape(&shapes)?, cx.dtype(tensors[0]))
    };
    let z = standard_normal(cx, dtype, &shape)?;
    tensor(shift_scale(cx, z, mean, std, dtype)?)
}

/// `bernoulli.p(self, p)`: ones with probability `p`, in `self`'s shape and dtype.
pub(super) fn bernoulli(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let like = cx.ty(args.tensor("self")?);
    let p = args.scalar_or("p", Scalar::Float(0.5))?.as_f64();
    if !(0.0..=1.0).contains(&p) {
        return Err(cx.bad(format!("bernoulli needs 0 <= p <= 1, found {p}")));
    }
    let hit = below(cx, &like.shape, p)?;
    tensor(cx.convert(hit, like.dtype)?)
}

/// `bool` samples of `shape` that are true with probability `p`: `u < p` with `u` uniform f32.
fn below(cx: &mut Cx<'_>, shape: &Shape, p: f64) -> Result<ValueId> {
    let u = unit_uniform(cx, DType::F32, digits(DType::F32), shape)?;
    let threshold = cx.splat(DType::F32, Scalar::Float(p), shape)?;
    cx.compare(CompareDirection::Lt, u, threshold)
}

/// `exponential(self, lambd)`: `-ln(1 - u) / lambd`, in `self`'s shape and dtype.
pub(super) fn exponential(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let like = cx.ty(args.tensor("self")?);
    let lambd = args.scalar_or("lambd", Scalar::Float(1.0))?.as_f64();
    if lambd.is_nan() || lambd <= 0.0 {
        return Err(cx.bad(format!("exponential needs lambd > 0, found {lambd}")));
    }
    let math = opmath(like.dtype);
    if !math.is_float() {
        return Err(cx.bad(format!("exponential needs a floating-point tensor, found {}", like)));
    }
    let value = exponential_draws(cx, math, &like.shape, lambd)?;
    tensor(cx.convert(value, like.dtype)?)
}

/// Exponential samples of rate `lambd` in `dtype` (a float opmath): `-ln(1 - u) / lambd`.
fn exponential_draws(cx: &mut Cx<'_>, dtype: DType, shape: &Shape, lambd: f64) -> Result<ValueId> {
    let u = unit_uniform(cx, dtype, digits(dtype), shape)?;
    let negated = cx.unary(UnaryOp::Negate, u)?;
    let log = cx.unary(UnaryOp::LogPlusOne, negated)?;
    cx.binary_scalar(BinaryOp::Multiply, log, Scalar::Float(-1.0 / lambd))
}

/// `native_dropout(input, p, train=True)`: `(input * mask * 1/(1-p), mask)` with `mask` true
/// with probability `1 - p`, multiplied rather than selected so NaN and infinity in dropped
/// positions give NaN as in PyTorch; `p = 1` drops everything (scale 0).
pub(super) fn dropout_train(cx: &mut Cx<'_>, x: ValueId, p: f64) -> Result<Imported> {
    if !(0.0..=1.0).contains(&p) {
        return Err(cx.bad(format!("dropout probability has to be between 0 and 1, but got {p}")));
    }
    let ty = cx.ty(x);
    if !ty.dtype.is_float() {
        return Err(cx.bad(format!("dropout needs a floating-point input, found {ty}")));
    }
    let mask = below(cx, &ty.shape, 1.0 - p)?;
    let scale = if p == 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    let kept = cx.convert(mask, ty.dtype)?;
    let masked = cx.binary(BinaryOp::Multiply, x, kept)?;
    let output = cx.binary_scalar(BinaryOp::Multiply, masked, Scalar::Float(scale))?;
    Ok(Imported::Tuple(vec![Imported::Tensor(output), Imported::Tensor(mask)]))
}

/// `rrelu_with_noise_functional(self, noise, lower, upper, training)` -> `(result, noise)`.
/// Evaluation is `leaky_relu` with slope `(lower + upper) / 2` and `noise` returned unchanged.
/// Training draws a slope per element uniform in `[lower, upper)` where `self <= 0` (PyTorch's
/// distribution from the seeded generator, not its numbers) and returns the slopes as the noise, 1
/// where `self > 0`, as PyTorch's CPU kernel does.
pub(super) fn rrelu_with_noise(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("self")?;
    let noise = args.tensor("noise")?;
    let lower = args.scalar_or("lower", Scalar::Float(0.125))?.as_f64();
    let upper = args.scalar_or("upper", Scalar::Float(1.0 / 3.0))?.as_f64();
    let training = args.bool_or("training", false)?;
    let ty = cx.ty(x);
    if !ty.dtype.is_float() {
        return Err(cx.bad(format!("rrelu needs a floating-point input, found {ty}")));
    }
    if lower > upper {
        return Err(cx.bad(format!(
            "Lower bound should be less than or equal to the upper bound, found lower {lower} and upper {upper}"
        )));
    }
    if cx.ty(noise) != ty {
        return Err(cx.bad(format!("noise {} must have the input's type {ty}", cx.ty(noise))));
    }
    let math = opmath(ty.dtype);
    let xm = cx.convert(x, math)?;
    let zero = cx.splat_like(xm, Scalar::Int(0))?;
    if !training {
        let positive = cx.compare(CompareDirection::Gt, xm, zero)?;
        let scaled = cx.binary_scalar(BinaryOp::Multiply, xm, Scalar::Float((lower + upper) / 2.0))?;
        let result = cx.select(positive, xm, scaled)?;
        let result = cx.convert(result, ty.dtype)?;
        return Ok(Imported::Tuple(vec![Imported::Tensor(result), Imported::Tensor(noise)]));
    }
    let slopes = uniform_in(cx, ty.dtype, &ty.shape, lower, upper)?;
    let slopes_math = cx.convert(slopes, math)?;
    let at_most_zero = cx.compare(CompareDirection::Le, xm, zero)?;
    let scaled = cx.binary(BinaryOp::Multiply, xm, slopes_math)?;
    let result = cx.select(at_most_zero, scaled, xm)?;
    let result = cx.convert(result, ty.dtype)?;
    let one = cx.splat_like(slopes, Scalar::Int(1))?;
    let noise_out = cx.select(at_most_zero, slopes, one)?;
    Ok(Imported::Tuple(vec![Imported::Tensor(result), Imported::Tensor(noise_out)]))
}

/// `multinomial(self, num_samples, replacement, *, generator)`: category indices drawn with the
/// weights of each row of `self` (1-D or 2-D, not necessarily normalised), PyTorch's algorithms
/// from the seeded generator: without replacement the `num_samples` largest of `w / q` with `q`
/// exponential (the first largest on ties); with replacement, for each uniform `u`, the number of
/// normalised running sums below `u`, as PyTorch's CPU kernel's binary search counts them.
pub(super) fn multinomial(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let weights = args.tensor("self")?;
    let samples = args.int("num_samples")?;
    let replacement = args.bool_or("replacement", false)?;
    let ty = cx.ty(weights);
    let dims = cx.static_dims(weights, "multinomial")?;
    if !ty.dtype.is_float() || !(1..=2).contains(&dims.len()) {
        return Err(cx.bad(format!("multinomial takes a 1-D or 2-D floating-point tensor, found {ty}")));
    }
    let categories = dims[dims.len() - 1];
    if categories == 0 {
        return Err(cx.bad("multinomial needs at least one category"));
    }
    if samples <= 0 {
        return Err(cx.bad(format!("cannot sample n_sample <= 0 samples, found {samples}")));
    }
    if !replacement && samples > categories {
        return Err(cx.bad(format!(
            "cannot sample n_sample > prob_dist.size(-1) samples without replacement ({samples} > {categories})"
        )));
    }
    let rows = if dims.len() == 2 { dims[0] } else { 1 };
    cx.table(&[rows, samples, categories], "multinomial")?;
    let math = opmath(ty.dtype);
    let grid = Shape::from_static(&[rows, categories]);
    let value = cx.convert(weights, math)?;
    let value = cx.reshape(value, grid.clone())?;
    let picked = if replacement {
        // [rows, categories] running sums over the total, then for each of `samples` uniforms the
        // count of sums strictly below it (at most the last category).
        let window = super::reduce::scan_window(2, 1, categories);
        let built = cx.b.reduce_window(value, ttpu_ir::ReduceKind::Sum, window);
        let running = cx.ok(built)?;
        let total = cx.slice(running, &[0, categories - 1], &[rows, categories], &[1, 1])?;
        let total = cx.broadcast_in_dim(total, &[0, 1], grid.clone())?;
        let cdf = cx.binary(BinaryOp::Divide, running, total)?;
        let cube = Shape::from_static(&[rows, samples, categories]);
        let cdf = cx.broadcast_in_dim(cdf, &[0, 2], cube.clone())?;
        let u = unit_uniform(cx, math, digits(math), &Shape::from_static(&[rows, samples]))?;
        let u = cx.broadcast_in_dim(u, &[0, 1], cube)?;
        let below = cx.compare(CompareDirection::Lt, cdf, u)?;
        let below = cx.convert(below, DType::I64)?;
        let count = cx.reduce(below, ttpu_ir::ReduceKind::Sum, &[2])?;
        cx.binary_scalar(BinaryOp::Minimum, count, Scalar::Int(categories - 1))?
    } else {
        let q = exponential_draws(cx, math, &grid, 1.0)?;
        let keys = cx.binary(BinaryOp::Divide, value, q)?;
        let (_, order) = super::index::sort_dim(cx, keys, 1, true)?;
        cx.slice(order, &[0, 0], &[rows, samples], &[1, 1])?
    };
    let shape: Vec<i64> = if dims.len() == 2 { vec![rows, samples] } else { vec![samples] };
    tensor(cx.reshape(picked, Shape::from_static(&shape))?)
}
