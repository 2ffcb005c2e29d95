//! `docs/ops.md` is generated from the decomposition table, its notes and the core overload list
//! ([`ttpu_aten::coverage::markdown`]); this test fails when the committed file is stale.
//! `cargo xtask ops-doc` (or `TTPU_BLESS=1`) rewrites it.

use std::path::PathBuf;

#[test]
fn ops_doc_is_up_to_date() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/ops.md");
    let generated = ttpu_aten::coverage::markdown();
    if std::env::var_os("TTPU_BLESS").is_some_and(|value| value == "1") {
        std::fs::write(&path, &generated).expect("writing docs/ops.md");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    // Compare line by line so the message names the first difference.
    if committed != generated {
        let first = committed
            .lines()
            .zip(generated.lines())
            .position(|(old, new)| old != new)
            .unwrap_or_else(|| committed.lines().count().min(generated.lines().count()));
        panic!(
            "docs/ops.md is stale: run `cargo xtask ops-doc`\nfirst difference at line {}:\n  committed: {}\n  generated: {}",
            first + 1,
            committed.lines().nth(first).unwrap_or("<end of file>"),
            generated.lines().nth(first).unwrap_or("<end of file>"),
        );
    }
}

#[test]
fn every_core_overload_has_a_status() {
    let statuses = ttpu_aten::coverage::statuses();
    for name in ttpu_aten::coverage::core_ops() {
        let status = statuses.iter().find(|status| status.name == name).expect("listed");
        assert!(status.core);
    }
    for name in ttpu_aten::supported_ops() {
        let status = statuses.iter().find(|status| status.name == name).expect("listed");
        assert_ne!(status.support.label(), "unsupported", "{name}");
    }
}
