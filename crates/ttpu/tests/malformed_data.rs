//! Malformed weights and inputs through the `ttpu` binary: every broken safetensors file ends in
//! exit code 1 with a message naming the file or the tensor key, within seconds; none panics
//! (exit 101) or dies of a signal. NaN-filled weights are data, not an error: the model runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `ttpu run` of the mlp fixture with the given weights and inputs files.
fn run(weights: &Path, inputs: &Path, scratch: &Path) -> (Output, Duration) {
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_ttpu"))
        .args(["run", "fixtures/mlp/model.fx", "--no-cache", "--weights"])
        .arg(weights)
        .arg("--inputs")
        .arg(inputs)
        .arg("--output")
        .arg(scratch.join("out.safetensors"))
        .current_dir(root())
        .output()
        .expect("the binary starts");
    (output, start.elapsed())
}

/// A safetensors file: an 8-byte little-endian header length, the JSON header, the data.
fn file(header: &str, data: &[u8]) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(data);
    bytes
}

/// The fixture's inputs with `x` replaced by a tensor of `dtype`, `shape` and `data`.
fn input_file(dtype: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let header = format!(r#"{{"x":{{"dtype":"{dtype}","shape":{shape},"data_offsets":[0,{}]}}}}"#, data.len());
    file(&header, data)
}

#[test]
fn broken_safetensors_fail_cleanly_naming_the_file_or_key() {
    let scratch = std::env::temp_dir().join(format!("ttpu-malformed-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch folder");
    let weights = root().join("fixtures/mlp/weights.safetensors");
    let good_inputs = std::fs::read(root().join("fixtures/mlp/inputs.safetensors")).expect("inputs read");
    let x = vec![0u8; 4 * 16 * 4];
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty file", Vec::new(), "inputs"),
        ("header length past the end", u64::MAX.to_le_bytes().to_vec(), "inputs"),
        ("header length larger than the file", file("{}", &[]).into_iter().take(9).collect(), "inputs"),
        ("header that is not JSON", file("{\"x\": [1, 2", &[]), "inputs"),
        ("negative dim", input_file("F32", "[-4, 16]", &x), "inputs"),
        ("dims whose product overflows", input_file("F32", "[4294967296, 4294967296, 4294967296]", &x), "inputs"),
        ("unknown dtype", input_file("X9", "[4, 16]", &x), "inputs"),
        (
            "offsets past the data",
            file(r#"{"x":{"dtype":"F32","shape":[4,16],"data_offsets":[0,9999]}}"#, &x),
            "inputs",
        ),
        ("offsets that disagree with the shape", input_file("F32", "[4, 15]", &x), "inputs"),
        ("an input of the wrong dtype", input_file("I32", "[4, 16]", &x), "`x`"),
        ("an input of the wrong rank", input_file("F32", "[64]", &x), "`x`"),
        ("a missing input", file(r#"{"y":{"dtype":"F32","shape":[4,16],"data_offsets":[0,256]}}"#, &x), "`x`"),
        ("half a file", good_inputs[..good_inputs.len() / 2].to_vec(), "inputs"),
        ("a file cut inside its header", good_inputs[..20].to_vec(), "inputs"),
    ];
    for (what, bytes, named) in cases {
        let inputs = scratch.join("inputs.safetensors");
        std::fs::write(&inputs, &bytes).expect("scratch write");
        let (output, took) = run(&weights, &inputs, &scratch);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
        assert!(stderr.contains(named), "{what}: the message names {named}: {stderr}");
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        assert!(took < Duration::from_secs(20), "{what} took {took:?}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn every_truncation_of_a_weights_file_is_an_error_never_a_panic() {
    let bytes = std::fs::read(root().join("fixtures/mlp/weights.safetensors")).expect("weights read");
    // Every prefix of the header, and a spread of prefixes through the data.
    let header_end = 8 + u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let cuts = (0..header_end.min(bytes.len())).chain((header_end..bytes.len()).step_by(97));
    for cut in cuts {
        assert!(ttpu_runtime::safetensors_from_bytes(&bytes[..cut]).is_err(), "a prefix of {cut} bytes was read");
    }
    assert!(ttpu_runtime::safetensors_from_bytes(&bytes).is_ok());
}

#[test]
fn nan_weights_are_data_and_the_model_runs() {
    let scratch = std::env::temp_dir().join(format!("ttpu-nan-weights-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch folder");
    let mut weights = ttpu::read_safetensors(&root().join("fixtures/mlp/weights.safetensors")).expect("weights read");
    for tensor in weights.values_mut() {
        tensor.data = f32::NAN.to_le_bytes().repeat(tensor.data.len() / 4);
    }
    let path = scratch.join("weights.safetensors");
    ttpu::write_safetensors(&path, &weights).expect("scratch write");
    let (output, _) = run(&path, &root().join("fixtures/mlp/inputs.safetensors"), &scratch);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let outputs = ttpu::read_safetensors(&scratch.join("out.safetensors")).expect("outputs written");
    assert!((0..outputs["output_0"].len()).all(|index| outputs["output_0"].get_f64(index).is_nan()));
    let _ = std::fs::remove_dir_all(&scratch);
}
