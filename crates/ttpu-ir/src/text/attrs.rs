//! The attribute dictionary of each op, shared by the printer and the parser.

use std::fmt;

use smallvec::SmallVec;

use crate::{
    BinaryOp, Collective, CompareDirection, ConvDims, Dim, DotDims, FftType, GatherDims, Literal, Op, ReduceKind,
    RngAlgorithm, ScatterDims, ScatterKind, TensorType, UnaryOp, Window,
};

/// One attribute value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Attr {
    Int(i64),
    Bool(bool),
    Ident(String),
    List(Vec<Attr>),
    Literal(Literal),
    /// A symbolic size (`s0`, `2*s0 + 1`); a static one is an `Int`.
    Dim(Dim),
    /// A graph of the text, by name (`@while0_body`).
    Graph(String),
    /// A quoted string, escaped as Rust escapes it (a kernel's name and module).
    Str(String),
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(value) => write!(f, "{value}"),
            Attr::Bool(value) => write!(f, "{value}"),
            Attr::Ident(name) => f.write_str(name),
            Attr::Dim(dim) => write!(f, "{dim}"),
            Attr::Graph(name) => write!(f, "@{name}"),
            Attr::Str(text) => write!(f, "{text:?}"),
            Attr::List(items) => {
                f.write_str("[")?;
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Attr::Literal(literal) => {
                f.write_str("dense<")?;
                match literal.splat_value() {
                    Some(value) if literal.len() > 1 || literal.dims().is_empty() => write!(f, "{value}")?,
                    _ => {
                        f.write_str("[")?;
                        for (index, value) in literal.scalars().enumerate() {
                            if index > 0 {
                                f.write_str(", ")?;
                            }
                            write!(f, "{value}")?;
                        }
                        f.write_str("]")?;
                    }
                }
                f.write_str(">")
            }
        }
    }
}

fn ints(values: &[i64]) -> Attr {
    Attr::List(values.iter().map(|&value| Attr::Int(value)).collect())
}

fn dims(values: &[Dim]) -> Attr {
    Attr::List(
        values
            .iter()
            .map(|dim| match dim {
                Dim::Static(size) => Attr::Int(*size),
                symbolic => Attr::Dim(symbolic.clone()),
            })
            .collect(),
    )
}

fn pairs(values: &[(i64, i64)]) -> Attr {
    Attr::List(values.iter().map(|&(low, high)| ints(&[low, high])).collect())
}

/// The attributes printed for `op`, in print order.
pub(crate) fn op_attrs(op: &Op) -> Vec<(&'static str, Attr)> {
    match op {
        Op::Constant(literal) => vec![("value", Attr::Literal(literal.clone()))],
        Op::Iota { dimension, .. } => vec![("dimension", Attr::Int(*dimension))],
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Clamp | Op::Convert(_) | Op::Reshape(_) => vec![],
        Op::BitcastConvert(_) | Op::Real | Op::Imag | Op::Complex => vec![],
        Op::Fft { kind, length } => {
            vec![("fft_type", Attr::Ident(kind.mnemonic().into())), ("fft_length", ints(length))]
        }
        Op::Compare(direction) => vec![("direction", Attr::Ident(direction.mnemonic().into()))],
        Op::Transpose(permutation) => vec![("permutation", ints(permutation))],
        Op::BroadcastInDim { dims, .. } => vec![("dims", ints(dims))],
        Op::Slice { start, limit, strides } => {
            vec![("start", ints(start)), ("limit", dims(limit)), ("strides", ints(strides))]
        }
        Op::Concatenate(dimension) => vec![("dimension", Attr::Int(*dimension))],
        Op::Pad { low, high, interior } => {
            vec![("low", ints(low)), ("high", ints(high)), ("interior", ints(interior))]
        }
        Op::DotGeneral(dims) => vec![
            ("lhs_batch", ints(&dims.lhs_batch)),
            ("rhs_batch", ints(&dims.rhs_batch)),
            ("lhs_contracting", ints(&dims.lhs_contracting)),
            ("rhs_contracting", ints(&dims.rhs_contracting)),
        ],
        Op::Reduce { kind, dimensions } => {
            vec![("kind", Attr::Ident(kind.mnemonic().into())), ("dimensions", ints(dimensions))]
        }
        Op::ReduceWindow { kind, window } => vec![
            ("kind", Attr::Ident(kind.mnemonic().into())),
            ("window", ints(&window.dimensions)),
            ("strides", ints(&window.strides)),
            ("base_dilations", ints(&window.base_dilations)),
            ("window_dilations", ints(&window.window_dilations)),
            ("padding", pairs(&window.padding)),
        ],
        Op::Convolution(dims) => vec![
            ("input_batch", Attr::Int(dims.input_batch)),
            ("input_feature", Attr::Int(dims.input_feature)),
            ("input_spatial", ints(&dims.input_spatial)),
            ("kernel_input_feature", Attr::Int(dims.kernel_input_feature)),
            ("kernel_output_feature", Attr::Int(dims.kernel_output_feature)),
            ("kernel_spatial", ints(&dims.kernel_spatial)),
            ("output_batch", Attr::Int(dims.output_batch)),
            ("output_feature", Attr::Int(dims.output_feature)),
            ("output_spatial", ints(&dims.output_spatial)),
            ("strides", ints(&dims.window_strides)),
            ("padding", pairs(&dims.padding)),
            ("lhs_dilation", ints(&dims.lhs_dilation)),
            ("rhs_dilation", ints(&dims.rhs_dilation)),
            ("feature_group_count", Attr::Int(dims.feature_group_count)),
            ("batch_group_count", Attr::Int(dims.batch_group_count)),
        ],
        Op::Gather(dims) => vec![
            ("offset_dims", ints(&dims.offset_dims)),
            ("collapsed_slice_dims", ints(&dims.collapsed_slice_dims)),
            ("operand_batching_dims", ints(&dims.operand_batching_dims)),
            ("start_indices_batching_dims", ints(&dims.start_indices_batching_dims)),
            ("start_index_map", ints(&dims.start_index_map)),
            ("index_vector_dim", Attr::Int(dims.index_vector_dim)),
            ("slice_sizes", ints(&dims.slice_sizes)),
            ("indices_are_sorted", Attr::Bool(dims.indices_are_sorted)),
        ],
        Op::Scatter(dims) => vec![
            (
                "kind",
                Attr::Ident(match dims.kind {
                    ScatterKind::Replace => "replace".into(),
                    ScatterKind::Combine(kind) => kind.mnemonic().into(),
                }),
            ),
            ("update_window_dims", ints(&dims.update_window_dims)),
            ("inserted_window_dims", ints(&dims.inserted_window_dims)),
            ("input_batching_dims", ints(&dims.input_batching_dims)),
            ("scatter_indices_batching_dims", ints(&dims.scatter_indices_batching_dims)),
            ("scatter_dims_to_operand_dims", ints(&dims.scatter_dims_to_operand_dims)),
            ("index_vector_dim", Attr::Int(dims.index_vector_dim)),
            ("indices_are_sorted", Attr::Bool(dims.indices_are_sorted)),
            ("unique_indices", Attr::Bool(dims.unique_indices)),
        ],
        Op::RngBitGenerator { algorithm, .. } => vec![("algorithm", Attr::Ident(algorithm.mnemonic().into()))],
        Op::DimSize(dimension) => vec![("dimension", Attr::Int(*dimension))],
        Op::ArgSort { dimension, descending } => {
            vec![("dimension", Attr::Int(*dimension)), ("descending", Attr::Bool(*descending))]
        }
        // The printer names the loop's graphs.
        Op::While(_) => vec![],
        Op::Kernel(kernel) => {
            let mut attrs =
                vec![("name", Attr::Str(kernel.name.to_string())), ("kind", Attr::Ident(kernel.kind().into()))];
            if let crate::KernelBody::StableHlo(module) = &kernel.body {
                attrs.push(("module", Attr::Str(module.to_string())));
            }
            attrs
        }
        Op::Collective(collective) => {
            let groups = |groups: &[Vec<i64>]| Attr::List(groups.iter().map(|group| ints(group)).collect());
            let kind = |kind: &ReduceKind| Attr::Ident(kind.mnemonic().into());
            match collective {
                Collective::AllReduce { kind: reduce, groups: replicas } => {
                    vec![("kind", kind(reduce)), ("groups", groups(replicas))]
                }
                Collective::AllGather { dimension, groups: replicas } => {
                    vec![("dimension", Attr::Int(*dimension)), ("groups", groups(replicas))]
                }
                Collective::ReduceScatter { kind: reduce, dimension, groups: replicas } => {
                    vec![("kind", kind(reduce)), ("dimension", Attr::Int(*dimension)), ("groups", groups(replicas))]
                }
                Collective::AllToAll { split_dimension, concat_dimension, groups: replicas } => vec![
                    ("split_dimension", Attr::Int(*split_dimension)),
                    ("concat_dimension", Attr::Int(*concat_dimension)),
                    ("groups", groups(replicas)),
                ],
                Collective::CollectivePermute { pairs: sends } => vec![("pairs", pairs(sends))],
            }
        }
    }
}

/// Reads attributes back by name; each is taken once, and leftovers are an error.
pub(crate) struct AttrReader {
    attrs: Vec<(String, Attr)>,
}

impl AttrReader {
    pub(crate) fn new(attrs: Vec<(String, Attr)>) -> AttrReader {
        AttrReader { attrs }
    }

    fn take(&mut self, name: &str) -> Result<Attr, String> {
        let index =
            self.attrs.iter().position(|(key, _)| key == name).ok_or_else(|| format!("missing attribute `{name}`"))?;
        Ok(self.attrs.remove(index).1)
    }

    fn int(&mut self, name: &str) -> Result<i64, String> {
        match self.take(name)? {
            Attr::Int(value) => Ok(value),
            other => Err(format!("attribute `{name}` must be an integer, found `{other}`")),
        }
    }

    fn boolean(&mut self, name: &str) -> Result<bool, String> {
        match self.take(name)? {
            Attr::Bool(value) => Ok(value),
            other => Err(format!("attribute `{name}` must be true or false, found `{other}`")),
        }
    }

    fn ident(&mut self, name: &str) -> Result<String, String> {
        match self.take(name)? {
            Attr::Ident(value) => Ok(value),
            other => Err(format!("attribute `{name}` must be a name, found `{other}`")),
        }
    }

    fn string(&mut self, name: &str) -> Result<String, String> {
        match self.take(name)? {
            Attr::Str(value) => Ok(value),
            other => Err(format!("attribute `{name}` must be a quoted string, found `{other}`")),
        }
    }

    fn ints<const N: usize>(&mut self, name: &str) -> Result<SmallVec<[i64; N]>, String> {
        let attr = self.take(name)?;
        let error = || format!("attribute `{name}` must be a list of integers, found `{attr}`");
        match &attr {
            Attr::List(items) => items
                .iter()
                .map(|item| match item {
                    Attr::Int(value) => Ok(*value),
                    _ => Err(error()),
                })
                .collect(),
            _ => Err(error()),
        }
    }

    fn dims<const N: usize>(&mut self, name: &str) -> Result<SmallVec<[Dim; N]>, String> {
        let attr = self.take(name)?;
        let error = || format!("attribute `{name}` must be a list of sizes, found `{attr}`");
        match &attr {
            Attr::List(items) => items
                .iter()
                .map(|item| match item {
                    Attr::Int(value) => Ok(Dim::Static(*value)),
                    Attr::Dim(dim) => Ok(dim.clone()),
                    _ => Err(error()),
                })
                .collect(),
            _ => Err(error()),
        }
    }

    fn pairs<const N: usize>(&mut self, name: &str) -> Result<SmallVec<[(i64, i64); N]>, String> {
        let attr = self.take(name)?;
        let error = || format!("attribute `{name}` must be a list of [low, high] pairs, found `{attr}`");
        match &attr {
            Attr::List(items) => items
                .iter()
                .map(|item| match item {
                    Attr::List(pair) => match pair.as_slice() {
                        [Attr::Int(low), Attr::Int(high)] => Ok((*low, *high)),
                        _ => Err(error()),
                    },
                    _ => Err(error()),
                })
                .collect(),
            _ => Err(error()),
        }
    }

    /// `groups = [[0, 1], [2, 3]]`: replica groups of a collective.
    fn groups(&mut self) -> Result<Vec<Vec<i64>>, String> {
        let attr = self.take("groups")?;
        let error = || format!("attribute `groups` must be a list of lists of replica ids, found `{attr}`");
        match &attr {
            Attr::List(groups) => groups
                .iter()
                .map(|group| match group {
                    Attr::List(ids) => ids
                        .iter()
                        .map(|id| match id {
                            Attr::Int(id) => Ok(*id),
                            _ => Err(error()),
                        })
                        .collect(),
                    _ => Err(error()),
                })
                .collect(),
            _ => Err(error()),
        }
    }

    fn finish(self) -> Result<(), String> {
        match self.attrs.first() {
            None => Ok(()),
            Some((name, _)) => Err(format!("unknown attribute `{name}`")),
        }
    }
}

fn reduce_kind(name: &str) -> Result<ReduceKind, String> {
    ReduceKind::ALL
        .into_iter()
        .find(|kind| kind.mnemonic() == name)
        .ok_or_else(|| format!("unknown reduction `{name}`"))
}

/// The largest constant the parser builds, so that a typo in a type cannot exhaust memory.
const MAX_CONSTANT_BYTES: i64 = 1 << 32;

/// Rebuilds a `kernel` from its attributes and the types of its operands and results (which are
/// the kernel's types).
pub(crate) fn kernel_from_attrs(
    mut attrs: AttrReader,
    inputs: Vec<TensorType>,
    results: Vec<TensorType>,
) -> Result<Op, String> {
    let name = attrs.string("name")?;
    let body = match attrs.ident("kind")?.as_str() {
        "stablehlo" => crate::KernelBody::StableHlo(attrs.string("module")?.into()),
        "host" => crate::KernelBody::Host,
        other => return Err(format!("unknown kernel kind `{other}` (expected `stablehlo` or `host`)")),
    };
    attrs.finish()?;
    Ok(Op::Kernel(std::sync::Arc::new(crate::Kernel { name: name.into(), inputs, results, body })))
}

/// Rebuilds an op from its mnemonic, attributes and result type.
pub(crate) fn op_from_attrs(mnemonic: &str, mut attrs: AttrReader, result: &TensorType) -> Result<Op, String> {
    let op = match mnemonic {
        "constant" => match attrs.take("value")? {
            Attr::Literal(literal) => {
                let dims = result.shape.as_static().ok_or("a constant must have a static type")?;
                let bytes = dims
                    .iter()
                    .try_fold(result.dtype.byte_size() as i64, |acc, &size| acc.checked_mul(size))
                    .filter(|bytes| (0..=MAX_CONSTANT_BYTES).contains(bytes))
                    .ok_or_else(|| format!("constant type {result} is too large"))?;
                let count = bytes / result.dtype.byte_size() as i64;
                let values: Vec<_> = literal.scalars().collect();
                if values.len() == 1 && count > 1 {
                    Op::Constant(Literal::splat(result.dtype, &dims, values[0]))
                } else {
                    Op::Constant(Literal::from_scalars(result.dtype, &dims, &values).map_err(|_| {
                        format!("constant has {} values, its type {result} needs {count}", values.len())
                    })?)
                }
            }
            other => return Err(format!("attribute `value` must be dense<...>, found `{other}`")),
        },
        "iota" => Op::Iota { dimension: attrs.int("dimension")?, dtype: result.dtype, shape: result.shape.clone() },
        "compare" => {
            let direction = attrs.ident("direction")?;
            Op::Compare(
                CompareDirection::ALL
                    .into_iter()
                    .find(|candidate| candidate.mnemonic() == direction)
                    .ok_or_else(|| format!("unknown comparison direction `{direction}`"))?,
            )
        }
        "select" => Op::Select,
        "clamp" => Op::Clamp,
        "convert" => Op::Convert(result.dtype),
        "bitcast_convert" => Op::BitcastConvert(result.dtype),
        "reshape" => Op::Reshape(result.shape.clone()),
        "transpose" => Op::Transpose(attrs.ints("permutation")?),
        "broadcast_in_dim" => Op::BroadcastInDim { dims: attrs.ints("dims")?, shape: result.shape.clone() },
        "slice" => {
            Op::Slice { start: attrs.ints("start")?, limit: attrs.dims("limit")?, strides: attrs.ints("strides")? }
        }
        "concatenate" => Op::Concatenate(attrs.int("dimension")?),
        "pad" => Op::Pad { low: attrs.ints("low")?, high: attrs.ints("high")?, interior: attrs.ints("interior")? },
        "dot_general" => Op::DotGeneral(DotDims {
            lhs_batch: attrs.ints("lhs_batch")?,
            rhs_batch: attrs.ints("rhs_batch")?,
            lhs_contracting: attrs.ints("lhs_contracting")?,
            rhs_contracting: attrs.ints("rhs_contracting")?,
        }),
        "reduce" => Op::Reduce { kind: reduce_kind(&attrs.ident("kind")?)?, dimensions: attrs.ints("dimensions")? },
        "reduce_window" => Op::ReduceWindow {
            kind: reduce_kind(&attrs.ident("kind")?)?,
            window: Window {
                dimensions: attrs.ints("window")?,
                strides: attrs.ints("strides")?,
                base_dilations: attrs.ints("base_dilations")?,
                window_dilations: attrs.ints("window_dilations")?,
                padding: attrs.pairs("padding")?,
            },
        },
        "convolution" => Op::Convolution(ConvDims {
            input_batch: attrs.int("input_batch")?,
            input_feature: attrs.int("input_feature")?,
            input_spatial: attrs.ints("input_spatial")?,
            kernel_input_feature: attrs.int("kernel_input_feature")?,
            kernel_output_feature: attrs.int("kernel_output_feature")?,
            kernel_spatial: attrs.ints("kernel_spatial")?,
            output_batch: attrs.int("output_batch")?,
            output_feature: attrs.int("output_feature")?,
            output_spatial: attrs.ints("output_spatial")?,
            window_strides: attrs.ints("strides")?,
            padding: attrs.pairs("padding")?,
            lhs_dilation: attrs.ints("lhs_dilation")?,
            rhs_dilation: attrs.ints("rhs_dilation")?,
            feature_group_count: attrs.int("feature_group_count")?,
            batch_group_count: attrs.int("batch_group_count")?,
        }),
        "gather" => Op::Gather(GatherDims {
            offset_dims: attrs.ints("offset_dims")?,
            collapsed_slice_dims: attrs.ints("collapsed_slice_dims")?,
            operand_batching_dims: attrs.ints("operand_batching_dims")?,
            start_indices_batching_dims: attrs.ints("start_indices_batching_dims")?,
            start_index_map: attrs.ints("start_index_map")?,
            index_vector_dim: attrs.int("index_vector_dim")?,
            slice_sizes: attrs.ints("slice_sizes")?,
            indices_are_sorted: attrs.boolean("indices_are_sorted")?,
        }),
        "scatter" => {
            let kind = attrs.ident("kind")?;
            Op::Scatter(ScatterDims {
                kind: if kind == "replace" { ScatterKind::Replace } else { ScatterKind::Combine(reduce_kind(&kind)?) },
                update_window_dims: attrs.ints("update_window_dims")?,
                inserted_window_dims: attrs.ints("inserted_window_dims")?,
                input_batching_dims: attrs.ints("input_batching_dims")?,
                scatter_indices_batching_dims: attrs.ints("scatter_indices_batching_dims")?,
                scatter_dims_to_operand_dims: attrs.ints("scatter_dims_to_operand_dims")?,
                index_vector_dim: attrs.int("index_vector_dim")?,
                indices_are_sorted: attrs.boolean("indices_are_sorted")?,
                unique_indices: attrs.boolean("unique_indices")?,
            })
        }
        "dim_size" => Op::DimSize(attrs.int("dimension")?),
        "real" => Op::Real,
        "imag" => Op::Imag,
        "complex" => Op::Complex,
        "fft" => {
            let kind = attrs.ident("fft_type")?;
            Op::Fft {
                kind: FftType::ALL
                    .into_iter()
                    .find(|candidate| candidate.mnemonic() == kind)
                    .ok_or_else(|| format!("unknown fft_type `{kind}`"))?,
                length: attrs.ints("fft_length")?,
            }
        }
        "argsort" => Op::ArgSort { dimension: attrs.int("dimension")?, descending: attrs.boolean("descending")? },
        "all_reduce" => {
            Op::Collective(Collective::AllReduce { kind: reduce_kind(&attrs.ident("kind")?)?, groups: attrs.groups()? })
        }
        "all_gather" => {
            Op::Collective(Collective::AllGather { dimension: attrs.int("dimension")?, groups: attrs.groups()? })
        }
        "reduce_scatter" => Op::Collective(Collective::ReduceScatter {
            kind: reduce_kind(&attrs.ident("kind")?)?,
            dimension: attrs.int("dimension")?,
            groups: attrs.groups()?,
        }),
        "all_to_all" => Op::Collective(Collective::AllToAll {
            split_dimension: attrs.int("split_dimension")?,
            concat_dimension: attrs.int("concat_dimension")?,
            groups: attrs.groups()?,
        }),
        "collective_permute" => {
            Op::Collective(Collective::CollectivePermute { pairs: attrs.pairs::<8>("pairs")?.into_vec() })
        }
        "rng_bit_generator" => {
            let name = attrs.ident("algorithm")?;
            let algorithm = RngAlgorithm::ALL
                .into_iter()
                .find(|algorithm| algorithm.mnemonic() == name)
                .ok_or_else(|| format!("unknown rng algorithm `{name}`"))?;
            Op::RngBitGenerator { algorithm, dtype: result.dtype, shape: result.shape.clone() }
        }
        other => {
            if let Some(unary) = UnaryOp::ALL.into_iter().find(|op| op.mnemonic() == other) {
                Op::Unary(unary)
            } else if let Some(binary) = BinaryOp::ALL.into_iter().find(|op| op.mnemonic() == other) {
                Op::Binary(binary)
            } else {
                return Err(format!("unknown op `{other}`"));
            }
        }
    };
    attrs.finish()?;
    Ok(op)
}
