//! Fuzz target: the IR text parser (`ttpu_ir::text::parse`) on arbitrary UTF-8 must return a
//! verified graph or an `Err`, never panic, overflow the stack or hang; a graph it accepts must
//! print and parse back to itself. Seed the corpus with `crates/*/tests/filetests/*.ttir`.

use libfuzzer_sys::fuzz_target;

include!("driver.rs");

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(graph) = ttpu_ir::text::parse(text) {
        let printed = ttpu_ir::text::print(&graph);
        let again = ttpu_ir::text::parse(&printed).expect("printed graphs parse");
        assert_eq!(ttpu_ir::text::print(&again), printed, "printing is a fixed point");
    }
});
