//! Fuzz target: a safetensors file read as a model's inputs. Reading must return tensors or an
//! `Err` (never panic or allocate what the header claims before checking it), and every tensor it
//! returns must hold exactly the bytes its dtype and shape say, so the signature check before a
//! run (`HostTensor::fits`) can trust `data.len()`. Seed the corpus with
//! `fixtures/*/inputs*.safetensors` and `weights.safetensors`.

use libfuzzer_sys::fuzz_target;

include!("driver.rs");

fuzz_target!(|data: &[u8]| {
    let Ok(tensors) = ttpu_runtime::safetensors_from_bytes(data) else {
        return;
    };
    for tensor in tensors.values() {
        assert_eq!(Some(tensor.data.len()), ttpu_runtime::byte_size(tensor.dtype, &tensor.shape));
        // A tensor fits its own type; a different rank never fits.
        assert!(tensor.fits(&tensor.ty()));
        let mut other = tensor.ty();
        other.shape.0.push(ttpu_ir::Dim::Static(1));
        assert!(!tensor.fits(&other));
    }
});
