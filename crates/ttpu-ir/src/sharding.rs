//! Device meshes and shardings: how a program's inputs and outputs are laid out over devices.
//!
//! A [`Mesh`] is a grid of devices with named axes (`dp=2,tp=4`); device `i` of a program is the
//! mesh position whose row-major index is `i`. A [`Sharding`] says, per tensor dim, which mesh
//! axes the dim is split over (major to minor), DTensor's `Shard(dim)`; a dim split over no axis
//! is whole on every device, and a tensor split over no axis is `Replicate()`. Every mesh axis a
//! tensor is not split over holds copies. A [`ProgramSharding`] annotates a graph's inputs and
//! outputs; XLA's SPMD partitioner splits the program accordingly. Split dims must divide evenly:
//! uneven shards are refused, never padded silently.

use std::fmt;

use crate::{Dim, TensorType};

/// A named grid of devices.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mesh {
    axes: Vec<(String, usize)>,
}

/// A mesh, sharding or plan that cannot hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ShardingError {
    /// What is wrong.
    pub message: String,
}

fn fail<T>(message: impl Into<String>) -> Result<T, ShardingError> {
    Err(ShardingError { message: message.into() })
}

impl Mesh {
    /// A mesh of `axes` (name, size), major to minor. Names must be identifiers and distinct,
    /// sizes at least 1, and the device count must fit a `usize`.
    pub fn new(axes: Vec<(String, usize)>) -> Result<Mesh, ShardingError> {
        if axes.is_empty() {
            return fail("a mesh needs at least one axis");
        }
        for (index, (name, size)) in axes.iter().enumerate() {
            let identifier = name.chars().next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !identifier {
                return fail(format!("mesh axis name `{name}` is not an identifier"));
            }
            if *size == 0 {
                return fail(format!("mesh axis `{name}` has size 0"));
            }
            if axes[..index].iter().any(|(earlier, _)| earlier == name) {
                return fail(format!("mesh axis `{name}` appears twice"));
            }
        }
        if axes.iter().try_fold(1usize, |acc, (_, size)| acc.checked_mul(*size)).is_none() {
            return fail("the mesh has more devices than can be counted");
        }
        Ok(Mesh { axes })
    }

    /// `dp=2,tp=4` (spaces allowed around names and sizes).
    pub fn parse(text: &str) -> Result<Mesh, ShardingError> {
        let axes = text
            .split(',')
            .map(|part| {
                let Some((name, size)) = part.split_once('=') else {
                    return fail(format!("expected a mesh like `dp=2,tp=4`, found `{text}`"));
                };
                let size = size.trim().parse::<usize>().map_err(|_| ShardingError {
                    message: format!("mesh axis `{}` needs a size, found `{}`", name.trim(), size.trim()),
                })?;
                Ok((name.trim().to_owned(), size))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Mesh::new(axes)
    }

    /// A one-axis mesh `devices=N`.
    pub fn one_d(devices: usize) -> Result<Mesh, ShardingError> {
        Mesh::new(vec![("devices".to_owned(), devices)])
    }

    /// The axes, major to minor.
    pub fn axes(&self) -> &[(String, usize)] {
        &self.axes
    }

    /// The axis names, major to minor.
    pub fn axis_names(&self) -> Vec<String> {
        self.axes.iter().map(|(name, _)| name.clone()).collect()
    }

    /// Number of devices.
    pub fn device_count(&self) -> usize {
        self.axes.iter().map(|(_, size)| size).product()
    }

    /// The size of axis `name`.
    pub fn axis_size(&self, name: &str) -> Option<usize> {
        self.axes.iter().find(|(axis, _)| axis == name).map(|(_, size)| *size)
    }

    /// The mesh coordinates of device `device` (row-major).
    pub fn coords(&self, device: usize) -> Vec<usize> {
        let mut rest = device;
        let mut coords = vec![0; self.axes.len()];
        for (slot, (_, size)) in coords.iter_mut().zip(&self.axes).rev() {
            *slot = rest % size;
            rest /= size;
        }
        coords
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.axes.iter().map(|(name, size)| format!("{name}={size}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// Per tensor dim, the mesh axes the dim is split over, major to minor (empty: not split).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sharding {
    /// One entry per dim.
    pub dims: Vec<Vec<String>>,
}

impl Sharding {
    /// Whole on every device.
    pub fn replicated(rank: usize) -> Sharding {
        Sharding { dims: vec![Vec::new(); rank] }
    }

    /// Dim `dim` split over `axes`, every other dim whole.
    pub fn split(rank: usize, dim: usize, axes: Vec<String>) -> Sharding {
        let mut sharding = Sharding::replicated(rank);
        if let Some(slot) = sharding.dims.get_mut(dim) {
            *slot = axes;
        }
        sharding
    }

    /// Whether no dim is split.
    pub fn is_replicated(&self) -> bool {
        self.dims.iter().all(Vec::is_empty)
    }

    /// How many shards dim `dim` is cut into.
    pub fn parts(&self, mesh: &Mesh, dim: usize) -> usize {
        self.dims.get(dim).map_or(1, |axes| axes.iter().map(|axis| mesh.axis_size(axis).unwrap_or(1)).product())
    }

    /// Checks the sharding against `mesh` and a tensor of type `ty` (`what` names it in
    /// messages): one entry per dim, known axes, each axis at most once, and split dims static and
    /// divisible by their number of shards.
    pub fn check(&self, mesh: &Mesh, ty: &TensorType, what: &str) -> Result<(), ShardingError> {
        if self.dims.len() != ty.rank() {
            return fail(format!("{what} has {} dims ({ty}), but its placement names {}", ty.rank(), self.dims.len()));
        }
        let mut seen: Vec<&str> = Vec::new();
        for (dim, axes) in self.dims.iter().enumerate() {
            for axis in axes {
                if mesh.axis_size(axis).is_none() {
                    return fail(format!("{what}: unknown mesh axis `{axis}` (the mesh is {mesh}) for dim {dim}"));
                }
                if seen.contains(&axis.as_str()) {
                    return fail(format!("{what}: mesh axis `{axis}` splits more than one dim"));
                }
                seen.push(axis);
            }
            if axes.is_empty() {
                continue;
            }
            let parts = self.parts(mesh, dim);
            match &ty.shape.dims()[dim] {
                Dim::Static(size) if usize::try_from(*size).is_ok_and(|size| size % parts == 0) => {}
                Dim::Static(size) => {
                    return fail(format!(
                        "{what}: dim {dim} has size {size}, which {parts} devices ({}) cannot split evenly",
                        axes.join("×")
                    ));
                }
                symbolic => {
                    return fail(format!(
                        "{what}: dim {dim} has the symbolic size {symbolic}; only static dims are split"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The shape one device holds of a tensor of `shape` (the sharding must have passed
    /// [`check`](Self::check)).
    pub fn shard_shape(&self, mesh: &Mesh, shape: &[i64]) -> Vec<i64> {
        shape.iter().enumerate().map(|(dim, &size)| size / self.parts(mesh, dim) as i64).collect()
    }

    /// Per dim, the index of the shard device `device` holds.
    pub fn shard_index(&self, mesh: &Mesh, device: usize) -> Vec<usize> {
        let coords = mesh.coords(device);
        self.dims
            .iter()
            .map(|axes| {
                axes.iter().fold(0, |index, axis| {
                    let position = mesh.axes.iter().position(|(name, _)| name == axis).unwrap_or(0);
                    index * mesh.axes[position].1 + coords[position]
                })
            })
            .collect()
    }

    /// Bytes one device holds of a tensor of `ty` (static).
    pub fn shard_bytes(&self, mesh: &Mesh, ty: &TensorType) -> Option<usize> {
        let dims = ty.shape.as_static()?;
        self.shard_shape(mesh, &dims)
            .iter()
            .try_fold(ty.dtype.byte_size(), |acc, &size| acc.checked_mul(usize::try_from(size).ok()?))
    }
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> =
            self.dims.iter().map(|axes| if axes.is_empty() { "-".to_owned() } else { axes.join("+") }).collect();
        write!(f, "[{}]", parts.join(", "))
    }
}

/// The shardings of a program's inputs and outputs over one mesh.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProgramSharding {
    /// The mesh; the program runs on its devices.
    pub mesh: Mesh,
    /// One per graph input.
    pub inputs: Vec<Sharding>,
    /// One per graph output.
    pub outputs: Vec<Sharding>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Shape};

    fn f32s(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, Shape::from_static(dims))
    }

    #[test]
    fn meshes_parse_and_count() {
        let mesh = Mesh::parse("dp=2, tp=4").unwrap();
        assert_eq!(mesh.device_count(), 8);
        assert_eq!(mesh.to_string(), "dp=2,tp=4");
        assert_eq!(mesh.coords(5), vec![1, 1]);
        assert_eq!(mesh.coords(3), vec![0, 3]);
        for (text, message) in [
            ("dp=2,dp=4", "mesh axis `dp` appears twice"),
            ("dp=0", "mesh axis `dp` has size 0"),
            ("dp", "expected a mesh like `dp=2,tp=4`, found `dp`"),
            ("dp=two", "mesh axis `dp` needs a size, found `two`"),
            ("2x=2", "mesh axis name `2x` is not an identifier"),
        ] {
            assert_eq!(Mesh::parse(text).unwrap_err().message, message, "{text}");
        }
    }

    #[test]
    fn shards_follow_the_mesh_order() {
        let mesh = Mesh::parse("dp=2,tp=4").unwrap();
        let both = Sharding { dims: vec![vec!["dp".into(), "tp".into()], vec![]] };
        both.check(&mesh, &f32s(&[16, 3]), "x").unwrap();
        assert_eq!(both.shard_shape(&mesh, &[16, 3]), vec![2, 3]);
        // dp is major: device 5 = (dp 1, tp 1) holds shard 1*4 + 1.
        assert_eq!(both.shard_index(&mesh, 5), vec![5, 0]);
        let columns = Sharding { dims: vec![vec![], vec!["tp".into()]] };
        assert_eq!(columns.shard_index(&mesh, 5), vec![0, 1]);
        assert_eq!(columns.shard_index(&mesh, 1), vec![0, 1], "devices along dp hold copies");
        assert_eq!(columns.shard_bytes(&mesh, &f32s(&[2, 8])), Some(2 * 2 * 4));
    }

    #[test]
    fn bad_shardings_are_refused_with_reasons() {
        let mesh = Mesh::parse("dp=2,tp=4").unwrap();
        let cases = [
            (
                Sharding::split(2, 0, vec!["tp".into()]),
                f32s(&[6, 2]),
                "x: dim 0 has size 6, which 4 devices (tp) cannot split evenly",
            ),
            (
                Sharding::split(2, 0, vec!["pp".into()]),
                f32s(&[8, 2]),
                "x: unknown mesh axis `pp` (the mesh is dp=2,tp=4) for dim 0",
            ),
            (Sharding::replicated(3), f32s(&[8, 2]), "x has 2 dims (f32[8, 2]), but its placement names 3"),
            (
                Sharding { dims: vec![vec!["dp".into()], vec!["dp".into()]] },
                f32s(&[8, 2]),
                "x: mesh axis `dp` splits more than one dim",
            ),
        ];
        for (sharding, ty, message) in cases {
            assert_eq!(sharding.check(&mesh, &ty, "x").unwrap_err().message, message);
        }
    }
}
