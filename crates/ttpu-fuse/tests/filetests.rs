//! Data-driven tests: every `tests/filetests/*.ttir` file is one fuse case.
//!
//! A file is a `; test fuse` header, optional `; set fast_math=true`, optional `;` comment lines,
//! the input IR text, and an `; expected:` line followed by the expected output: a
//! `; rules fired: ...` line and the fused IR text. Besides comparing text, every case runs the
//! input and the fused graph through the reference interpreter on several random inputs and checks
//! the results are bit-identical (close, for fast-math cases).
//!
//! Run with `TTPU_BLESS=1` to rewrite the expected blocks from the actual output.

mod common;

use std::path::{Path, PathBuf};

use common::interp::{Inputs, eval};
use ttpu_fuse::{FuseOptions, fuse, rule_names};
use ttpu_ir::text::{parse, print};

const EXPECTED: &str = "; expected:\n";

struct Case {
    fast_math: bool,
    body: String,
    head: String,
    expected: Option<String>,
}

fn split(contents: &str) -> Result<Case, String> {
    let header = contents.lines().next().ok_or("empty file")?;
    if header != "; test fuse" {
        return Err(format!("the first line must be `; test fuse`, found `{header}`"));
    }
    let (head, expected) = match contents.find(EXPECTED) {
        Some(at) => (contents[..at].to_owned(), Some(contents[at + EXPECTED.len()..].to_owned())),
        None => (if contents.ends_with('\n') { contents.to_owned() } else { format!("{contents}\n") }, None),
    };
    let mut fast_math = false;
    let mut body = String::new();
    for line in head.split_inclusive('\n').skip(1) {
        match line.trim_end().strip_prefix("; set ") {
            Some("fast_math=true") => fast_math = true,
            Some("fast_math=false") => fast_math = false,
            Some(other) => return Err(format!("unknown setting `{other}`")),
            None if line.starts_with(';') && body.is_empty() => {}
            None => body.push_str(line),
        }
    }
    Ok(Case { fast_math, body, head, expected })
}

fn run(case: &Case) -> Result<String, String> {
    let graph = parse(&case.body).map_err(|error| format!("the input does not parse: {error}"))?;
    let options = FuseOptions { fast_math: case.fast_math, ..FuseOptions::default() };
    let (fused, report) = fuse(&graph, &options).map_err(|error| error.to_string())?;
    for seed in 0..4 {
        let inputs = Inputs::new(seed).for_graph(&graph);
        let before = eval(&graph, &inputs)?;
        let after = eval(&fused, &inputs)?;
        for (index, (before, after)) in before.iter().zip(&after).enumerate() {
            let same = if case.fast_math { before.close(after, 1e-5) } else { before.bit_identical(after) };
            if !same {
                return Err(format!(
                    "output {index} changed (seed {seed}):\nbefore {before:?}\nafter {after:?}\nfused:\n{}",
                    print(&fused)
                ));
            }
        }
    }
    let rules = report.rules_fired.iter().map(|(name, _)| *name).collect::<Vec<_>>().join(", ");
    let rules = if rules.is_empty() { "none".to_owned() } else { rules };
    Ok(format!("; rules fired: {rules}\n{}", print(&fused)))
}

fn check(path: &Path, bless: bool) -> Result<(), String> {
    let contents = std::fs::read_to_string(path).map_err(|error| error.to_string())?;
    let case = split(&contents)?;
    let actual = run(&case)?;
    if case.expected.as_deref() == Some(actual.as_str()) {
        return Ok(());
    }
    if bless {
        std::fs::write(path, format!("{}{EXPECTED}{actual}", case.head)).map_err(|error| error.to_string())?;
        return Ok(());
    }
    match case.expected {
        None => Err(format!("no `; expected:` block; the output is\n{actual}")),
        Some(expected) => Err(format!("expected\n{expected}\nfound\n{actual}")),
    }
}

fn files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/filetests exists")
        .map(|entry| entry.expect("readable directory").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "ttir"))
        .collect();
    files.sort();
    files
}

#[test]
fn filetests() {
    let bless = std::env::var_os("TTPU_BLESS").is_some_and(|value| value == "1");
    let files = files();
    assert!(!files.is_empty(), "no filetests found");
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| check(path, bless).err().map(|error| format!("{}: {error}", path.display())))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} filetests failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_rule_fires_in_a_filetest() {
    let mut fired = String::new();
    for path in files() {
        let contents = std::fs::read_to_string(&path).expect("readable file");
        for line in contents.lines().filter(|line| line.starts_with("; rules fired: ")) {
            fired.push_str(line);
            fired.push_str(", ");
        }
    }
    let missing: Vec<&str> =
        rule_names(true).into_iter().filter(|name| !fired.contains(&format!(" {name},"))).collect();
    assert!(missing.is_empty(), "no filetest shows these rules firing: {missing:?}");
}
