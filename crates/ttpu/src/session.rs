//! `Session`: runs models on named host tensors on a [`ttpu_eager::Device`].
//!
//! A [`Model`] is parsed and imported once with its symbolic dims. Each run binds the symbols
//! from the input shapes (checking ranges and agreement between inputs), rounds each symbol that
//! padding cannot affect up to its bucket ([`Bucketing`]), pads the inputs, runs the
//! specialisation for those sizes (imported once per model and size) and slices the outputs back.
//! Executables come from the device's compile cache, keyed by graph structure and concrete
//! shapes: sessions on one device share compiles, and share the cache's capacity and counters
//! with the device's lazy tensors.

use std::path::Path;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use ttpu_eager::Device;
use ttpu_fx::{InputRole, ModelSignature, Module};
use ttpu_ir::{Dim, PaddingVerdict, PaddingVerdicts};
use ttpu_pjrt::{Client, LoadedExecutable};

use crate::tensor::{HostTensor, TensorMap, describe, fits, from_host_buffer};
use crate::{CompileOptions, Compiler, Error, Result};

/// A model read from `.fx` text, ready to run at any size its range constraints allow.
pub struct Model {
    program: ttpu_fx::ast::Program,
    module: Module,
    padding: PaddingVerdicts,
    specialisations: Mutex<IndexMap<Vec<i64>, Arc<Specialisation>>>,
}

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
    fn bucket(&self, size: i64, range: Option<&ttpu_ir::SymbolRange>) -> i64 {
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

struct Specialisation {
    module: Module,
    executable: Arc<LoadedExecutable>,
}

impl Model {
    /// The model's signature, with symbolic dims as exported.
    pub fn signature(&self) -> &ModelSignature {
        &self.module.signature
    }

    /// The imported module with symbolic dims.
    pub fn module(&self) -> &Module {
        &self.module
    }

    /// Per symbol, whether padding it can change results (and why), in declaration order.
    pub fn padding_verdicts(&self) -> &[(Arc<str>, PaddingVerdict)] {
        &self.padding
    }

    /// How many specialisations were compiled so far.
    pub fn compile_count(&self) -> usize {
        self.specialisations.lock().map_or(0, |cache| cache.len())
    }
}

/// A device (through a PJRT plugin) and the compiler feeding it.
pub struct Session {
    device: Device,
    compiler: Compiler,
    bucketing: Bucketing,
    options: CompileOptions,
}

impl Session {
    /// A session on the plugin at `path`.
    pub fn new(plugin_path: &Path) -> Result<Session> {
        let device = Device::from_plugin(plugin_path)?;
        tracing::debug!(platform = %device.client().platform_name().unwrap_or_default(), "pjrt client ready");
        Ok(Session::with_device(device))
    }

    /// A session on `device`, sharing its compile cache (and counters) with its lazy tensors and
    /// with other sessions on it.
    pub fn with_device(device: Device) -> Session {
        Session {
            device,
            compiler: Compiler::new(),
            bucketing: Bucketing::default(),
            options: CompileOptions::default(),
        }
    }

    /// The device models run on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A session on the plugin named by `--plugin`, else `$TTPU_PJRT_PLUGIN`, else the one
    /// `cargo xtask setup` installed.
    pub fn from_plugin_or_default(plugin_path: Option<&Path>) -> Result<Session> {
        match plugin_path {
            Some(path) => Session::new(path),
            None => Session::new(&ttpu_pjrt::find_plugin()?),
        }
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

    /// The PJRT client.
    pub fn client(&self) -> &Client {
        self.device.client()
    }

    /// Parses and imports a model; nothing is compiled until it runs.
    pub fn load_model(&self, source: &str, path: &str) -> Result<Model> {
        let program = ttpu_fx::parse(source, path)?;
        let (module, padding) = self.compiler.import_dynamic(&program, &self.options)?;
        Ok(Model { program, module, padding, specialisations: Mutex::new(IndexMap::new()) })
    }

    /// Runs `model` on `weights` (keyed by signature target) and `inputs` (keyed by placeholder
    /// name). Returns user outputs as `output_0`, ... and mutated buffers under their targets.
    pub fn run(&self, model: &Model, weights: &TensorMap, inputs: &TensorMap) -> Result<TensorMap> {
        let arguments = bind_arguments(model.signature(), weights, inputs)?;
        let symbol_values = bind_symbols(&model.module, &arguments)?;
        let compiled_values: IndexMap<String, i64> = symbol_values
            .iter()
            .map(|(symbol, &size)| {
                let paddable = model
                    .padding
                    .iter()
                    .any(|(name, verdict)| name.as_ref() == symbol && *verdict == PaddingVerdict::Pad);
                let bucket =
                    if paddable { self.bucketing.bucket(size, model.module.graph.symbols.range(symbol)) } else { size };
                (symbol.clone(), bucket)
            })
            .collect();
        let specialisation = self.specialise(model, compiled_values.clone())?;
        let signature = &specialisation.module.signature;
        let padded: Vec<std::borrow::Cow<'_, HostTensor>> = model
            .signature()
            .inputs
            .iter()
            .zip(&arguments)
            .map(|(input, tensor)| {
                let shape = resolved_shape(&input.ty, &tensor.shape, &compiled_values);
                if shape == tensor.shape {
                    std::borrow::Cow::Borrowed(*tensor)
                } else {
                    std::borrow::Cow::Owned(resize(tensor, &shape))
                }
            })
            .collect();
        let buffers = padded
            .iter()
            .map(|tensor| {
                self.device.client().buffer_from_host(
                    &tensor.data,
                    ttpu_eager::element_type(tensor.dtype),
                    &tensor.shape,
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let buffer_refs: Vec<_> = buffers.iter().collect();
        let results = {
            let _span = tracing::debug_span!("execute").entered();
            specialisation.executable.execute(&buffer_refs)?
        };
        let mut outputs = TensorMap::new();
        for ((output, symbolic), buffer) in signature.outputs.iter().zip(&model.signature().outputs).zip(results) {
            let host = buffer.to_host()?;
            let element = host.element_type;
            let tensor = from_host_buffer(host).ok_or_else(|| Error::Parity {
                key: output.key.clone(),
                message: format!("the device returned element type {element:?}, which ttpu never emits"),
            })?;
            // Outputs along padded symbols are cut back to the sizes the inputs gave.
            let true_shape = resolved_shape(&symbolic.ty, &tensor.shape, &symbol_values);
            let tensor = if true_shape == tensor.shape { tensor } else { resize(&tensor, &true_shape) };
            outputs.insert(output.key.clone(), tensor);
        }
        Ok(outputs)
    }

    fn specialise(&self, model: &Model, symbol_values: IndexMap<String, i64>) -> Result<Arc<Specialisation>> {
        let cache_key: Vec<i64> = symbol_values.values().copied().collect();
        let mut cache = model.specialisations.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(found) = cache.get(&cache_key) {
            return Ok(found.clone());
        }
        let module = if symbol_values.is_empty() {
            model.module.clone()
        } else {
            self.compiler.import_program(&model.program, &CompileOptions { symbol_values, ..self.options.clone() })?
        };
        let executable = {
            let _span = tracing::info_span!("pjrt_compile").entered();
            self.device.executable_of(&module.graph)?
        };
        let specialisation = Arc::new(Specialisation { module, executable });
        cache.insert(cache_key, specialisation.clone());
        Ok(specialisation)
    }
}

/// `ty`'s shape with each symbol replaced by its size in `values` (static dims kept from `actual`).
fn resolved_shape(ty: &ttpu_ir::TensorType, actual: &[i64], values: &IndexMap<String, i64>) -> Vec<i64> {
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
fn resize(tensor: &HostTensor, shape: &[i64]) -> HostTensor {
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

/// The graph's arguments in order, checked against the signature.
fn bind_arguments<'a>(
    signature: &ModelSignature,
    weights: &'a TensorMap,
    inputs: &'a TensorMap,
) -> Result<Vec<&'a HostTensor>> {
    let mut arguments = Vec::with_capacity(signature.inputs.len());
    for input in &signature.inputs {
        let (what, source) = match input.role {
            InputRole::UserInput => ("input", inputs),
            _ => ("weight", weights),
        };
        let tensor = source.get(&input.key).ok_or_else(|| Error::MissingTensor {
            what,
            key: input.key.clone(),
            expected: input.ty.to_string(),
        })?;
        if !fits(&input.ty, tensor) {
            return Err(Error::TensorMismatch {
                what,
                key: input.key.clone(),
                expected: input.ty.to_string(),
                found: describe(tensor),
            });
        }
        arguments.push(tensor);
    }
    for (what, source, is_user) in [("weight", weights, false), ("input", inputs, true)] {
        let known: Vec<&str> = signature
            .inputs
            .iter()
            .filter(|input| (input.role == InputRole::UserInput) == is_user)
            .map(|input| input.key.as_str())
            .collect();
        if let Some((key, tensor)) = source.iter().find(|(key, _)| !known.contains(&key.as_str())) {
            return Err(Error::UnexpectedTensor {
                what,
                key: key.clone(),
                found: describe(tensor),
                known: if known.is_empty() {
                    "none".into()
                } else {
                    known.iter().map(|key| format!("`{key}`")).collect::<Vec<_>>().join(", ")
                },
            });
        }
    }
    Ok(arguments)
}

/// Sizes of the model's symbols as the arguments give them, checked against their ranges.
fn bind_symbols(module: &Module, arguments: &[&HostTensor]) -> Result<IndexMap<String, i64>> {
    let symbols = &module.graph.symbols;
    let mut bound: IndexMap<String, (i64, String)> = IndexMap::new();
    for (input, tensor) in module.signature.inputs.iter().zip(arguments) {
        for (axis, (dim, &size)) in input.ty.shape.dims().iter().zip(&tensor.shape).enumerate() {
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
    let values: IndexMap<String, i64> = bound.into_iter().map(|(name, (size, _))| (name, size)).collect();
    // A compound dim (`2*s0`) must equal what its symbols say.
    for (input, tensor) in module.signature.inputs.iter().zip(arguments) {
        for (axis, (dim, &size)) in input.ty.shape.dims().iter().zip(&tensor.shape).enumerate() {
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
