//! Host tensors cut into per-device shards and put back together, following a [`Sharding`] over
//! a [`Mesh`]: device `d` holds the block whose index along each dim is the sharding's shard index
//! for `d`; devices that differ only along axes a tensor is not split over hold the same block.

use ttpu_ir::{Mesh, Sharding};

use crate::host::{HostTensor, byte_size};
use crate::{Error, Result};

/// Copies the block of `block` elements per dim at `from` in `src` (dims `src_dims`) to `to` in
/// `dst` (dims `dst_dims`); elements are `element` bytes. Every index must lie inside both
/// tensors (callers derive them from checked shapes).
// Source and destination each need data, dims and a position: grouping them in structs would
// only rename the arguments.
#[allow(clippy::too_many_arguments)]
fn copy_block(
    src: &[u8],
    src_dims: &[i64],
    from: &[i64],
    dst: &mut [u8],
    dst_dims: &[i64],
    to: &[i64],
    block: &[i64],
    element: usize,
) {
    let rank = block.len();
    if rank == 0 {
        dst[..element].copy_from_slice(&src[..element]);
        return;
    }
    if block.iter().any(|&size| size <= 0) {
        return;
    }
    let strides = |dims: &[i64]| -> Vec<usize> {
        let mut res = vec![1usize; dims.len()];
        for dim in (0..dims.len().saturating_sub(1)).rev() {
            res[dim] = res[dim + 1] * dims[dim + 1] as usize;
        }
        res
    };
    let (src_strides, dst_strides) = (strides(src_dims), strides(dst_dims));
    // The innermost dim is one contiguous run; walk every index of the outer dims.
    let run = block[rank - 1] as usize * element;
    let mut index = vec![0i64; rank - 1];
    loop {
        let offset = |base: &[i64], strides: &[usize]| -> usize {
            let outer: usize =
                index.iter().zip(base).zip(strides).map(|((&i, &b), &stride)| (i + b) as usize * stride).sum();
            (outer + base[rank - 1] as usize) * element
        };
        let (source, target) = (offset(from, &src_strides), offset(to, &dst_strides));
        dst[target..target + run].copy_from_slice(&src[source..source + run]);
        let Some(dim) = (0..rank - 1).rev().find(|&dim| index[dim] + 1 < block[dim]) else { break };
        index[dim] += 1;
        index[dim + 1..].iter_mut().for_each(|slot| *slot = 0);
    }
}

/// Each device's shard of `tensor`, by device index of `mesh`; a sharding that does not fit the
/// tensor (unknown axis, uneven split, another rank) is an error.
pub fn split(tensor: &HostTensor, sharding: &Sharding, mesh: &Mesh) -> Result<Vec<HostTensor>> {
    let devices: Vec<usize> = (0..mesh.device_count()).collect();
    split_for(tensor, sharding, mesh, &devices)
}

/// The shards of `tensor` that mesh devices `devices` hold, in that order: what one process of a
/// job uploads to its own devices. A device past the mesh is an error.
pub fn split_for(tensor: &HostTensor, sharding: &Sharding, mesh: &Mesh, devices: &[usize]) -> Result<Vec<HostTensor>> {
    sharding.check(mesh, &tensor.ty(), "the tensor").map_err(|error| Error::Sharding { message: error.message })?;
    if let Some(&device) = devices.iter().find(|&&device| device >= mesh.device_count()) {
        return Err(Error::Sharding {
            message: format!("device {device} is not in mesh {mesh} of {} devices", mesh.device_count()),
        });
    }
    let shape = sharding.shard_shape(mesh, &tensor.shape);
    let bytes = byte_size(tensor.dtype, &shape).ok_or_else(|| Error::InvalidShape { dims: shape.clone() })?;
    let element = tensor.dtype.byte_size();
    Ok(devices
        .iter()
        .map(|&device| {
            let from: Vec<i64> = sharding
                .shard_index(mesh, device)
                .iter()
                .zip(&shape)
                .map(|(&index, &size)| index as i64 * size)
                .collect();
            let mut data = vec![0u8; bytes];
            let origin = vec![0i64; shape.len()];
            copy_block(&tensor.data, &tensor.shape, &from, &mut data, &shape, &origin, &shape, element);
            HostTensor { dtype: tensor.dtype, shape: shape.clone(), data }
        })
        .collect())
}

/// The whole tensor of `shape` from every device's shard (by device index of `mesh`); each
/// block is taken from the first device that holds it.
pub fn assemble(shards: &[HostTensor], sharding: &Sharding, mesh: &Mesh, shape: &[i64]) -> Result<HostTensor> {
    if shards.len() < mesh.device_count() {
        return Err(Error::Sharding {
            message: format!("{} shards for a mesh of {} devices", shards.len(), mesh.device_count()),
        });
    }
    let indexed: Vec<(usize, &HostTensor)> = shards.iter().take(mesh.device_count()).enumerate().collect();
    assemble_from(&indexed, sharding, mesh, shape)
}

/// The whole tensor of `shape` from the shards some mesh devices hold (`(mesh device, shard)`,
/// what one process of a job has): each block from the first device given that holds it. A
/// block that none of them holds (it lies on other processes' devices only) is an error.
pub fn assemble_from(
    shards: &[(usize, &HostTensor)],
    sharding: &Sharding,
    mesh: &Mesh,
    shape: &[i64],
) -> Result<HostTensor> {
    let Some((_, first)) = shards.first() else {
        return Err(Error::InvalidShape { dims: shape.to_vec() });
    };
    let whole = ttpu_ir::TensorType::from_static(first.dtype, shape);
    sharding.check(mesh, &whole, "the tensor").map_err(|error| Error::Sharding { message: error.message })?;
    let block = sharding.shard_shape(mesh, shape);
    let bytes = byte_size(first.dtype, shape).ok_or_else(|| Error::InvalidShape { dims: shape.to_vec() })?;
    let mut data = vec![0u8; bytes];
    let mut done: Vec<Vec<usize>> = Vec::new();
    for &(device, shard) in shards {
        if device >= mesh.device_count() {
            return Err(Error::Sharding {
                message: format!("device {device} is not in mesh {mesh} of {} devices", mesh.device_count()),
            });
        }
        if shard.shape != block || shard.dtype != first.dtype {
            return Err(Error::DataLength {
                ty: shard.describe(),
                expected: byte_size(first.dtype, &block).unwrap_or(0),
                actual: shard.data.len(),
            });
        }
        let index = sharding.shard_index(mesh, device);
        if done.contains(&index) {
            continue;
        }
        let to: Vec<i64> = index.iter().zip(&block).map(|(&index, &size)| index as i64 * size).collect();
        let origin = vec![0i64; block.len()];
        copy_block(&shard.data, &block, &origin, &mut data, shape, &to, &block, first.dtype.byte_size());
        done.push(index);
    }
    if let Some(missing) = (0..mesh.device_count()).find(|&device| !done.contains(&sharding.shard_index(mesh, device)))
    {
        let holders: Vec<usize> = (0..mesh.device_count())
            .filter(|&device| sharding.shard_index(mesh, device) == sharding.shard_index(mesh, missing))
            .collect();
        return Err(Error::Sharding {
            message: format!(
                "the block of mesh devices {holders:?} is on none of the devices given; a tensor split over other \
                 processes' devices is read through a replicated (all-gathered) output of the program"
            ),
        });
    }
    Ok(HostTensor { dtype: first.dtype, shape: shape.to_vec(), data })
}

#[cfg(test)]
mod tests {
    use ttpu_ir::DType;

    use super::*;

    fn counting(shape: &[i64]) -> HostTensor {
        let count: i64 = shape.iter().product();
        HostTensor::new(DType::I64, shape.to_vec(), (0..count).flat_map(|value| value.to_le_bytes()).collect())
            .expect("valid")
    }

    fn values(tensor: &HostTensor) -> Vec<i64> {
        (0..tensor.len()).map(|index| tensor.get_f64(index) as i64).collect()
    }

    #[test]
    fn split_then_assemble_gives_back_the_tensor() {
        let mesh = Mesh::parse("dp=2,tp=3").expect("mesh");
        let tensor = counting(&[4, 6]);
        let cases = [
            Sharding::replicated(2),
            Sharding::split(2, 0, vec!["dp".into()]),
            Sharding::split(2, 1, vec!["tp".into()]),
            Sharding { dims: vec![vec!["dp".into()], vec!["tp".into()]] },
            Sharding { dims: vec![vec![], vec!["dp".into(), "tp".into()]] },
        ];
        for sharding in cases {
            let shards = split(&tensor, &sharding, &mesh).expect("splits");
            assert_eq!(shards.len(), 6);
            assert_eq!(assemble(&shards, &sharding, &mesh, &[4, 6]).expect("assembles"), tensor, "{sharding}");
        }
    }

    #[test]
    fn shards_hold_the_right_blocks() {
        let mesh = Mesh::parse("dp=2,tp=3").expect("mesh");
        let tensor = counting(&[4, 6]);
        // Columns over tp: device 4 = (dp 1, tp 1) holds columns 2..4 of every row.
        let shards = split(&tensor, &Sharding::split(2, 1, vec!["tp".into()]), &mesh).expect("splits");
        assert_eq!(values(&shards[4]), vec![2, 3, 8, 9, 14, 15, 20, 21]);
        assert_eq!(shards[1], shards[4], "devices along dp hold copies");
        // Rows over dp then tp (dp major): device 4 holds row block 1*3+1 of 6; 4 rows do not
        // split six ways, so use 12 rows.
        let tall = counting(&[12, 2]);
        let rows = split(&tall, &Sharding::split(2, 0, vec!["dp".into(), "tp".into()]), &mesh).expect("splits");
        assert_eq!(values(&rows[4]), vec![16, 17, 18, 19]);
    }

    #[test]
    fn shardings_that_do_not_fit_are_errors() {
        let mesh = Mesh::parse("dp=2,tp=3").expect("mesh");
        let tensor = counting(&[4, 5]);
        let error = split(&tensor, &Sharding::split(2, 1, vec!["tp".into()]), &mesh).expect_err("5 over 3");
        assert_eq!(
            error.to_string(),
            "sharding: the tensor: dim 1 has size 5, which 3 devices (tp) cannot split evenly"
        );
        let shards = split(&tensor, &Sharding::replicated(2), &mesh).expect("splits");
        let error = assemble(&shards[..2], &Sharding::replicated(2), &mesh, &[4, 5]).expect_err("too few shards");
        assert_eq!(error.to_string(), "sharding: 2 shards for a mesh of 6 devices");
        let error = split_for(&tensor, &Sharding::replicated(2), &mesh, &[6]).expect_err("past the mesh");
        assert_eq!(error.to_string(), "sharding: device 6 is not in mesh dp=2,tp=3 of 6 devices");
    }

    #[test]
    fn one_process_splits_and_assembles_from_its_own_devices() {
        let mesh = Mesh::parse("dp=2,tp=3").expect("mesh");
        let tensor = counting(&[4, 6]);
        // Process 1 of a job holds mesh devices 3..6 (dp = 1): its shards are those of `split`.
        let rows_over_tp = Sharding::split(2, 1, vec!["tp".into()]);
        let all = split(&tensor, &rows_over_tp, &mesh).expect("splits");
        let own = split_for(&tensor, &rows_over_tp, &mesh, &[3, 4, 5]).expect("splits");
        assert_eq!(own, all[3..]);
        // Split over tp only, dp = 1 holds every block: the whole tensor comes back.
        let held: Vec<(usize, &HostTensor)> = [3, 4, 5].into_iter().zip(&own).collect();
        assert_eq!(assemble_from(&held, &rows_over_tp, &mesh, &[4, 6]).expect("assembles"), tensor);
        // Split over dp too, half the rows lie on process 0's devices only.
        let over_dp = Sharding { dims: vec![vec!["dp".into()], vec!["tp".into()]] };
        let own = split_for(&tensor, &over_dp, &mesh, &[3, 4, 5]).expect("splits");
        let held: Vec<(usize, &HostTensor)> = [3, 4, 5].into_iter().zip(&own).collect();
        let error = assemble_from(&held, &over_dp, &mesh, &[4, 6]).expect_err("blocks elsewhere");
        assert_eq!(
            error.to_string(),
            "sharding: the block of mesh devices [0] is on none of the devices given; a tensor split over other \
             processes' devices is read through a replicated (all-gathered) output of the program"
        );
    }

    #[test]
    fn scalars_and_empty_tensors() {
        let mesh = Mesh::one_d(2).expect("mesh");
        let scalar = counting(&[]);
        let shards = split(&scalar, &Sharding::replicated(0), &mesh).expect("splits");
        assert_eq!(assemble(&shards, &Sharding::replicated(0), &mesh, &[]).expect("assembles"), scalar);
        let empty = counting(&[0, 4]);
        let sharding = Sharding::split(2, 1, vec!["devices".into()]);
        let shards = split(&empty, &sharding, &mesh).expect("splits");
        assert_eq!(shards[0].shape, vec![0, 2]);
        assert_eq!(assemble(&shards, &sharding, &mesh, &[0, 4]).expect("assembles"), empty);
    }
}
