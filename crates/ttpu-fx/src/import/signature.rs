//! The graph signature: which graph input is a parameter, buffer, constant or user input, and
//! which output is a user output or a mutation, with the keys the driver reads and writes them by.
//!
//! The printed signature and the graph must agree one to one (every placeholder has exactly one
//! input spec, every returned value one output spec, in order); anything else is
//! [`Error::Signature`] rather than a guess.

use ttpu_ir::{GraphBuilder, TensorType, ValueId};

use super::ctx::Imported;
use super::{InputRole, ModelInput, ModelOutput, OutputRole};
use crate::Location;
use crate::ast::{Arg, InputKind, OutputKind, Program, Span};
use crate::error::{Error, Result};

fn error(program: &Program, span: Span, message: String) -> Error {
    Error::Signature { at: Location::new(&program.path, &program.source, span), message }
}

/// One [`ModelInput`] per placeholder, in placeholder order; `types` are the placeholders' types.
pub(crate) fn inputs(program: &Program, types: &[TensorType]) -> Result<Vec<ModelInput>> {
    for (index, spec) in program.signature.inputs.iter().enumerate() {
        if !program.placeholders.iter().any(|placeholder| placeholder.name == spec.name) {
            return Err(error(
                program,
                spec.span,
                format!("input spec `{}` names no placeholder of `forward`", spec.name),
            ));
        }
        if program.signature.inputs[..index].iter().any(|earlier| earlier.name == spec.name) {
            return Err(error(program, spec.span, format!("placeholder `{}` has more than one input spec", spec.name)));
        }
    }
    let mut inputs = Vec::with_capacity(program.placeholders.len());
    for (placeholder, ty) in program.placeholders.iter().zip(types) {
        let Some(spec) = program.signature.inputs.iter().find(|spec| spec.name == placeholder.name) else {
            return Err(error(
                program,
                placeholder.span,
                format!("placeholder `{}` has no input spec in the graph signature", placeholder.name),
            ));
        };
        let role = match &spec.kind {
            InputKind::Parameter => InputRole::Parameter,
            InputKind::Buffer { persistent } => InputRole::Buffer { persistent: *persistent },
            InputKind::ConstantTensor => InputRole::ConstantTensor,
            InputKind::UserInput => InputRole::UserInput,
            InputKind::Other(kind) => {
                return Err(error(
                    program,
                    spec.span,
                    format!("input kind `{kind}` of `{}` is not supported", spec.name),
                ));
            }
        };
        let key = match (&role, &spec.target) {
            (InputRole::UserInput, _) => spec.name.clone(),
            (_, Some(target)) => target.clone(),
            (_, None) => {
                return Err(error(program, spec.span, format!("input spec `{}` has no target", spec.name)));
            }
        };
        inputs.push(ModelInput { name: placeholder.name.clone(), key, role, ty: ty.clone() });
    }
    Ok(inputs)
}

/// The graph outputs (the `return` tuple, in order) and one [`ModelOutput`] for each.
pub(crate) fn outputs<'e>(
    program: &Program,
    inputs: &[ModelInput],
    builder: &GraphBuilder,
    lookup: impl Fn(&str) -> Option<&'e Imported>,
) -> Result<(Vec<ValueId>, Vec<ModelOutput>)> {
    let specs = &program.signature.outputs;
    if specs.len() != program.outputs.len() {
        return Err(error(
            program,
            program.return_span,
            format!(
                "`return` has {} values but the graph signature lists {} outputs",
                program.outputs.len(),
                specs.len()
            ),
        ));
    }
    let mut values = Vec::with_capacity(specs.len());
    let mut outputs = Vec::with_capacity(specs.len());
    let mut user_outputs = 0;
    for (index, (returned, spec)) in program.outputs.iter().zip(specs).enumerate() {
        let Arg::Name(name, span) = returned else {
            return Err(error(
                program,
                program.return_span,
                format!(
                    "return value {index} is `{}`, not a tensor; constant outputs are not supported",
                    show(returned)
                ),
            ));
        };
        if *name != spec.name {
            return Err(error(
                program,
                spec.span,
                format!("output spec {index} names `{}` but `return` has `{name}` there", spec.name),
            ));
        }
        let value = match lookup(name) {
            Some(Imported::Tensor(value)) => *value,
            Some(_) => {
                return Err(error(program, *span, format!("return value `{name}` is not a tensor")));
            }
            None => {
                return Err(Error::UndefinedName {
                    at: Location::new(&program.path, &program.source, *span),
                    name: name.clone(),
                });
            }
        };
        let target = |kind: &str, allowed: &dyn Fn(&InputRole) -> bool| -> Result<String> {
            let target = spec
                .target
                .clone()
                .ok_or_else(|| error(program, spec.span, format!("{kind} output `{}` has no target", spec.name)))?;
            if !inputs.iter().any(|input| input.key == target && allowed(&input.role)) {
                return Err(error(
                    program,
                    spec.span,
                    format!("{kind} target `{target}` is not an input of that kind"),
                ));
            }
            Ok(target)
        };
        let (key, role) = match &spec.kind {
            OutputKind::UserOutput => {
                user_outputs += 1;
                (format!("output_{}", user_outputs - 1), OutputRole::User(user_outputs - 1))
            }
            OutputKind::BufferMutation => (
                target("BUFFER_MUTATION", &|role| matches!(role, InputRole::Buffer { .. }))?,
                OutputRole::BufferMutation,
            ),
            OutputKind::UserInputMutation => {
                (target("USER_INPUT_MUTATION", &|role| *role == InputRole::UserInput)?, OutputRole::UserInputMutation)
            }
            OutputKind::Other(kind) => {
                return Err(error(
                    program,
                    spec.span,
                    format!("output kind `{kind}` of `{}` is not supported", spec.name),
                ));
            }
        };
        values.push(value);
        outputs.push(ModelOutput { key, role, ty: builder.ty(value).clone() });
    }
    Ok((values, outputs))
}

/// A returned non-name, as printed.
fn show(arg: &Arg) -> String {
    match arg {
        Arg::None => "None".into(),
        Arg::Int(value) => value.to_string(),
        Arg::Float(value) => value.to_string(),
        Arg::Bool(value) => if *value { "True" } else { "False" }.into(),
        Arg::Str(text) => format!("{text:?}"),
        _ => "a constant".into(),
    }
}
