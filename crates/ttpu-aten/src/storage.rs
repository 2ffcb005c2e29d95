//! Where each value's elements live in memory, as PyTorch lays them out: the few ops that read
//! memory rather than logical elements (`as_strided`, `sym_stride`, `sym_storage_offset`) need
//! it, and every IR value is a logical tensor with no layout of its own.
//!
//! PyTorch's view ops (`permute`, `slice`, `unfold`, ...) return tensors that share their input's
//! storage with other sizes, strides and offset; `as_strided` then addresses that storage
//! directly. So every node gets a [`Layout`]: its own contiguous storage (graph inputs, as
//! `torch.export` assumes, and what most ops make from contiguous inputs), a [`View`] of some IR
//! value's row-major elements (PyTorch's stride rules for each view op, channels-last copies
//! included), or unknown, with the reason. An op that needs the layout of a value whose layout is
//! unknown is an error naming the reason: the alternative is a silently wrong number.
//!
//! Non-view ops are conservative: their result is contiguous only when every tensor they read is
//! (PyTorch's TensorIterator then makes a contiguous result); a strided input makes the result's
//! layout unknown, since PyTorch propagates permuted layouts through elementwise ops by rules
//! this module does not model.

use std::sync::Arc;

use ttpu_ir::{DType, Dim, TensorType, ValueId};

use crate::args::{Args, Val};
use crate::ctx::{Cx, Imported};
use crate::error::Result;

/// How a node's result sits in memory.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// Its own storage, row-major from offset 0.
    Contiguous,
    /// Elements of the storage of another value.
    View(View),
    /// Not known; why, for the message of an op that needs it.
    Unknown(Arc<str>),
    /// One layout per result of a multi-output op.
    Tuple(Vec<Layout>),
}

/// A strided view of a storage: element `i` of the view is element
/// `offset + Σ i[k] * strides[k]` of `base`'s row-major elements.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    /// The IR value whose row-major elements are the storage.
    pub base: ValueId,
    /// How many elements the storage has.
    pub storage_len: i64,
    /// The view's sizes.
    pub sizes: Vec<i64>,
    /// The view's strides, in elements.
    pub strides: Vec<i64>,
    /// Where the view starts in the storage.
    pub offset: i64,
}

/// Row-major strides of `sizes`.
pub fn contiguous_strides(sizes: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; sizes.len()];
    for dim in (0..sizes.len().saturating_sub(1)).rev() {
        strides[dim] = strides[dim + 1].saturating_mul(sizes[dim + 1].max(1));
    }
    strides
}

impl View {
    /// Whether the view is PyTorch-contiguous: row-major strides, dims of size 1 ignored.
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1i64;
        for (&size, &stride) in self.sizes.iter().zip(&self.strides).rev() {
            if size == 1 {
                continue;
            }
            if size == 0 {
                return true;
            }
            if stride != expected {
                return false;
            }
            expected = expected.saturating_mul(size);
        }
        true
    }
}

/// The order PyTorch lays out a copy of a strided tensor in (`infer_dense_strides` in
/// aten/src/ATen/TensorUtils.cpp, also what TensorIterator allocates outputs by): dims sorted by
/// stride, outermost first; a zero stride is ambiguous and keeps the logical order, and of two
/// equal strides the smaller dim goes inside.
fn infer_dense_order(sizes: &[i64], strides: &[i64]) -> Vec<usize> {
    let rank = sizes.len();
    // Innermost first, as PyTorch's insertion sort works.
    let mut perm: Vec<usize> = (0..rank).rev().collect();
    let should_swap = |dim0: usize, dim1: usize| -> std::cmp::Ordering {
        let (stride0, stride1) = (strides[dim0], strides[dim1]);
        if stride0 == 0 || stride1 == 0 {
            return std::cmp::Ordering::Equal;
        }
        if stride0 != stride1 {
            return stride0.cmp(&stride1);
        }
        if sizes[dim0] > sizes[dim1] { std::cmp::Ordering::Greater } else { std::cmp::Ordering::Equal }
    };
    for i in 1..rank {
        let mut dim1 = i;
        for dim0 in (0..i).rev() {
            match should_swap(perm[dim0], perm[dim1]) {
                std::cmp::Ordering::Greater => {
                    perm.swap(dim0, dim1);
                    dim1 = dim0;
                }
                std::cmp::Ordering::Less => break,
                std::cmp::Ordering::Equal => {}
            }
        }
    }
    perm.reverse();
    perm
}

/// Families whose results PyTorch 2.15 allocates contiguous whatever their inputs' layout
/// (checked on channels-last, permuted and sliced inputs): reductions, scans, matrix products,
/// normalizations and index reads.
const ALWAYS_CONTIGUOUS: &[&str] = &[
    "aten._log_softmax",
    "aten._softmax",
    "aten.addmm",
    "aten.all",
    "aten.amax",
    "aten.amin",
    "aten.any",
    "aten.argmax",
    "aten.as_strided_copy",
    "aten.argmin",
    "aten.bmm",
    "aten.contiguous",
    "aten.cumprod",
    "aten.cumsum",
    "aten.dot",
    "aten.gather",
    "aten.index_select",
    "aten.logsumexp",
    "aten.mean",
    "aten.mm",
    "aten.native_layer_norm",
    "aten.prod",
    "aten.repeat",
    "aten.scatter",
    "aten.std",
    "aten.std_mean",
    "aten.sum",
    "aten.topk",
    "aten.tril",
    "aten.triu",
    "aten.var",
    "aten.var_mean",
    // The copies of views are contiguous tensors of the view's values.
    "aten.view_copy",
    "aten.permute_copy",
    "aten.narrow_copy",
    "aten.unbind_copy",
    "aten.expand_copy",
    "aten.squeeze_copy",
    "aten.unsqueeze_copy",
    "aten.transpose_copy",
    "aten.select_copy",
    "aten.slice_copy",
    "aten.diagonal_copy",
    "aten.t_copy",
    "aten.split_copy",
    "aten.split_with_sizes_copy",
    "aten.unfold_copy",
    "aten.alias_copy",
    "aten.detach_copy",
];

/// Overloads of families whose other overloads are elementwise (`max.other` is `maximum`).
const ALWAYS_CONTIGUOUS_OVERLOADS: &[&str] = &["aten.max.default", "aten.max.dim", "aten.min.default", "aten.min.dim"];

/// Families computed by TensorIterator elementwise: the result is laid out like the input when
/// one full-size tensor is read (the others being 0-dim or numbers).
const POINTWISE: &[&str] = &[
    "aten.abs",
    "aten.acos",
    "aten.acosh",
    "aten.add",
    "aten.addcdiv",
    "aten.addcmul",
    "aten.asin",
    "aten.asinh",
    "aten.atan",
    "aten.atan2",
    "aten.atanh",
    "aten.bitwise_and",
    "aten.bitwise_not",
    "aten.bitwise_or",
    "aten.bitwise_xor",
    "aten.ceil",
    "aten.clamp",
    "aten.clamp_max",
    "aten.clamp_min",
    "aten.cos",
    "aten.cosh",
    "aten.div",
    "aten.elu",
    "aten.eq",
    "aten.erf",
    "aten.erfc",
    "aten.exp",
    "aten.exp2",
    "aten.expm1",
    "aten.floor",
    "aten.floor_divide",
    "aten.fmod",
    "aten.frac",
    "aten.ge",
    "aten.gelu",
    "aten.gt",
    "aten.hardsigmoid",
    "aten.hardswish",
    "aten.hardtanh",
    "aten.isinf",
    "aten.isnan",
    "aten.le",
    "aten.leaky_relu",
    "aten.lerp",
    "aten.log",
    "aten.log10",
    "aten.log1p",
    "aten.log2",
    "aten.logical_and",
    "aten.logical_not",
    "aten.logical_or",
    "aten.logical_xor",
    "aten.lt",
    "aten.maximum",
    "aten.minimum",
    "aten.mish",
    "aten.mul",
    "aten.ne",
    "aten.neg",
    "aten.pow",
    "aten.reciprocal",
    "aten.relu",
    "aten.remainder",
    "aten.round",
    "aten.rsqrt",
    "aten.rsub",
    "aten.sigmoid",
    "aten.sign",
    "aten.signbit",
    "aten.silu",
    "aten.sin",
    "aten.sinh",
    "aten.softplus",
    "aten.sqrt",
    "aten.sub",
    "aten.tan",
    "aten.tanh",
    "aten.trunc",
    "aten.where",
];

/// A layout that is contiguous in the sense of a non-view op's inputs.
pub(crate) fn is_contiguous(layout: &Layout) -> bool {
    match layout {
        Layout::Contiguous => true,
        Layout::View(view) => view.is_contiguous(),
        Layout::Unknown(_) | Layout::Tuple(_) => false,
    }
}

/// `value`'s layout as a [`View`], when its sizes are static.
pub fn view_of(cx: &Cx<'_>, value: ValueId, layout: &Layout) -> std::result::Result<View, Arc<str>> {
    match layout {
        Layout::View(view) => Ok(view.clone()),
        Layout::Unknown(reason) => Err(reason.clone()),
        Layout::Tuple(_) => Err("it is a tuple".into()),
        Layout::Contiguous => {
            let sizes = static_sizes(cx, value).ok_or_else(|| Arc::<str>::from("its sizes are symbolic"))?;
            let storage_len = sizes
                .iter()
                .try_fold(1i64, |acc, &size| acc.checked_mul(size))
                .ok_or_else(|| Arc::<str>::from("its element count overflows"))?;
            let strides = contiguous_strides(&sizes);
            Ok(View { base: value, storage_len, sizes, strides, offset: 0 })
        }
    }
}

fn static_sizes(cx: &Cx<'_>, value: ValueId) -> Option<Vec<i64>> {
    cx.shape(value)
        .dims()
        .iter()
        .map(|dim| match dim {
            Dim::Static(size) => Some(*size),
            _ => None,
        })
        .collect()
}

/// The layout of `self` for the op being imported, as the walk recorded it.
pub fn input_layout(cx: &Cx<'_>, param: &str) -> Layout {
    cx.input_layouts.iter().find(|(name, _)| *name == param).map_or(Layout::Contiguous, |(_, layout)| layout.clone())
}

/// The layout of the result of `target` (already imported to `result`), from its inputs'.
pub fn propagate(cx: &mut Cx<'_>, target: &str, args: &Args, result: &Imported) -> Layout {
    match derive(cx, target, args, result) {
        Ok(layout) => layout,
        Err(reason) => Layout::Unknown(reason),
    }
}

type Derived = std::result::Result<Layout, Arc<str>>;

fn derive(cx: &mut Cx<'_>, target: &str, args: &Args, result: &Imported) -> Derived {
    if matches!(result, Imported::None | Imported::SymInt(_) | Imported::SymBool(_) | Imported::Submodule(_)) {
        return Ok(Layout::Contiguous);
    }
    let family = target.rsplit_once('.').map_or(target, |(family, _)| family);
    // The tensor a view or copy is made of: `self`, or `a` for prims.
    let first = args.tensor_params().first().copied();
    let self_layout = first.map_or(Layout::Contiguous, |(param, _)| input_layout(cx, param));
    match family {
        "aten.alias" | "aten.detach" => return Ok(self_layout),
        family if ALWAYS_CONTIGUOUS.contains(&family) || ALWAYS_CONTIGUOUS_OVERLOADS.contains(&target) => {
            return Ok(match result {
                Imported::Tuple(items) => Layout::Tuple(vec![Layout::Contiguous; items.len()]),
                _ => Layout::Contiguous,
            });
        }
        "aten.clone" | "aten._to_copy" => return copy_layout(cx, args, result, &self_layout),
        "aten.empty_strided" | "aten.new_empty_strided" => {
            let sizes = args.ints("size").map_err(|_| "its sizes are symbolic")?;
            let strides = args.ints("stride").map_err(|_| "its strides are symbolic")?;
            let view = View { base: tensor_of(result)?, storage_len: 0, sizes: sizes.clone(), strides, offset: 0 };
            return if view.is_contiguous() {
                Ok(Layout::Contiguous)
            } else {
                Err(format!("`{target}` makes a tensor of strides {:?}, which are not tracked", view.strides).into())
            };
        }
        "aten.empty_permuted" => {
            let order = args.ints("physical_layout").map_err(|_| "its layout is not a list of ints")?;
            return if order.iter().enumerate().all(|(i, &d)| d == i as i64) {
                Ok(Layout::Contiguous)
            } else {
                Err(format!("`{target}` makes a tensor of physical layout {order:?}, which is not tracked").into())
            };
        }
        "aten._scaled_dot_product_flash_attention_for_cpu"
        | "aten._scaled_dot_product_flash_attention"
        | "aten._scaled_dot_product_efficient_attention"
        | "aten._scaled_dot_product_cudnn_attention" => {
            return Err(format!("`{target}` returns strides of its own").into());
        }
        _ => {}
    }
    // `view.dtype` reinterprets elements of another width: not a view of the same elements, so
    // it takes the rule of other ops below (contiguous when its input is).
    if let Some(view) = view_op(family).filter(|_| target != "aten.view.dtype") {
        let (_, input) = first.ok_or("it has no tensor input")?;
        let source = view_of(cx, input, &self_layout).map_err(|reason| -> Arc<str> {
            format!("it is a view of a tensor whose layout is unknown: {reason}").into()
        })?;
        return view(cx, args, result, source);
    }
    if POINTWISE.contains(&family)
        && let Some(order) = pointwise_order(cx, args, result)
    {
        return dense_copy(cx, tensor_of(result)?, &order);
    }
    let inputs = &cx.input_layouts;
    // Any other op: contiguous when everything it reads is.
    for (param, layout) in inputs {
        if !is_contiguous(layout) {
            let why = match layout {
                Layout::Unknown(reason) => format!(" ({reason})"),
                _ => " (a strided view)".to_string(),
            };
            return Err(format!(
                "`{target}` reads the non-contiguous `{param}`{why}, and the layout PyTorch gives its result \
                 is not tracked"
            )
            .into());
        }
    }
    Ok(match result {
        Imported::Tuple(items) => Layout::Tuple(vec![Layout::Contiguous; items.len()]),
        _ => Layout::Contiguous,
    })
}

/// The layout order of a pointwise result whose one full-size tensor operand is a strided view
/// (every other tensor operand is 0-dim): TensorIterator lays the result out in that view's
/// stride order. `None` when the operands do not have that form.
fn pointwise_order(cx: &Cx<'_>, args: &Args, result: &Imported) -> Option<Vec<usize>> {
    let value = tensor_of(result).ok()?;
    let mut full = None;
    for (param, operand) in args.tensor_params() {
        if cx.rank(operand) == 0 {
            continue;
        }
        if full.is_some() || cx.shape(operand) != cx.shape(value) {
            return None;
        }
        full = Some(param);
    }
    match input_layout(cx, full?) {
        Layout::View(view) if !view.strides.contains(&0) => Some(infer_dense_order(&view.sizes, &view.strides)),
        _ => None,
    }
}

type ViewRule = fn(&mut Cx<'_>, &Args, &Imported, View) -> Derived;

/// The stride rule of a view op family.
fn view_op(family: &str) -> Option<ViewRule> {
    Some(match family {
        "aten.permute" => permute,
        "aten.t" => t,
        "aten.transpose" => transpose,
        "aten.view" | "aten._unsafe_view" | "aten.reshape" | "prims.reshape" | "aten._reshape_alias" => reshape,
        "aten.expand" => expand,
        "aten.unsqueeze" => unsqueeze,
        "aten.squeeze" => squeeze,
        "aten.slice" => slice,
        "aten.select" => select,
        "aten.split" | "aten.split_with_sizes" => split,
        "aten.unbind" => unbind,
        "aten.unfold" => unfold,
        "aten.diagonal" => diagonal,
        "aten.as_strided" => as_strided,
        _ => return None,
    })
}

fn tensor_of(result: &Imported) -> std::result::Result<ValueId, Arc<str>> {
    match result {
        Imported::Tensor(value) => Ok(*value),
        _ => Err("the op did not make a tensor".into()),
    }
}

fn result_sizes(cx: &Cx<'_>, result: &Imported) -> std::result::Result<Vec<i64>, Arc<str>> {
    static_sizes(cx, tensor_of(result)?).ok_or_else(|| "its sizes are symbolic".into())
}

fn norm(dim: i64, rank: usize) -> std::result::Result<usize, Arc<str>> {
    let rank = rank as i64;
    let dim = if dim < 0 { dim + rank } else { dim };
    if (0..rank).contains(&dim) { Ok(dim as usize) } else { Err("a dim is out of range".into()) }
}

fn int(args: &Args, name: &str, default: i64) -> std::result::Result<i64, Arc<str>> {
    if !args.has_param(name) {
        return Ok(default);
    }
    match args.get(name) {
        Val::Missing | Val::None => Ok(default),
        Val::Int(value) => Ok(*value),
        _ => Err(format!("its `{name}` is symbolic").into()),
    }
}

fn permute(_cx: &mut Cx<'_>, args: &Args, _result: &Imported, v: View) -> Derived {
    let dims = args.ints("dims").map_err(|_| "its dims are not ints")?;
    let dims = dims.iter().map(|&d| norm(d, v.sizes.len())).collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Layout::View(View {
        sizes: dims.iter().map(|&d| v.sizes[d]).collect(),
        strides: dims.iter().map(|&d| v.strides[d]).collect(),
        ..v
    }))
}

fn t(_cx: &mut Cx<'_>, _args: &Args, _result: &Imported, mut v: View) -> Derived {
    if v.sizes.len() == 2 {
        v.sizes.swap(0, 1);
        v.strides.swap(0, 1);
    }
    Ok(Layout::View(v))
}

fn transpose(_cx: &mut Cx<'_>, args: &Args, _result: &Imported, mut v: View) -> Derived {
    let rank = v.sizes.len();
    if rank == 0 {
        return Ok(Layout::View(v));
    }
    let (a, b) = (norm(int(args, "dim0", 0)?, rank)?, norm(int(args, "dim1", 0)?, rank)?);
    v.sizes.swap(a, b);
    v.strides.swap(a, b);
    Ok(Layout::View(v))
}

fn reshape(cx: &mut Cx<'_>, args: &Args, result: &Imported, v: View) -> Derived {
    let sizes = result_sizes(cx, result)?;
    if args.has_param("stride") {
        // `_reshape_alias(self, size, stride)` states the strides it uses.
        let strides = args.ints("stride").map_err(|_| "its strides are symbolic")?;
        return Ok(Layout::View(View { sizes, strides, ..v }));
    }
    match compute_stride(&v.sizes, &v.strides, &sizes) {
        Some(strides) => Ok(Layout::View(View { sizes, strides, ..v })),
        // Not expressible as a view: `reshape` copies (a fresh contiguous tensor); `view` would
        // have failed in PyTorch.
        None if args.has_param("shape") => Ok(Layout::Contiguous),
        None => Err("PyTorch cannot view its input's strides with the new sizes".into()),
    }
}

/// PyTorch's `computeStride` (aten/src/ATen/TensorUtils.cpp): the strides of a view of
/// `old_sizes`/`old_strides` as `new_sizes`, or `None` when no strides give the same elements.
pub fn compute_stride(old_sizes: &[i64], old_strides: &[i64], new_sizes: &[i64]) -> Option<Vec<i64>> {
    let numel: i64 = old_sizes.iter().try_fold(1i64, |acc, &size| acc.checked_mul(size))?;
    if numel == 0 && old_sizes == new_sizes {
        return Some(old_strides.to_vec());
    }
    let mut new_strides = vec![0i64; new_sizes.len()];
    if numel == 0 {
        for dim in (0..new_sizes.len()).rev() {
            new_strides[dim] = if dim + 1 == new_sizes.len() {
                1
            } else {
                new_sizes[dim + 1].max(1).checked_mul(new_strides[dim + 1])?
            };
        }
        return Some(new_strides);
    }
    if old_sizes.is_empty() {
        // A scalar views as any all-ones shape.
        return Some(vec![1; new_sizes.len()]);
    }
    let mut view_d = new_sizes.len() as i64 - 1;
    let mut chunk_base_stride = *old_strides.last()?;
    let mut tensor_numel = 1i64;
    let mut view_numel = 1i64;
    for tensor_d in (0..old_sizes.len()).rev() {
        tensor_numel = tensor_numel.checked_mul(old_sizes[tensor_d])?;
        let chunk_ends = tensor_d == 0
            || (old_sizes[tensor_d - 1] != 1
                && old_strides[tensor_d - 1] != tensor_numel.checked_mul(chunk_base_stride)?);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel.checked_mul(chunk_base_stride)?;
                view_numel = view_numel.checked_mul(new_sizes[view_d as usize])?;
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(new_strides)
}

fn expand(cx: &mut Cx<'_>, _args: &Args, result: &Imported, v: View) -> Derived {
    let sizes = result_sizes(cx, result)?;
    let added = sizes.len().checked_sub(v.sizes.len()).ok_or("it has fewer dims than its input")?;
    let strides = (0..sizes.len())
        .map(|dim| match dim.checked_sub(added) {
            None => 0,
            Some(old) if v.sizes[old] == sizes[dim] => v.strides[old],
            Some(_) => 0,
        })
        .collect();
    Ok(Layout::View(View { sizes, strides, ..v }))
}

fn unsqueeze(_cx: &mut Cx<'_>, args: &Args, _result: &Imported, mut v: View) -> Derived {
    let dim = norm(int(args, "dim", 0)?, v.sizes.len() + 1)?;
    let stride = if dim >= v.sizes.len() { 1 } else { v.sizes[dim].saturating_mul(v.strides[dim]) };
    v.sizes.insert(dim, 1);
    v.strides.insert(dim, stride);
    Ok(Layout::View(v))
}

fn squeeze(_cx: &mut Cx<'_>, args: &Args, _result: &Imported, v: View) -> Derived {
    let rank = v.sizes.len();
    let dims: Vec<usize> = if !args.has_param("dim") {
        (0..rank).collect()
    } else {
        match args.get("dim") {
            Val::Int(dim) => vec![norm(*dim, rank.max(1))?],
            _ => {
                let dims = args.ints("dim").map_err(|_| "its dims are not ints")?;
                dims.iter().map(|&d| norm(d, rank.max(1))).collect::<std::result::Result<_, _>>()?
            }
        }
    };
    let keep = |dim: usize| !(dims.contains(&dim) && v.sizes[dim] == 1);
    Ok(Layout::View(View {
        sizes: (0..rank).filter(|&d| keep(d)).map(|d| v.sizes[d]).collect(),
        strides: (0..rank).filter(|&d| keep(d)).map(|d| v.strides[d]).collect(),
        ..v
    }))
}

fn slice(cx: &mut Cx<'_>, args: &Args, result: &Imported, v: View) -> Derived {
    let dim = norm(int(args, "dim", 0)?, v.sizes.len())?;
    let length = v.sizes[dim];
    let start = int(args, "start", 0)?;
    let step = int(args, "step", 1)?;
    let start = if start < 0 { start.saturating_add(length) } else { start }.clamp(0, length);
    let sizes = result_sizes(cx, result)?;
    let mut strides = v.strides.clone();
    strides[dim] = strides[dim].checked_mul(step).ok_or("its step overflows")?;
    let offset = if sizes[dim] == 0 { v.offset } else { shift(v.offset, start, v.strides[dim])? };
    Ok(Layout::View(View { sizes, strides, offset, ..v }))
}

fn shift(offset: i64, index: i64, stride: i64) -> std::result::Result<i64, Arc<str>> {
    index.checked_mul(stride).and_then(|step| offset.checked_add(step)).ok_or_else(|| "its offset overflows".into())
}

fn select(_cx: &mut Cx<'_>, args: &Args, _result: &Imported, mut v: View) -> Derived {
    let dim = norm(int(args, "dim", 0)?, v.sizes.len())?;
    let index = int(args, "index", 0)?;
    let index = if index < 0 { index + v.sizes[dim] } else { index };
    v.offset = shift(v.offset, index, v.strides[dim])?;
    v.sizes.remove(dim);
    v.strides.remove(dim);
    Ok(Layout::View(v))
}

fn split(cx: &mut Cx<'_>, args: &Args, result: &Imported, v: View) -> Derived {
    let dim = norm(int(args, "dim", 0)?, v.sizes.len())?;
    let Imported::Tuple(items) = result else { return Err("the op did not make a tuple".into()) };
    let mut start = 0i64;
    let mut layouts = Vec::with_capacity(items.len());
    for item in items {
        let sizes = result_sizes(cx, item)?;
        let offset = shift(v.offset, start, v.strides[dim])?;
        start = start.checked_add(sizes[dim]).ok_or("its sizes overflow")?;
        layouts.push(Layout::View(View { sizes, offset, ..v.clone() }));
    }
    Ok(Layout::Tuple(layouts))
}

fn unbind(_cx: &mut Cx<'_>, args: &Args, result: &Imported, v: View) -> Derived {
    let dim = norm(int(args, "dim", 0)?, v.sizes.len())?;
    let Imported::Tuple(items) = result else { return Err("the op did not make a tuple".into()) };
    let mut layouts = Vec::with_capacity(items.len());
    for index in 0..items.len() as i64 {
        let mut item = v.clone();
        item.offset = shift(v.offset, index, v.strides[dim])?;
        item.sizes.remove(dim);
        item.strides.remove(dim);
        layouts.push(Layout::View(item));
    }
    Ok(Layout::Tuple(layouts))
}

fn unfold(_cx: &mut Cx<'_>, args: &Args, _result: &Imported, mut v: View) -> Derived {
    let (size, step) = (int(args, "size", 0)?, int(args, "step", 1)?);
    if v.sizes.is_empty() {
        return Ok(Layout::View(View { sizes: vec![size], strides: vec![1], ..v }));
    }
    let dim = norm(int(args, "dimension", 0)?, v.sizes.len())?;
    let count = (v.sizes[dim] - size) / step.max(1) + 1;
    let stride = v.strides[dim];
    v.sizes[dim] = count;
    v.strides[dim] = stride.checked_mul(step).ok_or("its step overflows")?;
    v.sizes.push(size);
    v.strides.push(stride);
    Ok(Layout::View(v))
}

fn diagonal(cx: &mut Cx<'_>, args: &Args, result: &Imported, v: View) -> Derived {
    let rank = v.sizes.len();
    let (d1, d2) = (norm(int(args, "dim1", 0)?, rank)?, norm(int(args, "dim2", 1)?, rank)?);
    let diagonal_offset = int(args, "offset", 0)?;
    let sizes = result_sizes(cx, result)?;
    let length = *sizes.last().ok_or("it has no dims")?;
    let offset = if length == 0 {
        v.offset
    } else if diagonal_offset >= 0 {
        shift(v.offset, diagonal_offset, v.strides[d2])?
    } else {
        shift(v.offset, diagonal_offset.checked_neg().ok_or("its offset overflows")?, v.strides[d1])?
    };
    let mut strides: Vec<i64> = (0..rank).filter(|&d| d != d1 && d != d2).map(|d| v.strides[d]).collect();
    strides.push(v.strides[d1].checked_add(v.strides[d2]).ok_or("its strides overflow")?);
    Ok(Layout::View(View { sizes, strides, offset, ..v }))
}

fn as_strided(_cx: &mut Cx<'_>, args: &Args, _result: &Imported, v: View) -> Derived {
    let sizes = args.ints("size").map_err(|_| "its sizes are symbolic")?;
    let strides = args.ints("stride").map_err(|_| "its strides are symbolic")?;
    let offset = int(args, "storage_offset", v.offset)?;
    Ok(Layout::View(View { sizes, strides, offset, ..v }))
}

/// `clone` and `_to_copy`: a new storage in the requested memory format; `preserve_format` (the
/// default) keeps a dense input's strides.
fn copy_layout(cx: &mut Cx<'_>, args: &Args, result: &Imported, input: &Layout) -> Derived {
    let value = tensor_of(result)?;
    let format = match args.has_param("memory_format").then(|| args.get("memory_format")) {
        Some(Val::Opaque(name)) => name.rsplit('.').next().unwrap_or(name).to_string(),
        _ => "preserve_format".to_string(),
    };
    match format.as_str() {
        "contiguous_format" => Ok(Layout::Contiguous),
        "channels_last" | "channels_last_3d" => {
            let rank = if format == "channels_last" { 4 } else { 5 };
            if cx.rank(value) != rank {
                return Err(format!("`{format}` needs a rank-{rank} tensor").into());
            }
            // Channels last is NCHW logically and NHWC in memory.
            let mut order: Vec<usize> = vec![0];
            order.extend(2..rank);
            order.push(1);
            dense_copy(cx, value, &order)
        }
        _ => match input {
            Layout::Contiguous => Ok(Layout::Contiguous),
            Layout::View(view) if view.is_contiguous() => Ok(Layout::Contiguous),
            Layout::View(view) => dense_copy(cx, value, &infer_dense_order(&view.sizes, &view.strides)),
            Layout::Unknown(reason) => Err(reason.clone()),
            Layout::Tuple(_) => Err("it is a tuple".into()),
        },
    }
}

/// A new storage holding `value` with its dims laid out in `order` (outermost first).
fn dense_copy(cx: &mut Cx<'_>, value: ValueId, order: &[usize]) -> Derived {
    if order.iter().enumerate().all(|(position, &dim)| position == dim) {
        return Ok(Layout::Contiguous);
    }
    let sizes = static_sizes(cx, value).ok_or("its sizes are symbolic")?;
    let permuted: Vec<i64> = order.iter().map(|&d| sizes[d]).collect();
    let permuted_strides = contiguous_strides(&permuted);
    let mut strides = vec![0i64; sizes.len()];
    for (position, &dim) in order.iter().enumerate() {
        strides[dim] = permuted_strides[position];
    }
    let storage_len = sizes.iter().try_fold(1i64, |acc, &size| acc.checked_mul(size)).ok_or("its size overflows")?;
    let perm: Vec<i64> = order.iter().map(|&d| d as i64).collect();
    let base = cx.b.transpose(value, &perm).map_err(|error| -> Arc<str> { error.to_string().into() })?;
    Ok(Layout::View(View { base, storage_len, sizes, strides, offset: 0 }))
}

/// An `i64` tensor of `sizes` holding `offset + Σ i[k] * strides[k]` at each index `i`: the
/// storage position of every element of a view, computed on the device.
pub fn positions(cx: &mut Cx<'_>, view: &View) -> Result<ValueId> {
    let shape: ttpu_ir::Shape = ttpu_ir::Shape::from_static(&view.sizes);
    let ty = TensorType::new(DType::I64, shape.clone());
    let mut total = cx.splat(DType::I64, ttpu_ir::Scalar::Int(view.offset), &shape)?;
    for (dim, &stride) in view.strides.iter().enumerate() {
        if stride == 0 || view.sizes[dim] == 1 {
            continue;
        }
        let iota = cx.b.iota(ty.clone(), dim as i64);
        let iota = cx.ok(iota)?;
        let scaled = cx.binary_scalar(ttpu_ir::BinaryOp::Multiply, iota, ttpu_ir::Scalar::Int(stride))?;
        total = cx.binary(ttpu_ir::BinaryOp::Add, total, scaled)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strides as PyTorch 2.15 reports them for the same views.
    #[test]
    fn view_strides_match_pytorch() {
        // x.t().view(4, 3, 1) of x: f32[3, 4].
        assert_eq!(compute_stride(&[4, 3], &[1, 4], &[4, 3, 1]), Some(vec![1, 4, 4]));
        assert_eq!(compute_stride(&[2, 3, 4], &[12, 4, 1], &[6, 4]), Some(vec![4, 1]));
        // x.t().view(12) is not a view.
        assert_eq!(compute_stride(&[4, 3], &[1, 4], &[12]), None);
        assert_eq!(compute_stride(&[], &[], &[1, 1]), Some(vec![1, 1]));
    }

    /// Strides of `torch.empty_like` (a copy in preserve format) of strided views.
    #[test]
    fn dense_order_matches_pytorch() {
        let strides = |sizes: &[i64], order: Vec<usize>| {
            let permuted: Vec<i64> = order.iter().map(|&d| sizes[d]).collect();
            let dense = contiguous_strides(&permuted);
            let mut out = vec![0; sizes.len()];
            for (position, &dim) in order.iter().enumerate() {
                out[dim] = dense[position];
            }
            out
        };
        // y.permute(2, 0, 1)[::2] of y: f32[2, 3, 4] → (1, 6, 2).
        assert_eq!(strides(&[2, 2, 3], infer_dense_order(&[2, 2, 3], &[2, 12, 4])), vec![1, 6, 2]);
        // x.t()[:, ::2] of x: f32[3, 4] → (1, 4).
        assert_eq!(strides(&[4, 2], infer_dense_order(&[4, 2], &[1, 8])), vec![1, 4]);
        // randn(4, 1, 3).permute(1, 2, 0) → (3, 1, 3): equal strides, the size-1 dim inside.
        assert_eq!(strides(&[1, 3, 4], infer_dense_order(&[1, 3, 4], &[3, 1, 3])), vec![3, 1, 3]);
    }

    #[test]
    fn contiguity_ignores_size_one_dims() {
        let view = |sizes: Vec<i64>, strides: Vec<i64>| View {
            base: <ValueId as ttpu_ir::EntityId>::new(0),
            storage_len: 0,
            sizes,
            strides,
            offset: 3,
        };
        assert!(view(vec![2, 1, 3], vec![3, 99, 1]).is_contiguous());
        assert!(!view(vec![2, 3], vec![1, 2]).is_contiguous());
    }
}
