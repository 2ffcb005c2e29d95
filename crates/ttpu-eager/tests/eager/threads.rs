//! Many threads recording on, and reading from, one device.

use std::thread;

use ttpu_eager::Tensor;

use crate::common::{device, tensor};

#[test]
fn threads_share_one_device() {
    let device = device();
    let shared = tensor(&device, &[1.0, 2.0, 3.0], &[3]);
    let handles: Vec<_> = (0..8)
        .map(|thread_index| {
            let device = device.clone();
            let shared = shared.clone();
            thread::spawn(move || {
                let offset = thread_index as f32;
                let mut res = Vec::new();
                for step in 0..20 {
                    let own = Tensor::from_slice(&device, &[offset, offset, offset], &[3]).unwrap();
                    let value = shared.mul(&own).unwrap().add_scalar(step as f32).unwrap();
                    res.push(value.to_vec::<f32>().unwrap());
                }
                (offset, res)
            })
        })
        .collect();
    for handle in handles {
        let (offset, results) = handle.join().expect("worker threads do not panic");
        for (step, values) in results.into_iter().enumerate() {
            let step = step as f32;
            assert_eq!(values, vec![offset + step, 2.0 * offset + step, 3.0 * offset + step]);
        }
    }
    assert_eq!(shared.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn device_and_tensor_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<ttpu_eager::Device>();
    check::<Tensor>();
}
