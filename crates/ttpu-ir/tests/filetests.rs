//! Data-driven tests: every `tests/filetests/*.ttir` file is one case (harness: `ttpu-filetest`).
//!
//! A file is a header line naming the test kind, optional `;` comment lines, the IR text, and an
//! `; expected:` line followed by the expected output, verbatim up to the end of the file:
//!
//! ```text
//! ; test roundtrip
//! ; what the case is about
//! graph @main(%0: f32[2] "x") -> (f32[2]) {
//!   return %0
//! }
//! ; expected:
//! graph @main(%0: f32[2] "x") -> (f32[2]) {
//!   return %0
//! }
//! ```
//!
//! Kinds:
//! - `roundtrip`: the text must parse; the output is the printed graph, which must parse back to an
//!   equal graph and print the same again.
//! - `verify`: the output is `ok` when the text parses and [`ttpu_ir::verify`] accepts the graph,
//!   else the first error (`line:col: message`, positions counted from the first IR line).
//! - `infer`: the output is one `%n: type` line per node result (the inferred types, in print
//!   numbering) or the error.
//!
//! Run with `TTPU_BLESS=1` to rewrite the expected blocks from the actual output.

use std::fmt::Write;
use std::path::PathBuf;

use ttpu_filetest::Case;
use ttpu_ir::text::{parse, print};
use ttpu_ir::verify;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/filetests")
}

fn run(kind: &str, body: &str) -> Result<String, String> {
    let graph = parse(body);
    Ok(match kind {
        "roundtrip" => {
            let graph = graph.map_err(|error| format!("the text does not parse: {error}"))?;
            let printed = print(&graph);
            let reparsed = parse(&printed).map_err(|error| format!("the printed text does not parse: {error}"))?;
            if reparsed != graph {
                return Err(format!("parse(print(g)) != g for\n{printed}"));
            }
            let reprinted = print(&reparsed);
            if reprinted != printed {
                return Err(format!("print is not stable:\n{printed}\nvs\n{reprinted}"));
            }
            printed
        }
        "verify" => match graph {
            Ok(graph) => match verify(&graph) {
                Ok(()) => "ok\n".to_owned(),
                Err(errors) => format!("{errors}\n"),
            },
            Err(error) => format!("{error}\n"),
        },
        "infer" => match graph {
            Ok(graph) => {
                let mut out = String::new();
                let mut number = graph.inputs.len();
                for (_, node) in graph.nodes() {
                    for &result in &node.results {
                        writeln!(out, "%{number}: {}", graph.ty(result)).expect("writing to a String");
                        number += 1;
                    }
                }
                out
            }
            Err(error) => format!("{error}\n"),
        },
        other => return Err(format!("unknown test kind `{other}`")),
    })
}

#[test]
fn filetests() {
    if let Err(failures) = ttpu_filetest::check_dir(&dir(), "ttir", |case| run(&case.kind, &case.body)) {
        panic!("{failures}");
    }
}

#[test]
fn every_op_family_has_a_roundtrip_file() {
    let mut printed = String::new();
    for path in ttpu_filetest::files(&dir(), "ttir").expect("tests/filetests is readable") {
        let contents = std::fs::read_to_string(&path).expect("readable file");
        let case = Case::parse(&contents).expect("well-formed file");
        if case.kind == "roundtrip" {
            printed.push_str(&case.body);
        }
    }
    let mnemonics = [
        "constant",
        "iota",
        "exponential",
        "add",
        "compare",
        "select",
        "clamp",
        "convert",
        "reshape",
        "transpose",
        "broadcast_in_dim",
        "slice",
        "concatenate",
        "pad",
        "dot_general",
        "reduce",
        "reduce_window",
        "convolution",
        "gather",
        "scatter",
    ];
    for mnemonic in mnemonics {
        assert!(printed.contains(&format!(" = {mnemonic}(")), "no roundtrip filetest uses `{mnemonic}`");
    }
}
