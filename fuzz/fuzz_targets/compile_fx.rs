//! Fuzz target: the whole compile of a `.fx` text without a device (parse, import, passes, the
//! optimizer, StableHLO lowering through MLIR) must return `Ok` or an `Err`, never panic, abort,
//! overflow the stack or hang. Seed the corpus with `fixtures/*/model.fx` and
//! `fixtures/errors/*.fx`; mutations of real programs reach the importer's decompositions.

use libfuzzer_sys::fuzz_target;

include!("driver.rs");

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let compiler = ttpu::Compiler::new();
    match compiler.compile(source, "fuzz.fx", &ttpu::CompileOptions::default()) {
        Ok(compiled) => assert!(!compiled.stablehlo.is_empty()),
        Err(error) => {
            let _ = error.to_string();
        }
    }
});
