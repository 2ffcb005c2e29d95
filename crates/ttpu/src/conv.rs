//! Convolutions as matrix products, where that is faster on XLA's CPU backend.
//!
//! XLA CPU runs a convolution through Eigen's spatial convolution, which is slow when the output
//! has few positions and many channels (ResNet's last stages at small inputs: 2x2 outputs of
//! 512 channels). There the same numbers come faster as one matrix product: the input's patches
//! (one strided slice per kernel offset, joined along the features, channels-last) times the
//! kernel reshaped to `[kernel offsets * input features, output features]`. A resident kernel's
//! reshape is weight-only work, done once at load.
//!
//! The rule ([`Rule::matmul_wins`]): a convolution with one group and no input dilation becomes a
//! product when its output has at most [`Rule::max_positions`] positions per image, or its kernel
//! is 1x1 (no patches to gather at all). Measured on ResNet-18 (docs/performance.md).

use ttpu_ir::{ConvDims, DotDims, Graph, GraphBuilder, Literal, Op, Scalar, ValueId};

use crate::error::{Error, Result};

/// When a convolution becomes a matrix product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    /// The most output positions per image (the product of the output's spatial sizes) for
    /// which a convolution with a larger kernel becomes a product.
    pub(crate) max_positions: i64,
}

impl Default for Rule {
    fn default() -> Rule {
        Rule { max_positions: 64 }
    }
}

impl Rule {
    /// Whether `dims` (a convolution with output spatial sizes `out` and kernel spatial sizes
    /// `kernel`) becomes a product.
    pub(crate) fn matmul_wins(&self, dims: &ConvDims, out: &[i64], kernel: &[i64]) -> bool {
        let plain = dims.feature_group_count == 1
            && dims.batch_group_count == 1
            && dims.lhs_dilation.iter().all(|&dilation| dilation == 1)
            && dims.padding.iter().all(|&(low, high)| low >= 0 && high >= 0);
        let positions = out.iter().try_fold(1i64, |acc, &size| acc.checked_mul(size));
        plain && (kernel.iter().all(|&size| size == 1) || positions.is_some_and(|count| count <= self.max_positions))
    }
}

/// `graph` with each convolution that `rule` picks written as a matrix product; the rest as they
/// were. Results are the same numbers up to the order of the products' additions.
pub(crate) fn convolutions_as_matmuls(graph: &Graph, rule: Rule) -> Result<Graph> {
    let bug = |message: String| Error::Bug { message };
    let mut builder = GraphBuilder::new();
    builder.graph_mut().symbols = graph.symbols.clone();
    let mut map: Vec<Option<ValueId>> = vec![None; graph.value_count()];
    for &input in &graph.inputs {
        let data = graph.value(input);
        map[input.index_usize()] = Some(builder.input(data.ty.clone(), data.name.clone()));
    }
    let mut changed = false;
    for (_, node) in graph.nodes() {
        let operands: Vec<ValueId> = node
            .operands
            .iter()
            .map(|operand| {
                map[operand.index_usize()].ok_or_else(|| bug(format!("{operand} used before it is defined")))
            })
            .collect::<Result<_>>()?;
        builder.set_loc(node.loc.clone());
        if let Op::Convolution(dims) = &node.op
            && let Some(result) = as_matmul(&mut builder, graph, node, dims, &operands, rule)?
        {
            map[node.results[0].index_usize()] = Some(result);
            changed = true;
            continue;
        }
        let results = builder.op_results(node.op.clone(), &operands).map_err(|error| bug(error.to_string()))?;
        for (old, new) in node.results.iter().zip(results) {
            map[old.index_usize()] = Some(new);
        }
    }
    if !changed {
        return Ok(graph.clone());
    }
    let outputs = graph
        .outputs
        .iter()
        .map(|output| map[output.index_usize()].ok_or_else(|| bug(format!("output {output} is not defined"))))
        .collect::<Result<Vec<_>>>()?;
    Ok(builder.finish(&outputs))
}

/// The product form of one convolution, or `None` when `rule` keeps it (or a size is symbolic).
fn as_matmul(
    b: &mut GraphBuilder,
    graph: &Graph,
    node: &ttpu_ir::Node,
    dims: &ConvDims,
    operands: &[ValueId],
    rule: Rule,
) -> Result<Option<ValueId>> {
    let bug = |message: String| Error::Bug { message };
    let built =
        |result: std::result::Result<ValueId, ttpu_ir::InferError>| result.map_err(|error| bug(error.to_string()));
    let (Some(input), Some(kernel), Some(output)) = (
        graph.ty(node.operands[0]).shape.as_static(),
        graph.ty(node.operands[1]).shape.as_static(),
        graph.ty(node.results[0]).shape.as_static(),
    ) else {
        return Ok(None);
    };
    let dtype = graph.ty(node.operands[0]).dtype;
    // Integer convolutions keep XLA's own kernel; so do complex ones.
    if !dtype.is_float() {
        return Ok(None);
    }
    let n = dims.input_spatial.len();
    let at = |shape: &[i64], dim: i64| shape[dim as usize];
    let out_sizes: Vec<i64> = dims.output_spatial.iter().map(|&dim| at(&output, dim)).collect();
    let kernel_sizes: Vec<i64> = dims.kernel_spatial.iter().map(|&dim| at(&kernel, dim)).collect();
    if !rule.matmul_wins(dims, &out_sizes, &kernel_sizes) {
        return Ok(None);
    }
    let features = at(&input, dims.input_feature);
    let out_features = at(&kernel, dims.kernel_output_feature);
    // Channels last: [batch, spatial..., features].
    let mut to_last = vec![dims.input_batch];
    to_last.extend(dims.input_spatial.iter().copied());
    to_last.push(dims.input_feature);
    let x = transposed(b, operands[0], &to_last)?;
    let padded = if dims.padding.iter().all(|&(low, high)| low == 0 && high == 0) {
        x
    } else {
        let zero = b.constant(Literal::scalar(dtype, Scalar::Int(0)));
        let mut low = vec![0; n + 2];
        let mut high = vec![0; n + 2];
        for (index, &(before, after)) in dims.padding.iter().enumerate() {
            low[index + 1] = before;
            high[index + 1] = after;
        }
        built(b.pad(x, zero, &low, &high, &vec![0; n + 2]))?
    };
    let padded_dims = b.ty(padded).shape.as_static().ok_or_else(|| bug("a padded static shape".into()))?.to_vec();
    // One strided slice per kernel offset, in row-major offset order.
    let offsets: i64 = kernel_sizes.iter().product();
    let mut patches = Vec::with_capacity(offsets as usize);
    for flat in 0..offsets {
        let mut rest = flat;
        let mut offset = vec![0i64; n];
        for dim in (0..n).rev() {
            offset[dim] = rest % kernel_sizes[dim];
            rest /= kernel_sizes[dim];
        }
        let mut start = vec![0i64; n + 2];
        let mut limit = padded_dims.clone();
        let mut strides = vec![1i64; n + 2];
        for dim in 0..n {
            start[dim + 1] = offset[dim] * dims.rhs_dilation[dim];
            limit[dim + 1] = start[dim + 1] + (out_sizes[dim] - 1) * dims.window_strides[dim] + 1;
            strides[dim + 1] = dims.window_strides[dim];
        }
        let whole = start.iter().all(|&at| at == 0) && strides.iter().all(|&step| step == 1) && limit == padded_dims;
        patches.push(if whole { padded } else { built(b.slice(padded, &start, &limit, &strides))? });
    }
    let gathered = if patches.len() == 1 { patches[0] } else { built(b.concatenate(&patches, (n + 1) as i64))? };
    // The kernel as [offsets..., input features, output features], then one matrix.
    let mut kernel_order: Vec<i64> = dims.kernel_spatial.to_vec();
    kernel_order.push(dims.kernel_input_feature);
    kernel_order.push(dims.kernel_output_feature);
    let k = transposed(b, operands[1], &kernel_order)?;
    let k = built(b.reshape(k, ttpu_ir::Shape::from_static(&[offsets * features, out_features])))?;
    let rows = n as i64 + 1;
    let product = built(b.dot_general(
        gathered,
        k,
        DotDims {
            lhs_batch: Default::default(),
            rhs_batch: Default::default(),
            lhs_contracting: [rows].into_iter().collect(),
            rhs_contracting: [0].into_iter().collect(),
        },
    ))?;
    // [batch, spatial..., out features] back to the convolution's output layout.
    let mut from = vec![0i64; n + 2];
    from[dims.output_batch as usize] = 0;
    from[dims.output_feature as usize] = rows;
    for (index, &dim) in dims.output_spatial.iter().enumerate() {
        from[dim as usize] = index as i64 + 1;
    }
    Ok(Some(transposed(b, product, &from)?))
}

/// `value` with its dims permuted by `order`; no node for the identity.
fn transposed(b: &mut GraphBuilder, value: ValueId, order: &[i64]) -> Result<ValueId> {
    if order.iter().enumerate().all(|(index, &dim)| dim == index as i64) {
        return Ok(value);
    }
    b.transpose(value, order).map_err(|error| Error::Bug { message: error.to_string() })
}

#[cfg(test)]
mod tests {
    use ttpu_ir::text::parse;

    use super::*;

    fn conv(input: &str, output: &str, kernel: &str, extra: &str) -> Graph {
        parse(&format!(
            "graph @main(%0: f32[{input}] \"x\", %1: f32[{kernel}] \"k\") -> (f32[{output}]) {{
  %2: f32[{output}] = convolution(%0, %1) {{input_batch = 0, input_feature = 1, input_spatial = [2, 3], kernel_input_feature = 1, kernel_output_feature = 0, kernel_spatial = [2, 3], output_batch = 0, output_feature = 1, output_spatial = [2, 3], {extra}, lhs_dilation = [1, 1], batch_group_count = 1}}
  return %2
}}
"
        ))
        .unwrap()
    }

    fn ops(graph: &Graph) -> Vec<&'static str> {
        graph.nodes().map(|(_, node)| node.op.mnemonic()).collect()
    }

    #[test]
    fn small_outputs_become_one_product_of_patches() {
        // 3x3, stride 2, padding 1, on a 4x4 image: 2x2 outputs, nine patches.
        let graph = conv(
            "1, 8, 4, 4",
            "1, 16, 2, 2",
            "16, 8, 3, 3",
            "strides = [2, 2], padding = [[1, 1], [1, 1]], rhs_dilation = [1, 1], feature_group_count = 1",
        );
        let rewritten = convolutions_as_matmuls(&graph, Rule::default()).unwrap();
        ttpu_ir::verify(&rewritten).unwrap();
        let ops = ops(&rewritten);
        assert!(!ops.contains(&"convolution"), "{ops:?}");
        assert_eq!(ops.iter().filter(|&&op| op == "slice").count(), 9);
        assert_eq!(ops.iter().filter(|&&op| op == "dot_general").count(), 1);
        assert_eq!(rewritten.signature(), graph.signature());
    }

    #[test]
    fn large_outputs_and_grouped_convolutions_stay_convolutions() {
        let large = conv(
            "1, 8, 16, 16",
            "1, 16, 16, 16",
            "16, 8, 3, 3",
            "strides = [1, 1], padding = [[1, 1], [1, 1]], rhs_dilation = [1, 1], feature_group_count = 1",
        );
        assert_eq!(convolutions_as_matmuls(&large, Rule::default()).unwrap(), large);
        let grouped = conv(
            "1, 8, 4, 4",
            "1, 8, 2, 2",
            "8, 1, 3, 3",
            "strides = [1, 1], padding = [[0, 0], [0, 0]], rhs_dilation = [1, 1], feature_group_count = 8",
        );
        assert_eq!(convolutions_as_matmuls(&grouped, Rule::default()).unwrap(), grouped);
        // A 1x1 kernel is a product at any size: no patches at all.
        let pointwise = conv(
            "1, 8, 16, 16",
            "1, 16, 16, 16",
            "16, 8, 1, 1",
            "strides = [1, 1], padding = [[0, 0], [0, 0]], rhs_dilation = [1, 1], feature_group_count = 1",
        );
        let ops = ops(&convolutions_as_matmuls(&pointwise, Rule::default()).unwrap());
        assert_eq!(ops, ["transpose", "transpose", "reshape", "dot_general", "transpose"]);
    }
}
