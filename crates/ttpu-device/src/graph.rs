//! Whole graphs as one call: the ATen graphs `torch.compile` hands over (Dynamo's, after
//! AOTAutograd), recorded node by node through the same op table as eager calls, into one
//! program that runs as one step on the device.
//!
//! A [`Recorder`] starts from the graph's tensor inputs; each node's call is built by the op
//! table's eager entry point (templates shared with eager calls through the memo) and inlined;
//! floats the template takes as inputs are constants of the graph here (a compiled graph's
//! numbers are part of it, as Dynamo guards them), and each random draw reads a generator state
//! from an input of its own, so every run of the program draws new numbers. A custom op's call is
//! its user kernel's template ([`Recorder::call_kernel`]), the same one eager calls record.
//! A [`Program`] runs on device tensors ([`Backend::run_program`]): one step on the lazy tape,
//! so a compiled forward, its backward and an eager optimizer step still fuse into one flush.

use std::sync::Arc;

use ttpu_aten::eager::{self, Arg, Operand, Output, Strides, Template};
use ttpu_eager::CallGraph;
use ttpu_ir::{DType, GraphBuilder, Kernel, Literal, Shape, TensorType, ValueId};

use crate::memo::Lookup;
use crate::tensor::{DeviceTensor, Meta};
use crate::{Backend, Error, Result};

/// What a recorded node gave.
#[derive(Clone, Debug)]
pub enum Recorded {
    /// A tensor: the recorder's value index, its dtype and PyTorch's strides for it.
    Value(u32, DType, Strides),
    /// An int.
    Int(i64),
    /// A bool.
    Bool(bool),
    /// Nothing.
    None,
    /// Several results.
    List(Vec<Recorded>),
}

/// A graph being recorded call by call.
pub struct Recorder {
    backend: Backend,
    builder: GraphBuilder,
    /// Every value so far (inputs, then results), with PyTorch's strides.
    values: Vec<(ValueId, Strides)>,
    inputs: usize,
    rng_states: Vec<ValueId>,
    /// The index checks' code so far (`checks`), an extra output of the program.
    code: Option<ValueId>,
}

/// A call of a recorder with its tensors numbered by operand, as the table numbers them.
struct Renumbered {
    args: Vec<Arg>,
    kwargs: Vec<(String, Arg)>,
    /// The recorder's value of each operand.
    values: Vec<usize>,
    /// Each operand's type and strides.
    operands: Vec<Operand>,
}

/// A recorded graph, ready to run on the device.
pub struct Program {
    call: CallGraph,
    inputs: Vec<TensorType>,
    rng_states: usize,
    outputs: Vec<Meta>,
    /// Whether its last result is the code of its index checks.
    checked: bool,
}

impl Program {
    /// The types of its tensor inputs.
    pub fn inputs(&self) -> &[TensorType] {
        &self.inputs
    }

    /// The metadata of its results.
    pub fn outputs(&self) -> &[Meta] {
        &self.outputs
    }
}

impl Backend {
    /// A recorder of a new graph.
    pub fn recorder(&self) -> Recorder {
        Recorder {
            backend: self.clone(),
            builder: GraphBuilder::new(),
            values: Vec::new(),
            inputs: 0,
            rng_states: Vec::new(),
            code: None,
        }
    }

    /// Runs `program` on `inputs` (device tensors of its input types, on one device) as one step
    /// of that device's lazy tape; returns its results as new tensors.
    pub fn run_program(&self, program: &Program, inputs: &[DeviceTensor]) -> Result<Vec<DeviceTensor>> {
        if inputs.len() != program.inputs.len() {
            return Err(Error::Call {
                op: "compiled graph".into(),
                message: format!("takes {} tensors, given {}", program.inputs.len(), inputs.len()),
            });
        }
        let mut device = None;
        let mut values = Vec::with_capacity(inputs.len() + program.rng_states);
        for (index, (tensor, ty)) in inputs.iter().zip(&program.inputs).enumerate() {
            let state = tensor.state()?;
            let here = state.storage.device;
            match device {
                Some(other) if other != here => {
                    return Err(Error::DeviceMismatch {
                        first: format!("ttpu:{other}"),
                        second: format!("ttpu:{here}"),
                    });
                }
                _ => device = Some(here),
            }
            let value = crate::tensor::value_of(self.eager_device(here)?, &state)?;
            if value.dtype() != ty.dtype || value.shape() != &ty.shape {
                return Err(Error::Call {
                    op: "compiled graph".into(),
                    message: format!(
                        "input {index} is {}{:?}, the graph was compiled for {ty}",
                        value.dtype(),
                        value.dims()
                    ),
                });
            }
            values.push(value);
        }
        let device = device.unwrap_or(0);
        values.extend(self.rng_states_on(device, program.rng_states)?);
        self.check_result_sizes("a compiled graph", device, program.call.graph())?;
        let operands: Vec<&ttpu_eager::Tensor> = values.iter().collect();
        let eager = self.eager_device(device)?;
        let mut results = eager.call(&program.call, &operands)?;
        if program.checked
            && let Some(code) = results.pop()
        {
            self.checks().merge(eager, device, code)?;
        }
        results
            .into_iter()
            .zip(&program.outputs)
            .map(|(value, meta)| self.fresh_on(device, meta.clone(), value))
            .collect()
    }
}

impl Recorder {
    /// Adds a tensor input of `dtype` and `strides` (sizes included); returns its value index.
    pub fn input(&mut self, dtype: DType, strides: Strides) -> Result<u32> {
        if self.values.len() > self.inputs {
            return Err(Error::Call { op: "graph input".into(), message: "inputs come before every call".into() });
        }
        let value = self.builder.input(TensorType::new(dtype, Shape::from_static(&strides.sizes)), None);
        self.values.push((value, strides));
        self.inputs += 1;
        Ok(index_u32(self.values.len() - 1))
    }

    /// Records the overload `op` on `args` and `kwargs`, whose tensors are values of this
    /// recorder (`Arg::Tensor(value index)`).
    pub fn call(&mut self, op: &str, args: &[Arg], kwargs: &[(String, Arg)]) -> Result<Recorded> {
        let def = eager::lookup(op).ok_or_else(|| Error::Unsupported { op: op.to_string() })?;
        let call = self.renumbered(args, kwargs)?;
        let lookup = self.backend.lookup(def, &call.args, &call.kwargs, &call.operands)?;
        let entry = match lookup {
            Lookup::Entry(entry) => entry,
            Lookup::Sizes(_) => {
                return Err(Error::Call {
                    op: op.to_string(),
                    message: "its result's size depends on the data, which a compiled graph cannot know".into(),
                });
            }
        };
        let recorded = self.inline(op, &entry.family.template, &call)?;
        self.check_indices(def, &call)?;
        Ok(recorded)
    }

    /// Inlines the index checks of `call` (of `def`), folding them into the program's code.
    fn check_indices(&mut self, def: &'static ttpu_aten::ops::OpDef, call: &Renumbered) -> Result<()> {
        for bound in ttpu_aten::bounds::index_bounds(def, &call.args, &call.kwargs, &call.operands) {
            let (Some(operand), Some(&value)) = (call.operands.get(bound.operand), call.values.get(bound.operand))
            else {
                continue;
            };
            if operand.ty.shape.as_static().is_some_and(|dims| dims.contains(&0)) {
                continue;
            }
            let checks = self.backend.checks();
            let code = checks.code_of(def.name, bound.message(def.name))?;
            let graph = checks.check(def.name, &operand.ty, bound, code, self.code.is_none())?;
            let mut args = vec![self.values[value].0];
            args.extend(self.code);
            let results = self
                .builder
                .inline(graph.graph(), &args)
                .map_err(|error| Error::Call { op: def.name.to_string(), message: error.to_string() })?;
            self.code = results.first().copied();
        }
        Ok(())
    }

    /// Records a call of the user kernel `kernel` (a custom op, the overload `op`) on `args` and
    /// `kwargs` as [`Recorder::call`] does: its template is the one eager calls of the kernel
    /// record, and a call of other types than the kernel's is its error.
    pub fn call_kernel(
        &mut self,
        op: &str,
        kernel: &Arc<Kernel>,
        args: &[Arg],
        kwargs: &[(String, Arg)],
    ) -> Result<Recorded> {
        let call = self.renumbered(args, kwargs)?;
        let entry = self.backend.kernel_entry(op, kernel, &call.args, &call.kwargs, &call.operands)?;
        self.inline(op, &entry.template, &call)
    }

    /// The call with its tensors numbered by operand, as the table numbers them.
    fn renumbered(&self, args: &[Arg], kwargs: &[(String, Arg)]) -> Result<Renumbered> {
        let mut values: Vec<usize> = Vec::new();
        let mut renumber = |arg: &Arg| self.renumber(arg, &mut values);
        let args = args.iter().map(&mut renumber).collect::<Result<Vec<_>>>()?;
        let kwargs = kwargs.iter().map(|(name, arg)| Ok((name.clone(), renumber(arg)?))).collect::<Result<Vec<_>>>()?;
        let operands = values
            .iter()
            .map(|&index| {
                let (value, strides) = &self.values[index];
                Operand {
                    ty: self.builder.ty(*value).clone(),
                    strides: (!strides.is_contiguous()).then(|| strides.clone()),
                }
            })
            .collect();
        Ok(Renumbered { args, kwargs, values, operands })
    }

    /// Inlines `template`, built for `call` of `op`; its generator states become inputs of the
    /// graph and its float inputs constants.
    fn inline(&mut self, op: &str, template: &Template, call: &Renumbered) -> Result<Recorded> {
        let mut call_args: Vec<ValueId> = call.values.iter().map(|&index| self.values[index].0).collect();
        for _ in 0..template.rng_states {
            let state = self.builder.input(TensorType::from_static(DType::U64, &[2]), None);
            self.rng_states.push(state);
            call_args.push(state);
        }
        let floats = eager::floats(&call.args, &call.kwargs);
        let scalars = template.scalar_inputs(&floats).map_err(|error| Error::from_table(op, error))?;
        for (dtype, count, data) in scalars {
            let literal = Literal::from_bytes(dtype, &[count as i64], data)
                .map_err(|error| Error::Call { op: op.to_string(), message: format!("{error:?}") })?;
            call_args.push(self.builder.constant(literal));
        }
        let results = self
            .builder
            .inline(&template.graph, &call_args)
            .map_err(|error| Error::Call { op: op.to_string(), message: error.to_string() })?;
        let first = self.values.len();
        for (value, strides) in results.iter().zip(&template.strides) {
            self.values.push((*value, strides.clone()));
        }
        Ok(self.recorded(&template.output, first))
    }

    fn renumber(&self, arg: &Arg, operands: &mut Vec<usize>) -> Result<Arg> {
        Ok(match arg {
            Arg::Tensor(index) => {
                if *index >= self.values.len() {
                    return Err(Error::Call {
                        op: "graph".into(),
                        message: format!("value {index} is used before it is defined"),
                    });
                }
                operands.push(*index);
                Arg::Tensor(operands.len() - 1)
            }
            Arg::List(items) => {
                Arg::List(items.iter().map(|item| self.renumber(item, operands)).collect::<Result<_>>()?)
            }
            other => other.clone(),
        })
    }

    fn recorded(&self, output: &Output, first: usize) -> Recorded {
        match output {
            Output::Tensor(index) => {
                let position = first + index;
                let (value, strides) = &self.values[position];
                Recorded::Value(index_u32(position), self.builder.ty(*value).dtype, strides.clone())
            }
            Output::Int(value) => Recorded::Int(*value),
            Output::Bool(value) => Recorded::Bool(*value),
            Output::None => Recorded::None,
            Output::List(items) => Recorded::List(items.iter().map(|item| self.recorded(item, first)).collect()),
        }
    }

    /// The program returning the values `outputs` (indices from [`Recorder::input`] and
    /// [`Recorder::call`]).
    pub fn finish(self, outputs: &[u32]) -> Result<Program> {
        let mut results = Vec::with_capacity(outputs.len());
        let mut metas = Vec::with_capacity(outputs.len());
        for &output in outputs {
            let (value, strides) = self.values.get(output as usize).ok_or_else(|| Error::Call {
                op: "graph output".into(),
                message: format!("value {output} is not defined"),
            })?;
            results.push(*value);
            // A result of its own storage: contiguous whatever view the graph computed it as.
            metas.push(Meta::contiguous(self.builder.ty(*value).dtype, &strides.sizes));
        }
        let inputs: Vec<TensorType> =
            self.values[..self.inputs].iter().map(|(value, _)| self.builder.ty(*value).clone()).collect();
        let rng_states = self.rng_states.len();
        let checked = self.code.is_some();
        results.extend(self.code);
        let graph = self.builder.finish(&results);
        Ok(Program { call: CallGraph::new(graph)?, inputs, rng_states, outputs: metas, checked })
    }
}

fn index_u32(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}
