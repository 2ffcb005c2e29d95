//! Fuzz target: `ttpu_fx::parse` on arbitrary UTF-8 must return `Ok` or a located `Err`, never
//! panic, overflow the stack or hang. Seed the corpus with `fixtures/*/model.fx` and
//! `fixtures/errors/*.fx` for useful coverage.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The parser takes text; invalid UTF-8 is rejected before it, by the caller reading the file.
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(error) = ttpu_fx::parse(source, "fuzz.fx") {
        // Formatting the message exercises `Location` on the same input.
        let _ = error.to_string();
    }
});
