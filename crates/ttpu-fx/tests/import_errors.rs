//! Error messages of the importer: every `fixtures/errors/*.fx` that *parses* and has a sibling
//! `.expected` file must fail [`ttpu_fx::load`] with exactly that message. Files that fail to parse
//! belong to the parser's test (`parse_errors.rs`). Set `TTPU_BLESS=1` to rewrite the `.expected`
//! files of importer errors from the current messages.

use std::path::PathBuf;

use ttpu_fx::{Error, ImportOptions};

fn errors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/errors")
}

fn load_error(name: &str) -> Error {
    let source = std::fs::read_to_string(errors_dir().join(format!("{name}.fx"))).expect("readable fixture");
    match ttpu_fx::load(&source, &format!("fixtures/errors/{name}.fx"), &ImportOptions::default()) {
        Ok(_) => panic!("{name}.fx imported, but an error was expected"),
        Err(error) => error,
    }
}

#[test]
fn error_fixtures_that_parse_fail_import_with_expected_messages() {
    let bless = std::env::var_os("TTPU_BLESS").is_some_and(|value| value == "1");
    let mut entries: Vec<PathBuf> = std::fs::read_dir(errors_dir())
        .expect("fixtures/errors")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "fx"))
        .collect();
    entries.sort();
    let mut checked = Vec::new();
    for path in entries {
        let name = path.file_stem().and_then(|stem| stem.to_str()).expect("utf-8 name").to_owned();
        let shown = format!("fixtures/errors/{name}.fx");
        let source = std::fs::read_to_string(&path).expect("readable fixture");
        let Ok(program) = ttpu_fx::parse(&source, &shown) else {
            continue;
        };
        let expected_path = path.with_extension("expected");
        let message = match ttpu_fx::import(&program, &ImportOptions::default()) {
            Ok(_) => panic!("{shown} parses and imports; importer error fixtures must fail to import"),
            Err(error) => error.to_string(),
        };
        if bless {
            std::fs::write(&expected_path, format!("{message}\n")).expect("write .expected");
        } else {
            let expected = std::fs::read_to_string(&expected_path)
                .unwrap_or_else(|_| panic!("{shown} fails to import but has no .expected file: {message}"));
            assert_eq!(message, expected.trim_end(), "{shown}");
        }
        checked.push(name);
    }
    for required in ["unknown_op", "type_mismatch", "signature_missing_input", "item_bool", "local_scalar_dense"] {
        assert!(checked.iter().any(|name| name == required), "{required}.fx was not checked: {checked:?}");
    }
}

#[test]
fn error_variants_and_locations() {
    match load_error("unknown_op") {
        Error::UnsupportedOp { op, node, at } => {
            assert_eq!(op, "aten.frobnicate.default");
            assert_eq!(node, "relu");
            assert_eq!((at.line, at.col), (9, 34), "the location is the call target");
        }
        other => panic!("expected UnsupportedOp, got {other:?}"),
    }
    // A value the data decides is read back only when it is an integer.
    for name in ["local_scalar_dense", "item_bool"] {
        match load_error(name) {
            Error::BadArguments { op, message, .. } => {
                assert_eq!(op, "aten._local_scalar_dense.default");
                assert!(message.contains("only integer values are read back"), "{message}");
            }
            other => panic!("expected BadArguments, got {other:?}"),
        }
    }
    match load_error("type_mismatch") {
        Error::TypeMismatch { node, annotated, inferred, .. } => {
            assert_eq!((node.as_str(), annotated.as_str(), inferred.as_str()), ("relu", "f32[4, 31]", "f32[4, 32]"));
        }
        other => panic!("expected TypeMismatch, got {other:?}"),
    }
    assert!(matches!(load_error("signature_missing_input"), Error::Signature { .. }));
    assert!(matches!(load_error("signature_wrong_output"), Error::Signature { .. }));
    assert!(matches!(load_error("dynamic_compound_dim"), Error::TypeMismatch { .. }));
    assert!(matches!(load_error("bad_arguments"), Error::BadArguments { .. }));
}
