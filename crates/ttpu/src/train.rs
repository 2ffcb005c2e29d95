//! Training: a joint forward-backward graph with the optimizer step appended, run as one
//! executable per step that updates parameters, optimizer state and buffers in place.
//!
//! PyTorch exports the joint graph (`_export_forward_backward`: the loss, a gradient per trainable
//! parameter, buffer mutations) but not the optimizer, so the optimizer is built here, in IR, as
//! `torch.optim` computes it (defaults included): [`Sgd`] (momentum, dampening, Nesterov, weight
//! decay, maximize) and [`AdamW`] (bias correction, decoupled weight decay, amsgrad, maximize).
//! The training step is an ordinary model whose parameters and optimizer state are buffers it
//! mutates, so the loaded model's machinery applies unchanged: they stay on the devices, each step
//! donates them to XLA and gets the updated ones back, and a parallel plan (ddp, fsdp) lays the
//! step out over a mesh, the partitioner adding the gradient all-reduce or reduce-scatter.
//!
//! Optimizer state is keyed `optim.<target>.<name>` (`momentum_buffer`, `exp_avg`, `exp_avg_sq`,
//! `max_exp_avg_sq`, PyTorch's names) and the step count `optim.step` (`i64`); a checkpoint holds
//! all of it with the parameters and buffers, so a resumed run continues bit for bit.

use std::collections::HashMap;
use std::path::Path;

use ttpu_fx::{InputRole, ModelInput, ModelOutput, ModelSignature, Module, OutputRole};
use ttpu_ir::{BinaryOp, CompareDirection, DType, Graph, GraphBuilder, Literal, Scalar, TensorType, UnaryOp, ValueId};
use ttpu_runtime::{HostTensor, TensorMap};

use crate::loaded::LoadedModel;
use crate::parallel::Parallelism;
use crate::session::{Model, Session};
use crate::{Error, Result};

/// `torch.optim.SGD`'s options, with its defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Sgd {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Momentum factor (default 0).
    pub momentum: f64,
    /// Dampening of the momentum (default 0).
    pub dampening: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Nesterov momentum (default false; needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// Ascend instead of descend (default false).
    pub maximize: bool,
}

impl Default for Sgd {
    fn default() -> Sgd {
        Sgd { lr: 1e-3, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false, maximize: false }
    }
}

/// `torch.optim.AdamW`'s options, with its defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct AdamW {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Decay rates of the first and second moment (default 0.9, 0.999).
    pub betas: (f64, f64),
    /// Added to the denominator (default 1e-8).
    pub eps: f64,
    /// Decoupled weight decay (default 1e-2).
    pub weight_decay: f64,
    /// Use the maximum of past second moments (default false).
    pub amsgrad: bool,
    /// Ascend instead of descend (default false).
    pub maximize: bool,
}

impl Default for AdamW {
    fn default() -> AdamW {
        AdamW { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 1e-2, amsgrad: false, maximize: false }
    }
}

/// An optimizer appended to the joint graph.
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    /// Stochastic gradient descent.
    Sgd(Sgd),
    /// Adam with decoupled weight decay.
    AdamW(AdamW),
}

impl Optimizer {
    /// The state PyTorch keeps per parameter, by name.
    fn state_names(&self) -> Vec<&'static str> {
        match self {
            Optimizer::Sgd(sgd) if sgd.momentum != 0.0 => vec!["momentum_buffer"],
            Optimizer::Sgd(_) => vec![],
            Optimizer::AdamW(adamw) if adamw.amsgrad => vec!["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
            Optimizer::AdamW(_) => vec!["exp_avg", "exp_avg_sq"],
        }
    }

    /// The options as JSON, stored in checkpoints so a resume with other options is refused.
    pub fn to_json(&self) -> String {
        match self {
            Optimizer::Sgd(o) => serde_json::json!({
                "optimizer": "sgd", "lr": o.lr, "momentum": o.momentum, "dampening": o.dampening,
                "weight_decay": o.weight_decay, "nesterov": o.nesterov, "maximize": o.maximize,
            }),
            Optimizer::AdamW(o) => serde_json::json!({
                "optimizer": "adamw", "lr": o.lr, "betas": [o.betas.0, o.betas.1], "eps": o.eps,
                "weight_decay": o.weight_decay, "amsgrad": o.amsgrad, "maximize": o.maximize,
            }),
        }
        .to_string()
    }

    fn check(&self) -> Result<()> {
        let bad = |message: &str| Err(Error::Training { message: message.to_owned() });
        // NaN is refused too: it is not at least 0.
        let non_negative = |values: &[f64]| values.iter().all(|value| *value >= 0.0);
        match self {
            Optimizer::Sgd(o) => {
                if !non_negative(&[o.lr, o.momentum, o.weight_decay, o.dampening]) {
                    return bad("sgd needs lr, momentum, dampening and weight_decay of at least 0");
                }
                if o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0) {
                    return bad("Nesterov momentum requires a momentum and zero dampening");
                }
            }
            Optimizer::AdamW(o) => {
                if !non_negative(&[o.lr, o.eps, o.weight_decay]) {
                    return bad("adamw needs lr, eps and weight_decay of at least 0");
                }
                if !(0.0..1.0).contains(&o.betas.0) || !(0.0..1.0).contains(&o.betas.1) {
                    return bad("adamw betas must lie in [0, 1)");
                }
            }
        }
        Ok(())
    }
}

/// The key of optimizer state `name` of parameter `target`.
pub fn state_key(target: &str, name: &str) -> String {
    format!("optim.{target}.{name}")
}

/// The key of the step count.
pub const STEP_KEY: &str = "optim.step";

/// A joint model with an optimizer, resident on its devices.
pub struct Trainer {
    loaded: LoadedModel,
    optimizer: Optimizer,
    /// Parameter and buffer targets of the joint graph, in signature order (what `weights`
    /// returns).
    weight_keys: Vec<String>,
}

impl Trainer {
    /// A trainer for `joint` (a joint forward-backward graph) starting from `weights` (its
    /// parameters and buffers by target), with fresh optimizer state, on one device or laid out
    /// by `parallelism`.
    pub fn new(
        session: &Session,
        joint: &Model,
        weights: &TensorMap,
        optimizer: Optimizer,
        parallelism: Option<&Parallelism>,
    ) -> Result<Trainer> {
        optimizer.check()?;
        let step = training_step(joint.module(), &optimizer)?;
        let mut state = weights.clone();
        for input in &step.signature.inputs {
            if input.key.starts_with("optim.") && !state.contains_key(&input.key) {
                state.insert(input.key.clone(), zeros(&input.ty)?);
            }
        }
        Trainer::start(session, joint, step, &state, optimizer, parallelism)
    }

    /// A trainer that continues from a checkpoint written by [`Trainer::save_checkpoint`] with
    /// the same optimizer options.
    pub fn resume(
        session: &Session,
        joint: &Model,
        checkpoint: &Path,
        optimizer: Optimizer,
        parallelism: Option<&Parallelism>,
    ) -> Result<Trainer> {
        optimizer.check()?;
        let (state, saved) = read_checkpoint(checkpoint)?;
        if saved != optimizer.to_json() {
            return Err(Error::Training {
                message: format!(
                    "checkpoint {} was written with optimizer {saved}, not {}",
                    checkpoint.display(),
                    optimizer.to_json()
                ),
            });
        }
        let step = training_step(joint.module(), &optimizer)?;
        Trainer::start(session, joint, step, &state, optimizer, parallelism)
    }

    fn start(
        session: &Session,
        joint: &Model,
        step: Module,
        state: &TensorMap,
        optimizer: Optimizer,
        parallelism: Option<&Parallelism>,
    ) -> Result<Trainer> {
        let weight_keys = joint
            .signature()
            .inputs
            .iter()
            .filter(|input| input.role != InputRole::UserInput)
            .map(|input| input.key.clone())
            .collect();
        let model = session.model_from_module(step)?;
        let loaded = match parallelism {
            Some(parallelism) => session.shard(&model, state, parallelism)?,
            None => session.place(&model, state, 1)?,
        };
        Ok(Trainer { loaded, optimizer, weight_keys })
    }

    /// The optimizer.
    pub fn optimizer(&self) -> &Optimizer {
        &self.optimizer
    }

    /// Steps taken so far (restored from a checkpoint when resuming).
    pub fn steps_done(&self) -> Result<u64> {
        let step = self.loaded.state(STEP_KEY, 0)?;
        Ok(step.get_f64(0) as u64)
    }

    /// One training step on `batch` (every user input of the joint graph, by placeholder name):
    /// forward, backward and the optimizer update, in place on the devices. Returns the loss
    /// computed before the update, as PyTorch's `loss.item()` would.
    pub fn step(&self, batch: &TensorMap) -> Result<f64> {
        let _span = tracing::info_span!("train_step").entered();
        let prepared = self.loaded.prepare(&[batch])?;
        let outputs = self.loaded.execute(prepared)?;
        Ok(outputs.get("loss", 0)?.get_f64(0))
    }

    /// The current parameters and buffers, by target.
    pub fn weights(&self) -> Result<TensorMap> {
        self.weight_keys.iter().map(|key| Ok((key.clone(), self.loaded.state(key, 0)?))).collect()
    }

    /// Everything a resumed run needs: parameters, buffers, optimizer state and the step count.
    pub fn state(&self) -> Result<TensorMap> {
        self.loaded.state_keys().iter().map(|key| Ok((key.clone(), self.loaded.state(key, 0)?))).collect()
    }

    /// Writes [`Trainer::state`] to `path` atomically (a temporary file in the same folder,
    /// flushed, then renamed), with the optimizer options in its metadata.
    pub fn save_checkpoint(&self, path: &Path) -> Result<()> {
        let state = self.state()?;
        let metadata = HashMap::from([
            ("format".to_owned(), CHECKPOINT_FORMAT.to_owned()),
            ("optimizer".to_owned(), self.optimizer.to_json()),
        ]);
        let temp = path.with_extension(format!("tmp.{}", std::process::id()));
        let written = ttpu_runtime::write_safetensors_with_metadata(&temp, &state, Some(metadata))
            .and_then(|()| {
                std::fs::File::open(&temp)
                    .and_then(|file| file.sync_all())
                    .map_err(|source| ttpu_runtime::Error::Io { path: temp.clone(), source })
            })
            .and_then(|()| {
                std::fs::rename(&temp, path).map_err(|source| ttpu_runtime::Error::Io { path: path.to_owned(), source })
            });
        if written.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        Ok(written?)
    }
}

/// The metadata value that marks a ttpu checkpoint.
const CHECKPOINT_FORMAT: &str = "ttpu-checkpoint-1";

/// A checkpoint's tensors and the optimizer options (JSON) it was written with. A file that is
/// torn, corrupt or not a ttpu checkpoint is refused with the reason.
pub fn read_checkpoint(path: &Path) -> Result<(TensorMap, String)> {
    let refuse = |message: String| Error::Training { message: format!("checkpoint {}: {message}", path.display()) };
    let bytes = std::fs::read(path).map_err(|error| refuse(error.to_string()))?;
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&bytes)
        .map_err(|error| refuse(format!("not a whole safetensors file ({error}); it may be torn or corrupt")))?;
    let metadata = metadata.metadata().clone().unwrap_or_default();
    if metadata.get("format").map(String::as_str) != Some(CHECKPOINT_FORMAT) {
        return Err(refuse("not a ttpu checkpoint (no `format` metadata)".into()));
    }
    let optimizer = metadata.get("optimizer").cloned().ok_or_else(|| refuse("no optimizer metadata".into()))?;
    let tensors = ttpu_runtime::safetensors_from_bytes(&bytes)
        .map_err(|message| refuse(format!("{message}; it may be torn or corrupt")))?;
    if !tensors.contains_key(STEP_KEY) {
        return Err(refuse(format!("no `{STEP_KEY}`")));
    }
    Ok((tensors, optimizer))
}

fn zeros(ty: &TensorType) -> Result<HostTensor> {
    let dims = ty.shape.as_static().map(|dims| dims.to_vec()).unwrap_or_default();
    let bytes = ttpu_runtime::byte_size(ty.dtype, &dims)
        .ok_or(Error::Training { message: format!("a parameter of type {ty} is too large") })?;
    Ok(HostTensor::new(ty.dtype, dims, vec![0; bytes])?)
}

fn training_error(message: impl Into<String>) -> Error {
    Error::Training { message: message.into() }
}

/// The training-step module of a joint graph: trainable parameters, optimizer state and the step
/// count become mutated buffers; the outputs are their new values, the joint graph's buffer
/// mutations, the loss and any user outputs.
pub fn training_step(joint: &Module, optimizer: &Optimizer) -> Result<Module> {
    let signature = &joint.signature;
    let graph = &joint.graph;
    signature
        .outputs
        .iter()
        .position(|output| output.role == OutputRole::Loss)
        .ok_or_else(|| training_error("the graph has no LOSS_OUTPUT: export it with _export_forward_backward"))?;
    if let Some(input) = signature.inputs.iter().find(|input| !input.ty.shape.is_static()) {
        return Err(training_error(format!("training needs static shapes; `{}` is {}", input.key, input.ty)));
    }
    if let Some(size) = joint.pending.first() {
        return Err(training_error(format!(
            "training needs every size before a step runs, and the data decides {size}"
        )));
    }
    // Trainable parameters: those with a gradient, in input order.
    let mut trainable: Vec<(usize, usize)> = Vec::new();
    for (input_index, input) in signature.inputs.iter().enumerate() {
        let gradient = signature.outputs.iter().position(
            |output| matches!(&output.role, OutputRole::GradientToParameter { target } if *target == input.key),
        );
        if let Some(gradient) = gradient {
            if !input.ty.dtype.is_float() {
                return Err(training_error(format!("parameter `{}` is {}, not floating point", input.key, input.ty)));
            }
            trainable.push((input_index, gradient));
        }
    }
    if trainable.is_empty() {
        return Err(training_error("the joint graph has no GRADIENT_TO_PARAMETER output: nothing to train"));
    }
    let mut b = GraphBuilder::from_graph(graph.clone());
    let mut inputs: Vec<ModelInput> = signature
        .inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            let trained = trainable.iter().any(|&(trained, _)| trained == index);
            let role = if trained { InputRole::Buffer { persistent: true } } else { input.role.clone() };
            ModelInput { role, ..input.clone() }
        })
        .collect();
    // Optimizer state, then the step count, as new inputs.
    let names = optimizer.state_names();
    let mut state_values: Vec<Vec<ValueId>> = Vec::new();
    for &(input_index, _) in &trainable {
        let param = &signature.inputs[input_index];
        let values = names
            .iter()
            .map(|name| {
                let key = state_key(&param.key, name);
                inputs.push(ModelInput {
                    name: key.clone(),
                    key: key.clone(),
                    role: InputRole::Buffer { persistent: true },
                    ty: param.ty.clone(),
                });
                b.input(param.ty.clone(), Some(key))
            })
            .collect();
        state_values.push(values);
    }
    let step_ty = TensorType::scalar(DType::I64);
    inputs.push(ModelInput {
        name: STEP_KEY.into(),
        key: STEP_KEY.into(),
        role: InputRole::Buffer { persistent: true },
        ty: step_ty.clone(),
    });
    let step = b.input(step_ty.clone(), Some(STEP_KEY.into()));
    let mut math = OptimizerMath { b: &mut b };
    let one = math.constant(DType::I64, Scalar::Int(1))?;
    let new_step = math.binary(BinaryOp::Add, step, one)?;

    let mut values = Vec::new();
    let mut outputs = Vec::new();
    let mut new_states = Vec::new();
    for (&(input_index, gradient), states) in trainable.iter().zip(&state_values) {
        let param = graph.inputs[input_index];
        let grad = graph.outputs[gradient];
        let (new_param, updated) = match optimizer {
            Optimizer::Sgd(options) => math.sgd(options, param, grad, states, step)?,
            Optimizer::AdamW(options) => math.adamw(options, param, grad, states, new_step)?,
        };
        let key = &signature.inputs[input_index].key;
        values.push(new_param);
        outputs.push(mutation(key, math.b.ty(new_param).clone()));
        for (name, value) in names.iter().zip(updated) {
            new_states.push((state_key(key, name), value));
        }
    }
    for (key, value) in new_states {
        values.push(value);
        outputs.push(mutation(&key, math.b.ty(value).clone()));
    }
    values.push(new_step);
    outputs.push(mutation(STEP_KEY, step_ty));
    for (index, output) in signature.outputs.iter().enumerate() {
        if matches!(output.role, OutputRole::BufferMutation | OutputRole::Loss | OutputRole::User(_)) {
            values.push(graph.outputs[index]);
            outputs.push(output.clone());
        }
    }
    let graph: Graph = b.finish(&values);
    ttpu_ir::verify(&graph).map_err(|errors| Error::Internal { pass: "training step", errors })?;
    Ok(Module { graph, signature: ModelSignature { inputs, outputs }, pending: Vec::new() })
}

fn mutation(key: &str, ty: TensorType) -> ModelOutput {
    ModelOutput { key: key.to_owned(), role: OutputRole::BufferMutation, ty }
}

/// Builds the optimizers' arithmetic. Scalars are computed in `f64` (Python floats in
/// `torch.optim`) and converted to the parameter's dtype where they meet a tensor, as PyTorch's
/// scalar arguments are.
struct OptimizerMath<'b> {
    b: &'b mut GraphBuilder,
}

impl OptimizerMath<'_> {
    fn built(&self, built: std::result::Result<ValueId, ttpu_ir::InferError>) -> Result<ValueId> {
        built.map_err(|error| training_error(format!("building the optimizer: {error}")))
    }

    fn constant(&mut self, dtype: DType, value: Scalar) -> Result<ValueId> {
        Ok(self.b.constant(Literal::scalar(dtype, value)))
    }

    fn binary(&mut self, op: BinaryOp, lhs: ValueId, rhs: ValueId) -> Result<ValueId> {
        let built = self.b.binary(op, lhs, rhs);
        self.built(built)
    }

    /// `scalar` (0-d) broadcast to `like`'s type.
    fn spread(&mut self, scalar: ValueId, like: ValueId) -> Result<ValueId> {
        let ty = self.b.ty(like).clone();
        let scalar = if self.b.ty(scalar).dtype == ty.dtype {
            scalar
        } else {
            let built = self.b.convert(scalar, ty.dtype);
            self.built(built)?
        };
        let built = self.b.broadcast_in_dim(scalar, &[], ty.shape.clone());
        self.built(built)
    }

    /// `tensor op c` for a compile-time `c`, rounded to the tensor's dtype first.
    fn with_constant(&mut self, op: BinaryOp, tensor: ValueId, value: f64) -> Result<ValueId> {
        let dtype = self.b.ty(tensor).dtype;
        let scalar = self.constant(dtype, Scalar::Float(value))?;
        let wide = self.spread(scalar, tensor)?;
        self.binary(op, tensor, wide)
    }

    /// `tensor op s` for a run-time `f64` scalar `s`.
    fn with_scalar(&mut self, op: BinaryOp, tensor: ValueId, scalar: ValueId) -> Result<ValueId> {
        let wide = self.spread(scalar, tensor)?;
        self.binary(op, tensor, wide)
    }

    fn maybe_negate(&mut self, grad: ValueId, maximize: bool) -> Result<ValueId> {
        if !maximize {
            return Ok(grad);
        }
        let built = self.b.unary(UnaryOp::Negate, grad);
        self.built(built)
    }

    /// `torch.optim.SGD` (single-tensor): `g += wd * p`; with momentum, `buf = g` on the first
    /// step and `buf = momentum * buf + (1 - dampening) * g` after, `g = buf` (or
    /// `g + momentum * buf` with Nesterov); `p -= lr * g`.
    fn sgd(
        &mut self,
        options: &Sgd,
        param: ValueId,
        grad: ValueId,
        states: &[ValueId],
        step: ValueId,
    ) -> Result<(ValueId, Vec<ValueId>)> {
        let mut g = self.maybe_negate(grad, options.maximize)?;
        if options.weight_decay != 0.0 {
            let decay = self.with_constant(BinaryOp::Multiply, param, options.weight_decay)?;
            g = self.binary(BinaryOp::Add, g, decay)?;
        }
        let mut updated = Vec::new();
        if options.momentum != 0.0 {
            let buf = states[0];
            let kept = self.with_constant(BinaryOp::Multiply, buf, options.momentum)?;
            let added = self.with_constant(BinaryOp::Multiply, g, 1.0 - options.dampening)?;
            let later = self.binary(BinaryOp::Add, kept, added)?;
            // PyTorch's buffer starts as a copy of the first gradient.
            let zero = self.constant(DType::I64, Scalar::Int(0))?;
            let built = self.b.compare(CompareDirection::Eq, step, zero);
            let first = self.built(built)?;
            let ty = self.b.ty(g).clone();
            let built = self.b.broadcast_in_dim(first, &[], ty.shape.clone());
            let first = self.built(built)?;
            let built = self.b.select(first, g, later);
            let new_buf = self.built(built)?;
            g = if options.nesterov {
                let pushed = self.with_constant(BinaryOp::Multiply, new_buf, options.momentum)?;
                self.binary(BinaryOp::Add, g, pushed)?
            } else {
                new_buf
            };
            updated.push(new_buf);
        }
        let delta = self.with_constant(BinaryOp::Multiply, g, -options.lr)?;
        Ok((self.binary(BinaryOp::Add, param, delta)?, updated))
    }

    /// `torch.optim.AdamW` (single-tensor): `p *= 1 - lr * wd`;
    /// `m = lerp(m, g, 1 - beta1)`; `v = beta2 * v + (1 - beta2) * g * g`;
    /// `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)` (amsgrad: the running
    /// maximum of `v` in the denominator), with `t` the new step count.
    fn adamw(
        &mut self,
        options: &AdamW,
        param: ValueId,
        grad: ValueId,
        states: &[ValueId],
        step: ValueId,
    ) -> Result<(ValueId, Vec<ValueId>)> {
        let (beta1, beta2) = options.betas;
        let g = self.maybe_negate(grad, options.maximize)?;
        let p = self.with_constant(BinaryOp::Multiply, param, 1.0 - options.lr * options.weight_decay)?;
        // lerp(m, g, w) with w = 1 - beta1 < 0.5: m + w * (g - m).
        let (m, v) = (states[0], states[1]);
        let diff = self.binary(BinaryOp::Subtract, g, m)?;
        let weight = 1.0 - beta1;
        let new_m = if weight < 0.5 {
            let moved = self.with_constant(BinaryOp::Multiply, diff, weight)?;
            self.binary(BinaryOp::Add, m, moved)?
        } else {
            let moved = self.with_constant(BinaryOp::Multiply, diff, 1.0 - weight)?;
            self.binary(BinaryOp::Subtract, g, moved)?
        };
        let kept = self.with_constant(BinaryOp::Multiply, v, beta2)?;
        let scaled = self.with_constant(BinaryOp::Multiply, g, 1.0 - beta2)?;
        let squared = self.binary(BinaryOp::Multiply, scaled, g)?;
        let new_v = self.binary(BinaryOp::Add, kept, squared)?;
        let mut updated = vec![new_m, new_v];
        let second = if options.amsgrad {
            let new_max = self.binary(BinaryOp::Maximum, states[2], new_v)?;
            updated.push(new_max);
            new_max
        } else {
            new_v
        };
        // Bias corrections in f64 from the step count.
        let built = self.b.convert(step, DType::F64);
        let t = self.built(built)?;
        let power = |math: &mut Self, base: f64| -> Result<ValueId> {
            let base = math.constant(DType::F64, Scalar::Float(base))?;
            let raised = math.binary(BinaryOp::Power, base, t)?;
            let one = math.constant(DType::F64, Scalar::Float(1.0))?;
            math.binary(BinaryOp::Subtract, one, raised)
        };
        let correction1 = power(self, beta1)?;
        let correction2 = power(self, beta2)?;
        let lr = self.constant(DType::F64, Scalar::Float(options.lr))?;
        let step_size = self.binary(BinaryOp::Divide, lr, correction1)?;
        let built = self.b.unary(UnaryOp::Sqrt, correction2);
        let correction2_sqrt = self.built(built)?;
        let built = self.b.unary(UnaryOp::Sqrt, second);
        let root = self.built(built)?;
        let scaled_root = self.with_scalar(BinaryOp::Divide, root, correction2_sqrt)?;
        let denom = self.with_constant(BinaryOp::Add, scaled_root, options.eps)?;
        let built = self.b.unary(UnaryOp::Negate, step_size);
        let negative = self.built(built)?;
        let numerator = self.with_scalar(BinaryOp::Multiply, new_m, negative)?;
        let delta = self.binary(BinaryOp::Divide, numerator, denom)?;
        Ok((self.binary(BinaryOp::Add, p, delta)?, updated))
    }
}

/// Training data: every user input with a leading step dim `[S, ...]`, all with the same `S`.
#[derive(Clone, Debug)]
pub struct StepData {
    tensors: TensorMap,
    steps: u64,
}

impl StepData {
    /// Checks `tensors` (each rank 1 or more, one leading size for all, at least 1).
    pub fn new(tensors: TensorMap) -> Result<StepData> {
        let mut steps: Option<(i64, String)> = None;
        for (key, tensor) in &tensors {
            let Some(&first) = tensor.shape.first() else {
                return Err(training_error(format!("data `{key}` is a scalar; it needs a leading step dim")));
            };
            match &steps {
                Some((known, other)) if *known != first => {
                    return Err(training_error(format!(
                        "data `{key}` has {first} steps but `{other}` has {known}; every input needs the same leading step dim"
                    )));
                }
                Some(_) => {}
                None => steps = Some((first, key.clone())),
            }
        }
        let steps = steps.map_or(0, |(steps, _)| steps);
        if steps < 1 {
            return Err(training_error("the data holds no step"));
        }
        Ok(StepData { tensors, steps: steps as u64 })
    }

    /// Number of batches.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The batch of step `step`: slice `step mod S` of every input.
    pub fn batch(&self, step: u64) -> TensorMap {
        let index = (step % self.steps) as usize;
        self.tensors
            .iter()
            .map(|(key, tensor)| {
                let per_step = tensor.data.len() / self.steps as usize;
                let data = tensor.data[index * per_step..(index + 1) * per_step].to_vec();
                (key.clone(), HostTensor { dtype: tensor.dtype, shape: tensor.shape[1..].to_vec(), data })
            })
            .collect()
    }
}
