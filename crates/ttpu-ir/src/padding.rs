//! Which symbolic dims can be padded without changing the unpadded part of any result.
//!
//! Running a dynamic model at a bucket size (the next power of two, say) and slicing the outputs
//! back is exact only if no op lets values at padded positions reach real positions. That holds
//! when every op treats a dim carrying the symbol positionwise: elementwise ops, broadcasts,
//! transposes, reductions and contractions over *other* dims, block-preserving reshapes, and
//! convolutions or gathers that use it as a batch dim. A symbol that any op reduces, contracts,
//! windows, slices, pads, concatenates or scatters along must compile exactly; the verdict names
//! the first such op so `--explain-dynamic` can show why.

use std::sync::Arc;

use crate::{Dim, Graph, Node, Op, TensorType};

/// Whether a symbol may be padded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaddingVerdict {
    /// Padding along this symbol cannot change the unpadded results.
    Pad,
    /// Padding could change results; the reason names the op and its node.
    Exact(String),
}

/// Each symbol with its verdict, in declaration order.
pub type PaddingVerdicts = Vec<(Arc<str>, PaddingVerdict)>;

/// Decides, for every symbol of `graph`, whether its dims may be padded. Symbols come back in
/// declaration order.
pub fn padding_verdicts(graph: &Graph) -> PaddingVerdicts {
    graph
        .symbols
        .iter()
        .map(|(symbol, _)| {
            let verdict = graph
                .nodes()
                .find_map(|(_, node)| mixing_reason(graph, node, symbol))
                .map_or(PaddingVerdict::Pad, PaddingVerdict::Exact);
            (symbol.clone(), verdict)
        })
        .collect()
}

/// The rest of `dim` when `symbol` leads it: `dim` is `symbol * rest` (`1` for the symbol
/// itself). Such a dim, from a reshape that merges the symbol's dim with the dims inside it
/// (`[s0, s1, 8]` to `[s0*s1, 8]`), holds the symbol's positions as blocks of `rest`, in order:
/// padding the symbol appends whole blocks at its end, like padding a dim of its own.
fn led_by(dim: &Dim, symbol: &str) -> Option<Dim> {
    match dim {
        Dim::Sym(name) if name.as_ref() == symbol => Some(Dim::Static(1)),
        Dim::Expr(expr) => Some(expr.factor_out(symbol)?.into_dim()),
        _ => None,
    }
}

/// Dims of `ty` that carry `symbol` (the symbol itself, or a size it leads).
fn dims_with(ty: &TensorType, symbol: &str) -> Vec<i64> {
    ty.shape
        .dims()
        .iter()
        .enumerate()
        .filter(|(_, dim)| led_by(dim, symbol).is_some())
        .map(|(index, _)| index as i64)
        .collect()
}

/// Why `node` mixes positions along `symbol`, if it does.
fn mixing_reason(graph: &Graph, node: &Node, symbol: &str) -> Option<String> {
    let operand_dims: Vec<Vec<i64>> = node.operands.iter().map(|&value| dims_with(graph.ty(value), symbol)).collect();
    let result_dims: Vec<Vec<i64>> = node.results.iter().map(|&value| dims_with(graph.ty(value), symbol)).collect();
    if operand_dims.iter().chain(&result_dims).all(Vec::is_empty) {
        return None;
    }
    // A size computed from the symbol (`2*s0` from a concatenation, `s0*s1` from a reshape) means
    // positions along it are not the symbol's own positions any more.
    let compound = node.operands.iter().chain(&node.results).find_map(|&value| {
        graph.ty(value).shape.dims().iter().find_map(|dim| match dim {
            Dim::Expr(expr)
                if expr.symbols().iter().any(|name| name.as_ref() == symbol) && expr.factor_out(symbol).is_none() =>
            {
                Some(expr.clone())
            }
            _ => None,
        })
    });
    let at_node = || {
        let name = node.loc.name.as_deref().unwrap_or("?");
        let origin = node.loc.origin.as_deref().map_or(String::new(), |origin| format!(" ({origin})"));
        format!("`{}` at node `{name}`{origin}", node.op.mnemonic())
    };
    if let Some(expr) = compound {
        return Some(format!("{} has the size `{expr}`, computed from `{symbol}`", at_node()));
    }
    let touches = |dims: &[i64], used: &[i64]| dims.iter().any(|dim| used.contains(dim));
    let mixes = match &node.op {
        Op::Constant(_) | Op::Iota { .. } => false,
        Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Clamp | Op::Convert(_) => false,
        // A width change adds or removes only a static trailing dim: positions along a symbol stay.
        Op::BitcastConvert(_) => false,
        Op::Real | Op::Imag | Op::Complex => false,
        // A transform mixes every position of its trailing dims.
        Op::Fft { length, .. } => {
            let first = graph.ty(node.operands[0]).rank().saturating_sub(length.len());
            operand_dims[0].iter().any(|&dim| dim as usize >= first)
        }
        Op::Transpose(_) | Op::BroadcastInDim { .. } => false,
        Op::Reshape(_) => !block_preserving(graph.ty(node.operands[0]), graph.ty(node.results[0]), symbol),
        Op::Reduce { dimensions, .. } => touches(&operand_dims[0], dimensions),
        Op::DotGeneral(dims) => {
            touches(&operand_dims[0], &dims.lhs_contracting) || touches(&operand_dims[1], &dims.rhs_contracting)
        }
        Op::Convolution(dims) => {
            let input_ok = operand_dims[0].iter().all(|&dim| dim == dims.input_batch);
            let result_ok = result_dims[0].iter().all(|&dim| dim == dims.output_batch);
            !(input_ok && result_ok && operand_dims[1].is_empty())
        }
        Op::ReduceWindow { window, .. } => operand_dims[0].iter().any(|&dim| {
            let index = dim as usize;
            window.dimensions[index] != 1 || window.strides[index] != 1 || window.padding[index] != (0, 0)
        }),
        Op::Gather(dims) => {
            // Positionwise only when the symbol is a batch dim of the indices (one lookup per row).
            !operand_dims[0].is_empty() || operand_dims[1].contains(&dims.index_vector_dim)
        }
        // Random bits depend on the whole shape (its shape is static, so this is never reached).
        // Collectives move data between replicas by position.
        // Along other dims these move nothing along the symbol; a whole-dim slice is the identity.
        Op::Slice { start, limit, strides } => {
            let dims = graph.ty(node.operands[0]).shape.dims();
            operand_dims[0]
                .iter()
                .map(|&dim| dim as usize)
                .any(|dim| start[dim] != 0 || strides[dim] != 1 || limit[dim] != dims[dim])
        }
        Op::Concatenate(dimension) => operand_dims.iter().chain(&result_dims).any(|dims| dims.contains(dimension)),
        Op::Pad { low, high, interior } => operand_dims[0]
            .iter()
            .map(|&dim| dim as usize)
            .any(|dim| low[dim] != 0 || high[dim] != 0 || interior[dim] != 0),
        // A loop's graphs are not analysed: its trip count and its state may depend on the padding.
        // Nor is a kernel's body: it may mix any positions.
        Op::Scatter(_) | Op::RngBitGenerator { .. } | Op::Collective(_) | Op::While(_) | Op::Kernel(_) => true,
        // The size itself is data: padding would change it.
        Op::DimSize(dimension) | Op::ArgSort { dimension, .. } => operand_dims[0].contains(dimension),
    };
    mixes.then(|| match node.op {
        Op::DimSize(_) => format!("{} reads the size `{symbol}`, which padding would change", at_node()),
        _ => format!("{} mixes positions along `{symbol}`", at_node()),
    })
}

/// Whether a reshape keeps the symbol's positions as blocks in order: the dims before the one it
/// leads multiply to the same size on both sides, as do that dim's rest and the dims after it, so
/// each position along the symbol maps to itself however large the symbol is (`[s0, s1, 8]` to
/// `[s0*s1, 8]` keeps `s0` but not `s1`, which is inside the merged dim).
fn block_preserving(from: &TensorType, to: &TensorType, symbol: &str) -> bool {
    // Products as sizes, so other symbols on either side compare as polynomials (`[s0, s1]` to
    // `[s0, s1, 1]` keeps `s0` a block).
    let split = |ty: &TensorType| -> Option<(Dim, Dim)> {
        let dims = dims_with(ty, symbol);
        let [index] = dims.as_slice() else { return None };
        let index = *index as usize;
        let product = |dims: &[Dim]| dims.iter().try_fold(Dim::Static(1), |acc, dim| acc.checked_mul(dim));
        let rest = led_by(&ty.shape.dims()[index], symbol)?;
        let inner = rest.checked_mul(&product(&ty.shape.dims()[index + 1..])?)?;
        Some((product(&ty.shape.dims()[..index])?, inner))
    };
    matches!((split(from), split(to)), (Some(lhs), Some(rhs)) if lhs == rhs)
}
