//! `Compiler`: `.fx` text to a verified IR module and to StableHLO text. Needs no device.

use indexmap::IndexMap;
use ttpu_fx::{ImportOptions, Module};

use crate::pipeline::{PASSES, run_passes};
use crate::{Error, Result};

/// How the IR text and StableHLO are produced.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    /// Concrete sizes for symbolic dims (`s77 -> 8`); others stay symbolic.
    pub symbol_values: IndexMap<String, i64>,
}

/// A model compiled to StableHLO.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The imported module after the pass pipeline.
    pub module: Module,
    /// The StableHLO module text handed to PJRT.
    pub stablehlo: String,
}

/// Composes the frontend, the pass pipeline and StableHLO lowering.
#[derive(Clone, Debug, Default)]
pub struct Compiler {
    _private: (),
}

impl Compiler {
    /// A compiler with the default pipeline.
    pub fn new() -> Compiler {
        Compiler::default()
    }

    /// Parses and imports `.fx` text, then runs the pass pipeline; the IR is verified after each step.
    pub fn import(&self, source: &str, path: &str, options: &CompileOptions) -> Result<Module> {
        let program = ttpu_fx::parse(source, path)?;
        self.import_program(&program, options)
    }

    /// Imports an already parsed program (used to specialise one model to many sizes).
    pub fn import_program(&self, program: &ttpu_fx::ast::Program, options: &CompileOptions) -> Result<Module> {
        let span = tracing::debug_span!("import", path = %program.path);
        let _enter = span.enter();
        let import_options = ImportOptions { symbol_values: options.symbol_values.clone() };
        let mut module = ttpu_fx::import(program, &import_options)?;
        ttpu_ir::verify(&module.graph).map_err(|errors| Error::Internal { pass: "import", errors })?;
        run_passes(&mut module.graph, PASSES)?;
        Ok(module)
    }

    /// Lowers an imported module to StableHLO text.
    pub fn lower(&self, module: &Module) -> Result<String> {
        let _span = tracing::debug_span!("lower").entered();
        Ok(ttpu_stablehlo::lower(&module.graph)?)
    }

    /// `.fx` text to StableHLO in one call.
    pub fn compile(&self, source: &str, path: &str, options: &CompileOptions) -> Result<Compiled> {
        let module = self.import(source, path, options)?;
        let stablehlo = self.lower(&module)?;
        Ok(Compiled { module, stablehlo })
    }
}
