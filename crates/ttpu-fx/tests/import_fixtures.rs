//! Every fixture model imports, its IR verifies, and its IR text matches the reviewed snapshot
//! (`ir_<name>`). `mlp_dynamic` imports both with a symbolic batch and at a fixed size.

use std::path::PathBuf;

use ttpu_fx::{ImportOptions, InputRole, Module, OutputRole};

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Every fixture folder holding a `model.fx`, sorted.
fn fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures directory")
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("model.fx").is_file())
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

fn load(name: &str, options: &ImportOptions) -> Module {
    let path = fixtures_dir().join(name).join("model.fx");
    let source = std::fs::read_to_string(&path).expect("readable model.fx");
    let shown = format!("fixtures/{name}/model.fx");
    match ttpu_fx::load(&source, &shown, options) {
        Ok(module) => module,
        Err(error) => panic!("{shown} does not import: {error}"),
    }
}

/// The symbolic import, or for models that compute with a symbol's value (or have compound dims)
/// the import at each symbol's smallest size.
fn load_symbolic_or_smallest(name: &str) -> Module {
    let path = fixtures_dir().join(name).join("model.fx");
    let source = std::fs::read_to_string(&path).expect("readable model.fx");
    let shown = format!("fixtures/{name}/model.fx");
    let program = ttpu_fx::parse(&source, &shown).unwrap_or_else(|error| panic!("{error}"));
    match ttpu_fx::import(&program, &ImportOptions::default()) {
        Ok(module) => module,
        Err(ttpu_fx::Error::DynamicDims { .. }) => {
            let symbol_values = program
                .range_constraints
                .iter()
                .map(|constraint| (constraint.symbol.clone(), constraint.min))
                .collect();
            ttpu_fx::import(&program, &ImportOptions { symbol_values, ..ImportOptions::default() })
                .unwrap_or_else(|error| panic!("{shown} does not import at its smallest sizes: {error}"))
        }
        Err(error) => panic!("{shown} does not import: {error}"),
    }
}

#[test]
fn every_fixture_imports_verifies_and_matches_its_snapshot() {
    let names = fixture_names();
    // As many as exist: a lost fixture fails here.
    assert!(names.len() >= 78, "found only {names:?}");
    for name in names {
        let module = load_symbolic_or_smallest(&name);
        if let Err(errors) = ttpu_ir::verify(&module.graph) {
            panic!("{name}: {errors}");
        }
        let text = ttpu_ir::text::print(&module.graph);
        insta::assert_snapshot!(format!("ir_{name}"), text);
    }
}

#[test]
fn mlp_dynamic_keeps_the_symbolic_batch() {
    let module = load("mlp_dynamic", &ImportOptions::default());
    let range = module.graph.symbols.range("s77").expect("s77 is declared");
    assert_eq!((range.min, range.max), (2, Some(1024)));
    let x = module.signature.inputs.last().expect("inputs");
    assert_eq!(x.ty.to_string(), "f32[s77, 16]");
    assert_eq!(module.signature.outputs[0].ty.to_string(), "f32[s77, 8]");
}

#[test]
fn mlp_dynamic_imports_at_a_concrete_size() {
    let mut options = ImportOptions::default();
    options.symbol_values.insert("s77".into(), 7);
    let module = load("mlp_dynamic", &options);
    ttpu_ir::verify(&module.graph).expect("valid IR");
    assert!(module.graph.symbols.is_empty(), "a symbol with a value is not declared");
    assert_eq!(module.signature.inputs.last().expect("inputs").ty.to_string(), "f32[7, 16]");
    assert_eq!(module.signature.outputs[0].ty.to_string(), "f32[7, 8]");
    // Same graph as the symbolic one with s77 replaced.
    let symbolic = ttpu_ir::text::print(&load("mlp_dynamic", &ImportOptions::default()).graph);
    let expected = symbolic.replace("symbol s77 in [2, 1024]\n", "").replace("s77", "7");
    assert_eq!(ttpu_ir::text::print(&module.graph), expected);
}

#[test]
fn symbol_values_are_checked() {
    let source = std::fs::read_to_string(fixtures_dir().join("mlp_dynamic/model.fx")).expect("model.fx");
    let mut options = ImportOptions::default();
    options.symbol_values.insert("s77".into(), 1);
    let error = ttpu_fx::load(&source, "m.fx", &options).expect_err("1 is below the range");
    assert!(error.to_string().contains("symbol `s77` = 1 is outside its range [2, 1024]"), "{error}");
    let mut options = ImportOptions::default();
    options.symbol_values.insert("s1".into(), 4);
    let error = ttpu_fx::load(&source, "m.fx", &options).expect_err("no such symbol");
    assert!(error.to_string().contains("no such symbol"), "{error}");
}

#[test]
fn buffer_mutation_signature() {
    let module = load("buffer_mutation", &ImportOptions::default());
    let inputs: Vec<(&str, &str, InputRole)> = module
        .signature
        .inputs
        .iter()
        .map(|input| (input.name.as_str(), input.key.as_str(), input.role.clone()))
        .collect();
    assert_eq!(
        inputs,
        [
            ("p_fc_weight", "fc.weight", InputRole::Parameter),
            ("p_fc_bias", "fc.bias", InputRole::Parameter),
            ("b_running_mean", "running_mean", InputRole::Buffer { persistent: true }),
            ("b_count", "count", InputRole::Buffer { persistent: true }),
            ("x", "x", InputRole::UserInput),
        ]
    );
    let outputs: Vec<(&str, OutputRole, String)> = module
        .signature
        .outputs
        .iter()
        .map(|output| (output.key.as_str(), output.role.clone(), output.ty.to_string()))
        .collect();
    assert_eq!(
        outputs,
        [
            ("running_mean", OutputRole::BufferMutation, "f32[8]".to_string()),
            ("count", OutputRole::BufferMutation, "i64[]".to_string()),
            ("output_0", OutputRole::User(0), "f32[4, 8]".to_string()),
        ]
    );
    assert_eq!(module.graph.outputs.len(), 3);
}

#[test]
fn cnn_signature_has_buffers() {
    let module = load("cnn", &ImportOptions::default());
    let buffers: Vec<(&str, String)> = module
        .signature
        .inputs
        .iter()
        .filter(|input| matches!(input.role, InputRole::Buffer { .. }))
        .map(|input| (input.key.as_str(), input.ty.to_string()))
        .collect();
    assert_eq!(
        buffers,
        [
            ("bn1.running_mean", "f32[8]".to_string()),
            ("bn1.running_var", "f32[8]".to_string()),
            ("bn1.num_batches_tracked", "i64[]".to_string()),
        ]
    );
    let user: Vec<&str> = module
        .signature
        .inputs
        .iter()
        .filter(|input| input.role == InputRole::UserInput)
        .map(|input| input.key.as_str())
        .collect();
    assert_eq!(user, ["x"]);
    assert_eq!(module.signature.inputs.len(), module.graph.inputs.len());
    assert_eq!(module.signature.outputs.len(), 1);
    assert_eq!(module.signature.outputs[0].key, "output_0");
}

#[test]
fn every_fixture_op_is_supported() {
    let supported = ttpu_fx::supported_ops();
    let mut sorted = supported.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(supported, sorted, "supported_ops() is sorted and unique");
    for name in fixture_names() {
        let meta = std::fs::read_to_string(fixtures_dir().join(&name).join("meta.json")).expect("meta.json");
        // `"aten_ops": ["aten.x.y", ...]`: every quoted `aten.` string is an overload.
        for op in meta.split('"').filter(|part| part.starts_with("aten.")) {
            assert!(supported.contains(&op), "{name} uses {op}, which has no decomposition");
        }
    }
}
