//! `grid_sampler_3d`: volumes sampled at a grid of normalised `(x, y, z)` points, trilinear (0) or
//! nearest (1), with zeros (0), border (1) or reflection (2) padding, as PyTorch's CPU kernel
//! (`grid_sampler_3d_cpu`) computes them: coordinates unnormalised and padded like the 2-D
//! sampler's, the eight corners weighted in its order (top then bottom, north then south, west
//! then east), corners outside the volume contributing zero.

use ttpu_ir::{BinaryOp, CompareDirection, DType, Scalar, Shape, UnaryOp, ValueId};

use super::elementwise::tensor;
use super::index::{gather_points, iota, pad_coordinate, stack_last, unnormalize};
use crate::args::Args;
use crate::ctx::{Cx, Imported, opmath};
use crate::error::Result;

/// `grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners)`.
pub(super) fn grid_sampler_3d(cx: &mut Cx<'_>, args: &Args) -> Result<Imported> {
    let x = args.tensor("input")?;
    let grid = args.tensor("grid")?;
    let mode = args.int("interpolation_mode")?;
    let padding = args.int("padding_mode")?;
    let align = args.bool_or("align_corners", false)?;
    let dtype = cx.dtype(x);
    let sizes = cx.static_dims(x, "grid_sampler_3d")?;
    let grid_sizes = cx.static_dims(grid, "grid_sampler_3d")?;
    if sizes.len() != 5 || grid_sizes.len() != 5 || grid_sizes[4] != 3 || !dtype.is_float() || grid_sizes[0] != sizes[0]
    {
        return Err(cx.bad(format!("cannot sample {} at {}", cx.ty(x), cx.ty(grid))));
    }
    if !(0..=1).contains(&mode) || !(0..=2).contains(&padding) {
        return Err(cx.bad(format!(
            "interpolation mode {mode} / padding mode {padding} is not supported (PyTorch's 3-D sampler has no bicubic)"
        )));
    }
    let (n, c, d, h, w) = (sizes[0], sizes[1], sizes[2], sizes[3], sizes[4]);
    let (out_d, out_h, out_w) = (grid_sizes[1], grid_sizes[2], grid_sizes[3]);
    let compute = opmath(dtype);
    let volume = Shape::from_static(&[n, out_d, out_h, out_w]);
    let grid = cx.convert(grid, compute)?;
    let mut coords = vec![];
    for (component, size) in [(0, w), (1, h), (2, d)] {
        let part = cx.slice_dim(grid, 4, component, component + 1, 1)?;
        let part = cx.reshape(part, volume.clone())?;
        let pixel = unnormalize(cx, part, size, align)?;
        coords.push(pad_coordinate(cx, pixel, size, padding, align)?);
    }
    let (ix, iy, iz) = (coords[0], coords[1], coords[2]);
    let front = cx.transpose(x, &[0, 2, 3, 4, 1])?; // [N, D, H, W, C]
    let front = cx.convert(front, compute)?;
    let batch = iota(cx, &volume, 0)?;
    let wide = Shape::from_static(&[n, out_d, out_h, out_w, c]);
    let corner = |cx: &mut Cx<'_>, px: ValueId, py: ValueId, pz: ValueId, weight: Option<ValueId>| -> Result<ValueId> {
        let mut valid = None;
        let mut index = vec![batch];
        for (p, size) in [(pz, d), (py, h), (px, w)] {
            let zero = cx.splat_like(p, Scalar::Int(0))?;
            let top = cx.splat_like(p, Scalar::Int(size - 1))?;
            let above = cx.compare(CompareDirection::Ge, p, zero)?;
            let below = cx.compare(CompareDirection::Le, p, top)?;
            let inside = cx.binary(BinaryOp::And, above, below)?;
            valid = Some(match valid {
                None => inside,
                Some(acc) => cx.binary(BinaryOp::And, acc, inside)?,
            });
            let clamped = cx.b.clamp(zero, p, top);
            let clamped = cx.ok(clamped)?;
            index.push(cx.convert(clamped, DType::I64)?);
        }
        let points = stack_last(cx, &index)?;
        let values = gather_points(cx, front, points)?;
        let zeros = cx.splat(compute, Scalar::Int(0), &volume)?;
        let scale = match weight {
            Some(weight) => weight,
            None => cx.splat(compute, Scalar::Int(1), &volume)?,
        };
        let scale = cx.select(valid.expect("three coordinates"), scale, zeros)?;
        let scale = cx.broadcast_in_dim(scale, &[0, 1, 2, 3], wide.clone())?;
        cx.binary(BinaryOp::Multiply, values, scale)
    };
    let sampled = if mode == 1 {
        let rx = cx.unary(UnaryOp::RoundNearestEven, ix)?;
        let ry = cx.unary(UnaryOp::RoundNearestEven, iy)?;
        let rz = cx.unary(UnaryOp::RoundNearestEven, iz)?;
        corner(cx, rx, ry, rz, None)?
    } else {
        let x0 = cx.unary(UnaryOp::Floor, ix)?;
        let y0 = cx.unary(UnaryOp::Floor, iy)?;
        let z0 = cx.unary(UnaryOp::Floor, iz)?;
        let x1 = cx.binary_scalar(BinaryOp::Add, x0, Scalar::Int(1))?;
        let y1 = cx.binary_scalar(BinaryOp::Add, y0, Scalar::Int(1))?;
        let z1 = cx.binary_scalar(BinaryOp::Add, z0, Scalar::Int(1))?;
        // Distances to the far corner along each axis (PyTorch's `tnw = (ix_bse - ix) * ...`).
        let west = cx.binary(BinaryOp::Subtract, x1, ix)?;
        let east = cx.binary(BinaryOp::Subtract, ix, x0)?;
        let north = cx.binary(BinaryOp::Subtract, y1, iy)?;
        let south = cx.binary(BinaryOp::Subtract, iy, y0)?;
        let top = cx.binary(BinaryOp::Subtract, z1, iz)?;
        let bottom = cx.binary(BinaryOp::Subtract, iz, z0)?;
        let mut total = None;
        for (pz, wz) in [(z0, top), (z1, bottom)] {
            for (py, wy) in [(y0, north), (y1, south)] {
                for (px, wx) in [(x0, west), (x1, east)] {
                    let weight = cx.binary(BinaryOp::Multiply, wx, wy)?;
                    let weight = cx.binary(BinaryOp::Multiply, weight, wz)?;
                    let term = corner(cx, px, py, pz, Some(weight))?;
                    total = Some(match total {
                        None => term,
                        Some(acc) => cx.binary(BinaryOp::Add, acc, term)?,
                    });
                }
            }
        }
        total.expect("eight corners")
    };
    let out = cx.transpose(sampled, &[0, 4, 1, 2, 3])?;
    tensor(cx.convert(out, dtype)?)
}
