//! Data-driven tests: every `tests/filetests/*.ttir` file is one case.
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
use std::path::{Path, PathBuf};

use ttpu_ir::text::{parse, print};
use ttpu_ir::verify;

const EXPECTED: &str = "; expected:\n";

struct Case {
    kind: String,
    body: String,
    /// Everything before the expected block, kept when blessing.
    head: String,
    expected: Option<String>,
}

fn split(contents: &str) -> Result<Case, String> {
    let mut lines = contents.split_inclusive('\n');
    let header = lines.next().ok_or("empty file")?;
    let kind = header
        .trim_end()
        .strip_prefix("; test ")
        .ok_or_else(|| format!("the first line must be `; test KIND`, found `{}`", header.trim_end()))?
        .to_owned();
    let (head, expected) = match contents.find(EXPECTED) {
        Some(at) if at == 0 || contents[..at].ends_with('\n') => {
            (contents[..at].to_owned(), Some(contents[at + EXPECTED.len()..].to_owned()))
        }
        _ => (if contents.ends_with('\n') { contents.to_owned() } else { format!("{contents}\n") }, None),
    };
    let mut body = String::new();
    let mut in_description = true;
    for line in head.split_inclusive('\n').skip(1) {
        if in_description && line.starts_with(';') {
            continue;
        }
        in_description = false;
        body.push_str(line);
    }
    Ok(Case { kind, body, head, expected })
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

fn check(path: &Path, bless: bool) -> Result<(), String> {
    let contents = std::fs::read_to_string(path).map_err(|error| error.to_string())?;
    let case = split(&contents)?;
    let actual = run(&case.kind, &case.body)?;
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
fn every_op_family_has_a_roundtrip_file() {
    let mut printed = String::new();
    for path in files() {
        let contents = std::fs::read_to_string(&path).expect("readable file");
        let case = split(&contents).expect("well-formed file");
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
