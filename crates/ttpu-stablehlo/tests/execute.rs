//! Runs lowered graphs on the XLA CPU PJRT plugin (through `ttpu-pjrt`): XLA must accept every
//! snapshot graph, and a few computations are checked number by number.
//!
//! Like `ttpu-pjrt`'s own tests, a missing plugin fails the test with the setup hint
//! (`cargo xtask setup` or `TTPU_PJRT_PLUGIN`).

mod common;

use std::sync::OnceLock;

use common::{dims, graphs, input, lower, nchw_conv2d};
use half::{bf16, f16};
use ttpu_ir::{
    BinaryOp, CompareDirection, DType, DotDims, FftType, GatherDims, Graph, GraphBuilder, Literal, ReduceKind, Scalar,
    ScatterDims, ScatterKind, UnaryOp, Window,
};
use ttpu_pjrt::{Client, ElementType, HostBuffer, Plugin};

/// One CPU client for the whole binary.
fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        let path = ttpu_pjrt::find_plugin().unwrap_or_else(|error| panic!("{error}"));
        let plugin = Plugin::load(&path).unwrap_or_else(|error| panic!("{error}"));
        Client::new(&plugin).unwrap_or_else(|error| panic!("{error}"))
    })
}

fn element_type(dtype: DType) -> ElementType {
    match dtype {
        DType::F64 => ElementType::F64,
        DType::F32 => ElementType::F32,
        DType::F16 => ElementType::F16,
        DType::BF16 => ElementType::BF16,
        DType::I64 => ElementType::S64,
        DType::I32 => ElementType::S32,
        DType::I16 => ElementType::S16,
        DType::I8 => ElementType::S8,
        DType::U8 => ElementType::U8,
        DType::U16 => ElementType::U16,
        DType::U32 => ElementType::U32,
        DType::U64 => ElementType::U64,
        DType::Bool => ElementType::Pred,
        DType::C32 | DType::C64 => ElementType::C64,
        DType::C128 => ElementType::C128,
    }
}

/// Lowers `graph`, compiles it, runs it on `args` and downloads every output.
fn run(graph: &Graph, args: &[Literal]) -> Vec<HostBuffer> {
    let text = lower(graph);
    let executable = client().compile(&text).unwrap_or_else(|error| panic!("{error}\n{text}"));
    let buffers: Vec<_> = args
        .iter()
        .map(|arg| client().buffer_from_host(arg.bytes(), element_type(arg.dtype()), arg.dims()).expect("upload"))
        .collect();
    let refs: Vec<_> = buffers.iter().collect();
    let outputs = executable.execute(&refs).unwrap_or_else(|error| panic!("{error}\n{text}"));
    outputs.iter().map(|buffer| buffer.to_host().expect("download")).collect()
}

fn f32s(buffer: &HostBuffer) -> Vec<f32> {
    buffer.data.chunks_exact(4).map(|chunk| f32::from_le_bytes(chunk.try_into().unwrap())).collect()
}

fn i32s(buffer: &HostBuffer) -> Vec<i32> {
    buffer.data.chunks_exact(4).map(|chunk| i32::from_le_bytes(chunk.try_into().unwrap())).collect()
}

fn f32_literal(dims: &[i64], values: &[f32]) -> Literal {
    let bytes: Vec<u8> = values.iter().flat_map(|value| value.to_le_bytes()).collect();
    Literal::from_bytes(DType::F32, dims, bytes).unwrap()
}

fn i32_literal(dims: &[i64], values: &[i32]) -> Literal {
    let bytes: Vec<u8> = values.iter().flat_map(|value| value.to_le_bytes()).collect();
    Literal::from_bytes(DType::I32, dims, bytes).unwrap()
}

#[test]
fn xla_compiles_every_snapshot_graph() {
    for (name, graph) in graphs::all() {
        let text = lower(&graph);
        if let Err(error) = client().compile(&text) {
            panic!("XLA rejected `{name}`: {error}\n{text}");
        }
    }
}

#[test]
fn constants_come_back_bit_exact() {
    let graph = graphs::constants_of_every_dtype();
    let outputs = run(&graph, &[]);
    for ((_, node), host) in graph.nodes().zip(&outputs) {
        let ttpu_ir::Op::Constant(literal) = &node.op else { unreachable!("only constants") };
        assert_eq!(host.element_type, element_type(literal.dtype()));
        assert_eq!(host.dims, literal.dims());
        assert_eq!(host.data, literal.bytes(), "{}", literal.ty());
    }
    // Spot-check the narrow floats by value too.
    let f16s: Vec<f16> = outputs[2].data.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect();
    assert_eq!(f16s[1], f16::from_f32(-2.5));
    let bf16s: Vec<bf16> = outputs[3].data.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect();
    assert_eq!(bf16s[0], bf16::from_f64(0.1));
}

#[test]
fn elementwise_compare_select_and_reduce_compute() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[2, 3]);
    let y = input(&mut b, "y", DType::F32, &[2, 3]);
    let sum = b.binary(BinaryOp::Add, x, y).unwrap();
    let greater = b.compare(CompareDirection::Gt, x, y).unwrap();
    let larger = b.select(greater, x, y).unwrap();
    let row_sums = b.reduce(sum, ReduceKind::Sum, &[1]).unwrap();
    let column_max = b.reduce(larger, ReduceKind::Max, &[0]).unwrap();
    let graph = b.finish(&[sum, greater, larger, row_sums, column_max]);
    let outputs = run(
        &graph,
        &[
            f32_literal(&[2, 3], &[1.0, 5.0, -3.0, 4.0, 0.5, 6.0]),
            f32_literal(&[2, 3], &[2.0, 1.0, -4.0, 4.0, 8.0, -1.0]),
        ],
    );
    assert_eq!(f32s(&outputs[0]), [3.0, 6.0, -7.0, 8.0, 8.5, 5.0]);
    assert_eq!(outputs[1].data, [0, 1, 1, 0, 0, 1]);
    assert_eq!(f32s(&outputs[2]), [2.0, 5.0, -3.0, 4.0, 8.0, 6.0]);
    assert_eq!(f32s(&outputs[3]), [2.0, 21.5]);
    assert_eq!(f32s(&outputs[4]), [4.0, 8.0, 6.0]);
}

#[test]
fn bitcast_convert_reinterprets_bits_across_widths() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[3]);
    let bits = b.bitcast_convert(x, DType::I32).unwrap();
    let halves = b.bitcast_convert(x, DType::I16).unwrap();
    let back = b.bitcast_convert(halves, DType::F32).unwrap();
    let graph = b.finish(&[bits, halves, back]);
    let values = [1.0f32, -0.0, f32::from_bits(0xffc0_0001)];
    let outputs = run(&graph, &[f32_literal(&[3], &values)]);
    let expected: Vec<i32> = values.iter().map(|value| value.to_bits() as i32).collect();
    assert_eq!(i32s(&outputs[0]), expected);
    // The trailing dim holds the parts in memory order: the low half first on little-endian.
    assert_eq!(outputs[1].dims, [3, 2]);
    let parts: Vec<u16> =
        outputs[1].data.chunks_exact(2).map(|chunk| u16::from_le_bytes([chunk[0], chunk[1]])).collect();
    assert_eq!(parts, [0x0000, 0x3f80, 0x0000, 0x8000, 0x0001, 0xffc0]);
    let round_trip: Vec<u32> = f32s(&outputs[2]).iter().map(|value| value.to_bits()).collect();
    assert_eq!(round_trip, values.map(f32::to_bits));
}

fn f64s(buffer: &HostBuffer) -> Vec<f64> {
    buffer.data.chunks_exact(8).map(|chunk| f64::from_le_bytes(chunk.try_into().unwrap())).collect()
}

/// The DFT of `x` by its definition, in f64: (real, imaginary) of `sum x[n] exp(-2 pi i k n / N)`.
fn naive_dft(x: &[f64]) -> Vec<(f64, f64)> {
    let n = x.len() as f64;
    (0..x.len())
        .map(|k| {
            x.iter().enumerate().fold((0.0, 0.0), |(re, im), (index, &value)| {
                let angle = -2.0 * std::f64::consts::PI * (k * index) as f64 / n;
                (re + value * angle.cos(), im + value * angle.sin())
            })
        })
        .collect()
}

#[test]
fn fft_real_imag_and_complex_match_the_definition() {
    // An odd length, so the half spectrum of rfft (n/2 + 1 entries) is not half of n.
    let values: Vec<f64> = (0..7).map(|i| (i as f64 * 0.7).sin() + 0.25 * i as f64).collect();
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F64, &[7]);
    let spectrum = b.fft(x, FftType::Rfft, &[7]).unwrap();
    let re = b.real(spectrum).unwrap();
    let im = b.imag(spectrum).unwrap();
    let back = b.fft(spectrum, FftType::Irfft, &[7]).unwrap();
    let zero = b.constant(Literal::splat(DType::F64, &[7], Scalar::Float(0.0)));
    let full = b.complex(x, zero).unwrap();
    let forward = b.fft(full, FftType::Fft, &[7]).unwrap();
    let product = b.binary(BinaryOp::Multiply, forward, forward).unwrap();
    let inverse = b.fft(forward, FftType::Ifft, &[7]).unwrap();
    let modulus = b.unary(UnaryOp::Abs, forward).unwrap();
    let inverse_re = b.real(inverse).unwrap();
    let product_re = b.real(product).unwrap();
    let product_im = b.imag(product).unwrap();
    let graph = b.finish(&[re, im, back, modulus, inverse_re, product_re, product_im]);
    let bytes: Vec<u8> = values.iter().flat_map(|value| value.to_le_bytes()).collect();
    let outputs = run(&graph, &[Literal::from_bytes(DType::F64, &[7], bytes).unwrap()]);
    let expected = naive_dft(&values);
    let close = |got: &[f64], want: &[f64]| {
        assert_eq!(got.len(), want.len());
        for (got, want) in got.iter().zip(want) {
            assert!((got - want).abs() <= 1e-12 * (1.0 + want.abs()), "{got} vs {want}");
        }
    };
    assert_eq!(outputs[0].dims, [4]);
    close(&f64s(&outputs[0]), &expected[..4].iter().map(|pair| pair.0).collect::<Vec<_>>());
    close(&f64s(&outputs[1]), &expected[..4].iter().map(|pair| pair.1).collect::<Vec<_>>());
    close(&f64s(&outputs[2]), &values);
    close(&f64s(&outputs[3]), &expected.iter().map(|(re, im)| re.hypot(*im)).collect::<Vec<_>>());
    close(&f64s(&outputs[4]), &values);
    close(&f64s(&outputs[5]), &expected.iter().map(|(re, im)| re * re - im * im).collect::<Vec<_>>());
    close(&f64s(&outputs[6]), &expected.iter().map(|(re, im)| 2.0 * re * im).collect::<Vec<_>>());
}

#[test]
fn integer_and_reduction_starts_from_all_ones() {
    let mut b = GraphBuilder::new();
    let i = input(&mut b, "i", DType::I32, &[3]);
    let all = b.reduce(i, ReduceKind::And, &[0]).unwrap();
    let any = b.reduce(i, ReduceKind::Or, &[0]).unwrap();
    let outputs = run(&b.finish(&[all, any]), &[i32_literal(&[3], &[0b0111, 0b0110, 0b1110])]);
    assert_eq!(i32s(&outputs[0]), [0b0110]);
    assert_eq!(i32s(&outputs[1]), [0b1111]);
}

#[test]
fn dot_general_multiplies_matrices() {
    let mut b = GraphBuilder::new();
    let a = input(&mut b, "a", DType::F32, &[2, 3]);
    let w = input(&mut b, "w", DType::F32, &[2, 3]);
    let dims_ = DotDims { lhs_contracting: dims(&[1]), rhs_contracting: dims(&[1]), ..DotDims::default() };
    let product = b.dot_general(a, w, dims_).unwrap();
    let outputs = run(
        &b.finish(&[product]),
        &[
            f32_literal(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            f32_literal(&[2, 3], &[1.0, 0.0, -1.0, 0.5, 0.5, 0.5]),
        ],
    );
    // a @ w^T
    assert_eq!(f32s(&outputs[0]), [-2.0, 3.0, -2.0, 7.5]);
}

#[test]
fn max_pool_pads_with_negative_infinity() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[1, 4]);
    let window = Window {
        dimensions: dims(&[1, 2]),
        strides: dims(&[1, 2]),
        base_dilations: dims(&[1, 1]),
        window_dilations: dims(&[1, 1]),
        padding: [(0, 0), (1, 1)].into_iter().collect(),
    };
    let pooled = b.reduce_window(x, ReduceKind::Max, window).unwrap();
    let outputs = run(&b.finish(&[pooled]), &[f32_literal(&[1, 4], &[-5.0, -6.0, -7.0, -8.0])]);
    assert_eq!(f32s(&outputs[0]), [-5.0, -6.0, -8.0]);
}

#[test]
fn convolution_slides_the_kernel() {
    let mut b = GraphBuilder::new();
    let x = input(&mut b, "x", DType::F32, &[1, 1, 3, 3]);
    let k = input(&mut b, "k", DType::F32, &[1, 1, 2, 2]);
    let conv = b.convolution(x, k, nchw_conv2d([1, 1], [(0, 0), (0, 0)], [1, 1], 1)).unwrap();
    let outputs = run(
        &b.finish(&[conv]),
        &[
            f32_literal(&[1, 1, 3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
            f32_literal(&[1, 1, 2, 2], &[1.0, 0.0, 0.0, -1.0]),
        ],
    );
    assert_eq!(f32s(&outputs[0]), [-4.0, -4.0, -4.0, -4.0]);
}

#[test]
fn gather_and_scatter_move_rows() {
    let mut b = GraphBuilder::new();
    let table = input(&mut b, "table", DType::F32, &[3, 2]);
    let ids = input(&mut b, "ids", DType::I32, &[2, 1]);
    let updates = input(&mut b, "updates", DType::F32, &[2, 2]);
    let rows = b
        .gather(
            table,
            ids,
            GatherDims {
                offset_dims: dims(&[1]),
                collapsed_slice_dims: dims(&[0]),
                operand_batching_dims: dims(&[]),
                start_indices_batching_dims: dims(&[]),
                start_index_map: dims(&[0]),
                index_vector_dim: 1,
                slice_sizes: dims(&[1, 2]),
                indices_are_sorted: false,
            },
        )
        .unwrap();
    let scatter = |kind| ScatterDims {
        update_window_dims: dims(&[1]),
        inserted_window_dims: dims(&[0]),
        input_batching_dims: dims(&[]),
        scatter_indices_batching_dims: dims(&[]),
        scatter_dims_to_operand_dims: dims(&[0]),
        index_vector_dim: 1,
        kind,
        indices_are_sorted: false,
        unique_indices: false,
    };
    let added = b.scatter(table, ids, updates, scatter(ScatterKind::Combine(ReduceKind::Sum))).unwrap();
    let replaced = b.scatter(table, ids, updates, scatter(ScatterKind::Replace)).unwrap();
    let outputs = run(
        &b.finish(&[rows, added, replaced]),
        &[
            f32_literal(&[3, 2], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]),
            i32_literal(&[2, 1], &[2, 0]),
            f32_literal(&[2, 2], &[0.5, 0.25, 100.0, 200.0]),
        ],
    );
    assert_eq!(f32s(&outputs[0]), [20.0, 21.0, 0.0, 1.0]);
    assert_eq!(f32s(&outputs[1]), [100.0, 201.0, 10.0, 11.0, 20.5, 21.25]);
    assert_eq!(f32s(&outputs[2]), [100.0, 200.0, 10.0, 11.0, 0.5, 0.25]);
}

#[test]
fn iota_counts_and_bool_constants_select() {
    let mut b = GraphBuilder::new();
    let counts = b.iota(ttpu_ir::TensorType::from_static(DType::I32, &[2, 3]), 1).unwrap();
    let mask = b.constant(
        Literal::from_scalars(DType::Bool, &[2, 3], &[true, false, true, false, false, true].map(Scalar::Bool))
            .unwrap(),
    );
    let zeros = b.constant(Literal::splat(DType::I32, &[2, 3], Scalar::Int(-1)));
    let picked = b.select(mask, counts, zeros).unwrap();
    let outputs = run(&b.finish(&[counts, picked]), &[]);
    assert_eq!(i32s(&outputs[0]), [0, 1, 2, 0, 1, 2]);
    assert_eq!(i32s(&outputs[1]), [0, -1, 2, -1, -1, 2]);
}

#[test]
fn large_bool_constants_keep_every_element() {
    // Over a hundred elements, MLIR prints constants as hex; i1 data must still reach XLA intact.
    let values: Vec<Scalar> = (0..210).map(|index| Scalar::Bool(index % 3 == 0 || index % 7 == 0)).collect();
    let literal = Literal::from_scalars(DType::Bool, &[2, 3, 7, 5], &values).expect("210 values");
    let mut b = GraphBuilder::new();
    let mask = b.constant(literal.clone());
    let outputs = run(&b.finish(&[mask]), &[]);
    assert_eq!(outputs[0].element_type, ElementType::Pred);
    assert_eq!(outputs[0].data, literal.bytes());
}

#[test]
fn random_bits_come_back_as_u64_and_map_to_uniform_floats() {
    let outputs = run(&graphs::rng_bit_generator(), &[]);
    let uniform = f32s(&outputs[0]);
    assert_eq!(uniform.len(), 10_000);
    assert!(uniform.iter().all(|value| (0.0..1.0).contains(value)));
    let mean = uniform.iter().map(|&value| f64::from(value)).sum::<f64>() / 10_000.0;
    let variance = uniform.iter().map(|&value| (f64::from(value) - mean).powi(2)).sum::<f64>() / 10_000.0;
    // U(0, 1): mean 1/2, variance 1/12; the standard error of the mean is 0.0029.
    assert!((mean - 0.5).abs() < 0.015, "mean {mean}");
    assert!((variance - 1.0 / 12.0).abs() < 0.005, "variance {variance}");
    assert_eq!((outputs[1].element_type, outputs[1].dims.as_slice()), (ElementType::U64, &[5][..]));
    assert_eq!((outputs[2].element_type, outputs[2].dims.as_slice()), (ElementType::U64, &[][..]));
    let words: Vec<u64> =
        outputs[1].data.chunks_exact(8).map(|chunk| u64::from_le_bytes(chunk.try_into().unwrap())).collect();
    assert!(words.windows(2).all(|pair| pair[0] != pair[1]), "{words:?}");
}
