//! `Compiler`: `.fx` text to a verified IR module and to StableHLO text. Needs no device.

use indexmap::IndexMap;
use ttpu_fx::{ImportOptions, Module};
use ttpu_ir::{Dim, PaddingVerdict, PaddingVerdicts};

use crate::pipeline::{PASSES, run_passes};
use crate::{Error, Result};

/// How the IR text and StableHLO are produced.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    /// Concrete sizes for symbolic dims (`s77 -> 8`); others stay symbolic.
    pub symbol_values: IndexMap<String, i64>,
    /// The e-graph optimizer's options, or `None` to skip it (`--no-fuse`).
    pub fuse: Option<ttpu_fuse::FuseOptions>,
    /// The seed of the model's random ops, 0 by default ([`ttpu_fx::ImportOptions::seed`]): the
    /// numbers are fixed at compile time, so every run of a compiled model draws the same ones.
    pub seed: u64,
    /// Evaluate the work that reads only weights once, when a model's weights are bound
    /// (`Session::load`), instead of on every call: layout changes, converts and arithmetic on
    /// weights run in a preparation program whose results stay resident (on by default;
    /// `--no-weight-prep` turns it off). Sharded models are not split.
    pub prepare_weights: bool,
    /// XLA options by name for every compile of the model (fields of `xla.DebugOptions`, such as
    /// `xla_cpu_use_thunk_runtime`; `--xla-option NAME=VALUE`), applied by the plugin on top of
    /// its defaults and part of the compile-cache keys. A name the plugin does not know fails the
    /// first compile with the plugin's message (`No such compile option: '...'`). Empty by
    /// default: XLA's own defaults.
    pub xla_options: Vec<(String, crate::OptionValue)>,
}

impl Default for CompileOptions {
    /// Symbolic dims kept, exact rewrites on, weight-only work prepared at load.
    fn default() -> CompileOptions {
        CompileOptions {
            symbol_values: IndexMap::new(),
            fuse: Some(ttpu_fuse::FuseOptions::default()),
            seed: 0,
            prepare_weights: true,
            xla_options: Vec::new(),
        }
    }
}

/// A model compiled to StableHLO.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The imported module after the pass pipeline.
    pub module: Module,
    /// The StableHLO module text handed to PJRT.
    pub stablehlo: String,
}

/// Composes the frontend, the pass pipeline and StableHLO lowering, with the user kernels that
/// calls of ops outside the ATen table run.
#[derive(Clone, Debug, Default)]
pub struct Compiler {
    kernels: ttpu_fx::Kernels,
}

impl Compiler {
    /// A compiler with the default pipeline and no user kernels.
    pub fn new() -> Compiler {
        Compiler::default()
    }

    /// Registers the user op `name` (`mylib::foo`, as `torch.library.custom_op` names it; `.fx`
    /// text calls it `torch.ops.mylib.foo.default`) with a StableHLO module as its
    /// implementation: MLIR text in generic op form whose public `@main` takes the op's tensors
    /// and returns its results (what `jax.jit(f).lower(...)` gives, printed generic). Each call
    /// is checked against `@main`'s types at import, and the module's functions are inlined into
    /// the program as private functions; the module's bytes are part of every compile-cache key.
    /// A module that does not parse or has no usable `@main`, or a name that is malformed or
    /// already registered, is an error naming the kernel.
    pub fn register_kernel(&mut self, name: &str, module: &str) -> Result<()> {
        let signature = ttpu_stablehlo::kernel_signature(module)
            .map_err(|error| Error::Kernel { name: name.to_owned(), message: error.to_string() })?;
        let kernel = ttpu_ir::Kernel {
            name: name.into(),
            inputs: signature.inputs,
            results: signature.results,
            body: ttpu_ir::KernelBody::StableHlo(module.into()),
        };
        self.insert_kernel(kernel)
    }

    /// Registers the user op `name` with a host implementation: `function` runs on the host
    /// through XLA's FFI (the plugin must export the PJRT FFI extension, as the CPU plugin does;
    /// others refuse the program before it compiles), reading tensors of `inputs` types and
    /// writing tensors of `results` types. The function is registered for the whole process, so
    /// a name can have one host function only.
    pub fn register_host_kernel(
        &mut self,
        name: &str,
        inputs: Vec<ttpu_ir::TensorType>,
        results: Vec<ttpu_ir::TensorType>,
        function: std::sync::Arc<ttpu_runtime::HostKernelFn>,
    ) -> Result<()> {
        let fail = |message: String| Error::Kernel { name: name.to_owned(), message };
        if let Some(ty) = inputs.iter().chain(&results).find(|ty| !ty.shape.is_static()) {
            return Err(fail(format!("the type {ty} is symbolic; kernel types are static")));
        }
        if results.is_empty() {
            return Err(fail("a kernel has at least one result".into()));
        }
        let kernel = ttpu_ir::Kernel { name: name.into(), inputs, results, body: ttpu_ir::KernelBody::Host };
        let mut kernels = self.kernels.clone();
        kernels.insert(std::sync::Arc::new(kernel)).map_err(|error| fail(without_name(&error)))?;
        ttpu_runtime::register_host_kernel(name, function).map_err(|error| fail(error.to_string()))?;
        self.kernels = kernels;
        Ok(())
    }

    /// Registers every `*.mlir` file of `dir` as a StableHLO kernel named after the file
    /// (`mylib.foo.mlir` is `mylib::foo`), in name order.
    pub fn register_kernel_dir(&mut self, dir: &std::path::Path) -> Result<()> {
        let unreadable =
            |error: std::io::Error| Error::Kernel { name: dir.display().to_string(), message: error.to_string() };
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map_err(unreadable)?
            .map(|entry| entry.map(|entry| entry.path()))
            .collect::<std::io::Result<_>>()
            .map_err(unreadable)?;
        files.retain(|path| path.extension().is_some_and(|ext| ext == "mlir"));
        files.sort();
        for file in files {
            let stem = file.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default();
            let Some((namespace, op)) = stem.split_once('.') else {
                return Err(Error::Kernel {
                    name: file.display().to_string(),
                    message: "a kernel file is named `namespace.op.mlir`".into(),
                });
            };
            let module = std::fs::read_to_string(&file)
                .map_err(|error| Error::Kernel { name: file.display().to_string(), message: error.to_string() })?;
            self.register_kernel(&format!("{namespace}::{op}"), &module)?;
        }
        Ok(())
    }

    /// The user kernels registered so far.
    pub fn kernels(&self) -> &ttpu_fx::Kernels {
        &self.kernels
    }

    fn insert_kernel(&mut self, kernel: ttpu_ir::Kernel) -> Result<()> {
        let name = kernel.name.to_string();
        self.kernels
            .insert(std::sync::Arc::new(kernel))
            .map_err(|error| Error::Kernel { name, message: without_name(&error) })
    }

    /// Parses and imports `.fx` text, then runs the pass pipeline; the IR is verified after each step.
    pub fn import(&self, source: &str, path: &str, options: &CompileOptions) -> Result<Module> {
        let program = ttpu_fx::parse(source, path)?;
        self.import_program(&program, options)
    }

    /// Imports an already parsed program (used to specialise one model to many sizes).
    pub fn import_program(&self, program: &ttpu_fx::ast::Program, options: &CompileOptions) -> Result<Module> {
        self.import_with_report(program, options).map(|(module, _)| module)
    }

    /// Like [`Compiler::import_program`], also returning what the optimizer did (when it ran).
    pub fn import_with_report(
        &self,
        program: &ttpu_fx::ast::Program,
        options: &CompileOptions,
    ) -> Result<(Module, Option<ttpu_fuse::FuseReport>)> {
        let span = tracing::debug_span!("import", path = %program.path);
        let _enter = span.enter();
        let import_options = ImportOptions {
            symbol_values: options.symbol_values.clone(),
            seed: options.seed,
            kernels: self.kernels.clone(),
        };
        let mut module = ttpu_fx::import(program, &import_options)?;
        ttpu_ir::verify(&module.graph).map_err(|errors| Error::Internal { pass: "import", errors })?;
        run_passes(&mut module.graph, PASSES)?;
        let Some(fuse_options) = &options.fuse else { return Ok((module, None)) };
        // With the load-time split, work on weights alone runs once: the optimizer prices it so.
        let fuse_options = if options.prepare_weights && fuse_options.resident_inputs.is_empty() {
            let resident_inputs = crate::prepare::resident_inputs(&module.signature);
            ttpu_fuse::FuseOptions { resident_inputs, ..fuse_options.clone() }
        } else {
            fuse_options.clone()
        };
        let (fused, report) = {
            let _span = tracing::debug_span!("fuse").entered();
            ttpu_fuse::fuse(&module.graph, &fuse_options)?
        };
        ttpu_ir::verify(&fused).map_err(|errors| Error::Internal { pass: "fuse", errors })?;
        tracing::debug!(ops_before = report.ops_before, ops_after = report.ops_after, stop = %report.stop_reason, "fused");
        module.graph = fused;
        Ok((module, Some(report)))
    }

    /// Imports a model keeping its symbolic dims, and decides per symbol whether runs may pad it
    /// (see [`ttpu_ir::padding_verdicts`]).
    pub fn import_dynamic(
        &self,
        program: &ttpu_fx::ast::Program,
        options: &CompileOptions,
    ) -> Result<(Module, PaddingVerdicts)> {
        match self.import_program(program, options) {
            Ok(module) if !module.pending.is_empty() => {
                // The graph is a size program, not the model: nothing proves padding safe.
                let padding =
                    all_exact(&module, &format!("the data decides sizes of the model ({})", module.pending[0]));
                Ok((module, padding))
            }
            Ok(module) => {
                let padding = ttpu_ir::padding_verdicts(&module.graph);
                Ok((module, padding))
            }
            Err(Error::Frontend(error)) if matches!(*error, ttpu_fx::Error::DynamicDims { .. }) => {
                self.sized_stand_in(program, options, &error)
            }
            Err(error) => Err(error),
        }
    }

    /// For a model that only imports at concrete sizes (it computes with a symbol's value, or
    /// has compound dims like `s0*s1`): the module imported at each symbol's smallest size, with
    /// the placeholders' symbolic types put back so inputs bind symbols. Every symbol compiles
    /// exactly, since nothing proves padding safe.
    fn sized_stand_in(
        &self,
        program: &ttpu_fx::ast::Program,
        options: &CompileOptions,
        why: &ttpu_fx::Error,
    ) -> Result<(Module, PaddingVerdicts)> {
        // Only the symbols of input dims: the data decides the others (`u0`), at run time.
        let input_symbols = program.input_symbols();
        let symbol_values: IndexMap<String, i64> = program
            .range_constraints
            .iter()
            .filter(|constraint| input_symbols.contains(&constraint.symbol))
            .map(|constraint| (constraint.symbol.clone(), constraint.min.max(0)))
            .collect();
        let mut module = self.import_program(program, &CompileOptions { symbol_values, ..options.clone() })?;
        for constraint in &program.range_constraints {
            let range = ttpu_ir::SymbolRange { min: constraint.min, max: constraint.max };
            module.graph.symbols.declare(&constraint.symbol, range);
        }
        for (input, placeholder) in module.signature.inputs.iter_mut().zip(&program.placeholders) {
            if let ttpu_fx::ast::FxType::Tensor { dtype, dims } = &placeholder.ty {
                let symbolic: Option<ttpu_ir::Shape> = dims
                    .iter()
                    .map(|dim| match dim {
                        ttpu_fx::ast::SymExpr::Int(size) => Some(Dim::Static(*size)),
                        ttpu_fx::ast::SymExpr::Symbol(name) => module.graph.symbols.name(name).map(Dim::Sym),
                        _ => None,
                    })
                    .collect();
                let Some(shape) = symbolic else { return Err(Error::Frontend(Box::new(why.clone()))) };
                input.ty = ttpu_ir::TensorType::new(*dtype, shape);
            }
        }
        let padding = all_exact(&module, &format!("the model only imports at concrete sizes ({})", why));
        Ok((module, padding))
    }

    /// Lowers an imported module to StableHLO text.
    pub fn lower(&self, module: &Module) -> Result<String> {
        let _span = tracing::debug_span!("lower").entered();
        Ok(ttpu_stablehlo::lower(&module.graph)?)
    }

    /// Lowers a static module to one SPMD StableHLO module laid out over a mesh as
    /// `parallelism` plans it (Shardy's `sdy.mesh` and `sdy.sharding` annotations).
    pub fn lower_sharded(&self, module: &Module, parallelism: &crate::Parallelism) -> Result<String> {
        let _span = tracing::debug_span!("lower", sharded = true).entered();
        let sharding = parallelism.program_sharding(&module.signature)?;
        let options = ttpu_stablehlo::LowerOptions { sharding: Some(sharding), ..Default::default() };
        Ok(ttpu_stablehlo::lower_with(&module.graph, &options)?)
    }

    /// Lowers a module that keeps its symbolic dims to a shape-polymorphic StableHLO module
    /// (`tensor<?x8xf32>`, sizes computed with `get_dimension_size` and the `dynamic_*` ops): the
    /// portable artifact. PJRT plugins compile static modules, so runs lower per size instead.
    pub fn lower_polymorphic(&self, module: &Module) -> Result<String> {
        let _span = tracing::debug_span!("lower", polymorphic = true).entered();
        let options = ttpu_stablehlo::LowerOptions { shape_polymorphic: true, ..Default::default() };
        Ok(ttpu_stablehlo::lower_with(&module.graph, &options)?)
    }

    /// `.fx` text to StableHLO in one call.
    pub fn compile(&self, source: &str, path: &str, options: &CompileOptions) -> Result<Compiled> {
        let module = self.import(source, path, options)?;
        let stablehlo = self.lower(&module)?;
        Ok(Compiled { module, stablehlo })
    }
}

/// A registry error's reason, for a message that names the kernel already.
fn without_name(error: &ttpu_fx::KernelError) -> String {
    match error {
        ttpu_fx::KernelError::BadName { .. } => {
            "the name is not `namespace::name` (as `torch.library` names ops)".into()
        }
        ttpu_fx::KernelError::Twice { .. } => "registered twice".into(),
    }
}

/// Every symbol of `module` compiled exactly, for `reason`.
fn all_exact(module: &Module, reason: &str) -> PaddingVerdicts {
    module.graph.symbols.iter().map(|(symbol, _)| (symbol.clone(), PaddingVerdict::Exact(reason.to_owned()))).collect()
}
