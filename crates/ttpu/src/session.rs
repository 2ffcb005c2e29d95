//! `Session`: runs models on named host tensors on a [`Runtime`].
//!
//! A [`Model`] is parsed and imported once with its symbolic dims. Each run binds the symbols
//! from the argument shapes (checking ranges and agreement between inputs), rounds each symbol
//! that padding cannot affect up to its bucket ([`Bucketing`]), pads the inputs, runs the
//! specialisation for those sizes (imported once per model and size) and slices the outputs back.
//! Executables come from the runtime's compile cache, keyed by graph structure, concrete shapes
//! and placement: sessions on one runtime share compiles, and share the cache's capacity and
//! counters with the eager tensors on it.
//!
//! [`Session::load`] keeps a model's weights on its devices ([`LoadedModel`]); [`Session::run`]
//! is the one-shot form that uploads the weights with every call.

use std::path::Path;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use ttpu_fx::{ModelSignature, Module};
use ttpu_ir::{Dim, PaddingVerdict, PaddingVerdicts};
use ttpu_runtime::{CompileInfo, CompileSpec, Executable, HostTensor, Runtime, RuntimeOptions, TensorMap};

use crate::loaded::LoadedModel;
use crate::prepare::{self, WeightSplit};
use crate::{CompileOptions, Compiler, Error, Result};
use crate::{conv, layout};

/// A model read from `.fx` text, ready to run at any size its range constraints allow. Cheap to
/// clone (a shared handle).
#[derive(Clone)]
pub struct Model {
    inner: Arc<ModelInner>,
}

struct ModelInner {
    /// The parsed program, to import other sizes; `None` for a module built in Rust (static).
    program: Option<ttpu_fx::ast::Program>,
    module: Module,
    padding: PaddingVerdicts,
    compiler: Compiler,
    options: CompileOptions,
    /// By the symbols' values (input sizes, then sizes the data decided, in the order found).
    specialisations: Mutex<IndexMap<SizeKey, Arc<Specialisation>>>,
}

/// The symbols' values a specialisation was imported at, by name.
type SizeKey = Vec<(String, i64)>;

/// How a symbolic dim's size picks the size that is compiled.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Bucketing {
    /// Compile every size exactly.
    Exact,
    /// Pad a paddable symbol up to the next power of two inside its range.
    #[default]
    PowersOfTwo,
    /// Pad a paddable symbol up to the smallest of these sizes that holds it (exact above them).
    Sizes(Vec<i64>),
}

impl Bucketing {
    pub(crate) fn bucket(&self, size: i64, range: Option<&ttpu_ir::SymbolRange>) -> i64 {
        let max = range.and_then(|range| range.max).unwrap_or(i64::MAX);
        let candidate = match self {
            Bucketing::Exact => size,
            Bucketing::PowersOfTwo => u64::try_from(size)
                .ok()
                .and_then(u64::checked_next_power_of_two)
                .and_then(|pow| i64::try_from(pow).ok())
                .unwrap_or(size),
            Bucketing::Sizes(sizes) => sizes.iter().copied().filter(|&bucket| bucket >= size).min().unwrap_or(size),
        };
        // A bucket outside the range would compile a size the model was never exported for.
        candidate.min(max).max(size)
    }
}

/// The model imported at one set of concrete sizes, with its executables by placement.
pub(crate) struct Specialisation {
    pub(crate) module: Module,
    executables: Mutex<Vec<(CompileSpec, Arc<Executable>)>>,
    /// The load-time split of the graph (computed once; `None` inside when nothing is
    /// prepared), and its (per-call, preparation) executables by spec.
    split: Mutex<Option<Option<Arc<WeightSplit>>>>,
    split_executables: Mutex<Vec<(CompileSpec, SplitExecutables)>>,
}

/// The two programs of a split graph.
#[derive(Clone)]
pub(crate) struct SplitExecutables {
    /// The per-call program: the original inputs, then the prepared values.
    pub(crate) main: Arc<Executable>,
    /// The preparation: resident weights in, prepared values out.
    pub(crate) prep: Arc<Executable>,
}

impl Specialisation {
    fn new(module: Module) -> Specialisation {
        Specialisation {
            module,
            executables: Mutex::new(Vec::new()),
            split: Mutex::new(None),
            split_executables: Mutex::new(Vec::new()),
        }
    }

    /// The graph split into preparation and per-call programs (small convolutions first
    /// written as matrix products, activations around convolutions made channels-last, other
    /// convolution kernels turned to the layout the kernels read), where `resident[i]` says input `i` is a weight
    /// that no call changes; `None` when nothing would be prepared. Computed once.
    pub(crate) fn weight_split(&self, resident: &[bool]) -> Result<Option<Arc<WeightSplit>>> {
        let mut split = self.split.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(found) = split.as_ref() {
            return Ok(found.clone());
        }
        let graph = conv::convolutions_as_matmuls(&self.module.graph, conv::Rule::default())?;
        let graph = layout::channels_last(&graph)?;
        let graph = prepare::kernels_to_spatial_major(&graph, resident)?;
        let made = prepare::split(&graph, resident)?.map(Arc::new);
        *split = Some(made.clone());
        Ok(made)
    }

    /// The per-call and preparation executables of `split` for `spec` (the preparation runs on
    /// the same devices, with no aliases), from this specialisation's list, else the runtime's
    /// cache or a compile; the info is the per-call program's, `None` when found here.
    pub(crate) fn split_executables(
        &self,
        runtime: &Runtime,
        spec: &CompileSpec,
        split: &WeightSplit,
    ) -> Result<(SplitExecutables, Option<CompileInfo>)> {
        let mut executables = self.split_executables.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, found)) = executables.iter().find(|(known, _)| known == spec) {
            return Ok((found.clone(), None));
        }
        let (main, info) = runtime.executable_with_info(&split.main, spec, || Ok::<_, Error>(split.main.clone()))?;
        let prep_spec = CompileSpec { aliases: Vec::new(), sharding: None, ..spec.clone() };
        let (prep, _) = runtime.executable_with_info(&split.prep, &prep_spec, || Ok::<_, Error>(split.prep.clone()))?;
        let made = SplitExecutables { main, prep };
        executables.push((spec.clone(), made.clone()));
        Ok((made, Some(info)))
    }

    /// The executable for `spec`, from this specialisation's own list (no hashing on the hot
    /// path), else from the runtime's cache or a compile. The info is `None` when it was found
    /// here.
    pub(crate) fn executable(
        &self,
        runtime: &Runtime,
        spec: &CompileSpec,
    ) -> Result<(Arc<Executable>, Option<CompileInfo>)> {
        let mut executables = self.executables.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, found)) = executables.iter().find(|(known, _)| known == spec) {
            return Ok((Arc::clone(found), None));
        }
        let graph = &self.module.graph;
        let (executable, info) = runtime.executable_with_info(graph, spec, || Ok::<_, Error>(graph.clone()))?;
        executables.push((spec.clone(), Arc::clone(&executable)));
        Ok((executable, Some(info)))
    }
}

impl Model {
    /// Whether weight-only work runs once at load ([`CompileOptions::prepare_weights`]).
    pub(crate) fn prepares_weights(&self) -> bool {
        self.inner.options.prepare_weights
    }

    /// XLA's options for this model's compiles ([`CompileOptions::xla_options`]).
    pub(crate) fn xla_options(&self) -> &[(String, ttpu_runtime::OptionValue)] {
        &self.inner.options.xla_options
    }

    /// The model's signature, with symbolic dims as exported.
    pub fn signature(&self) -> &ModelSignature {
        &self.inner.module.signature
    }

    /// The imported module with symbolic dims.
    pub fn module(&self) -> &Module {
        &self.inner.module
    }

    /// Per symbol, whether padding it can change results (and why), in declaration order.
    pub fn padding_verdicts(&self) -> &[(Arc<str>, PaddingVerdict)] {
        &self.inner.padding
    }

    /// How many specialisations (concrete size sets) were imported so far.
    pub fn compile_count(&self) -> usize {
        self.inner.specialisations.lock().map_or(0, |cache| cache.len())
    }

    /// Whether padding symbol `symbol` cannot change results.
    pub(crate) fn paddable(&self, symbol: &str) -> bool {
        self.inner.padding.iter().any(|(name, verdict)| name.as_ref() == symbol && *verdict == PaddingVerdict::Pad)
    }

    /// The model imported at `symbol_values` (imported once per size set).
    pub(crate) fn specialise(&self, symbol_values: IndexMap<String, i64>) -> Result<Arc<Specialisation>> {
        let inner = &self.inner;
        let cache_key: SizeKey = symbol_values.iter().map(|(name, &value)| (name.clone(), value)).collect();
        let mut cache = inner.specialisations.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(found) = cache.get(&cache_key) {
            return Ok(found.clone());
        }
        let module = match &inner.program {
            _ if symbol_values.is_empty() => inner.module.clone(),
            Some(program) => {
                inner.compiler.import_program(program, &CompileOptions { symbol_values, ..inner.options.clone() })?
            }
            None => {
                return Err(Error::Bug { message: "a model built from a module has symbolic dims".into() });
            }
        };
        let specialisation = Arc::new(Specialisation::new(module));
        cache.insert(cache_key, specialisation.clone());
        Ok(specialisation)
    }
}

/// A runtime (a PJRT plugin's devices) and the compiler feeding it.
pub struct Session {
    runtime: Runtime,
    compiler: Compiler,
    bucketing: Bucketing,
    options: CompileOptions,
}

impl Session {
    /// A session on the plugin at `path`, on a runtime of its own.
    pub fn new(plugin_path: &Path) -> Result<Session> {
        Ok(Session::with_runtime(Runtime::new(plugin_path, &RuntimeOptions::default())?))
    }

    /// A session on `runtime`, sharing its compile caches and counters with everything else on
    /// it (other sessions, eager tensors).
    pub fn with_runtime(runtime: Runtime) -> Session {
        Session {
            runtime,
            compiler: Compiler::new(),
            bucketing: Bucketing::default(),
            options: CompileOptions::default(),
        }
    }

    /// The runtime models run on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// A session on the plugin named by `--plugin`, else `$TTPU_PJRT_PLUGIN`, else the one
    /// `cargo xtask setup` installed.
    pub fn from_plugin_or_default(plugin_path: Option<&Path>) -> Result<Session> {
        Ok(Session::with_runtime(Runtime::from_plugin_or_default(plugin_path, &RuntimeOptions::default())?))
    }

    /// The compiler of models loaded from now on.
    pub fn compiler(&self) -> &Compiler {
        &self.compiler
    }

    /// The compiler of models loaded from now on, to register user kernels with
    /// ([`Compiler::register_kernel`]).
    pub fn compiler_mut(&mut self) -> &mut Compiler {
        &mut self.compiler
    }

    /// Sets how symbolic sizes are bucketed for models run from now on.
    pub fn set_bucketing(&mut self, bucketing: Bucketing) {
        self.bucketing = bucketing;
    }

    /// Sets the compile options (the optimizer's, say) for models loaded from now on; symbol sizes
    /// in them are ignored, since each run binds its own.
    pub fn set_compile_options(&mut self, options: CompileOptions) {
        self.options = CompileOptions { symbol_values: IndexMap::new(), ..options };
    }

    /// Parses and imports a model; nothing is compiled until it runs.
    pub fn load_model(&self, source: &str, path: &str) -> Result<Model> {
        let parse_span = tracing::debug_span!("parse", path).entered();
        let program = ttpu_fx::parse(source, path)?;
        drop(parse_span);
        let (module, padding) = self.compiler.import_dynamic(&program, &self.options)?;
        Ok(Model {
            inner: Arc::new(ModelInner {
                program: Some(program),
                module,
                padding,
                compiler: self.compiler.clone(),
                options: self.options.clone(),
                specialisations: Mutex::new(IndexMap::new()),
            }),
        })
    }

    /// A model of a module built in Rust (a training step, say); its shapes must be static.
    pub fn model_from_module(&self, module: Module) -> Result<Model> {
        if let Some(input) = module.signature.inputs.iter().find(|input| !input.ty.shape.is_static()) {
            return Err(Error::NotStatic { key: input.key.clone(), ty: input.ty.to_string() });
        }
        Ok(Model {
            inner: Arc::new(ModelInner {
                program: None,
                padding: Vec::new(),
                module,
                compiler: self.compiler.clone(),
                options: self.options.clone(),
                specialisations: Mutex::new(IndexMap::new()),
            }),
        })
    }

    /// Parses and imports a model and uploads its weights (keyed by signature target) to device 0
    /// once; each run then uploads only the user inputs.
    pub fn load(&self, source: &str, path: &str, weights: &TensorMap) -> Result<LoadedModel> {
        self.place(&self.load_model(source, path)?, weights, 1)
    }

    /// Uploads `model`'s weights to devices `0..replicas` once, for runs that take one input set
    /// per device (data parallel); buffers a run mutates stay on the devices and are updated in
    /// place.
    pub fn place(&self, model: &Model, weights: &TensorMap, replicas: usize) -> Result<LoadedModel> {
        LoadedModel::new(self.runtime.clone(), model.clone(), self.bucketing.clone(), weights, replicas)
    }

    /// Lays `model` out over a device mesh as `parallelism` plans it: each device keeps only its
    /// shard of every weight, and each run takes one input set, splits it over the devices and
    /// assembles the outputs; XLA's SPMD partitioner inserts the collectives.
    pub fn shard(&self, model: &Model, weights: &TensorMap, parallelism: &crate::Parallelism) -> Result<LoadedModel> {
        LoadedModel::sharded(self.runtime.clone(), model.clone(), self.bucketing.clone(), weights, parallelism.clone())
    }

    /// Runs `model` on `weights` (keyed by signature target) and `inputs` (keyed by placeholder
    /// name), uploading both. Returns user outputs as `output_0`, ... and mutated buffers under
    /// their targets. [`Session::load`] keeps the weights on the device instead.
    pub fn run(&self, model: &Model, weights: &TensorMap, inputs: &TensorMap) -> Result<TensorMap> {
        self.place(model, weights, 1)?.run(inputs)
    }
}

/// `ty`'s shape with each symbol replaced by its size in `values` (static dims kept from `actual`).
pub(crate) fn resolved_shape(ty: &ttpu_ir::TensorType, actual: &[i64], values: &IndexMap<String, i64>) -> Vec<i64> {
    ty.shape
        .dims()
        .iter()
        .zip(actual)
        .map(|(dim, &size)| match dim {
            Dim::Static(_) => size,
            symbolic => symbolic.eval(values).unwrap_or(size),
        })
        .collect()
}

/// Copies `tensor` into a zero-filled tensor of `shape`, cropping or padding each dim at its end.
pub(crate) fn resize(tensor: &HostTensor, shape: &[i64]) -> HostTensor {
    let element = tensor.dtype.byte_size();
    let count: i64 = shape.iter().product();
    let mut data = vec![0u8; count.max(0) as usize * element];
    let rank = shape.len();
    let common: Vec<i64> = tensor.shape.iter().zip(shape).map(|(&from, &to)| from.min(to)).collect();
    if rank == 0 || common.contains(&0) {
        if rank == 0 {
            data.copy_from_slice(&tensor.data[..element]);
        }
        return HostTensor { dtype: tensor.dtype, shape: shape.to_vec(), data };
    }
    let strides = |dims: &[i64]| -> Vec<usize> {
        let mut res = vec![1usize; dims.len()];
        for index in (0..dims.len().saturating_sub(1)).rev() {
            res[index] = res[index + 1] * dims[index + 1] as usize;
        }
        res
    };
    let (from_strides, to_strides) = (strides(&tensor.shape), strides(shape));
    // Copy the innermost common run at once for every index of the outer dims.
    let run = common[rank - 1] as usize * element;
    let mut index = vec![0i64; rank - 1];
    loop {
        let offset = |strides: &[usize]| {
            index.iter().zip(strides).map(|(&i, &stride)| i as usize * stride).sum::<usize>() * element
        };
        let (from, to) = (offset(&from_strides), offset(&to_strides));
        data[to..to + run].copy_from_slice(&tensor.data[from..from + run]);
        let Some(dim) = (0..rank - 1).rev().find(|&dim| index[dim] + 1 < common[dim]) else { break };
        index[dim] += 1;
        index[dim + 1..].iter_mut().for_each(|slot| *slot = 0);
    }
    HostTensor { dtype: tensor.dtype, shape: shape.to_vec(), data }
}

/// Sizes of the model's symbols as the arguments give them, checked against their ranges.
/// `arguments` holds each signature input's shape, `None` where it is not known yet.
pub(crate) fn bind_symbols(module: &Module, arguments: &[Option<&[i64]>]) -> Result<IndexMap<String, i64>> {
    let symbols = &module.graph.symbols;
    let mut bound: IndexMap<String, (i64, String)> = IndexMap::new();
    for (input, tensor) in module.signature.inputs.iter().zip(arguments) {
        let Some(tensor) = tensor else { continue };
        for (axis, (dim, &size)) in input.ty.shape.dims().iter().zip(tensor.iter()).enumerate() {
            let Dim::Sym(name) = dim else { continue };
            let range = symbols.range(name);
            let range_text = range.map_or("[?]".into(), |range| match range.max {
                Some(max) => format!("[{}, {max}]", range.min),
                None => format!("[{}, inf]", range.min),
            });
            let here = format!("`{}` dim {axis}", input.key);
            if let Some((previous, source)) = bound.get(name.as_ref()) {
                if *previous != size {
                    return Err(Error::SymbolSize {
                        symbol: name.to_string(),
                        range: range_text,
                        message: format!("{source} has size {previous} but {here} has size {size}"),
                    });
                }
                continue;
            }
            if let Some(range) = range
                && (size < range.min || range.max.is_some_and(|max| size > max))
            {
                return Err(Error::SymbolSize {
                    symbol: name.to_string(),
                    range: range_text,
                    message: format!("{here} has size {size}, outside the range"),
                });
            }
            bound.insert(name.to_string(), (size, here));
        }
    }
    let mut values: IndexMap<String, i64> = bound.into_iter().map(|(name, (size, _))| (name, size)).collect();
    // A symbol that only appears in compound dims (`2*s0`, from a `Dim` defined as `2*k`) is
    // solved from the first such dim that is linear in it; the check below confirms the rest.
    for (input, tensor) in module.signature.inputs.iter().zip(arguments) {
        let Some(tensor) = tensor else { continue };
        for (axis, (dim, &size)) in input.ty.shape.dims().iter().zip(tensor.iter()).enumerate() {
            let Dim::Expr(expr) = dim else { continue };
            let unbound: Vec<_> =
                expr.symbols().into_iter().filter(|name| !values.contains_key(name.as_ref())).collect();
            let [symbol] = unbound.as_slice() else { continue };
            let at = |value: i64| {
                let mut trial = values.clone();
                trial.insert(symbol.to_string(), value);
                expr.eval(&trial)
            };
            let (Some(f0), Some(f1), Some(f2)) = (at(0), at(1), at(2)) else { continue };
            let slope = f1 - f0;
            // Linear in the symbol, and the size reachable by a whole value of it.
            if slope == 0 || f2 - f1 != slope || (size - f0) % slope != 0 {
                continue;
            }
            let solved = (size - f0) / slope;
            if let Some(range) = symbols.range(symbol)
                && (solved < range.min || range.max.is_some_and(|max| solved > max))
            {
                let range_text = match range.max {
                    Some(max) => format!("[{}, {max}]", range.min),
                    None => format!("[{}, inf]", range.min),
                };
                return Err(Error::SymbolSize {
                    symbol: symbol.to_string(),
                    range: range_text,
                    message: format!(
                        "`{}` dim {axis} has size {size}, so `{dim}` gives {solved}, outside the range",
                        input.key
                    ),
                });
            }
            values.insert(symbol.to_string(), solved);
        }
    }
    // A compound dim (`2*s0`) must equal what its symbols say.
    for (input, tensor) in module.signature.inputs.iter().zip(arguments) {
        let Some(tensor) = tensor else { continue };
        for (axis, (dim, &size)) in input.ty.shape.dims().iter().zip(tensor.iter()).enumerate() {
            let Dim::Expr(expr) = dim else { continue };
            if let Some(expected) = expr.eval(&values)
                && expected != size
            {
                let bindings: Vec<String> =
                    expr.symbols().iter().map(|name| format!("{name} = {}", values[name.as_ref()])).collect();
                return Err(Error::ComputedSize {
                    key: input.key.clone(),
                    axis,
                    size,
                    dim: dim.to_string(),
                    expected,
                    bindings: bindings.join(", "),
                });
            }
        }
    }
    Ok(values)
}
