//! User kernels in real models, end to end on the CPU plugin: a custom activation written in
//! StableHLO inside an MLP, a causal attention exported from JAX inside a GPT-2 block, and a host
//! kernel written in Rust, each against PyTorch's eager outputs of the same custom op; kernels
//! under a mesh; compile caches keyed by kernel bytes; and every way a kernel can be wrong,
//! refused with the op and the mismatch before anything compiles.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ttpu::{Compiler, DType, Runtime, RuntimeOptions, Session, TensorMap, read_safetensors};
use ttpu_ir::{Shape, TensorType};

fn kernels_dir() -> PathBuf {
    common::fixtures_dir().join("kernels")
}

fn kernel_text(name: &str) -> String {
    std::fs::read_to_string(kernels_dir().join(format!("{name}.mlir"))).expect("the kernel fixture exists")
}

fn model(folder: &str) -> (String, String, PathBuf) {
    let dir = kernels_dir().join(folder);
    let source = std::fs::read_to_string(dir.join("model.fx")).expect("model.fx");
    (source, format!("fixtures/kernels/{folder}/model.fx"), dir)
}

fn runtime() -> Runtime {
    Runtime::from_plugin_or_default(None, &RuntimeOptions::default())
        .unwrap_or_else(|error| panic!("no PJRT CPU plugin: {error} (run `cargo xtask setup`)"))
}

/// Runs the kernel fixture `folder` on `session` and checks it against PyTorch's outputs within
/// the fixture's tolerances; returns the outputs.
fn run_and_check(session: &Session, folder: &str) -> TensorMap {
    let (source, path, dir) = model(folder);
    let weights = read_safetensors(&dir.join("weights.safetensors")).unwrap();
    let inputs = read_safetensors(&dir.join("inputs.safetensors")).unwrap();
    let expected = read_safetensors(&dir.join("expected.safetensors")).unwrap();
    let outputs = session.load(&source, &path, &weights).unwrap().run(&inputs).unwrap();
    let (rtol, atol) = common::tolerances(&dir);
    for parity in ttpu::parity::compare(&outputs, &expected, rtol, atol).unwrap() {
        assert!(parity.ok(), "{folder} `{}`: max abs {:e}, max rel {:e}", parity.key, parity.max_abs, parity.max_rel);
    }
    outputs
}

fn session_with(kernels: &[(&str, String)]) -> Session {
    let mut session = Session::with_runtime(runtime());
    for (name, text) in kernels {
        session.compiler_mut().register_kernel(name, text).unwrap();
    }
    session
}

#[test]
fn a_stablehlo_activation_runs_inside_an_mlp() {
    let session = session_with(&[("mylib::silu", kernel_text("mylib.silu"))]);
    run_and_check(&session, "mlp");
}

#[test]
fn a_jax_exported_attention_runs_inside_a_gpt2_block() {
    let session = session_with(&[("mylib::causal_attention", kernel_text("mylib.causal_attention"))]);
    run_and_check(&session, "gpt2_block");
}

#[test]
fn a_kernel_folder_registers_every_module_by_file_name() {
    let mut compiler = Compiler::new();
    compiler.register_kernel_dir(&kernels_dir()).unwrap();
    let names: Vec<&str> = compiler.kernels().iter().map(|kernel| &*kernel.name).collect();
    assert_eq!(names, ["mylib::causal_attention", "mylib::silu"]);
    // The kernel stays one opaque node through the optimizer and its functions are inlined.
    let (source, path, _) = model("mlp");
    let compiled = compiler.compile(&source, &path, &ttpu::CompileOptions::default()).unwrap();
    let kernels = compiled.module.graph.nodes().filter(|(_, node)| node.op.mnemonic() == "kernel").count();
    assert_eq!(kernels, 1);
    assert!(compiled.stablehlo.contains("func.func private @kernel0_mylib_silu_main("), "{}", compiled.stablehlo);
    assert!(compiled.stablehlo.contains("call @kernel0_mylib_silu_main("), "{}", compiled.stablehlo);
}

#[test]
fn a_rust_host_kernel_runs_inside_an_mlp() {
    let f32s = |dims: &[i64]| TensorType::new(DType::F32, Shape::from_static(dims));
    let mut session = Session::with_runtime(runtime());
    session
        .compiler_mut()
        .register_host_kernel(
            "mylib::silu",
            vec![f32s(&[4, 32])],
            vec![f32s(&[4, 32])],
            Arc::new(|inputs, outputs| {
                let silu = inputs[0].data.chunks_exact(4).flat_map(|bytes| {
                    let x = f32::from_le_bytes(bytes.try_into().expect("4 bytes"));
                    (x / (1.0 + (-x).exp())).to_le_bytes()
                });
                outputs[0].data.iter_mut().zip(silu).for_each(|(out, byte)| *out = byte);
                Ok(())
            }),
        )
        .unwrap();
    run_and_check(&session, "mlp");
}

#[test]
fn a_kernel_under_a_mesh_is_replicated_and_still_matches() {
    let runtime = Runtime::from_plugin_or_default(None, &RuntimeOptions { devices: Some(2), ..Default::default() })
        .expect("2 CPU devices");
    let mut session = Session::with_runtime(runtime);
    session.compiler_mut().register_kernel("mylib::silu", &kernel_text("mylib.silu")).unwrap();
    let (source, path, dir) = model("mlp");
    let weights = read_safetensors(&dir.join("weights.safetensors")).unwrap();
    let inputs = read_safetensors(&dir.join("inputs.safetensors")).unwrap();
    let expected = read_safetensors(&dir.join("expected.safetensors")).unwrap();
    let parallelism = ttpu::Parallelism::new(None, Some(2), ttpu::Plan::Ddp).unwrap();
    let model = session.load_model(&source, &path).unwrap();
    let outputs = session.shard(&model, &weights, &parallelism).unwrap().run(&inputs).unwrap();
    for parity in ttpu::parity::compare(&outputs, &expected, 1e-4, 1e-5).unwrap() {
        assert!(parity.ok(), "`{}`: max abs {:e}", parity.key, parity.max_abs);
    }
}

#[test]
fn the_compile_caches_key_kernels_by_their_bytes() {
    // Two sessions on one runtime share its compile cache; the same op with another module must
    // compile again and compute the other function.
    let runtime = runtime();
    let identity =
        "module { func.func @main(%x: tensor<4x32xf32>) -> tensor<4x32xf32> { return %x : tensor<4x32xf32> } }";
    let mut silu = Session::with_runtime(runtime.clone());
    silu.compiler_mut().register_kernel("mylib::silu", &kernel_text("mylib.silu")).unwrap();
    let mut other = Session::with_runtime(runtime.clone());
    other.compiler_mut().register_kernel("mylib::silu", identity).unwrap();
    let expected = run_and_check(&silu, "mlp");
    let compiles = runtime.counters().compiles;
    let (source, path, dir) = model("mlp");
    let weights = read_safetensors(&dir.join("weights.safetensors")).unwrap();
    let inputs = read_safetensors(&dir.join("inputs.safetensors")).unwrap();
    let outputs = other.load(&source, &path, &weights).unwrap().run(&inputs).unwrap();
    assert!(runtime.counters().compiles > compiles, "the other module compiled");
    let differ = ttpu::parity::compare(&outputs, &expected, 1e-4, 1e-5).unwrap();
    assert!(differ.iter().any(|parity| !parity.ok()), "the identity kernel gives other outputs");
}

fn import_error(compiler: &Compiler, folder: &str) -> String {
    let (source, path, _) = model(folder);
    compiler.import(&source, &path, &ttpu::CompileOptions::default()).unwrap_err().to_string()
}

#[test]
fn calls_that_disagree_with_the_kernel_are_refused_at_import() {
    let silu_at = |dims: &str| kernel_text("mylib.silu").replace("4x32xf32", dims);
    // No kernel: the op is unknown, as before.
    assert_eq!(
        import_error(&Compiler::new(), "mlp"),
        "fixtures/kernels/mlp/model.fx:9:34: unsupported op `mylib.silu.default` at node `silu`"
    );
    // A module of other types.
    let mut compiler = Compiler::new();
    compiler.register_kernel("mylib::silu", &silu_at("4x16xf32")).unwrap();
    assert_eq!(
        import_error(&compiler, "mlp"),
        "fixtures/kernels/mlp/model.fx:9:34: `mylib.silu.default` at node `silu`: argument 0 is f32[4, 32], but \
         kernel `mylib::silu` takes f32[4, 16]"
    );
    // Another arity.
    let two = "module { func.func @main(%x: tensor<4x32xf32>, %y: tensor<4x32xf32>) -> tensor<4x32xf32> { \
               return %x : tensor<4x32xf32> } }";
    let mut compiler = Compiler::new();
    compiler.register_kernel("mylib::silu", two).unwrap();
    assert_eq!(
        import_error(&compiler, "mlp"),
        "fixtures/kernels/mlp/model.fx:9:34: `mylib.silu.default` at node `silu`: kernel `mylib::silu` takes 2 \
         tensors, the call passes 1"
    );
    // Right operands, but results that are not what the export says the op returns.
    let wider = "module { func.func @main(%x: tensor<4x32xf32>) -> tensor<4x32xf64> { \
                 %0 = \"stablehlo.convert\"(%x) : (tensor<4x32xf32>) -> tensor<4x32xf64>\n \
                 return %0 : tensor<4x32xf64> } }";
    let mut compiler = Compiler::new();
    compiler.register_kernel("mylib::silu", wider).unwrap();
    assert_eq!(
        import_error(&compiler, "mlp"),
        "fixtures/kernels/mlp/model.fx:9:13: node `silu` is annotated f32[4, 32] but `mylib.silu.default` produces \
         f64[4, 32]"
    );
}

#[test]
fn bad_kernels_are_refused_when_registered() {
    let mut compiler = Compiler::new();
    let error = compiler.register_kernel("mylib::silu", "module { this is not mlir }").unwrap_err().to_string();
    assert!(error.starts_with("kernel `mylib::silu`: the module does not parse: "), "{error}");
    compiler.register_kernel("mylib::silu", &kernel_text("mylib.silu")).unwrap();
    assert_eq!(
        compiler.register_kernel("mylib::silu", &kernel_text("mylib.silu")).unwrap_err().to_string(),
        "kernel `mylib::silu`: registered twice"
    );
    assert_eq!(
        compiler.register_kernel("silu", &kernel_text("mylib.silu")).unwrap_err().to_string(),
        "kernel `silu`: the name is not `namespace::name` (as `torch.library` names ops)"
    );
    let no_main =
        "module { func.func @silu(%x: tensor<4x32xf32>) -> tensor<4x32xf32> { return %x : tensor<4x32xf32> } }";
    assert_eq!(
        compiler.register_kernel("mylib::other", no_main).unwrap_err().to_string(),
        "kernel `mylib::other`: the module has no function `@main`"
    );
    let badly_named = std::env::temp_dir().join(format!("ttpu-kernels-{}", std::process::id()));
    std::fs::create_dir_all(&badly_named).unwrap();
    std::fs::write(badly_named.join("silu.mlir"), kernel_text("mylib.silu")).unwrap();
    let error = Compiler::new().register_kernel_dir(&badly_named).unwrap_err().to_string();
    std::fs::remove_dir_all(&badly_named).ok();
    assert!(error.ends_with("silu.mlir`: a kernel file is named `namespace.op.mlir`"), "{error}");
}

#[test]
fn the_cli_takes_a_kernel_folder() {
    let (_, _, dir) = model("gpt2_block");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ttpu"))
        .args(["parity", "fixtures/kernels/gpt2_block/model.fx", "--kernels", "fixtures/kernels", "--no-cache"])
        .arg("--weights")
        .arg(dir.join("weights.safetensors"))
        .arg("--inputs")
        .arg(dir.join("inputs.safetensors"))
        .arg("--expected")
        .arg(dir.join("expected.safetensors"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("all outputs match"), "{stdout}");
}
