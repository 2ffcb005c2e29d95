//! Which ATen overloads the importer supports, and how well: the data behind `docs/ops.md`.
//!
//! Three sources meet here: the decomposition table (what has a decomposition), its notes
//! (`ops/notes.rs`: partial support and the reasons for refusals) and the list of overloads
//! tagged `torch.Tag.core` in the PyTorch the fixtures come from (`data/core_ops.txt`, written by
//! `fixtures/core_ops.py`). [`markdown`] renders them; a test keeps `docs/ops.md` equal to it.

use crate::ops::{self, notes};

/// `data/core_ops.txt`: `#` comment lines, then one overload per line.
const CORE_OPS: &str = include_str!("../data/core_ops.txt");

/// How far an overload is supported.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Support {
    /// Every variant decomposes exactly (up to floating-point rounding).
    Supported,
    /// It decomposes, but the note says which variants are refused or differ.
    Partial(&'static str),
    /// It has no decomposition; the note says why.
    Unsupported(&'static str),
}

impl Support {
    /// `supported`, `partial` or `unsupported`.
    pub fn label(self) -> &'static str {
        match self {
            Support::Supported => "supported",
            Support::Partial(_) => "partial",
            Support::Unsupported(_) => "unsupported",
        }
    }

    /// The note of a partial or unsupported overload.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Support::Supported => None,
            Support::Partial(note) | Support::Unsupported(note) => Some(note),
        }
    }
}

/// The status of one overload.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct OpStatus {
    /// `aten.add.Tensor`.
    pub name: &'static str,
    /// Whether PyTorch tags it `core`.
    pub core: bool,
    /// How far it is supported.
    pub support: Support,
}

/// Why a core overload without a decomposition or a note is unsupported.
const NO_DECOMPOSITION: &str = "no decomposition yet";

/// The PyTorch version the core list comes from, as its header states it (`2.15.0`).
pub fn core_ops_torch_version() -> &'static str {
    CORE_OPS
        .lines()
        .next()
        .and_then(|line| line.split("PyTorch ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or("unknown")
}

/// Every overload tagged `torch.Tag.core`, sorted.
pub fn core_ops() -> Vec<&'static str> {
    let mut names: Vec<&'static str> =
        CORE_OPS.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')).collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// The status of `name`: from the table and its notes.
pub fn support(name: &str) -> Support {
    let note = notes::note(name);
    match (ops::lookup(name).is_some(), note) {
        (true, Some(notes::Note::Partial(why))) => Support::Partial(why),
        // A stale refusal note on an overload that gained a decomposition: the table wins (the
        // notes test flags the note).
        (true, _) => Support::Supported,
        (false, Some(notes::Note::Unsupported(why) | notes::Note::Partial(why))) => Support::Unsupported(why),
        (false, None) => Support::Unsupported(NO_DECOMPOSITION),
    }
}

/// Every core overload, every supported one and every other one refused on purpose (with a
/// reason in the notes), sorted by name.
pub fn statuses() -> Vec<OpStatus> {
    let core = core_ops();
    let refused =
        notes::NOTES.iter().filter(|(_, note)| matches!(note, notes::Note::Unsupported(_))).map(|(name, _)| *name);
    let mut names: Vec<&'static str> =
        core.iter().copied().chain(ops::TABLE.iter().map(|def| def.name)).chain(refused).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|name| OpStatus { name, core: core.binary_search(&name).is_ok(), support: support(name) })
        .collect()
}

/// Problems in the notes: a note on an overload that is neither core nor in the table, a partial
/// note on an overload without a decomposition, a refusal note on one that has one, a note given
/// twice, a core overload refused without a reason.
#[cfg(test)]
fn note_problems() -> Vec<String> {
    let core = core_ops();
    let mut problems = vec![];
    let mut seen = std::collections::HashSet::new();
    for (name, note) in notes::NOTES {
        if !seen.insert(*name) {
            problems.push(format!("{name} has two notes"));
        }
        let supported = ops::lookup(name).is_some();
        match note {
            notes::Note::Partial(_) if !supported => {
                problems.push(format!("{name} is noted as partial but has no decomposition"));
            }
            notes::Note::Unsupported(_) if supported => {
                problems.push(format!("{name} is noted as unsupported but has a decomposition: remove the note"));
            }
            // An overload outside the core set may be refused on purpose, with its reason.
            notes::Note::Partial(_) if !supported && core.binary_search(name).is_err() => {
                problems.push(format!("{name} is noted but is neither core nor supported"));
            }
            _ => {}
        }
    }
    for name in core {
        if support(name) == Support::Unsupported(NO_DECOMPOSITION) {
            problems.push(format!("core overload {name} is unsupported without a reason in ops/notes.rs"));
        }
    }
    problems
}

/// Remarks that hold for every overload, printed above the tables.
const GENERAL: &str = "\
Notes that hold for every overload:

- \"Supported\" means every variant PyTorch accepts decomposes, up to floating-point rounding, \
for static sizes. With symbolic sizes, some decompositions need a dim to be static and say so \
(the driver then compiles per size).
- Out-of-range indices: on the ttpu device and in `torch.compile` graphs, `embedding`, `index_select`, `gather`, the scatters, `index`, `index_put`, `index_reduce` and `put` check their indices beside the call and raise PyTorch's `IndexError` (`ttpu.TtpuIndexError`, also a `RuntimeError`) at the next host read, as CUDA reports a device-side assert at the next synchronizing call. An exported `.fx` program run by the driver has no such checks: its gathers clamp them and its scatters drop them, where PyTorch raises an error.
- Values have no memory layout in the IR; the importer tracks PyTorch's layout of each node (strides and storage offset of views) for the ops that read memory (`as_strided`, `sym_stride`, `sym_storage_offset`), and refuses them where it does not know it.
- Overloads outside the core set are listed only when they are supported or refused on purpose; most \
of the others never reach the importer because `run_decompositions()` decomposes them.
- `complex32` (`chalf`) is the IR's `c32`. StableHLO's complex types have `f32` or `f64` parts, so a \
program holds a `c32` value as `complex<f32>` and rounds both parts to half after every op that computes \
one, as PyTorch computes `complex32` in `complex64` and rounds each result; device buffers are `c64`. \
Arithmetic follows PyTorch's CPU kernels: a scalar taking part (a Python number, a zero-dim tensor, \
`alpha`) becomes a `complex32` first, and `add(z, u, alpha=a)` rounds the product before the sum. Ops \
PyTorch's CPU lacks for `complex32` (`exp`, `sum`, `div`, ...) compute in `complex64` and round their \
result, as CUDA's op math does. Refused: bitcasts of any complex type (as by the IR), FFTs of `complex32` (PyTorch's CPU has none in half, and CUDA's computes in half, which a `complex64` FFT rounded \
afterwards does not reproduce) and kernels over it. Complex scalars in `.fx` text (`complex(1.5, 0.0)`) \
must have a zero imaginary part.

## Random numbers

Random ops (`rand`, `randn`, `randint`, `randperm`, `uniform`, `normal`, `bernoulli.p`, \
`exponential`, dropout in training) draw from StableHLO's `rng_bit_generator` (ThreeFry) and follow \
PyTorch's distributions, not its numbers. The seed is `ImportOptions::seed` \
(`CompileOptions::seed`, `ttpu --seed`), 0 by default; the `k`-th draw of a graph uses the `k`-th \
output of SplitMix64 seeded with it as its key, so draws never share a stream. The numbers are part \
of the compiled program: every run of a compiled model draws the same ones, and another seed gives \
other ones. `generator` arguments are ignored. A draw needs a static shape.
";

/// `docs/ops.md`.
pub fn markdown() -> String {
    let statuses = statuses();
    let core: Vec<&OpStatus> = statuses.iter().filter(|status| status.core).collect();
    let count = |label: &str| core.iter().filter(|status| status.support.label() == label).count();
    let others: Vec<&OpStatus> =
        statuses.iter().filter(|status| !status.core && status.support.label() != "unsupported").collect();
    let refused: Vec<&OpStatus> =
        statuses.iter().filter(|status| !status.core && status.support.label() == "unsupported").collect();
    let mut out = String::new();
    out.push_str("# ATen operator coverage\n\n");
    out.push_str(
        "Generated by `cargo xtask ops-doc` from the decomposition table \
         (`crates/ttpu-aten/src/ops/mod.rs`), its notes (`crates/ttpu-aten/src/ops/notes.rs`) \
         and the core overloads list (`crates/ttpu-aten/data/core_ops.txt`, written by `fixtures/core_ops.py`). \
         Do not edit by hand.\n\n",
    );
    out.push_str(&format!(
        "PyTorch {} tags {} overloads `torch.Tag.core`: {} supported, {} partial, {} unsupported.\n",
        core_ops_torch_version(),
        core.len(),
        count("supported"),
        count("partial"),
        count("unsupported"),
    ));
    let refused_count = match refused.len() {
        1 => "1 is".to_string(),
        count => format!("{count} are"),
    };
    out.push_str(&format!(
        "Beyond them, {} other overloads are supported ({} of them partially), and {refused_count} refused on \
         purpose (the last table says why).\n\n",
        others.len(),
        others.iter().filter(|status| status.support.label() == "partial").count(),
    ));
    out.push_str(GENERAL);
    let table = |out: &mut String, title: &str, rows: &[&OpStatus]| {
        out.push_str(&format!("\n## {title}\n\n| overload | status | notes |\n|---|---|---|\n"));
        for status in rows {
            let note = status.support.note().unwrap_or("").replace('|', "\\|");
            out.push_str(&format!("| `{}` | {} | {note} |\n", status.name, status.support.label()));
        }
    };
    table(&mut out, "Core overloads", &core);
    table(&mut out, "Other supported overloads", &others);
    table(&mut out, "Other overloads refused on purpose", &refused);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_core_list_is_read() {
        assert_eq!(core_ops_torch_version(), "2.15.0");
        assert!(core_ops().len() > 150);
        assert!(core_ops().contains(&"aten.add.Tensor"));
    }

    #[test]
    fn notes_are_consistent_with_the_table() {
        let problems = note_problems();
        assert!(problems.is_empty(), "ops/notes.rs:\n{}", problems.join("\n"));
    }
}
