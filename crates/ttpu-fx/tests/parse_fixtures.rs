//! Parses every exported fixture (`fixtures/*/model.fx`) and checks facts read off the files by
//! hand: counts, signature kinds and targets, range constraints, and specific nodes. One small
//! program (mlp) is also kept whole as an `insta` snapshot, so any change in the tree is reviewed.

use std::path::PathBuf;

use ttpu_fx::ast::{Arg, Expr, FxType, InputKind, Node, OutputKind, Program, SymExpr};
use ttpu_ir::DType;

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn load(name: &str) -> Program {
    let path = fixtures_dir().join(name).join("model.fx");
    let source = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let shown = format!("fixtures/{name}/model.fx");
    ttpu_fx::parse(&source, &shown).unwrap_or_else(|error| panic!("{error}"))
}

fn node<'p>(program: &'p Program, name: &str) -> &'p Node {
    program.nodes.iter().find(|node| node.name == name).unwrap_or_else(|| panic!("no node `{name}`"))
}

fn call(node: &Node) -> (&str, &[Arg], &[(String, Arg)]) {
    match &node.expr {
        Expr::Call { target, args, kwargs, .. } => (target, args, kwargs),
        other => panic!("`{}` is not a call: {other:?}", node.name),
    }
}

fn tensor(dtype: DType, dims: &[i64]) -> FxType {
    FxType::Tensor { dtype, dims: dims.iter().map(|&dim| SymExpr::Int(dim)).collect() }
}

fn names(args: &[Arg]) -> Vec<&str> {
    args.iter()
        .map(|arg| match arg {
            Arg::Name(name, _) => name.as_str(),
            other => panic!("not a name: {other:?}"),
        })
        .collect()
}

#[test]
fn every_fixture_parses_with_matching_counts() {
    // (placeholders, nodes, outputs, signature inputs, signature outputs), counted in the files.
    let expected = [
        ("buffer_mutation", (5, 8, 3)),
        ("buffer_mutation_calls", (5, 8, 3)),
        ("cnn", (12, 12, 1)),
        ("cnn_bf16", (12, 12, 1)),
        ("cnn_dynamic", (12, 13, 1)),
        ("cnn_pool_variants", (6, 14, 3)),
        ("cnn_spatial_dynamic", (12, 12, 5)),
        ("cond_branches", (4, 7, 2)),
        ("data_chain", (2, 28, 4)),
        ("data_select", (4, 45, 6)),
        ("data_unique", (4, 56, 15)),
        ("data_while", (7, 15, 5)),
        ("data_while_dynamic", (4, 8, 3)),
        ("derived_dim", (1, 2, 1)),
        ("gpt2_block", (14, 59, 1)),
        ("gpt2_block_bf16", (14, 59, 1)),
        ("gpt2_block_dynamic", (14, 63, 1)),
        ("hf_albert", (29, 174, 1)),
        ("hf_bart", (97, 392, 1)),
        ("hf_bert", (43, 156, 1)),
        ("hf_bert_dynamic", (43, 160, 1)),
        ("hf_bloom", (32, 165, 1)),
        ("hf_convnext", (49, 79, 1)),
        ("hf_distilbert", (39, 151, 1)),
        ("hf_electra", (43, 160, 1)),
        ("hf_falcon", (24, 202, 1)),
        ("hf_gemma", (26, 261, 1)),
        ("hf_gpt2", (31, 162, 1)),
        ("hf_gpt2_dynamic", (31, 166, 1)),
        ("hf_gpt_neox", (32, 194, 1)),
        ("hf_llama", (25, 256, 1)),
        ("hf_llama_dynamic", (25, 260, 1)),
        ("hf_mistral", (25, 263, 1)),
        ("hf_mixtral", (25, 316, 1)),
        ("hf_opt", (39, 163, 1)),
        ("hf_phi3", (19, 254, 1)),
        ("hf_qwen2", (31, 256, 1)),
        ("hf_qwen2_moe", (39, 367, 1)),
        ("hf_qwen3", (29, 288, 1)),
        ("hf_qwen3_moe", (29, 348, 1)),
        ("hf_roberta", (43, 166, 1)),
        ("hf_swin", (84, 468, 1)),
        ("hf_t5", (52, 498, 1)),
        ("hf_t5_dynamic", (52, 504, 1)),
        ("hf_vit", (41, 141, 1)),
        ("hf_whisper", (38, 128, 1)),
        ("mlp", (7, 8, 1)),
        ("mlp_bf16", (7, 8, 1)),
        ("mlp_dynamic", (7, 8, 1)),
        ("ops_mix", (6, 88, 13)),
        ("polymorphic_ops", (8, 15, 11)),
        ("quant_cnn", (16, 19, 1)),
        ("quant_mlp", (16, 17, 1)),
        ("quant_mlp_dynamic", (16, 26, 1)),
        ("sequential_input", (7, 9, 1)),
        ("signature_variety", (8, 9, 6)),
        ("spectrogram", (4, 19, 1)),
        ("sym_min_max", (2, 13, 3)),
        ("symbolic_dim_ops", (4, 18, 11)),
        ("train_cnn_bn", (16, 140, 15)),
        ("train_gpt", (29, 470, 28)),
        ("train_hf_llama", (25, 686, 22)),
        ("train_mlp", (8, 82, 8)),
        ("tv_convnext_tiny", (183, 317, 1)),
        ("tv_convnext_tiny_bf16", (183, 317, 1)),
        ("tv_convnext_tiny_f16", (183, 317, 1)),
        ("tv_densenet121", (728, 554, 1)),
        ("tv_densenet121_bf16", (728, 554, 1)),
        ("tv_efficientnet_b0", (361, 339, 1)),
        ("tv_mobilenet_v3_small", (245, 296, 1)),
        ("tv_mobilenet_v3_small_bf16", (245, 352, 1)),
        ("tv_mobilenet_v3_small_f16", (245, 352, 1)),
        ("tv_mobilenet_v3_small_f64", (245, 296, 1)),
        ("tv_resnet18", (123, 91, 1)),
        ("tv_vit_b_16", (33, 155, 1)),
        ("tv_vit_b_16_bf16", (33, 163, 1)),
        ("tv_vit_b_16_f16", (33, 163, 1)),
        ("tv_vit_b_16_f64", (33, 155, 1)),
        ("view_dynamic", (3, 7, 1)),
    ];
    let mut found: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("fixtures dir")
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("model.fx").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let known: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
    assert_eq!(found, known, "a fixture was added or removed: extend this table");
    for (name, (placeholders, nodes, outputs)) in expected {
        let program = load(name);
        assert_eq!(program.placeholders.len(), placeholders, "{name} placeholders");
        assert_eq!(program.nodes.len(), nodes, "{name} nodes");
        assert_eq!(program.outputs.len(), outputs, "{name} outputs");
        assert_eq!(program.signature.inputs.len(), placeholders, "{name} signature inputs");
        assert_eq!(program.signature.outputs.len(), outputs, "{name} signature outputs");
        for (spec, placeholder) in program.signature.inputs.iter().zip(&program.placeholders) {
            assert_eq!(spec.name, placeholder.name, "{name}: signature follows forward's order");
        }
        for (spec, output) in program.signature.outputs.iter().zip(&program.outputs) {
            match output {
                Arg::Name(returned, _) => assert_eq!(&spec.name, returned, "{name}: output specs follow `return`"),
                // A returned number has an empty spec name.
                Arg::Int(_) | Arg::Float(_) | Arg::Bool(_) => assert_eq!(spec.name, "", "{name}: constant output"),
                other => panic!("{name}: unexpected output {other:?}"),
            }
        }
        // Lines are 1-based and point at the statement's own text.
        for node in &program.nodes {
            let line = program.source.lines().nth(node.line as usize - 1).unwrap_or("");
            assert!(line.trim_start().starts_with(&node.name), "{name}: line {} of `{}`", node.line, node.name);
            assert!(program.source[node.span.start..node.span.end].starts_with(&node.name));
        }
        assert!(program.source[program.return_span.start..program.return_span.end].starts_with("return ("));
    }
}

#[test]
fn mlp_signature_and_types() {
    let program = load("mlp");
    assert_eq!(program.placeholders[0].name, "p_fc1_weight");
    assert_eq!(program.placeholders[0].ty, tensor(DType::F32, &[32, 16]));
    assert_eq!(program.placeholders[6].ty, tensor(DType::F32, &[4, 16]));
    let inputs = &program.signature.inputs;
    assert_eq!(inputs[0].kind, InputKind::Parameter);
    assert_eq!(inputs[0].target.as_deref(), Some("fc1.weight"));
    assert_eq!(inputs[6].kind, InputKind::UserInput);
    assert_eq!(inputs[6].target, None);
    assert_eq!(program.signature.outputs[0].kind, OutputKind::UserOutput);
    assert!(program.range_constraints.is_empty());

    let permute = node(&program, "permute");
    assert_eq!(permute.line, 5);
    assert_eq!(permute.ty, Some(tensor(DType::F32, &[16, 32])));
    let (target, args, kwargs) = call(permute);
    assert_eq!(target, "aten.permute.default");
    assert_eq!(args[1], Arg::List(vec![Arg::Int(1), Arg::Int(0)]));
    assert!(kwargs.is_empty());
    let Expr::Call { target_span, .. } = &permute.expr else { unreachable!() };
    assert_eq!(&program.source[target_span.start..target_span.end], "torch.ops.aten.permute.default");
    // The span stops before the `;  p_fc1_weight = None` suffix.
    assert!(program.source[permute.span.start..permute.span.end].ends_with("[1, 0])"));
}

#[test]
fn mlp_bf16_dtypes() {
    let program = load("mlp_bf16");
    assert_eq!(program.placeholders[6].ty, tensor(DType::BF16, &[4, 16]));
    assert_eq!(node(&program, "addmm_2").ty, Some(tensor(DType::BF16, &[4, 8])));
}

#[test]
fn mlp_dynamic_symbols() {
    let program = load("mlp_dynamic");
    let symbolic = FxType::Tensor { dtype: DType::F32, dims: vec![SymExpr::Symbol("s77".into()), SymExpr::Int(16)] };
    assert_eq!(program.placeholders[6].ty, symbolic);
    assert_eq!(
        node(&program, "addmm").ty,
        Some(FxType::Tensor { dtype: DType::F32, dims: vec![SymExpr::Symbol("s77".into()), SymExpr::Int(32)] })
    );
    assert_eq!(program.range_constraints.len(), 1);
    let range = &program.range_constraints[0];
    assert_eq!((range.symbol.as_str(), range.min, range.max), ("s77", 2, Some(1024)));
    assert_eq!(&program.source[range.span.start..range.span.end], "s77: VR[2, 1024]");
}

#[test]
fn gpt2_block_nodes() {
    let program = load("gpt2_block");
    assert_eq!(program.signature.inputs[12].kind, InputKind::Buffer { persistent: false });
    assert_eq!(program.signature.inputs[12].target.as_deref(), Some("attn.bias"));
    assert_eq!(program.placeholders[12].ty, tensor(DType::Bool, &[1, 1, 16, 16]));

    // Multi-output ops have no annotation and are read by indexing.
    let layer_norm = node(&program, "native_layer_norm");
    assert_eq!(layer_norm.ty, None);
    let (target, args, _) = call(layer_norm);
    assert_eq!(target, "aten.native_layer_norm.default");
    assert_eq!(args[1], Arg::List(vec![Arg::Int(32)]));
    assert_eq!(args[4], Arg::Float(1e-05));
    assert_eq!(node(&program, "getitem_5").expr, Expr::Index { base: "split_with_sizes".into(), index: 2 });
    assert_eq!(node(&program, "getitem").expr, Expr::Index { base: "native_layer_norm".into(), index: 0 });

    let (_, args, kwargs) = call(node(&program, "full_1"));
    assert_eq!(args, &[Arg::List(vec![]), Arg::Float(-3.4028234663852886e+38)]);
    assert_eq!(kwargs[0], ("dtype".to_owned(), Arg::DType(DType::F32)));
    assert_eq!(kwargs[1], ("device".to_owned(), Arg::Device("cpu".into())));
    assert_eq!(kwargs[2], ("pin_memory".to_owned(), Arg::Bool(false)));
    assert_eq!(node(&program, "full_1").ty, Some(tensor(DType::F32, &[])));

    let (_, args, _) = call(node(&program, "full"));
    assert_eq!(args[1], Arg::Float(2.8284271247461903));
    let (_, _, kwargs) = call(node(&program, "gelu"));
    assert_eq!(kwargs, &[("approximate".to_owned(), Arg::Str("tanh".into()))]);
    let (_, _, kwargs) = call(node(&program, "clone"));
    assert_eq!(kwargs, &[("memory_format".to_owned(), Arg::Enum("contiguous_format".into()))]);
    let (_, args, _) = call(node(&program, "_softmax"));
    assert_eq!(args[1..], [Arg::Int(-1), Arg::Bool(false)]);
    let (_, args, _) = call(node(&program, "addmm"));
    assert_eq!(names(args), ["p_attn_c_attn_bias", "view", "permute"]);
}

#[test]
fn ops_mix_literals() {
    let program = load("ops_mix");
    assert_eq!(program.signature.inputs[2].kind, InputKind::ConstantTensor);
    assert_eq!(program.signature.inputs[2].target.as_deref(), Some("scale"));
    assert_eq!(program.placeholders[4].ty, tensor(DType::I64, &[2, 5]));

    let (_, args, _) = call(node(&program, "slice_1"));
    assert_eq!(args[1..], [Arg::Int(1), Arg::Int(1), Arg::Int(9223372036854775807), Arg::Int(2)]);
    let (_, args, _) = call(node(&program, "cat"));
    assert!(matches!(&args[0], Arg::List(items) if names(items) == ["x", "embedding"]));
    let (_, args, _) = call(node(&program, "amax"));
    assert_eq!(args[1], Arg::List(vec![Arg::Int(-1)]));
    let (_, args, kwargs) = call(node(&program, "full_like_1"));
    assert_eq!(args[1], Arg::Int(-1));
    assert_eq!(kwargs, &[("pin_memory".to_owned(), Arg::Bool(false))]);
    let (_, _, kwargs) = call(node(&program, "arange"));
    let kwarg_names: Vec<&str> = kwargs.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(kwarg_names, ["dtype", "layout", "device", "pin_memory"]);
    assert_eq!(kwargs[1].1, Arg::Enum("strided".into()));
    assert_eq!(node(&program, "gt").ty, Some(tensor(DType::Bool, &[2, 3, 4])));
    assert_eq!(node(&program, "_to_copy").ty, Some(tensor(DType::F64, &[2, 3, 4])));
    assert_eq!(node(&program, "scalar_tensor").ty, Some(tensor(DType::F32, &[])));

    // A call returning None: no annotation, positional `None`s, a dtype, kwargs.
    let assert_node = node(&program, "_assert_tensor_metadata");
    assert_eq!(assert_node.ty, None);
    let (target, args, kwargs) = call(assert_node);
    assert_eq!(target, "aten._assert_tensor_metadata.default");
    assert_eq!(args[1..], [Arg::None, Arg::None, Arg::DType(DType::F32)]);
    assert_eq!(kwargs[0], ("device".to_owned(), Arg::Device("cpu".into())));
    let (_, _, kwargs) = call(node(&program, "_to_copy_1"));
    assert_eq!(kwargs, &[("dtype".to_owned(), Arg::DType(DType::I32))]);
    let (_, _, kwargs) = call(node(&program, "full_like"));
    assert_eq!(kwargs[1], ("memory_format".to_owned(), Arg::Enum("preserve_format".into())));
}

#[test]
fn buffer_mutation_signature() {
    let program = load("buffer_mutation");
    let inputs = &program.signature.inputs;
    assert_eq!(inputs[2].kind, InputKind::Buffer { persistent: true });
    assert_eq!(inputs[2].target.as_deref(), Some("running_mean"));
    assert_eq!(program.placeholders[3].ty, tensor(DType::I64, &[]));
    let outputs = &program.signature.outputs;
    assert_eq!((outputs[0].name.as_str(), &outputs[0].kind), ("add_1", &OutputKind::BufferMutation));
    assert_eq!(outputs[0].target.as_deref(), Some("running_mean"));
    assert_eq!(outputs[1].target.as_deref(), Some("count"));
    assert_eq!(outputs[2].kind, OutputKind::UserOutput);
    assert_eq!(names(&program.outputs), ["add_1", "add", "mul_1"]);
    let (_, _, kwargs) = call(node(&program, "add_1"));
    assert_eq!(kwargs, &[("alpha".to_owned(), Arg::Float(0.1))]);
}

#[test]
fn cnn_pool_variants_none_and_bools() {
    let program = load("cnn_pool_variants");
    let (target, args, _) = call(node(&program, "convolution_1"));
    assert_eq!(target, "aten.convolution.default");
    assert_eq!(args[2], Arg::None);
    assert_eq!(args[6], Arg::Bool(false));
    assert_eq!(args[8], Arg::Int(1));
    assert_eq!(node(&program, "max_pool2d_with_indices_1").ty, None);
    let (_, args, _) = call(node(&program, "max_pool2d_with_indices_1"));
    assert_eq!(args[5], Arg::Bool(true));
}

#[test]
fn cnn_batch_norm() {
    let program = load("cnn");
    assert_eq!(
        node(&program, "getitem").expr,
        Expr::Index { base: "_native_batch_norm_legit_no_training".into(), index: 0 }
    );
    assert_eq!(program.signature.inputs[10].kind, InputKind::Buffer { persistent: true });
    assert_eq!(program.signature.inputs[10].target.as_deref(), Some("bn1.num_batches_tracked"));
}

#[test]
fn crlf_and_blank_lines_parse_the_same() {
    let path = fixtures_dir().join("gpt2_block/model.fx");
    let source = std::fs::read_to_string(path).expect("gpt2_block");
    let lf = ttpu_fx::parse(&source, "a.fx").expect("lf");
    let crlf = ttpu_fx::parse(&source.replace('\n', "\r\n"), "a.fx").expect("crlf");
    assert_eq!(lf.nodes.len(), crlf.nodes.len());
    for (a, b) in lf.nodes.iter().zip(&crlf.nodes) {
        assert_eq!((&a.name, &a.ty, a.line), (&b.name, &b.ty, b.line));
    }
    assert_eq!(lf.signature.inputs.len(), crlf.signature.inputs.len());
    // Blank lines may be empty or hold any whitespace.
    let spaced = source.replace("\n    \n", "\n\n\t \n");
    assert_eq!(ttpu_fx::parse(&spaced, "a.fx").expect("blank lines").nodes.len(), lf.nodes.len());
}

#[test]
fn mlp_snapshot() {
    let program = load("mlp");
    // The source text itself is left out: the snapshot is about the tree.
    insta::assert_debug_snapshot!((
        &program.placeholders,
        &program.nodes,
        &program.outputs,
        &program.return_span,
        &program.signature,
        &program.range_constraints
    ));
}

#[test]
fn submodule_classes_nest_by_indentation_and_keep_their_own_names() {
    let program = load("cond_branches");
    let names = |submodules: &[ttpu_fx::ast::Submodule]| -> Vec<String> {
        submodules.iter().map(|submodule| submodule.name.clone()).collect()
    };
    assert_eq!(names(&program.submodules), ["true_graph_0", "false_graph_0"]);
    let outer_true = &program.submodules[0];
    // The inner branches reuse the outer names: they are scoped to `true_graph_0`.
    assert_eq!(names(&outer_true.submodules), ["true_graph_0", "false_graph_0"]);
    assert!(program.submodules[1].submodules.is_empty());
    let placeholders: Vec<&str> = outer_true.placeholders.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(placeholders, ["x", "y", "p_lin_bias", "p_lin_weight"]);
    // `gt` is defined in the main graph and again in the branch: each graph has its own names.
    assert!(program.nodes.iter().any(|node| node.name == "gt"));
    assert!(outer_true.nodes.iter().any(|node| node.name == "gt"));
    assert_eq!(outer_true.submodules[0].outputs.len(), 2);
}
