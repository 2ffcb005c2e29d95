//! Repository hygiene checked as a test: the allowed dependency edges between crates, no declared
//! dependency left unused, a `//!` doc at the top of every Rust file, and no `#[ignore]` or
//! `#[should_panic]` anywhere.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Workspace crates each crate may depend on (normal, dev or build dependencies alike).
const ALLOWED_EDGES: &[(&str, &[&str])] = &[
    ("ttpu-ir", &[]),
    ("ttpu-pjrt", &[]),
    ("ttpu-torch", &["ttpu-ir"]),
    ("ttpu-aten", &["ttpu-ir", "ttpu-torch"]),
    ("ttpu-fx", &["ttpu-ir", "ttpu-aten"]),
    ("ttpu-fuse", &["ttpu-ir"]),
    ("ttpu-stablehlo", &["ttpu-ir"]),
    ("ttpu-runtime", &["ttpu-ir", "ttpu-stablehlo", "ttpu-pjrt"]),
    ("ttpu-eager", &["ttpu-ir", "ttpu-torch", "ttpu-fuse", "ttpu-runtime"]),
    ("ttpu-device", &["ttpu-ir", "ttpu-aten", "ttpu-eager", "ttpu-runtime"]),
    ("ttpu-dist", &["ttpu-runtime"]),
    ("ttpu", &["ttpu-ir", "ttpu-fx", "ttpu-fuse", "ttpu-stablehlo", "ttpu-runtime", "ttpu-dist"]),
    ("ttpu-filetest", &[]),
    ("ttpu-py", &["ttpu", "ttpu-device"]),
    ("ttpu-serve", &["ttpu"]),
    ("xtask", &[]),
];

/// Extra workspace crates a crate's tests may use: lowering tests execute what they emit, the IR
/// crates share one filetest harness, the driver's tests check that both frontends build the
/// same IR for PyTorch's shared decompositions, and the control plane's tests compile programs
/// over a job's mesh.
const ALLOWED_DEV_EDGES: &[(&str, &[&str])] = &[
    ("ttpu-stablehlo", &["ttpu-pjrt"]),
    ("ttpu-ir", &["ttpu-filetest"]),
    ("ttpu-fuse", &["ttpu-filetest"]),
    ("ttpu", &["ttpu-eager"]),
    ("ttpu-dist", &["ttpu-ir"]),
];

/// Crates that only binaries may use.
const BINARY_ONLY: &[&str] = &["clap", "anyhow", "miette", "tracing-subscriber", "indicatif"];

/// Packages with a binary, which may use them there.
const BINARIES: &[&str] = &["ttpu", "ttpu-serve", "xtask"];

/// Dependencies of the serving edge that no compiler crate may take.
const SERVING_ONLY: &[&str] = &["tokio", "axum", "tokenizers", "minijinja", "minijinja-contrib"];

/// `(package name, manifest text, crate directory)` of every workspace member.
fn members() -> Vec<(String, String, PathBuf)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .expect("crates/ exists")
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    dirs.push(root().join("xtask"));
    dirs.sort();
    dirs.into_iter()
        .map(|dir| {
            let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("every crate has a Cargo.toml");
            let name = text
                .lines()
                .find_map(|line| line.strip_prefix("name = \""))
                .and_then(|rest| rest.strip_suffix('"'))
                .expect("every manifest names its package")
                .to_owned();
            (name, text, dir)
        })
        .collect()
}

/// `(name, is_dev_dependency)` for every dependency line of a manifest.
fn dependency_names(manifest: &str) -> Vec<(String, bool)> {
    let mut section = None;
    let mut res = vec![];
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.ends_with("dependencies]").then(|| line.contains("dev-dependencies"));
            continue;
        }
        if let Some(is_dev) = section
            && let Some((name, _)) = line.split_once(['=', '.'])
        {
            let name = name.trim();
            if !name.is_empty() && !name.starts_with('#') {
                res.push((name.to_owned(), is_dev));
            }
        }
    }
    res
}

#[test]
fn crate_dependencies_follow_the_allowed_edges() {
    let mut problems = vec![];
    for (name, manifest, _) in members() {
        let Some((_, allowed)) = ALLOWED_EDGES.iter().find(|(crate_name, _)| *crate_name == name) else {
            problems.push(format!("{name} is not listed in ALLOWED_EDGES"));
            continue;
        };
        let dev_allowed =
            ALLOWED_DEV_EDGES.iter().find(|(crate_name, _)| *crate_name == name).map_or(&[][..], |(_, extra)| *extra);
        for (dependency, is_dev) in dependency_names(&manifest) {
            let is_workspace_crate = dependency.starts_with("ttpu");
            let permitted =
                allowed.contains(&dependency.as_str()) || (is_dev && dev_allowed.contains(&dependency.as_str()));
            if is_workspace_crate && !permitted {
                problems.push(format!("{name} depends on {dependency}"));
            }
            if BINARY_ONLY.contains(&dependency.as_str()) && !BINARIES.contains(&name.as_str()) {
                problems.push(format!("library {name} depends on binary-only {dependency}"));
            }
            if SERVING_ONLY.contains(&dependency.as_str()) && name != "ttpu-serve" {
                problems.push(format!("{name} depends on {dependency}, which only ttpu-serve may use"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// Whether Rust code names the crate `name` (`name::`, `use name`, `extern crate name`).
fn names_crate(code: &str, name: &str) -> bool {
    let ident = name.replace('-', "_");
    code.match_indices(&ident).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = &code[at + ident.len()..];
        let starts_word = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        starts_word && (after.starts_with("::") || after.starts_with(';') || after.starts_with(" as "))
    })
}

#[test]
fn every_declared_dependency_is_used() {
    let mut problems = vec![];
    let mut used_anywhere = std::collections::BTreeSet::new();
    for (name, manifest, dir) in members() {
        let mut files = vec![];
        rust_files(&dir, &mut files);
        let code: String = files.iter().filter_map(|file| std::fs::read_to_string(file).ok()).collect();
        let declared = dependency_names(&manifest);
        for (index, (dependency, _)) in declared.iter().enumerate() {
            if declared[..index].iter().any(|(earlier, _)| earlier == dependency) {
                // A normal dependency is there for tests too.
                problems.push(format!("{name} declares {dependency} twice"));
            }
        }
        for (dependency, _) in declared {
            if names_crate(&code, &dependency) {
                used_anywhere.insert(dependency);
            } else {
                problems.push(format!("{name} declares {dependency} and never uses it"));
            }
        }
    }
    let workspace = std::fs::read_to_string(root().join("Cargo.toml")).expect("the workspace manifest exists");
    for (dependency, _) in dependency_names(&workspace) {
        if !used_anywhere.contains(&dependency) {
            problems.push(format!("the workspace declares {dependency} and no crate uses it"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_unused_dependency_check_sees_uses_and_misses() {
    assert!(names_crate("use smallvec::SmallVec;", "smallvec"));
    assert!(names_crate("    tracing::debug!(x);", "tracing"));
    assert!(names_crate("let m = mlir_sys::mlirContextCreate();", "mlir-sys"));
    assert!(!names_crate("let my_smallvec = 1; // smallvec", "smallvec"));
    assert!(!names_crate("use ttpu_ir_extra::X;", "ttpu-ir"));
}

/// Every `unsafe` block or impl says why it is sound in a `// SAFETY:` comment in the comment
/// lines right above it (or on its own line). The `unsafe_code` lint (denied for the workspace)
/// makes each crate that needs `unsafe` allow it by name; this makes each use explain itself.
#[test]
fn every_unsafe_block_has_a_safety_comment() {
    let mut problems = vec![];
    for (shown, text) in workspace_sources() {
        if shown.ends_with("tidy.rs") {
            continue;
        }
        for line in unexplained_unsafe(&text) {
            problems.push(format!("{shown}:{line}: `unsafe` without a `// SAFETY:` comment"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The 1-based lines of `text` with an `unsafe` block or impl and no `SAFETY:` on the line or in
/// the comment lines right above it.
fn unexplained_unsafe(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = vec![];
    for (index, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let is_unsafe_use = ["unsafe {", "unsafe impl"].iter().any(|form| code.contains(form));
        if !is_unsafe_use || line.contains("SAFETY:") {
            continue;
        }
        let explained = lines[..index]
            .iter()
            .rev()
            .take_while(|above| above.trim_start().starts_with("//"))
            .any(|above| above.contains("SAFETY:"));
        if !explained {
            found.push(index + 1);
        }
    }
    found
}

#[test]
fn the_safety_check_sees_explained_and_unexplained_blocks() {
    let text = "// SAFETY: the pointer is live.\n// More of why.\nlet a = unsafe { f() };\n\n\
                let b = unsafe { g() };\n// a comment that is not one\nunsafe impl Send for X {}\n\
                let c = 1; // unsafe { in a comment }\n";
    assert_eq!(unexplained_unsafe(text), vec![5, 7]);
}

/// `(path as shown, text)` of every Rust file of the workspace.
fn workspace_sources() -> Vec<(String, String)> {
    let mut files = vec![];
    rust_files(&root().join("crates"), &mut files);
    rust_files(&root().join("xtask"), &mut files);
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file).expect("source files are UTF-8");
            (file.strip_prefix(root()).unwrap_or(&file).display().to_string(), text)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            if !path.ends_with("target") && !path.ends_with("snapshots") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_starts_with_a_doc_and_no_test_is_ignored() {
    let mut problems = vec![];
    for (shown, text) in workspace_sources() {
        let is_build_script = shown.ends_with("build.rs");
        if !is_build_script && !text.trim_start().starts_with("//!") {
            problems.push(format!("{shown}: no `//!` doc at the top"));
        }
        for marker in ["#[ignore", "#[should_panic"] {
            // Split so this file does not match itself.
            if text.contains(marker) && !shown.ends_with("tidy.rs") {
                problems.push(format!("{shown}: uses {marker}]"));
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
