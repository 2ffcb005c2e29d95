//! Fuses the IR of every committed fixture (the driver's `snapshots__ir@*.snap` files), checks the
//! result verifies, keeps the signature and has no more ops, and prints the op counts
//! (`cargo test -p ttpu-fuse --test fixtures -- --nocapture`). Fixtures whose ops the reference
//! interpreter knows (static shapes, no pooling, gather or scatter, convolutions of at most
//! [`CONVOLUTION_BUDGET`] multiply-adds in all) are also run before and after fusing on random
//! inputs, and must give bit-identical outputs.

mod common;

use std::path::Path;

use common::interp::{Inputs, eval};

use ttpu_fuse::{FuseOptions, fuse};

/// The most multiply-adds of convolutions a fixture may have to be interpreted. The reference
/// interpreter is slow in a debug build, and the convolution networks above this (MobileNet,
/// EfficientNet, ConvNeXt, DenseNet, ResNet, 1 to 6 million) would add about a minute to the
/// test in their several dtypes; the filetests check the rules on convolutions instead.
const CONVOLUTION_BUDGET: u64 = 500_000;

/// The multiply-adds of every convolution of `graph` (each output element reads one kernel
/// slice: the kernel's elements over its output features).
fn convolution_work(graph: &ttpu_ir::Graph) -> u64 {
    let elements = |value| graph.ty(value).shape.as_static().map_or(0, |dims| dims.iter().product::<i64>() as u64);
    graph
        .nodes()
        .filter_map(|(_, node)| match &node.op {
            ttpu_ir::Op::Convolution(dims) => {
                let kernel = graph.ty(node.operands[1]);
                let out_features =
                    kernel.shape.as_static().map_or(1, |sizes| sizes[dims.kernel_output_feature as usize]);
                Some(elements(node.results[0]) * (elements(node.operands[1]) / out_features.max(1) as u64))
            }
            _ => None,
        })
        .sum()
}

/// The IR text of an insta snapshot: everything after the second `---` line.
fn snapshot_body(contents: &str) -> &str {
    let mut separators = 0;
    let mut offset = 0;
    for line in contents.split_inclusive('\n') {
        offset += line.len();
        if line.trim_end() == "---" {
            separators += 1;
            if separators == 2 {
                return &contents[offset..];
            }
        }
    }
    panic!("a snapshot has a header between two `---` lines")
}

#[test]
fn fixtures_fuse_without_growing() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ttpu/tests/snapshots");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("the driver's snapshot directory exists")
        .map(|entry| entry.expect("readable directory").path())
        .filter(|path| {
            path.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.starts_with("snapshots__ir@"))
        })
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no IR snapshots under {}", dir.display());
    for path in paths {
        let name =
            path.file_stem().and_then(|stem| stem.to_str()).expect("utf-8 name").trim_start_matches("snapshots__ir@");
        let contents = std::fs::read_to_string(&path).expect("readable snapshot");
        // Models that import only at concrete sizes snapshot their error message, not IR.
        if snapshot_body(&contents).starts_with("error: ") {
            continue;
        }
        let graph = ttpu_ir::text::parse(snapshot_body(&contents)).unwrap_or_else(|error| panic!("{name}: {error}"));
        let options = FuseOptions::default();
        let (fused, report) = fuse(&graph, &options).unwrap_or_else(|error| panic!("{name}: {error}"));
        ttpu_ir::verify(&fused).unwrap_or_else(|error| panic!("{name}: {error}"));
        assert_eq!(fused.signature(), graph.signature(), "{name}: the signature changed");
        for (&before, &after) in graph.inputs.iter().zip(&fused.inputs) {
            assert_eq!(graph.value(before).name, fused.value(after).name, "{name}: an input name changed");
        }
        let inputs =
            Inputs::new(7).for_graph_checked(&graph).filter(|_| convolution_work(&graph) <= CONVOLUTION_BUDGET);
        let checked = match inputs.map(|inputs| (eval(&graph, &inputs), inputs)) {
            Some((Ok(before), inputs)) => {
                let after = eval(&fused, &inputs).unwrap_or_else(|error| panic!("{name}: {error}"));
                for (index, (before, after)) in before.iter().zip(&after).enumerate() {
                    assert!(before.bit_identical(after), "{name}: output {index} changed");
                }
                "results bit-identical"
            }
            _ => "not interpretable",
        };
        println!(
            "{name} ({checked}): {} -> {} ops\n  {}",
            report.ops_before,
            report.ops_after,
            report.to_string().replace('\n', "\n  ")
        );
        assert!(report.ops_after <= report.ops_before, "{name}: {} -> {} ops", report.ops_before, report.ops_after);
    }
}
