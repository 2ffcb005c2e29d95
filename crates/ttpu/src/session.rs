//! `Session`: a PJRT client plus a compile cache; runs models on named host tensors.
//!
//! A [`Model`] is parsed and imported once with its symbolic dims. Each run binds the symbols
//! from the input shapes (checking ranges and agreement between inputs), then compiles that
//! specialisation once and keeps the executable.

use std::path::Path;
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use ttpu_fx::{InputRole, ModelSignature, Module};
use ttpu_ir::Dim;
use ttpu_pjrt::{Client, LoadedExecutable, Plugin};

use crate::tensor::{HostTensor, TensorMap, describe, element_type, fits, from_host_buffer};
use crate::{CompileOptions, Compiler, Error, Result};

/// A model read from `.fx` text, ready to run at any size its range constraints allow.
pub struct Model {
    program: ttpu_fx::ast::Program,
    module: Module,
    specialisations: Mutex<IndexMap<Vec<i64>, Arc<Specialisation>>>,
}

struct Specialisation {
    module: Module,
    executable: LoadedExecutable,
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

    /// How many specialisations were compiled so far.
    pub fn compile_count(&self) -> usize {
        self.specialisations.lock().map_or(0, |cache| cache.len())
    }
}

/// A device (through a PJRT plugin) and the compiler feeding it.
pub struct Session {
    client: Client,
    compiler: Compiler,
}

impl Session {
    /// A session on the plugin at `path`.
    pub fn new(plugin_path: &Path) -> Result<Session> {
        let plugin = Plugin::load(plugin_path)?;
        let client = Client::new(&plugin)?;
        tracing::debug!(platform = %client.platform_name().unwrap_or_default(), "pjrt client ready");
        Ok(Session { client, compiler: Compiler::new() })
    }

    /// A session on the plugin named by `--plugin`, else `$TTPU_PJRT_PLUGIN`, else the one
    /// `cargo xtask setup` installed.
    pub fn from_plugin_or_default(plugin_path: Option<&Path>) -> Result<Session> {
        match plugin_path {
            Some(path) => Session::new(path),
            None => Session::new(&ttpu_pjrt::find_plugin()?),
        }
    }

    /// The PJRT client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Parses and imports a model; nothing is compiled until it runs.
    pub fn load_model(&self, source: &str, path: &str) -> Result<Model> {
        let program = ttpu_fx::parse(source, path)?;
        let module = self.compiler.import_program(&program, &CompileOptions::default())?;
        Ok(Model { program, module, specialisations: Mutex::new(IndexMap::new()) })
    }

    /// Runs `model` on `weights` (keyed by signature target) and `inputs` (keyed by placeholder
    /// name). Returns user outputs as `output_0`, ... and mutated buffers under their targets.
    pub fn run(&self, model: &Model, weights: &TensorMap, inputs: &TensorMap) -> Result<TensorMap> {
        let arguments = bind_arguments(model.signature(), weights, inputs)?;
        let symbol_values = bind_symbols(&model.module, &arguments)?;
        let specialisation = self.specialise(model, symbol_values)?;
        let signature = &specialisation.module.signature;
        let buffers = arguments
            .iter()
            .map(|tensor| self.client.buffer_from_host(&tensor.data, element_type(tensor.dtype), &tensor.shape))
            .collect::<Result<Vec<_>, _>>()?;
        let buffer_refs: Vec<_> = buffers.iter().collect();
        let results = {
            let _span = tracing::debug_span!("execute").entered();
            specialisation.executable.execute(&buffer_refs)?
        };
        let mut outputs = TensorMap::new();
        for (output, buffer) in signature.outputs.iter().zip(results) {
            let host = buffer.to_host()?;
            let element = host.element_type;
            let tensor = from_host_buffer(host).ok_or_else(|| Error::Parity {
                key: output.key.clone(),
                message: format!("the device returned element type {element:?}, which ttpu never emits"),
            })?;
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
            self.compiler.import_program(&model.program, &CompileOptions { symbol_values })?
        };
        let stablehlo = self.compiler.lower(&module)?;
        let executable = {
            let _span = tracing::info_span!("pjrt_compile").entered();
            self.client.compile(&stablehlo)?
        };
        let specialisation = Arc::new(Specialisation { module, executable });
        cache.insert(cache_key, specialisation.clone());
        Ok(specialisation)
    }
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
    Ok(bound.into_iter().map(|(name, (size, _))| (name, size)).collect())
}
