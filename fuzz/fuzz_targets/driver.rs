// The `main` of fuzz targets that link MLIR. MLIR's static libraries carry a `main` of their own
// (`mlir-opt`'s), which the linker would otherwise take for the `#![no_main]` target: the target
// then parses libFuzzer's flags as MLIR options and exits. This `main` hands the process to
// libFuzzer's driver instead, with the input callback that `fuzz_target!` defines.

use std::ffi::{c_char, c_int};

unsafe extern "C" {
    fn LLVMFuzzerRunDriver(
        argc: *mut c_int,
        argv: *mut *mut *mut c_char,
        callback: unsafe extern "C" fn(*const u8, usize) -> c_int,
    ) -> c_int;
    fn LLVMFuzzerTestOneInput(data: *const u8, size: usize) -> c_int;
}

fn main() {
    // libFuzzer keeps pointers into argv for the whole run: leak owned copies.
    let args: Vec<*mut c_char> = std::env::args()
        .map(|arg| std::ffi::CString::new(arg).expect("no NUL in arguments").into_raw())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect();
    let mut argc = (args.len() - 1) as c_int;
    let mut argv = Box::leak(args.into_boxed_slice()).as_mut_ptr();
    // SAFETY: argc/argv describe NUL-terminated strings that live for the rest of the process,
    // with a null pointer after the last, as C's main receives them; the callback is the target's.
    let code = unsafe { LLVMFuzzerRunDriver(&mut argc, &mut argv, LLVMFuzzerTestOneInput) };
    std::process::exit(code);
}
