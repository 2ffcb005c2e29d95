//! Generates Rust declarations for the vendored PJRT C API header
//! (`include/pjrt_c_api.h`, API 0.81) with bindgen at build time.
//!
//! Generating instead of hand-writing keeps every struct layout and every
//! `*_STRUCT_SIZE` constant byte-exact with the header the plugins were built
//! against; bindgen also emits compile-time layout assertions for each struct.
//! Only types and constants are generated: the one entry point, `GetPjrtApi`,
//! is looked up at run time with `libloading`, so nothing is linked.

use std::env;
use std::path::PathBuf;

fn main() {
    let header = "include/pjrt_c_api.h";
    println!("cargo:rerun-if-changed={header}");
    println!("cargo:rerun-if-changed=build.rs");

    let bindings = bindgen::Builder::default()
        .header(header)
        // Everything the API defines is prefixed `PJRT_`; skip libc noise.
        .allowlist_type("PJRT_.*")
        .allowlist_var("PJRT_.*")
        // Plain integer constants rather than Rust enums: a newer plugin may
        // hand back a value (e.g. a new buffer type) that this header does
        // not know, and an out-of-range Rust enum would be undefined behavior.
        .default_enum_style(bindgen::EnumVariation::Consts)
        // Zero-initialised argument structs (null pointers, `None` callbacks)
        // are the documented "unset" state of every optional field.
        .derive_default(true)
        // Keep the header's own constant names (`PJRT_Buffer_Type_F32`).
        .prepend_enum_name(false)
        .generate_comments(false)
        .layout_tests(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("bindgen failed on the vendored include/pjrt_c_api.h; is libclang installed (LIBCLANG_PATH)?");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR for build scripts"));
    bindings.write_to_file(out.join("pjrt_c_api.rs")).expect("writing bindings into OUT_DIR");
}
