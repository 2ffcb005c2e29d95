//! Parallelism plans: which dims of which weights, inputs and outputs are split over which mesh
//! axes, in DTensor's vocabulary (`Shard(dim)` over an axis, or `Replicate()`).
//!
//! - [`Plan::Ddp`]: every user input split along dim 0 (the batch) over all mesh axes;
//!   weights replicated.
//! - [`Plan::Fsdp`]: user inputs as in `Ddp` when their batch divides (replicated otherwise),
//!   and every weight split along its first dim that the device count divides (ZeRO-3: each
//!   device keeps 1/N of it, and the partitioner gathers it where it is used).
//! - [`Plan::Explicit`]: placements by name pattern from a TOML file ([`PlanFile`]), for
//!   tensor parallelism (Megatron's column- and row-parallel linears) and anything else.
//!
//! User outputs are gathered (replicated) unless a plan file places them; a mutated buffer's
//! new value keeps the buffer's placement, so the update stays in place on every device.

use std::path::Path;

use globset::{Glob, GlobMatcher};
use ttpu_fx::{InputRole, ModelSignature, OutputRole};
use ttpu_ir::{Mesh, ProgramSharding, Sharding, TensorType};

use crate::{Error, Result};

/// How a model is laid out over a mesh.
#[derive(Clone, Debug)]
pub struct Parallelism {
    /// The devices, as a named grid.
    pub mesh: Mesh,
    /// The placements.
    pub plan: Plan,
}

/// A placement rule set.
#[derive(Clone, Debug)]
pub enum Plan {
    /// Data parallel: inputs split along the batch, weights replicated.
    Ddp,
    /// Fully sharded data parallel: inputs as `Ddp`, every weight split along one dim.
    Fsdp,
    /// Placements by name pattern.
    Explicit(PlanFile),
}

/// A placement per dim, as written in a plan file: the mesh axes each dim is split over
/// (empty: whole). Shorter than the tensor's rank means the remaining dims are whole.
pub type Placement = Vec<Vec<String>>;

/// `--plan PLAN.toml`: placements by name pattern (`*` matches any run of characters, dots
/// included), first match in file order, for weights (by signature target), inputs (by
/// placeholder name) and outputs (`output_0`, ... or a mutated target). Anything unmatched is
/// replicated.
///
/// ```toml
/// mesh = "dp=2,tp=4"                  # optional; must agree with --mesh / --devices
/// [weights]
/// "*.q_proj.weight" = ["tp", "-"]     # column parallel: output features split over tp
/// "*.o_proj.weight" = ["-", "tp"]     # row parallel: input features split over tp
/// [inputs]
/// "*" = ["dp"]                        # batch over dp, other dims whole
/// [outputs]
/// "output_0" = ["dp"]
/// ```
///
/// A dim's entry is `"-"` (whole), an axis name, `"dp+tp"` or `["dp", "tp"]` (several axes,
/// major first).
#[derive(Clone, Debug)]
pub struct PlanFile {
    /// The mesh the file names, if any.
    pub mesh: Option<Mesh>,
    weights: Vec<Rule>,
    inputs: Vec<Rule>,
    outputs: Vec<Rule>,
}

#[derive(Clone, Debug)]
struct Rule {
    pattern: String,
    matcher: GlobMatcher,
    placement: Placement,
}

fn plan_error(message: impl Into<String>) -> Error {
    Error::Sharding { message: message.into() }
}

impl PlanFile {
    /// Reads a plan file.
    pub fn read(path: &Path) -> Result<PlanFile> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| Error::from(ttpu_runtime::Error::Io { path: path.to_owned(), source }))?;
        PlanFile::parse(&text).map_err(|error| match error {
            Error::Sharding { message } => plan_error(format!("{}: {message}", path.display())),
            other => other,
        })
    }

    /// Parses a plan file's text.
    pub fn parse(text: &str) -> Result<PlanFile> {
        let table: toml::Table = text.parse().map_err(|error: toml::de::Error| plan_error(error.to_string()))?;
        let mut plan = PlanFile { mesh: None, weights: Vec::new(), inputs: Vec::new(), outputs: Vec::new() };
        for (key, value) in &table {
            match (key.as_str(), value) {
                ("mesh", toml::Value::String(mesh)) => {
                    plan.mesh = Some(Mesh::parse(mesh).map_err(|error| plan_error(error.message))?);
                }
                ("weights" | "inputs" | "outputs", toml::Value::Table(rules)) => {
                    let parsed = rules
                        .iter()
                        .map(|(pattern, placement)| rule(key, pattern, placement))
                        .collect::<Result<Vec<Rule>>>()?;
                    match key.as_str() {
                        "weights" => plan.weights = parsed,
                        "inputs" => plan.inputs = parsed,
                        _ => plan.outputs = parsed,
                    }
                }
                _ => {
                    return Err(plan_error(format!(
                        "unexpected `{key}`: a plan has `mesh = \"...\"` and the tables [weights], [inputs] and [outputs]"
                    )));
                }
            }
        }
        Ok(plan)
    }

    fn find<'a>(rules: &'a [Rule], name: &str) -> Option<&'a Rule> {
        rules.iter().find(|rule| rule.matcher.is_match(name))
    }
}

fn rule(table: &str, pattern: &str, value: &toml::Value) -> Result<Rule> {
    let where_ = || format!("[{table}] \"{pattern}\"");
    let matcher = Glob::new(pattern).map_err(|error| plan_error(format!("{}: {error}", where_())))?.compile_matcher();
    let toml::Value::Array(dims) = value else {
        return Err(plan_error(format!("{}: expected a list of per-dim placements like [\"tp\", \"-\"]", where_())));
    };
    let placement = dims
        .iter()
        .map(|dim| match dim {
            toml::Value::String(text) if text == "-" || text.is_empty() => Ok(Vec::new()),
            toml::Value::String(text) => Ok(text.split('+').map(|axis| axis.trim().to_owned()).collect()),
            toml::Value::Array(axes) => axes
                .iter()
                .map(|axis| match axis {
                    toml::Value::String(axis) => Ok(axis.clone()),
                    other => Err(plan_error(format!("{}: expected an axis name, found {other}", where_()))),
                })
                .collect(),
            other => {
                Err(plan_error(format!("{}: expected \"-\", an axis name or a list of them, found {other}", where_())))
            }
        })
        .collect::<Result<Placement>>()?;
    Ok(Rule { pattern: pattern.to_owned(), matcher, placement })
}

impl Parallelism {
    /// `--mesh`/`--devices` and `--parallel`/`--plan` as the CLI takes them: a mesh from
    /// `mesh` (or a 1-D mesh of `devices`, or the plan file's), checked to agree.
    pub fn new(mesh: Option<Mesh>, devices: Option<usize>, plan: Plan) -> Result<Parallelism> {
        let from_file = match &plan {
            Plan::Explicit(file) => file.mesh.clone(),
            _ => None,
        };
        let mesh = match (mesh, from_file) {
            (Some(given), Some(file)) if given != file => {
                return Err(plan_error(format!("the plan file's mesh {file} differs from --mesh {given}")));
            }
            (Some(mesh), _) | (None, Some(mesh)) => mesh,
            (None, None) => {
                let devices = devices.ok_or_else(|| plan_error("a parallel plan needs --mesh or --devices"))?;
                Mesh::one_d(devices).map_err(|error| plan_error(error.message))?
            }
        };
        if let Some(devices) = devices
            && devices != mesh.device_count()
        {
            return Err(plan_error(format!(
                "mesh {mesh} has {} devices, but --devices says {devices}",
                mesh.device_count()
            )));
        }
        Ok(Parallelism { mesh, plan })
    }

    /// Every mesh axis, major first: what `Ddp` and `Fsdp` split over.
    fn all_axes(&self) -> Vec<String> {
        self.mesh.axis_names()
    }

    /// The placement of weight `key` of type `ty`.
    pub fn weight_sharding(&self, key: &str, ty: &TensorType) -> Result<Sharding> {
        let what = format!("weight `{key}`");
        let sharding = match &self.plan {
            Plan::Ddp => Sharding::replicated(ty.rank()),
            Plan::Fsdp => {
                let devices = self.mesh.device_count() as i64;
                let dims = ty.shape.as_static().unwrap_or_default();
                match dims.iter().position(|&size| size > 0 && size % devices == 0) {
                    Some(dim) if ty.shape.is_static() => Sharding::split(ty.rank(), dim, self.all_axes()),
                    _ => Sharding::replicated(ty.rank()),
                }
            }
            Plan::Explicit(file) => placed(PlanFile::find(&file.weights, key), ty, &what)?,
        };
        sharding.check(&self.mesh, ty, &what).map_err(|error| plan_error(error.message))?;
        Ok(sharding)
    }

    /// The placement of user input `key` of (concrete) type `ty`.
    pub fn input_sharding(&self, key: &str, ty: &TensorType) -> Result<Sharding> {
        let what = format!("input `{key}`");
        let batch = || Sharding::split(ty.rank(), 0, self.all_axes());
        let sharding = match &self.plan {
            Plan::Ddp if ty.rank() > 0 => {
                let devices = self.mesh.device_count();
                let size = ty.shape.as_static().map(|dims| dims[0]).unwrap_or(-1);
                if usize::try_from(size).map_or(true, |size| size % devices != 0) {
                    return Err(plan_error(format!(
                        "input `{key}` has batch size {size} (dim 0 of {ty}), which {devices} devices cannot split evenly; \
                         --parallel ddp splits dim 0 of every input"
                    )));
                }
                batch()
            }
            Plan::Fsdp if ty.rank() > 0 && batch().check(&self.mesh, ty, &what).is_ok() => batch(),
            Plan::Ddp | Plan::Fsdp => Sharding::replicated(ty.rank()),
            Plan::Explicit(file) => placed(PlanFile::find(&file.inputs, key), ty, &what)?,
        };
        sharding.check(&self.mesh, ty, &what).map_err(|error| plan_error(error.message))?;
        Ok(sharding)
    }

    /// The placements of a static module's inputs and outputs (a specialisation's).
    pub fn program_sharding(&self, signature: &ModelSignature) -> Result<ProgramSharding> {
        let inputs = self.input_shardings(signature)?;
        let outputs = signature
            .outputs
            .iter()
            .map(|output| {
                if output.role == OutputRole::BufferMutation
                    && let Some(index) = signature
                        .inputs
                        .iter()
                        .position(|input| matches!(input.role, InputRole::Buffer { .. }) && input.key == output.key)
                {
                    return Ok(inputs[index].clone());
                }
                let what = format!("output `{}`", output.key);
                let sharding = match &self.plan {
                    Plan::Explicit(file) => placed(PlanFile::find(&file.outputs, &output.key), &output.ty, &what)?,
                    _ => Sharding::replicated(output.ty.rank()),
                };
                sharding.check(&self.mesh, &output.ty, &what).map_err(|error| plan_error(error.message))?;
                Ok(sharding)
            })
            .collect::<Result<Vec<Sharding>>>()?;
        Ok(ProgramSharding { mesh: self.mesh.clone(), inputs, outputs })
    }

    /// The placement of every graph input of `signature` (weights and user inputs).
    pub fn input_shardings(&self, signature: &ModelSignature) -> Result<Vec<Sharding>> {
        signature
            .inputs
            .iter()
            .map(|input| match input.role {
                InputRole::UserInput => self.input_sharding(&input.key, &input.ty),
                _ => self.weight_sharding(&input.key, &input.ty),
            })
            .collect()
    }
}

/// The sharding a matched rule gives a tensor of `ty` (replicated when no rule matched).
fn placed(rule: Option<&Rule>, ty: &TensorType, what: &str) -> Result<Sharding> {
    let Some(rule) = rule else { return Ok(Sharding::replicated(ty.rank())) };
    if rule.placement.len() > ty.rank() {
        return Err(plan_error(format!(
            "{what} ({ty}) has {} dims, but the rule \"{}\" places {}",
            ty.rank(),
            rule.pattern,
            rule.placement.len()
        )));
    }
    let mut dims = rule.placement.clone();
    dims.resize(ty.rank(), Vec::new());
    Ok(Sharding { dims })
}

#[cfg(test)]
mod tests {
    use ttpu_ir::{DType, Shape};

    use super::*;

    fn f32s(dims: &[i64]) -> TensorType {
        TensorType::new(DType::F32, Shape::from_static(dims))
    }

    #[test]
    fn plan_files_parse_in_order_and_pad_short_placements() {
        let file = PlanFile::parse(
            "mesh = \"dp=2,tp=4\"\n[weights]\n\"*.q.weight\" = [\"tp\", \"-\"]\n\"*.weight\" = [\"-\", [\"dp\", \"tp\"]]\n[inputs]\n\"*\" = [\"dp\"]\n",
        )
        .unwrap();
        let parallel = Parallelism::new(None, Some(8), Plan::Explicit(file)).unwrap();
        let q = parallel.weight_sharding("layer.q.weight", &f32s(&[8, 16])).unwrap();
        assert_eq!(q.to_string(), "[tp, -]", "the first matching rule wins");
        let other = parallel.weight_sharding("layer.k.weight", &f32s(&[8, 16])).unwrap();
        assert_eq!(other.to_string(), "[-, dp+tp]");
        let bias = parallel.weight_sharding("layer.k.bias", &f32s(&[8])).unwrap();
        assert!(bias.is_replicated());
        assert_eq!(parallel.input_sharding("x", &f32s(&[4, 3, 5])).unwrap().to_string(), "[dp, -, -]");
    }

    #[test]
    fn plans_explain_what_does_not_fit() {
        let ddp = Parallelism::new(None, Some(8), Plan::Ddp).unwrap();
        assert_eq!(
            ddp.input_sharding("x", &f32s(&[6, 3])).unwrap_err().to_string(),
            "sharding: input `x` has batch size 6 (dim 0 of f32[6, 3]), which 8 devices cannot split evenly; \
             --parallel ddp splits dim 0 of every input"
        );
        let fsdp = Parallelism::new(Some(Mesh::parse("dp=2,tp=4").unwrap()), None, Plan::Fsdp).unwrap();
        assert!(
            fsdp.input_sharding("x", &f32s(&[6, 3])).unwrap().is_replicated(),
            "fsdp replicates what does not divide"
        );
        assert_eq!(fsdp.weight_sharding("w", &f32s(&[3, 16])).unwrap().to_string(), "[-, dp+tp]");
        let error = Parallelism::new(Some(Mesh::parse("dp=2,tp=4").unwrap()), Some(4), Plan::Ddp).unwrap_err();
        assert_eq!(error.to_string(), "sharding: mesh dp=2,tp=4 has 8 devices, but --devices says 4");
        let file = PlanFile::parse("[weights]\n\"w\" = [\"pp\"]\n").unwrap();
        let explicit = Parallelism::new(None, Some(2), Plan::Explicit(file)).unwrap();
        assert_eq!(
            explicit.weight_sharding("w", &f32s(&[4])).unwrap_err().to_string(),
            "sharding: weight `w`: unknown mesh axis `pp` (the mesh is devices=2) for dim 0"
        );
        let file = PlanFile::parse("[weights]\n\"w\" = [\"-\", \"-\", \"devices\"]\n").unwrap();
        let explicit = Parallelism::new(None, Some(2), Plan::Explicit(file)).unwrap();
        assert_eq!(
            explicit.weight_sharding("w", &f32s(&[4, 4])).unwrap_err().to_string(),
            "sharding: weight `w` (f32[4, 4]) has 2 dims, but the rule \"w\" places 3"
        );
        let error = PlanFile::parse("[layers]\n").unwrap_err();
        assert_eq!(
            error.to_string(),
            "sharding: unexpected `layers`: a plan has `mesh = \"...\"` and the tables [weights], [inputs] and [outputs]"
        );
    }
}
