//! Quantization ops: the types they build, and the arguments PyTorch would refuse, refused with
//! a message naming the node.

mod common;

use common::{check, try_import};
use ttpu_fx::ImportOptions;

const QD: &str = "quantized_decomposed";

fn refused(params: &[(&str, &str)], ty: &str, call: &str) -> String {
    let line = format!("out: \"{ty}\" = torch.ops.{call}");
    match try_import(params, &[&line], &["out"], &ImportOptions::default()) {
        Ok(_) => panic!("{call} imported, but an error was expected"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn quantize_and_dequantize_build_their_types() {
    let x = [("x", "f32[4, 3]")];
    check(&x, "i8[4, 3]", &format!("{QD}.quantize_per_tensor.default(x, 0.1, 3, -128, 127, torch.int8)"));
    check(&x, "u8[4, 3]", &format!("{QD}.quantize_per_tensor.default(x, 0.1, 3, 0, 255, torch.uint8)"));
    let q = [("q", "i8[4, 3]"), ("s", "f64[1]"), ("z", "i64[1]")];
    check(&q, "f32[4, 3]", &format!("{QD}.dequantize_per_tensor.tensor(q, s, z, -128, 127, torch.int8)"));
    check(
        &q,
        "bf16[4, 3]",
        &format!("{QD}.dequantize_per_tensor.tensor(q, s, z, -128, 127, torch.int8, out_dtype = torch.bfloat16)"),
    );
    let w = [("w", "i8[4, 3]"), ("s", "f32[3]"), ("z", "i64[3]")];
    check(&w, "f32[4, 3]", &format!("{QD}.dequantize_per_channel.default(w, s, z, -1, -128, 127, torch.int8)"));
    check(&w, "f32[4, 3]", &format!("{QD}.dequantize_per_channel.default(w, s, None, 1, -128, 127, torch.int8)"));
    check(&[("a", "i8[5, 8]"), ("b", "i8[8, 2]")], "i32[5, 2]", "aten._int_mm.default(a, b)");
}

#[test]
fn a_range_outside_the_dtype_is_refused() {
    let x = [("x", "f32[4]")];
    let message = refused(&x, "i8[4]", &format!("{QD}.quantize_per_tensor.default(x, 0.1, 0, -129, 127, torch.int8)"));
    assert!(
        message.contains("`out`") && message.contains("quant_min -129 is below the smallest i8 value -128"),
        "{message}"
    );
    let message = refused(&x, "u8[4]", &format!("{QD}.quantize_per_tensor.default(x, 0.1, 0, 0, 256, torch.uint8)"));
    assert!(message.contains("quant_max 256 is above the largest u8 value 255"), "{message}");
    let message = refused(&x, "i8[4]", &format!("{QD}.quantize_per_tensor.default(x, 0.1, 0, 5, 4, torch.int8)"));
    assert!(message.contains("quant_min 5 is above quant_max 4"), "{message}");
    let message = refused(&x, "f32[4]", &format!("{QD}.quantize_per_tensor.default(x, 0.1, 0, 0, 1, torch.float32)"));
    assert!(message.contains("is not a quantized dtype"), "{message}");
}

#[test]
fn per_channel_axes_and_lengths_are_checked() {
    let params = [("x", "f32[4, 3]"), ("s", "f32[3]"), ("z", "i64[3]")];
    let message =
        refused(&params, "i8[4, 3]", &format!("{QD}.quantize_per_channel.default(x, s, z, 2, -128, 127, torch.int8)"));
    assert!(message.contains("axis 2 is out of range"), "{message}");
    let message =
        refused(&params, "i8[4, 3]", &format!("{QD}.quantize_per_channel.default(x, s, z, 0, -128, 127, torch.int8)"));
    assert!(message.contains("scales f32[3] must have one element per channel"), "{message}");
    let params = [("x", "f32[4, 3]"), ("s", "f32[3]"), ("z", "i64[2]")];
    let message =
        refused(&params, "i8[4, 3]", &format!("{QD}.quantize_per_channel.default(x, s, z, 1, -128, 127, torch.int8)"));
    assert!(message.contains("zero_points i64[2] must have 3 elements"), "{message}");
    // Fake quantization refuses negative axes, as PyTorch does.
    let params = [("x", "f32[4, 3]"), ("s", "f32[3]"), ("z", "i32[3]")];
    let line = "fq = torch.ops.aten.fake_quantize_per_channel_affine_cachemask.default(x, s, z, -1, -128, 127)";
    let error =
        try_import(&params, &[line, "out = fq[0]"], &["out"], &ImportOptions::default()).expect_err("a negative axis");
    assert!(error.to_string().contains("axis -1 must be between 0 and the rank"), "{error}");
}

#[test]
fn dtype_mismatches_are_refused() {
    let q = [("q", "u8[4]")];
    let message =
        refused(&q, "f32[4]", &format!("{QD}.dequantize_per_tensor.default(q, 0.1, 0, -128, 127, torch.int8)"));
    assert!(message.contains("input u8[4] does not have the dtype i8"), "{message}");
    let message = refused(&[("a", "i32[5, 8]"), ("b", "i8[8, 2]")], "i32[5, 2]", "aten._int_mm.default(a, b)");
    assert!(message.contains("expects rank-2 int8 operands, found i32[5, 8]"), "{message}");
    let message = refused(
        &[("x", "f32[4]"), ("s", "f32[2]"), ("z", "i64[1]")],
        "u8[4]",
        &format!("{QD}.quantize_per_tensor.tensor(x, s, z, 0, 255, torch.uint8)"),
    );
    assert!(message.contains("scale must hold exactly one element, found f32[2]"), "{message}");
}
