//! The eager entry point: calls built into templates, their floats lifted to inputs only where
//! that is exact, random draws reading their state from inputs, strides of views, and sizes the
//! data decides.

use indexmap::IndexMap;
use ttpu_aten::eager::{self, Arg, Built, Family, Operand, Output, Strides};
use ttpu_ir::{DType, Shape, TensorType, text};

fn f32s(dims: &[i64]) -> Operand {
    Operand { ty: TensorType::new(DType::F32, Shape::from_static(dims)), strides: None }
}

fn family_of(name: &str, args: &[Arg], kwargs: &[(String, Arg)], operands: &[Operand]) -> Family {
    let def = eager::lookup(name).unwrap_or_else(|| panic!("{name} is in the table"));
    match eager::build(def, args, kwargs, operands, &IndexMap::new()).unwrap() {
        Built::Template(family) => family,
        Built::Sizes(graph) => panic!("{name} needs sizes: {}", text::print(&graph)),
    }
}

fn admits(family: &Family, name: &str, args: &[Arg], kwargs: &[(String, Arg)], operands: &[Operand]) -> bool {
    family.admits(eager::lookup(name).unwrap(), args, kwargs, operands)
}

#[test]
fn a_float_argument_becomes_an_input_of_its_dtype() {
    let kwargs = [("alpha".to_string(), Arg::Float(0.5))];
    let operands = [f32s(&[2, 3]), f32s(&[3])];
    let family = family_of("aten.add.Tensor", &[Arg::Tensor(0), Arg::Tensor(1)], &kwargs, &operands);
    let template = &family.template;
    assert_eq!(
        text::print(&template.graph),
        "graph @main(%0: f32[2, 3], %1: f32[3], %2: f32[1]) -> (f32[2, 3]) {\n  \
         %3: f32[2, 3] = broadcast_in_dim(%1) {dims = [1]}\n  \
         %4: f32[1] = slice(%2) {start = [0], limit = [1], strides = [1]}\n  \
         %5: f32[] = reshape(%4)\n  \
         %6: f32[2, 3] = broadcast_in_dim(%5) {dims = []}\n  \
         %7: f32[2, 3] = multiply(%3, %6)\n  \
         %8: f32[2, 3] = add(%0, %7)\n  \
         return %8\n}\n"
    );
    assert_eq!((template.operands, template.rng_states), (2, 0));
    assert_eq!(template.output, Output::Tensor(0));
    assert_eq!(template.strides, vec![Strides::contiguous(&[2, 3])]);
    let data = template.scalar_inputs(&[0.25]).unwrap();
    assert_eq!(data, vec![(DType::F32, 1, 0.25f32.to_le_bytes().to_vec())]);
    let other = [("alpha".to_string(), Arg::Float(-3.75))];
    assert!(admits(&family, "aten.add.Tensor", &[Arg::Tensor(0), Arg::Tensor(1)], &other, &operands));
    // 1.0 is never lifted: the decomposition skips the multiplication for it.
    let one = [("alpha".to_string(), Arg::Float(1.0))];
    assert!(!admits(&family, "aten.add.Tensor", &[Arg::Tensor(0), Arg::Tensor(1)], &one, &operands));
}

#[test]
fn a_float_that_reaches_the_graph_through_host_arithmetic_stays_a_constant() {
    // Dropout scales by 1 / (1 - p), computed on the host: no constant equals `p`.
    let args = [Arg::Tensor(0), Arg::Float(0.25), Arg::Bool(true)];
    let family = family_of("aten.native_dropout.default", &args, &[], &[f32s(&[4])]);
    assert!(family.template.scalars.is_empty());
    assert_eq!(family.template.rng_states, 1, "the mask is drawn from a generator state input");
    let other = [Arg::Tensor(0), Arg::Float(0.5), Arg::Bool(true)];
    assert!(!admits(&family, "aten.native_dropout.default", &other, &[], &[f32s(&[4])]));
}

#[test]
fn a_list_of_floats_packs_into_one_input_per_dtype() {
    let args = [Arg::Tensor(0), Arg::Float(0.125), Arg::Float(0.75)];
    let family = family_of("aten.clamp.default", &args, &[], &[f32s(&[5])]);
    let scalars = &family.template.scalars;
    assert_eq!(scalars.len(), 1);
    assert_eq!((scalars[0].dtype, scalars[0].floats.clone()), (DType::F32, vec![0, 1]));
    let data = family.template.scalar_inputs(&[-2.0, 2.5]).unwrap();
    let bytes: Vec<u8> = [-2.0f32, 2.5].iter().flat_map(|value| value.to_le_bytes()).collect();
    assert_eq!(data, vec![(DType::F32, 2, bytes)]);
}

#[test]
fn views_report_pytorch_strides_and_their_operand() {
    let family = family_of("aten.t.default", &[Arg::Tensor(0)], &[], &[f32s(&[2, 3])]);
    assert_eq!(family.template.strides, vec![Strides { sizes: vec![3, 2], strides: vec![1, 3], offset: 0 }]);
    assert_eq!(family.template.view_of, vec![Some(0)]);
    // A view of a view composes with the operand's own strides.
    let transposed = Operand {
        ty: TensorType::new(DType::F32, Shape::from_static(&[3, 2])),
        strides: Some(Strides { sizes: vec![3, 2], strides: vec![1, 3], offset: 0 }),
    };
    let family = family_of("aten.select.int", &[Arg::Tensor(0), Arg::Int(1), Arg::Int(1)], &[], &[transposed]);
    assert_eq!(family.template.strides, vec![Strides { sizes: vec![3], strides: vec![1], offset: 3 }]);
    // A fresh result is contiguous.
    let family = family_of("aten.exp.default", &[Arg::Tensor(0)], &[], &[f32s(&[2, 3])]);
    assert_eq!(family.template.view_of, vec![None]);
    assert_eq!(family.template.strides, vec![Strides::contiguous(&[2, 3])]);
}

#[test]
fn several_results_map_to_outputs_in_order() {
    let args = [Arg::Tensor(0), Arg::List(vec![Arg::Int(4)]), Arg::None, Arg::None, Arg::Float(1e-5)];
    let family = family_of("aten.native_layer_norm.default", &args, &[], &[f32s(&[2, 4])]);
    assert_eq!(family.template.output, Output::List(vec![Output::Tensor(0), Output::Tensor(1), Output::Tensor(2)]));
    let dims: Vec<Vec<i64>> = family.template.strides.iter().map(|strides| strides.sizes.clone()).collect();
    assert_eq!(dims, vec![vec![2, 4], vec![2, 1], vec![2, 1]]);
}

#[test]
fn a_size_the_data_decides_is_computed_first() {
    let def = eager::lookup("aten.nonzero.default").unwrap();
    let operands = [f32s(&[5])];
    let sizes = match eager::build(def, &[Arg::Tensor(0)], &[], &operands, &IndexMap::new()).unwrap() {
        Built::Sizes(graph) => graph,
        Built::Template(_) => panic!("nonzero needs its count first"),
    };
    assert_eq!(sizes.outputs.len(), 1);
    assert_eq!(sizes.ty(sizes.outputs[0]), &TensorType::scalar(DType::I64));
    let known = IndexMap::from([("u0".to_string(), 3)]);
    let Built::Template(family) = eager::build(def, &[Arg::Tensor(0)], &[], &operands, &known).unwrap() else {
        panic!("with its count, nonzero builds");
    };
    assert_eq!(family.template.strides[0].sizes, vec![3, 1]);
}

#[test]
fn bad_calls_are_located_errors_naming_the_overload() {
    let def = eager::lookup("aten.add.Tensor").unwrap();
    let error =
        eager::build(def, &[Arg::Tensor(0), Arg::Tensor(1)], &[], &[f32s(&[2, 3]), f32s(&[4])], &IndexMap::new())
            .unwrap_err();
    assert_eq!(error.to_string(), "<eager>:1:1: `aten.add.Tensor` at node `add`: shapes [2, 3], [4] do not broadcast");
    let error = eager::build(def, &[Arg::Tensor(0), Arg::Tensor(3)], &[], &[f32s(&[2])], &IndexMap::new()).unwrap_err();
    assert_eq!(error.to_string(), "<eager>:1:1: `aten.add.Tensor` at node `add`: tensor operand 3 of 1 is missing");
    assert!(eager::lookup("aten.no_such_op.default").is_none());
}

#[test]
fn a_user_kernel_builds_into_a_template_of_one_kernel_node() {
    use std::sync::Arc;
    use ttpu_aten::eager::{Built, Operand, Output, build_kernel};
    let f32s = |dims: &[i64]| ttpu_ir::TensorType::new(ttpu_ir::DType::F32, ttpu_ir::Shape::from_static(dims));
    let kernel = Arc::new(ttpu_ir::Kernel {
        name: "mylib::pair".into(),
        inputs: vec![f32s(&[2, 3])],
        results: vec![f32s(&[2, 3]), f32s(&[3])],
        body: ttpu_ir::KernelBody::Host,
    });
    let operand = |dims: &[i64]| Operand { ty: f32s(dims), strides: None };
    let Built::Template(family) = build_kernel(&kernel, &[operand(&[2, 3])]).unwrap() else { panic!("a template") };
    let template = &family.template;
    assert_eq!(template.output, Output::List(vec![Output::Tensor(0), Output::Tensor(1)]));
    assert_eq!(template.graph.node_count(), 1);
    assert_eq!(template.strides[1].strides, vec![1]);
    let error = build_kernel(&kernel, &[operand(&[3, 2])]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "<eager>:1:1: `mylib.pair.default` at node `pair`: argument 0 is f32[3, 2], but kernel `mylib::pair` takes f32[2, 3]"
    );
    let error = build_kernel(&kernel, &[]).unwrap_err();
    assert!(error.to_string().ends_with("kernel `mylib::pair` takes 1 tensors, the call passes 0"), "{error}");
    // A kernel built by hand with a symbolic result is an error, not a panic.
    let symbolic = Arc::new(ttpu_ir::Kernel {
        results: vec![ttpu_ir::TensorType::new(
            ttpu_ir::DType::F32,
            ttpu_ir::Shape(std::iter::once(ttpu_ir::Dim::Sym("s0".into())).collect()),
        )],
        ..(*kernel).clone()
    });
    let error = build_kernel(&symbolic, &[operand(&[2, 3])]).unwrap_err();
    assert!(
        error.to_string().ends_with("`kernel`: `mylib::pair` has the symbolic type f32[s0]; kernel types are static"),
        "{error}"
    );
}

#[test]
fn a_user_kernel_takes_tensors_positionally_and_nothing_else() {
    use ttpu_aten::eager::check_kernel_call;
    let ty = ttpu_ir::TensorType::new(ttpu_ir::DType::F32, ttpu_ir::Shape::from_static(&[2]));
    let kernel = ttpu_ir::Kernel {
        name: "mylib::mix".into(),
        inputs: vec![ty.clone(), ty.clone()],
        results: vec![ty],
        body: ttpu_ir::KernelBody::Host,
    };
    check_kernel_call(&kernel, &[Arg::Tensor(0), Arg::Tensor(1)], &[]).unwrap();
    let refused =
        |args: &[Arg], kwargs: &[(String, Arg)]| check_kernel_call(&kernel, args, kwargs).unwrap_err().to_string();
    assert_eq!(
        refused(&[Arg::Tensor(0), Arg::Float(0.5)], &[]),
        "<eager>:1:1: `mylib.mix.default` at node `mix`: argument 1 of kernel `mylib::mix` is not a tensor"
    );
    assert_eq!(
        refused(&[Arg::List(vec![Arg::Tensor(0), Arg::Tensor(1)])], &[]),
        "<eager>:1:1: `mylib.mix.default` at node `mix`: argument 0 of kernel `mylib::mix` is not a tensor"
    );
    assert_eq!(
        refused(&[Arg::Tensor(0)], &[("other".into(), Arg::Tensor(1))]),
        "<eager>:1:1: `mylib.mix.default` at node `mix`: kernel `mylib::mix` takes tensors positionally, not `other=`"
    );
}
