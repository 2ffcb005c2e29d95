//! Shared helpers for the driver's tests: fixture discovery, the plugin and a shared session.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ttpu::Session;

/// The repository's `fixtures/` folder.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Every fixture folder holding a `model.fx`, sorted by name.
pub fn fixtures() -> Vec<(String, PathBuf)> {
    let mut res: Vec<(String, PathBuf)> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures/ exists")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path())
        .filter(|path| path.join("model.fx").is_file())
        .map(|path| (path.file_name().expect("a folder has a name").to_string_lossy().into_owned(), path))
        .collect();
    res.sort();
    res
}

/// The relative path used in messages and snapshots, so they do not depend on the checkout.
pub fn relative_model_path(name: &str) -> String {
    format!("fixtures/{name}/model.fx")
}

/// One session for all tests of a binary: creating a PJRT client costs tens of milliseconds.
pub fn session() -> &'static Session {
    static SESSION: OnceLock<Session> = OnceLock::new();
    SESSION.get_or_init(|| match Session::from_plugin_or_default(None) {
        Ok(session) => session,
        Err(error) => panic!("no PJRT CPU plugin: {error} (run `cargo xtask setup`)"),
    })
}

/// `rtol`, `atol` from a fixture's meta.json.
pub fn tolerances(folder: &Path) -> (f64, f64) {
    let text = std::fs::read_to_string(folder.join("meta.json")).expect("every fixture has meta.json");
    let meta: serde_json::Value = serde_json::from_str(&text).expect("meta.json is JSON");
    let field = |name: &str| meta[name].as_f64().unwrap_or_else(|| panic!("meta.json has no number `{name}`"));
    (field("rtol"), field("atol"))
}

/// Whether a fixture's input sets are successive calls of one module (meta.json `chained`).
pub fn chained(folder: &Path) -> bool {
    let text = std::fs::read_to_string(folder.join("meta.json")).expect("every fixture has meta.json");
    let meta: serde_json::Value = serde_json::from_str(&text).expect("meta.json is JSON");
    meta["chained"].as_bool().unwrap_or(false)
}

/// `inputs.safetensors` and every `inputs_<set>.safetensors`, each with its expected file.
pub fn input_sets(folder: &Path) -> Vec<(String, String)> {
    let mut sets: Vec<(String, String)> = std::fs::read_dir(folder)
        .expect("fixture folders are readable")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter_map(|file| {
            let suffix = file.strip_prefix("inputs")?.strip_suffix(".safetensors")?.to_owned();
            Some((file, format!("expected{suffix}.safetensors")))
        })
        .collect();
    sets.sort();
    sets
}
