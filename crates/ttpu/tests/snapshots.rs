//! Snapshots of the IR and the StableHLO (shape-polymorphic for models with symbols) of every
//! fixture. A change in lowering shows up as a
//! snapshot diff to review (`cargo insta review`); CI refuses new or changed snapshots.

mod common;

use ttpu::{CompileOptions, Compiler};

#[test]
fn ir_fused_ir_and_stablehlo_of_every_fixture() {
    let compiler = Compiler::new();
    let unfused = CompileOptions { fuse: None, ..CompileOptions::default() };
    for (name, folder) in common::fixtures() {
        let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
        let path = common::relative_model_path(&name);
        // Models that only import at concrete sizes snapshot their message instead.
        let module = match compiler.import(&source, &path, &unfused) {
            Ok(module) => module,
            Err(error) => {
                insta::assert_snapshot!(format!("ir@{name}"), format!("error: {error}"));
                continue;
            }
        };
        insta::assert_snapshot!(format!("ir@{name}"), ttpu_ir::text::print(&module.graph));
        let fused =
            compiler.import(&source, &path, &CompileOptions::default()).expect("the optimizer keeps graphs valid");
        insta::assert_snapshot!(format!("fused@{name}"), ttpu_ir::text::print(&fused.graph));
        // A model with symbols snapshots its shape-polymorphic module.
        let lowered =
            if fused.graph.symbols.is_empty() { compiler.lower(&fused) } else { compiler.lower_polymorphic(&fused) };
        let stablehlo = match lowered {
            Ok(text) => text,
            Err(error) => format!("error: {error}"),
        };
        insta::assert_snapshot!(format!("stablehlo@{name}"), stablehlo);
    }
}

#[test]
fn lowering_is_deterministic() {
    let compiler = Compiler::new();
    let folder = common::fixtures_dir().join("gpt2_block");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let options = CompileOptions::default();
    let first = compiler.compile(&source, "fixtures/gpt2_block/model.fx", &options).expect("compiles").stablehlo;
    let second = compiler.compile(&source, "fixtures/gpt2_block/model.fx", &options).expect("compiles").stablehlo;
    assert_eq!(first, second);
}

#[test]
fn a_dynamic_model_lowers_once_its_sizes_are_given() {
    let compiler = Compiler::new();
    let folder = common::fixtures_dir().join("mlp_dynamic");
    let source = std::fs::read_to_string(folder.join("model.fx")).expect("model.fx is readable");
    let options =
        CompileOptions { symbol_values: [("s77".to_owned(), 7)].into_iter().collect(), ..CompileOptions::default() };
    let compiled = compiler.compile(&source, "fixtures/mlp_dynamic/model.fx", &options).expect("compiles at batch 7");
    assert!(compiled.stablehlo.contains("tensor<7x16xf32>"), "{}", compiled.stablehlo);
    assert!(compiled.stablehlo.contains("tensor<7x8xf32>"), "{}", compiled.stablehlo);
}
