//! A tiny reference interpreter for the IR, used only by tests to check that fusing keeps results.
//!
//! Elements are `Scalar`s rounded to their dtype after every operation (through the literal byte
//! encoding), so f32 arithmetic is exactly what an f32 device computes for `+ - * /`. Reductions and
//! dot products accumulate in row-major order of the reduced dims, rounding after each step;
//! convolutions accumulate over input features, then kernel offsets in row-major order.
//! Unsupported ops (`reduce_window`, `gather`, `scatter`, ...) return an error.

use ttpu_ir::{
    BinaryOp, CompareDirection, DType, Graph, Literal, Op, ReduceKind, Scalar, TensorType, UnaryOp, ValueId,
};

/// A dense tensor.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub dtype: DType,
    pub dims: Vec<usize>,
    pub elems: Vec<Scalar>,
}

impl Tensor {
    pub fn from_literal(literal: &Literal) -> Tensor {
        Tensor {
            dtype: literal.dtype(),
            dims: literal.dims().iter().map(|&dim| dim as usize).collect(),
            elems: literal.scalars().collect(),
        }
    }

    /// Whether both tensors hold the same bits, treating every NaN as equal.
    pub fn bit_identical(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype
            && self.dims == other.dims
            && self.elems.iter().zip(&other.elems).all(|(a, b)| match (a, b) {
                (Scalar::Float(a), Scalar::Float(b)) => (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits(),
                _ => a == b,
            })
    }

    /// Whether both tensors are equal up to a relative tolerance where both elements are finite,
    /// and not finite at the same places (for rules that reassociate products: with an infinity
    /// among the factors, one order gives `inf` where another gives `inf * 0 = NaN`).
    pub fn close_where_finite(&self, other: &Tensor, tolerance: f64) -> bool {
        self.dtype == other.dtype
            && self.dims == other.dims
            && self.elems.iter().zip(&other.elems).all(|(a, b)| match (a, b) {
                (Scalar::Float(a), Scalar::Float(b)) if !a.is_finite() || !b.is_finite() => {
                    !a.is_finite() && !b.is_finite()
                }
                (Scalar::Float(a), Scalar::Float(b)) => {
                    a == b || (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(1e-30)
                }
                _ => a == b,
            })
    }

    /// Whether both tensors are equal up to a relative tolerance (for fast-math results).
    pub fn close(&self, other: &Tensor, tolerance: f64) -> bool {
        self.dtype == other.dtype
            && self.dims == other.dims
            && self.elems.iter().zip(&other.elems).all(|(a, b)| match (a, b) {
                (Scalar::Float(a), Scalar::Float(b)) => {
                    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tolerance * a.abs().max(b.abs()).max(1e-30)
                }
                _ => a == b,
            })
    }
}

/// Rounds `value` to an element of `dtype` the way storing it would.
///
/// f16 and bf16 go through f32 first, because the `half` conversions from f64 drop low bits before
/// rounding; for the results of `+ - * /` the detour is innocuous.
pub fn round(dtype: DType, value: Scalar) -> Scalar {
    let value = match value {
        Scalar::Float(float) if matches!(dtype, DType::F16 | DType::BF16) => Scalar::Float(f64::from(float as f32)),
        other => other,
    };
    let mut bytes = Vec::new();
    value.to_bytes(dtype, &mut bytes);
    Scalar::from_bytes(dtype, &bytes)
}

fn strides(dims: &[usize]) -> Vec<usize> {
    let mut res = vec![1; dims.len()];
    for index in (0..dims.len().saturating_sub(1)).rev() {
        res[index] = res[index + 1] * dims[index + 1];
    }
    res
}

/// Every multi-index of `dims`, row-major.
fn indices(dims: &[usize]) -> Vec<Vec<usize>> {
    let count: usize = dims.iter().product();
    let strides = strides(dims);
    (0..count)
        .map(|flat| dims.iter().enumerate().map(|(dim, &size)| (flat / strides[dim]) % size.max(1)).collect())
        .collect()
}

fn flat(index: &[usize], dims: &[usize]) -> usize {
    index.iter().zip(strides(dims)).map(|(i, stride)| i * stride).sum()
}

fn unary(op: UnaryOp, dtype: DType, value: Scalar) -> Scalar {
    let res = match (op, value) {
        (UnaryOp::Negate, Scalar::Float(x)) => Scalar::Float(-x),
        (UnaryOp::Negate, Scalar::Int(x)) => Scalar::Int(x.wrapping_neg()),
        (UnaryOp::Abs, Scalar::Float(x)) => Scalar::Float(x.abs()),
        (UnaryOp::Abs, Scalar::Int(x)) => Scalar::Int(x.wrapping_abs()),
        (UnaryOp::Not, Scalar::Int(x)) => Scalar::Int(!x),
        (UnaryOp::Not, Scalar::Bool(x)) => Scalar::Bool(!x),
        (UnaryOp::Sign, Scalar::Int(x)) => Scalar::Int(x.signum()),
        (op, Scalar::Float(x)) => Scalar::Float(match op {
            UnaryOp::Exponential => x.exp(),
            UnaryOp::ExponentialMinusOne => x.exp_m1(),
            UnaryOp::Log => x.ln(),
            UnaryOp::LogPlusOne => x.ln_1p(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Cbrt => x.cbrt(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Logistic => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Sine => x.sin(),
            UnaryOp::Cosine => x.cos(),
            UnaryOp::Tan => x.tan(),
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::RoundNearestEven => x.round_ties_even(),
            UnaryOp::RoundNearestAfz => x.round(),
            UnaryOp::Sign => {
                if x.is_nan() || x == 0.0 {
                    x
                } else {
                    x.signum()
                }
            }
            UnaryOp::IsFinite => return Scalar::Bool(x.is_finite()),
            _ => unreachable!("handled above"),
        }),
        (op, value) => panic!("interp: `{}` on {value:?}", op.mnemonic()),
    };
    round(dtype, res)
}

fn binary(op: BinaryOp, dtype: DType, lhs: Scalar, rhs: Scalar) -> Scalar {
    let res = match (lhs, rhs) {
        (Scalar::Float(a), Scalar::Float(b)) => Scalar::Float(match op {
            BinaryOp::Add => a + b,
            BinaryOp::Subtract => a - b,
            BinaryOp::Multiply => a * b,
            BinaryOp::Divide => a / b,
            BinaryOp::Remainder => a % b,
            BinaryOp::Power => a.powf(b),
            BinaryOp::Atan2 => a.atan2(b),
            BinaryOp::Maximum if a.is_nan() || b.is_nan() => f64::NAN,
            BinaryOp::Minimum if a.is_nan() || b.is_nan() => f64::NAN,
            BinaryOp::Maximum => a.max(b),
            BinaryOp::Minimum => a.min(b),
            _ => panic!("interp: `{}` on floats", op.mnemonic()),
        }),
        (Scalar::Int(a), Scalar::Int(b)) => Scalar::Int(match op {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Subtract => a.wrapping_sub(b),
            BinaryOp::Multiply => a.wrapping_mul(b),
            BinaryOp::Divide if b == 0 => -1,
            BinaryOp::Divide => a.wrapping_div(b),
            BinaryOp::Remainder if b == 0 => a,
            BinaryOp::Remainder => a.wrapping_rem(b),
            BinaryOp::Maximum => a.max(b),
            BinaryOp::Minimum => a.min(b),
            BinaryOp::And => a & b,
            BinaryOp::Or => a | b,
            BinaryOp::Xor => a ^ b,
            _ => panic!("interp: `{}` on integers", op.mnemonic()),
        }),
        (Scalar::Bool(a), Scalar::Bool(b)) => Scalar::Bool(match op {
            BinaryOp::And | BinaryOp::Multiply | BinaryOp::Minimum => a & b,
            BinaryOp::Or | BinaryOp::Add | BinaryOp::Maximum => a | b,
            BinaryOp::Xor => a ^ b,
            _ => panic!("interp: `{}` on bools", op.mnemonic()),
        }),
        _ => panic!("interp: mixed operands"),
    };
    round(dtype, res)
}

fn compare(direction: CompareDirection, lhs: Scalar, rhs: Scalar) -> Scalar {
    let (a, b) = (lhs.as_f64(), rhs.as_f64());
    let result = match (lhs, rhs) {
        (Scalar::Int(x), Scalar::Int(y)) => match direction {
            CompareDirection::Eq => x == y,
            CompareDirection::Ne => x != y,
            CompareDirection::Lt => x < y,
            CompareDirection::Le => x <= y,
            CompareDirection::Gt => x > y,
            CompareDirection::Ge => x >= y,
        },
        _ => match direction {
            CompareDirection::Eq => a == b,
            CompareDirection::Ne => a != b,
            CompareDirection::Lt => a < b,
            CompareDirection::Le => a <= b,
            CompareDirection::Gt => a > b,
            CompareDirection::Ge => a >= b,
        },
    };
    Scalar::Bool(result)
}

fn convert(to: DType, value: Scalar) -> Scalar {
    let value = match (value, to) {
        (Scalar::Float(x), to) if to.is_integer() => Scalar::Int(x as i64),
        (Scalar::Float(x), DType::Bool) => Scalar::Bool(x != 0.0),
        (Scalar::Int(x), DType::Bool) => Scalar::Bool(x != 0),
        (value, _) => value,
    };
    round(to, value)
}

fn dims_of(ty: &TensorType) -> Result<Vec<usize>, String> {
    ty.shape
        .as_static()
        .map(|dims| dims.iter().map(|&dim| dim as usize).collect())
        .ok_or_else(|| format!("interp: symbolic shape {ty}"))
}

/// Evaluates `graph` on `inputs`, returning its outputs.
pub fn eval(graph: &Graph, inputs: &[Tensor]) -> Result<Vec<Tensor>, String> {
    let mut values: Vec<Option<Tensor>> = vec![None; graph.value_count()];
    for (&input, tensor) in graph.inputs.iter().zip(inputs) {
        values[input.index_usize()] = Some(tensor.clone());
    }
    let get = |values: &Vec<Option<Tensor>>, id: ValueId| values[id.index_usize()].clone().expect("defined before use");
    for (_, node) in graph.nodes() {
        if let Op::While(while_loop) = &node.op {
            // At most 1000 steps: a test loop that runs longer is a broken test, not a result.
            let mut state: Vec<Tensor> = node.operands.iter().map(|&id| get(&values, id)).collect();
            for _ in 0..1000 {
                let predicate = eval(&while_loop.cond, &state)?;
                if predicate[0].elems[0] != Scalar::Bool(true) {
                    for (&result, tensor) in node.results.iter().zip(state) {
                        values[result.index_usize()] = Some(tensor);
                    }
                    break;
                }
                state = eval(&while_loop.body, &state)?;
            }
            if node.results.iter().any(|&result| values[result.index_usize()].is_none()) {
                return Err("interp: a loop ran 1000 steps".into());
            }
            continue;
        }
        let ty = graph.ty(node.results[0]).clone();
        let dims = dims_of(&ty)?;
        let operands: Vec<Tensor> = node.operands.iter().map(|&id| get(&values, id)).collect();
        let dtype = ty.dtype;
        let count: usize = dims.iter().product();
        let elems: Vec<Scalar> = match &node.op {
            Op::Constant(literal) => literal.scalars().collect(),
            Op::Iota { dimension, .. } => indices(&dims)
                .iter()
                .map(|index| round(dtype, Scalar::Int(index[*dimension as usize] as i64)))
                .collect(),
            Op::Unary(op) => operands[0].elems.iter().map(|&x| unary(*op, dtype, x)).collect(),
            Op::Binary(op) => {
                operands[0].elems.iter().zip(&operands[1].elems).map(|(&a, &b)| binary(*op, dtype, a, b)).collect()
            }
            Op::Compare(direction) => {
                operands[0].elems.iter().zip(&operands[1].elems).map(|(&a, &b)| compare(*direction, a, b)).collect()
            }
            Op::Select => (0..count)
                .map(|index| {
                    let pred = &operands[0].elems[if operands[0].dims.is_empty() { 0 } else { index }];
                    if *pred == Scalar::Bool(true) { operands[1].elems[index] } else { operands[2].elems[index] }
                })
                .collect(),
            Op::Clamp => (0..count)
                .map(|index| {
                    let pick = |tensor: &Tensor| tensor.elems[if tensor.dims.is_empty() { 0 } else { index }];
                    let low = binary(BinaryOp::Maximum, dtype, pick(&operands[0]), operands[1].elems[index]);
                    binary(BinaryOp::Minimum, dtype, low, pick(&operands[2]))
                })
                .collect(),
            Op::Convert(to) => operands[0].elems.iter().map(|&x| convert(*to, x)).collect(),
            Op::Reshape(_) => operands[0].elems.clone(),
            Op::Transpose(permutation) => indices(&dims)
                .iter()
                .map(|index| {
                    let mut source = vec![0; index.len()];
                    for (result_dim, &operand_dim) in permutation.iter().enumerate() {
                        source[operand_dim as usize] = index[result_dim];
                    }
                    operands[0].elems[flat(&source, &operands[0].dims)]
                })
                .collect(),
            Op::BroadcastInDim { dims: map, .. } => indices(&dims)
                .iter()
                .map(|index| {
                    let source: Vec<usize> = map
                        .iter()
                        .enumerate()
                        .map(
                            |(operand_dim, &result_dim)| {
                                if operands[0].dims[operand_dim] == 1 { 0 } else { index[result_dim as usize] }
                            },
                        )
                        .collect();
                    operands[0].elems[flat(&source, &operands[0].dims)]
                })
                .collect(),
            Op::Slice { start, strides, .. } => indices(&dims)
                .iter()
                .map(|index| {
                    let source: Vec<usize> = index
                        .iter()
                        .enumerate()
                        .map(|(dim, &i)| start[dim] as usize + i * strides[dim] as usize)
                        .collect();
                    operands[0].elems[flat(&source, &operands[0].dims)]
                })
                .collect(),
            Op::Concatenate(axis) => {
                let axis = *axis as usize;
                indices(&dims)
                    .iter()
                    .map(|index| {
                        let mut offset = index[axis];
                        for operand in &operands {
                            if offset < operand.dims[axis] {
                                let mut source = index.clone();
                                source[axis] = offset;
                                return operand.elems[flat(&source, &operand.dims)];
                            }
                            offset -= operand.dims[axis];
                        }
                        unreachable!("index inside the concatenation")
                    })
                    .collect()
            }
            Op::Pad { low, interior, .. } => indices(&dims)
                .iter()
                .map(|index| {
                    let mut source = Vec::with_capacity(index.len());
                    for (dim, &i) in index.iter().enumerate() {
                        let position = i as i64 - low[dim];
                        let step = interior[dim] + 1;
                        if position < 0 || position % step != 0 || position / step >= operands[0].dims[dim] as i64 {
                            return operands[1].elems[0];
                        }
                        source.push((position / step) as usize);
                    }
                    operands[0].elems[flat(&source, &operands[0].dims)]
                })
                .collect(),
            Op::DotGeneral(dot) => {
                let (lhs, rhs) = (&operands[0], &operands[1]);
                let lhs_free: Vec<usize> = (0..lhs.dims.len())
                    .filter(|dim| {
                        !dot.lhs_batch.contains(&(*dim as i64)) && !dot.lhs_contracting.contains(&(*dim as i64))
                    })
                    .collect();
                let rhs_free: Vec<usize> = (0..rhs.dims.len())
                    .filter(|dim| {
                        !dot.rhs_batch.contains(&(*dim as i64)) && !dot.rhs_contracting.contains(&(*dim as i64))
                    })
                    .collect();
                let contracting_dims: Vec<usize> =
                    dot.lhs_contracting.iter().map(|&dim| lhs.dims[dim as usize]).collect();
                let zero = round(dtype, ReduceKind::Sum.identity(dtype));
                indices(&dims)
                    .iter()
                    .map(|index| {
                        let batch = &index[..dot.lhs_batch.len()];
                        let lhs_part = &index[dot.lhs_batch.len()..dot.lhs_batch.len() + lhs_free.len()];
                        let rhs_part = &index[dot.lhs_batch.len() + lhs_free.len()..];
                        let mut acc = zero;
                        for contracted in indices(&contracting_dims) {
                            let mut lhs_index = vec![0; lhs.dims.len()];
                            let mut rhs_index = vec![0; rhs.dims.len()];
                            for (k, &b) in batch.iter().enumerate() {
                                lhs_index[dot.lhs_batch[k] as usize] = b;
                                rhs_index[dot.rhs_batch[k] as usize] = b;
                            }
                            for (k, &c) in contracted.iter().enumerate() {
                                lhs_index[dot.lhs_contracting[k] as usize] = c;
                                rhs_index[dot.rhs_contracting[k] as usize] = c;
                            }
                            for (k, &dim) in lhs_free.iter().enumerate() {
                                lhs_index[dim] = lhs_part[k];
                            }
                            for (k, &dim) in rhs_free.iter().enumerate() {
                                rhs_index[dim] = rhs_part[k];
                            }
                            let product = binary(
                                BinaryOp::Multiply,
                                dtype,
                                lhs.elems[flat(&lhs_index, &lhs.dims)],
                                rhs.elems[flat(&rhs_index, &rhs.dims)],
                            );
                            acc = binary(BinaryOp::Add, dtype, acc, product);
                        }
                        acc
                    })
                    .collect()
            }
            Op::Convolution(conv) => convolution(conv, &operands[0], &operands[1], &dims, dtype),
            Op::Reduce { kind, dimensions } => {
                let operand = &operands[0];
                let mut acc = vec![round(dtype, kind.identity(dtype)); count];
                let kept: Vec<usize> =
                    (0..operand.dims.len()).filter(|dim| !dimensions.contains(&(*dim as i64))).collect();
                for (position, index) in indices(&operand.dims).iter().enumerate() {
                    let result_index: Vec<usize> = kept.iter().map(|&dim| index[dim]).collect();
                    let slot = flat(&result_index, &dims);
                    acc[slot] = binary(kind.combiner(), dtype, acc[slot], operand.elems[position]);
                }
                acc
            }
            other => return Err(format!("interp: `{}` is not supported", other.mnemonic())),
        };
        assert_eq!(elems.len(), count, "interp: `{}` produced the wrong element count", node.op.mnemonic());
        values[node.results[0].index_usize()] = Some(Tensor { dtype, dims, elems });
    }
    Ok(graph.outputs.iter().map(|&id| get(&values, id)).collect())
}

/// StableHLO's `convolution` of `input` and `kernel` into a result of `dims`: each output feature
/// reads its feature group's input features and its batch group's images.
fn convolution(conv: &ttpu_ir::ConvDims, input: &Tensor, kernel: &Tensor, dims: &[usize], dtype: DType) -> Vec<Scalar> {
    let at = |tensor: &Tensor, dim: i64| tensor.dims[dim as usize] as i64;
    let out_features = at(kernel, conv.kernel_output_feature);
    let kernel_features = at(kernel, conv.kernel_input_feature);
    let per_feature_group = out_features / conv.feature_group_count;
    let per_batch_group = out_features / conv.batch_group_count;
    let out_batch = dims[conv.output_batch as usize] as i64;
    let kernel_spatial: Vec<usize> = conv.kernel_spatial.iter().map(|&dim| kernel.dims[dim as usize]).collect();
    let offsets = indices(&kernel_spatial);
    let (input_strides, kernel_strides) = (strides(&input.dims), strides(&kernel.dims));
    let input_stride = |dim: i64| input_strides[dim as usize];
    let kernel_stride = |dim: i64| kernel_strides[dim as usize];
    let zero = round(dtype, ReduceKind::Sum.identity(dtype));
    indices(dims)
        .iter()
        .map(|index| {
            let batch = index[conv.output_batch as usize] as i64;
            let feature = index[conv.output_feature as usize] as i64;
            let image = (feature / per_batch_group) * out_batch + batch;
            let first_feature = (feature / per_feature_group) * kernel_features;
            let mut acc = zero;
            for channel in 0..kernel_features {
                let input_base = image as usize * input_stride(conv.input_batch)
                    + (first_feature + channel) as usize * input_stride(conv.input_feature);
                let kernel_base = channel as usize * kernel_stride(conv.kernel_input_feature)
                    + feature as usize * kernel_stride(conv.kernel_output_feature);
                'offsets: for offset in &offsets {
                    let (mut input_at, mut kernel_at) = (input_base, kernel_base);
                    for (k, &position) in offset.iter().enumerate() {
                        let out_position = index[conv.output_spatial[k] as usize] as i64;
                        // The position in the dilated, padded input.
                        let dilated = out_position * conv.window_strides[k] + position as i64 * conv.rhs_dilation[k]
                            - conv.padding[k].0;
                        let (step, size) = (conv.lhs_dilation[k], at(input, conv.input_spatial[k]));
                        if dilated < 0 || dilated % step != 0 || dilated / step >= size {
                            continue 'offsets;
                        }
                        input_at += (dilated / step) as usize * input_stride(conv.input_spatial[k]);
                        kernel_at += position * kernel_stride(conv.kernel_spatial[k]);
                    }
                    let product = binary(BinaryOp::Multiply, dtype, input.elems[input_at], kernel.elems[kernel_at]);
                    acc = binary(BinaryOp::Add, dtype, acc, product);
                }
            }
            acc
        })
        .collect()
}

/// Floats every rule about IEEE arithmetic has to survive.
const SPECIAL: [f64; 8] = [0.0, -0.0, 1.0, -1.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e-40];

/// A deterministic generator of test inputs that includes the values IEEE rules trip over.
///
/// Seeds 0 and 1 fill float tensors with the special values in turn (shifted per tensor), so every
/// special value reaches every op; other seeds mix random values with a third of special ones.
pub struct Inputs {
    state: u64,
    seed: u64,
    tensors: usize,
}

impl Inputs {
    pub fn new(seed: u64) -> Inputs {
        Inputs { state: seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407), seed, tensors: 0 }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.state >> 33
    }

    fn scalar(&mut self, dtype: DType, position: usize) -> Scalar {
        let pick = self.next();
        let value = if dtype.is_float() {
            if self.seed < 2 {
                let shift = self.tensors * 3 + self.seed as usize * 5;
                Scalar::Float(SPECIAL[(position + shift) % SPECIAL.len()])
            } else if pick.is_multiple_of(3) {
                Scalar::Float(SPECIAL[(pick / 3 % 8) as usize])
            } else {
                Scalar::Float(((pick % 20_000) as f64 - 10_000.0) / 1024.0 + (pick % 7) as f64 * 1e-3)
            }
        } else if dtype.is_bool() {
            Scalar::Bool(pick.is_multiple_of(2))
        } else if pick.is_multiple_of(7) {
            Scalar::Int(i64::MIN)
        } else {
            Scalar::Int((pick % 21) as i64 - 10)
        };
        round(dtype, value)
    }

    /// A tensor of `ty` with fresh values.
    pub fn tensor(&mut self, ty: &TensorType) -> Tensor {
        let dims = dims_of(ty).expect("test inputs have static shapes");
        let count: usize = dims.iter().product();
        let elems = (0..count).map(|position| self.scalar(ty.dtype, position)).collect();
        self.tensors += 1;
        Tensor { dtype: ty.dtype, dims, elems }
    }

    /// Fresh values for every input of `graph`, or `None` when an input has a symbolic shape.
    pub fn for_graph_checked(&mut self, graph: &Graph) -> Option<Vec<Tensor>> {
        let static_inputs = graph.inputs.iter().all(|&input| graph.ty(input).shape.is_static());
        static_inputs.then(|| self.for_graph(graph))
    }

    /// Fresh values for every input of `graph`.
    pub fn for_graph(&mut self, graph: &Graph) -> Vec<Tensor> {
        graph.inputs.iter().map(|&input| self.tensor(graph.ty(input))).collect()
    }
}
