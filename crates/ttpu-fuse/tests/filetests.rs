//! Data-driven tests: every `tests/filetests/*.ttir` file is one fuse case (harness: `ttpu-filetest`).
//!
//! A file is a `; test fuse` header, optional `; set fast_math=true` and `; set resident=0,2`
//! (the inputs that are resident weights, `FuseOptions::resident_inputs`), optional `;` comment lines,
//! the input IR text, and an `; expected:` line followed by the expected output: a
//! `; rules fired: ...` line and the fused IR text. Besides comparing text, every case runs the
//! input and the fused graph through the reference interpreter on several random inputs and checks
//! the results are bit-identical (for fast-math cases: close where finite, and not finite at the
//! same places).
//!
//! Run with `TTPU_BLESS=1` to rewrite the expected blocks from the actual output.

mod common;

use std::path::PathBuf;

use common::interp::{Inputs, eval};
use ttpu_filetest::Case;
use ttpu_fuse::{FuseOptions, fuse, rule_names};
use ttpu_ir::text::{parse, print};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/filetests")
}

fn run(case: &Case) -> Result<String, String> {
    if case.kind != "fuse" {
        return Err(format!("unknown test kind `{}`; this directory holds `fuse` cases", case.kind));
    }
    let fast_math = match case.setting("fast_math") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => return Err(format!("fast_math is `true` or `false`, found `{other}`")),
    };
    if let Some((name, _)) = case.settings.iter().find(|(name, _)| name != "fast_math" && name != "resident") {
        return Err(format!("unknown setting `{name}`"));
    }
    let graph = parse(&case.body).map_err(|error| format!("the input does not parse: {error}"))?;
    let mut resident_inputs = vec![false; graph.inputs.len()];
    for index in case.setting("resident").into_iter().flat_map(|list| list.split(',')) {
        let slot = index
            .trim()
            .parse::<usize>()
            .ok()
            .and_then(|index| resident_inputs.get_mut(index))
            .ok_or_else(|| format!("resident takes input indices, found `{index}`"))?;
        *slot = true;
    }
    let options = FuseOptions { fast_math, resident_inputs, ..FuseOptions::default() };
    let (fused, report) = fuse(&graph, &options).map_err(|error| error.to_string())?;
    for seed in 0..4 {
        let inputs = Inputs::new(seed).for_graph(&graph);
        let before = eval(&graph, &inputs)?;
        let after = eval(&fused, &inputs)?;
        for (index, (before, after)) in before.iter().zip(&after).enumerate() {
            let same = if fast_math { before.close_where_finite(after, 1e-5) } else { before.bit_identical(after) };
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

#[test]
fn filetests() {
    if let Err(failures) = ttpu_filetest::check_dir(&dir(), "ttir", run) {
        panic!("{failures}");
    }
}

#[test]
fn every_rule_fires_in_a_filetest() {
    let mut fired = String::new();
    for path in ttpu_filetest::files(&dir(), "ttir").expect("tests/filetests is readable") {
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
