//! User kernels in lowered modules: a kernel module's signature, its functions inlined privately
//! under names of their own, host kernels as typed FFI custom calls, and the errors of modules
//! that cannot be used.

use std::sync::Arc;

use ttpu_ir::{BinaryOp, DType, GraphBuilder, Kernel, KernelBody, Shape, TensorType};
use ttpu_stablehlo::{Error, KernelSignature, kernel_signature};

const SILU: &str = include_str!("../../../fixtures/kernels/mylib.silu.mlir");

fn f32s(dims: &[i64]) -> TensorType {
    TensorType::new(DType::F32, Shape::from_static(dims))
}

fn silu() -> Arc<Kernel> {
    Arc::new(Kernel {
        name: "mylib::silu".into(),
        inputs: vec![f32s(&[4, 32])],
        results: vec![f32s(&[4, 32])],
        body: KernelBody::StableHlo(SILU.into()),
    })
}

#[test]
fn the_signature_is_read_from_main() {
    assert_eq!(
        kernel_signature(SILU).unwrap(),
        KernelSignature { inputs: vec![f32s(&[4, 32])], results: vec![f32s(&[4, 32])] }
    );
}

#[test]
fn kernel_functions_are_inlined_privately_and_called() {
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[4, 32]), Some("x".into()));
    let first = b.kernel(silu(), &[x]).unwrap()[0];
    let second = b.kernel(silu(), &[first]).unwrap()[0];
    let sum = b.binary(BinaryOp::Add, first, second).unwrap();
    let text = ttpu_stablehlo::lower(&b.finish(&[sum])).unwrap();
    // One copy of each function however often the kernel is called, renamed, private, with the
    // call between them renamed too; `@main` is the program's own and the last function.
    assert_eq!(text.matches("func.func private @kernel0_mylib_silu_main(").count(), 1, "{text}");
    assert_eq!(text.matches("func.func private @kernel0_mylib_silu_times(").count(), 1, "{text}");
    assert!(text.contains("call @kernel0_mylib_silu_times("), "{text}");
    assert_eq!(text.matches("call @kernel0_mylib_silu_main(%").count(), 2, "{text}");
    assert!(text.rfind("func.func @main(").unwrap() > text.rfind("func.func private").unwrap(), "{text}");
}

#[test]
fn host_kernels_are_typed_ffi_custom_calls() {
    let kernel = Arc::new(Kernel {
        name: "mylib::scale".into(),
        inputs: vec![f32s(&[3])],
        results: vec![f32s(&[3]), f32s(&[3])],
        body: KernelBody::Host,
    });
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[3]), None);
    let results = b.kernel(kernel, &[x]).unwrap();
    let text = ttpu_stablehlo::lower(&b.finish(&results)).unwrap();
    assert!(
        text.contains(
            "\"stablehlo.custom_call\"(%arg0) {api_version = 4 : i32, backend_config = {kernel = \"mylib::scale\"}, \
             call_target_name = \"ttpu_host_kernel\", has_side_effect = false} : (tensor<3xf32>) -> (tensor<3xf32>, \
             tensor<3xf32>)"
        ),
        "{text}"
    );
}

#[test]
fn a_sharded_module_replicates_kernel_operands_and_results() {
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[4, 32]), None);
    let y = b.kernel(silu(), &[x]).unwrap()[0];
    let graph = b.finish(&[y]);
    let mesh = ttpu_ir::Mesh::one_d(2).unwrap();
    let split = ttpu_ir::Sharding::split(2, 0, vec![mesh.axis_names()[0].clone()]);
    let sharding = ttpu_ir::ProgramSharding { mesh, inputs: vec![split.clone()], outputs: vec![split] };
    let options = ttpu_stablehlo::LowerOptions { sharding: Some(sharding), ..Default::default() };
    let text = ttpu_stablehlo::lower_with(&graph, &options).unwrap();
    assert_eq!(text.matches("\"sdy.sharding_constraint\"").count(), 2, "{text}");
    assert_eq!(text.matches("sharding = #sdy.sharding<@mesh, [{}, {}]>").count(), 2, "{text}");
}

fn module_error(text: &str) -> String {
    match kernel_signature(text) {
        Err(error @ Error::KernelModule { .. }) => error.to_string(),
        other => panic!("expected a kernel module error, found {other:?}"),
    }
}

#[test]
fn unusable_modules_are_refused_with_the_reason() {
    let pretty = "module { func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> { \
                  %0 = stablehlo.abs %x : tensor<2xf32>\n return %0 : tensor<2xf32> } }";
    let message = module_error(pretty);
    assert!(message.starts_with("the module does not parse: "), "{message}");
    assert!(message.contains("generic form"), "{message}");
    assert_eq!(
        module_error("module { func.func @other(%x: tensor<2xf32>) -> tensor<2xf32> { return %x : tensor<2xf32> } }"),
        "the module has no function `@main`"
    );
    assert_eq!(
        module_error("module { func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> { return %x : tensor<?xf32> } }"),
        "`@main` argument 0 has the type `tensor<?xf32>`; a kernel takes and returns static tensors"
    );
    assert_eq!(
        module_error(
            "module { func.func private @main(%x: tensor<2xf32>) -> tensor<2xf32> { return %x : tensor<2xf32> } }"
        ),
        "`@main` is private; the kernel's entry must be public"
    );
    assert_eq!(
        module_error("module { func.func @main(%x: tensor<2xf32>) { return } }"),
        "`@main` returns nothing; a kernel has at least one result"
    );
    assert_eq!(
        module_error("module { \"sdy.mesh\"() {sym_name = \"mesh\", mesh = #sdy.mesh<[\"x\"=2]>} : () -> () }"),
        "the module holds `sdy.mesh`; only `func.func` operations are inlined"
    );
}

#[test]
fn a_module_whose_main_disagrees_with_the_node_is_refused_at_lowering() {
    let wrong = Arc::new(Kernel { inputs: vec![f32s(&[2, 32])], results: vec![f32s(&[2, 32])], ..(*silu()).clone() });
    let mut b = GraphBuilder::new();
    let x = b.input(f32s(&[2, 32]), None);
    let y = b.kernel(wrong, &[x]).unwrap()[0];
    let error = ttpu_stablehlo::lower(&b.finish(&[y])).unwrap_err();
    assert_eq!(
        error.to_string(),
        "kernel `mylib::silu`: `@main` is (f32[4, 32]) -> (f32[4, 32]) but the op is (f32[2, 32]) -> (f32[2, 32])"
    );
}
