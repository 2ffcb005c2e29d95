//! Layout, indexing, creation and `linear`: `flatten`, `squeeze`, `expand`, `stack`,
//! `index_select`, `gather`, `embedding`, `zeros`/`ones`, `arange` and `linear` against values
//! worked out by hand or in `f64`, with negative dims, and the exact messages of what is refused.

use ttpu_eager::{DType, Tensor};

use crate::common::{assert_close, assert_close_f64, device, message, tensor};

/// `0, 1, ..., n - 1` as an `f32` tensor of `dims`.
fn counting(device: &ttpu_eager::Device, dims: &[i64]) -> Tensor {
    let count: i64 = dims.iter().product();
    let data: Vec<f32> = (0..count).map(|value| value as f32).collect();
    tensor(device, &data, dims)
}

#[test]
fn flatten_squeeze_and_expand_reshape_like_pytorch() {
    let device = device();
    let x = counting(&device, &[2, 3, 4]);
    let all: Vec<f32> = (0..24).map(|value| value as f32).collect();
    let flat = x.flatten(1, -1).unwrap();
    assert_eq!((flat.dims(), flat.to_vec::<f32>().unwrap()), (vec![2, 12], all.clone()));
    assert_eq!(x.flatten(0, -2).unwrap().dims(), vec![6, 4]);
    assert_eq!(x.flatten(-1, -1).unwrap().dims(), vec![2, 3, 4]);
    assert_eq!(x.flatten(0, 2).unwrap().dims(), vec![24]);
    assert_eq!(Tensor::scalar(&device, 2.0f32).unwrap().flatten(0, -1).unwrap().dims(), vec![1]);

    let padded = x.reshape(&[1, 2, 1, 12, 1]).unwrap().squeeze().unwrap();
    assert_eq!((padded.dims(), padded.to_vec::<f32>().unwrap()), (vec![2, 12], all));
    assert_eq!(tensor(&device, &[5.0], &[1, 1]).squeeze().unwrap().dims(), Vec::<i64>::new());

    let column = tensor(&device, &[1.0, 2.0, 3.0], &[3, 1]);
    let expanded = column.expand(&[2, -1, 4]).unwrap();
    assert_eq!(expanded.dims(), vec![2, 3, 4]);
    let expected: Vec<f32> = [1.0f32, 2.0, 3.0].repeat(2).into_iter().flat_map(|value| [value; 4]).collect();
    assert_eq!(expanded.to_vec::<f32>().unwrap(), expected);
    assert_eq!(column.broadcast_to(&[-1, 0]).unwrap().dims(), vec![3, 0]);
}

#[test]
fn stack_joins_along_a_new_dim_and_promotes() {
    let device = device();
    let floats = tensor(&device, &[1.0, 2.0, 3.0], &[3]);
    let ints = Tensor::from_slice(&device, &[4i64, 5, 6], &[3]).unwrap();
    let rows = Tensor::stack(&[&floats, &ints], 0).unwrap();
    assert_eq!((rows.dtype(), rows.dims()), (DType::F32, vec![2, 3]));
    assert_eq!(rows.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let columns = Tensor::stack(&[&floats, &ints], -1).unwrap();
    assert_eq!(columns.dims(), vec![3, 2]);
    assert_eq!(columns.to_vec::<f32>().unwrap(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    let matrix = counting(&device, &[2, 2]);
    let middle = Tensor::stack(&[&matrix, &matrix.neg().unwrap(), &matrix], 1).unwrap();
    assert_eq!(middle.dims(), vec![2, 3, 2]);
    assert_eq!(middle.to_vec::<f32>().unwrap(), vec![0.0, 1.0, -0.0, -1.0, 0.0, 1.0, 2.0, 3.0, -2.0, -3.0, 2.0, 3.0]);
}

#[test]
fn index_select_gather_and_embedding_read_by_index() {
    let device = device();
    let x = counting(&device, &[3, 4]);
    let columns = Tensor::from_slice(&device, &[3i32, 0, 3], &[3]).unwrap();
    let picked = x.index_select(-1, &columns).unwrap();
    assert_eq!(picked.dims(), vec![3, 3]);
    assert_eq!(picked.to_vec::<f32>().unwrap(), vec![3.0, 0.0, 3.0, 7.0, 4.0, 7.0, 11.0, 8.0, 11.0]);
    let one_row = x.index_select(0, &Tensor::scalar(&device, 2i64).unwrap()).unwrap();
    assert_eq!((one_row.dims(), one_row.to_vec::<f32>().unwrap()), (vec![1, 4], vec![8.0, 9.0, 10.0, 11.0]));

    let along_rows = Tensor::from_slice(&device, &[0i64, 0, 1, 0, 3, 2], &[3, 2]).unwrap();
    let gathered = x.gather(1, &along_rows).unwrap();
    assert_eq!(gathered.dims(), vec![3, 2]);
    assert_eq!(gathered.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 5.0, 4.0, 11.0, 10.0]);
    let along_columns = Tensor::from_slice(&device, &[2i32, 1, 0, 0], &[1, 4]).unwrap();
    assert_eq!(x.gather(-2, &along_columns).unwrap().to_vec::<f32>().unwrap(), vec![8.0, 5.0, 2.0, 3.0]);

    let weight = counting(&device, &[4, 3]);
    let tokens = Tensor::from_slice(&device, &[1i32, 3, 0, 1], &[2, 2]).unwrap();
    let embedded = Tensor::embedding(&weight, &tokens).unwrap();
    assert_eq!(embedded.dims(), vec![2, 2, 3]);
    let rows = [1, 3, 0, 1];
    let expected: Vec<f32> = rows.iter().flat_map(|&row| (0..3).map(move |column| (row * 3 + column) as f32)).collect();
    assert_eq!(embedded.to_vec::<f32>().unwrap(), expected);
}

#[test]
fn zeros_ones_and_arange_fill_on_the_device() {
    let device = device();
    let zeros = Tensor::zeros(&device, DType::I64, &[2, 3]).unwrap();
    assert_eq!((zeros.dims(), zeros.to_vec::<i64>().unwrap()), (vec![2, 3], vec![0; 6]));
    assert_eq!(Tensor::ones(&device, DType::Bool, &[2]).unwrap().to_vec::<bool>().unwrap(), vec![true, true]);
    let half_ones = Tensor::ones(&device, DType::F16, &[1]).unwrap();
    assert_eq!(half_ones.to_vec::<half::f16>().unwrap(), vec![half::f16::from_f32(1.0)]);
    assert_eq!(device.counters().bytes_to_device, 0, "fills are made on the device");

    let counted = Tensor::arange(&device, 0.0, 5.0, 1.0, DType::I64).unwrap();
    assert_eq!(counted.to_vec::<i64>().unwrap(), vec![0, 1, 2, 3, 4]);
    let quarters = Tensor::arange(&device, 1.0, 2.0, 0.25, DType::F32).unwrap();
    assert_eq!(quarters.to_vec::<f32>().unwrap(), vec![1.0, 1.25, 1.5, 1.75]);
    let down = Tensor::arange(&device, 5.0, 0.0, -2.0, DType::I32).unwrap();
    assert_eq!(down.to_vec::<i32>().unwrap(), vec![5, 3, 1]);
    // Each element is `start + step * i` in f64, rounded once; `ceil` counts a partial step.
    let tenths = Tensor::arange(&device, -0.5, 0.55, 0.1, DType::F64).unwrap();
    let expected: Vec<f64> = (0..11).map(|index| -0.5 + 0.1 * f64::from(index)).collect();
    assert_close_f64(&tenths.to_vec::<f64>().unwrap(), &expected, 0.0);
    // Integer dtypes truncate the step, as PyTorch's kernel does.
    let truncated = Tensor::arange(&device, 0.0, 3.0, 0.5, DType::I64).unwrap();
    assert_eq!(truncated.to_vec::<i64>().unwrap(), vec![0; 6]);
    assert_eq!(Tensor::arange(&device, 2.0, 2.0, 1.0, DType::F32).unwrap().dims(), vec![0]);
}

#[test]
fn linear_multiplies_by_the_transposed_weight_and_adds_the_bias() {
    let device = device();
    let input_data: Vec<f32> = (0..24).map(|value| value as f32 * 0.25 - 3.0).collect();
    let weight_data: Vec<f32> = (0..20).map(|value| (value % 7) as f32 * 0.5 - 1.0).collect();
    let bias_data = [0.5f32, -1.0, 2.0, 0.0, 0.25];
    let input = tensor(&device, &input_data, &[2, 3, 4]);
    let weight = tensor(&device, &weight_data, &[5, 4]);
    let bias = tensor(&device, &bias_data, &[5]);
    let expected = |with_bias: bool| -> Vec<f64> {
        let mut res = vec![];
        for row in input_data.chunks(4) {
            for (out, weights) in weight_data.chunks(4).enumerate() {
                let dot: f64 = row.iter().zip(weights).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                res.push(dot + if with_bias { f64::from(bias_data[out]) } else { 0.0 });
            }
        }
        res
    };
    let with_bias = input.linear(&weight, Some(&bias)).unwrap();
    assert_eq!(with_bias.dims(), vec![2, 3, 5]);
    assert_close(&with_bias.to_vec::<f32>().unwrap(), &expected(true), 1e-5);
    assert_close(&input.linear(&weight, None).unwrap().to_vec::<f32>().unwrap(), &expected(false), 1e-5);

    // A vector weight drops the output dim; a vector input has no leading dims.
    let vector_weight = tensor(&device, &weight_data[..4], &[4]);
    let dotted = input.linear(&vector_weight, None).unwrap();
    assert_eq!(dotted.dims(), vec![2, 3]);
    let firsts: Vec<f64> = expected(false).chunks(5).map(|outputs| outputs[0]).collect();
    assert_close(&dotted.to_vec::<f32>().unwrap(), &firsts, 1e-5);
    let single = tensor(&device, &input_data[..4], &[4]).linear(&weight, Some(&bias)).unwrap();
    assert_eq!(single.dims(), vec![5]);
    assert_close(&single.to_vec::<f32>().unwrap(), &expected(true)[..5], 1e-5);
}

#[test]
fn shape_and_index_refusals_have_exact_messages() {
    let device = device();
    let x = tensor(&device, &[0.0; 6], &[2, 3]);
    let row = tensor(&device, &[0.0; 3], &[3]);
    let vector = tensor(&device, &[0.0; 4], &[4]);
    let ints = Tensor::from_slice(&device, &[0i64, 1], &[2]).unwrap();
    let pair = Tensor::from_slice(&device, &[0i64, 1], &[1, 2]).unwrap();
    let tall = Tensor::from_slice(&device, &[0i64; 3], &[3, 1]).unwrap();
    let flags = Tensor::from_slice(&device, &[true, false], &[2]).unwrap();
    let cases = [
        (message(x.flatten(1, 0)), "flatten: start dim 1 comes after end dim 0"),
        (message(x.flatten(0, 2)), "dim 2 is out of range for a tensor of rank 2"),
        (message(x.expand(&[3, 3])), "cannot expand shape [2, 3] to [3, 3]"),
        (message(x.expand(&[3])), "cannot expand shape [2, 3] to [3]"),
        (message(row.expand(&[-1, 3])), "cannot expand shape [3] to [-1, 3]"),
        (message(row.broadcast_to(&[2, -2])), "cannot expand shape [3] to [2, -2]"),
        (message(Tensor::stack(&[&x, &row], 0)), "stack: tensor 1 has shape [3], but tensor 0 has shape [2, 3]"),
        (message(Tensor::stack(&[], 0)), "stack: expected at least one tensor"),
        (message(Tensor::stack(&[&x, &x], -4)), "dim -4 is out of range for a tensor of rank 3"),
        (message(x.index_select(1, &row)), "index_select: indices must be i64 or i32, found f32"),
        (message(x.index_select(1, &pair)), "index_select: index must have at most one dim, found shape [1, 2]"),
        (message(x.index_select(2, &ints)), "dim 2 is out of range for a tensor of rank 2"),
        (message(x.gather(1, &flags)), "gather: indices must be i64 or i32, found bool"),
        (
            message(x.gather(1, &ints)),
            "gather: index of shape [2] does not fit the input of shape [2, 3] outside dim 1",
        ),
        (
            message(x.gather(1, &tall)),
            "gather: index of shape [3, 1] does not fit the input of shape [2, 3] outside dim 1",
        ),
        (
            message(Tensor::embedding(&vector, &ints)),
            "embedding: weight must be a matrix of at least one row, found shape [4]",
        ),
        (message(Tensor::embedding(&x, &row)), "embedding: indices must be i64 or i32, found f32"),
        (message(Tensor::arange(&device, 0.0, 5.0, 0.0, DType::F32)), "arange: step must be nonzero"),
        (message(Tensor::arange(&device, 0.0, 5.0, -1.0, DType::F32)), "arange: step -1 does not lead from 0 to 5"),
        (
            message(Tensor::arange(&device, 0.0, f64::NAN, 1.0, DType::F32)),
            "arange: start, end and step must be finite, found 0, NaN and 1",
        ),
        (message(Tensor::arange(&device, 0.0, 2.0, 1.0, DType::Bool)), "`arange` is not defined for bool"),
        (message(Tensor::zeros(&device, DType::F32, &[2, -1])), "invalid shape [2, -1]"),
        (message(x.linear(&vector, None)), "linear: input of shape [2, 3] does not fit weight of shape [4]"),
        (
            message(x.linear(&x.reshape(&[1, 2, 3]).unwrap(), None)),
            "linear: input of shape [2, 3] does not fit weight of shape [1, 2, 3]",
        ),
        (
            message(Tensor::scalar(&device, 1.0f32).unwrap().linear(&row, None)),
            "linear: input of shape [] does not fit weight of shape [3]",
        ),
        (message(x.linear(&x, Some(&row))), "linear: bias of shape [3] does not broadcast to the output shape [2, 2]"),
        (message(x.linear(&row, Some(&row))), "linear: bias of shape [3] does not broadcast to the output shape [2]"),
        (message(flags.linear(&flags, None)), "`linear` is not defined for bool"),
    ];
    for (actual, expected) in cases {
        assert_eq!(actual, expected);
    }
}
