//! The graph signature: which graph input is a parameter, buffer, constant or user input, and
//! which output is a user output or a mutation, with the keys the driver reads and writes them by.
//!
//! The printed signature and the graph must agree one to one (every placeholder has exactly one
//! input spec, every returned value one output spec, in order); anything else is
//! [`Error::Signature`] rather than a guess.

use ttpu_ir::{DType, GraphBuilder, Literal, Loc, Scalar, TensorType, ValueId};

use super::{InputRole, ModelInput, ModelOutput, OutputRole};
use crate::Location;
use crate::ast::{Arg, InputKind, OutputKind, Program, Span, SymExpr};
use crate::{Error, Result};
use ttpu_aten::Imported;

fn error(program: &Program, span: Span, message: String) -> Error {
    Error::Signature { at: Location::new(&program.path, &program.source, span), message }
}

/// One [`ModelInput`] per tensor placeholder, in placeholder order; `types` are the placeholders'
/// types, `None` for a user input's Python value that the export specialized (it has a spec but
/// no graph input, and the driver asks no data for it).
pub(crate) fn inputs(program: &Program, types: &[Option<TensorType>]) -> Result<Vec<ModelInput>> {
    for (index, spec) in program.signature.inputs.iter().enumerate() {
        if !program.placeholders.iter().any(|placeholder| program.names_placeholder(&spec.name, &placeholder.name)) {
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
        let Some(spec) =
            program.signature.inputs.iter().find(|spec| program.names_placeholder(&spec.name, &placeholder.name))
        else {
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
            // An effect token orders side effects in PyTorch; it holds no data and is no input.
            InputKind::Other(kind) if kind == "TOKEN" => continue,
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
        if let Some(ty) = ty {
            inputs.push(ModelInput { name: spec.name.clone(), key, role, ty: ty.clone() });
        }
    }
    Ok(inputs)
}

/// The graph outputs (the `return` tuple, in order) and one [`ModelOutput`] for each. A Python
/// value returned as such (`x.shape[0]` of a static shape, a flag) becomes a rank-0 constant
/// output: an int as `i64`, a float as `f64` (every Python float exactly), a bool as `bool`.
pub(crate) fn outputs<'e>(
    program: &Program,
    inputs: &[ModelInput],
    builder: &mut GraphBuilder,
    lookup: impl Fn(&str) -> Option<&'e Imported>,
    mut annotated: impl FnMut(&str) -> Result<TensorType>,
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
        // The effect token threaded out of the graph: no data, no output.
        if matches!(&spec.kind, OutputKind::Other(kind) if kind == "TOKEN") {
            continue;
        }
        let constant = |builder: &mut GraphBuilder, scalar: Scalar| {
            let dtype = match scalar {
                Scalar::Int(_) => DType::I64,
                Scalar::Float(_) => DType::F64,
                Scalar::Bool(_) => DType::Bool,
            };
            let line = Location::new(&program.path, &program.source, program.return_span).line;
            builder.set_loc(Loc {
                name: Some(format!("return value {index}")),
                origin: Some(format!("return @ {}:{line}", program.path)),
            });
            builder.constant(Literal::scalar(dtype, scalar))
        };
        let value = match returned {
            Arg::Int(value) => Some(constant(builder, Scalar::Int(*value))),
            Arg::Float(value) => Some(constant(builder, Scalar::Float(*value))),
            Arg::Bool(value) => Some(constant(builder, Scalar::Bool(*value))),
            Arg::Name(name, span) => {
                if *name != spec.name {
                    return Err(error(
                        program,
                        spec.span,
                        format!("output spec {index} names `{}` but `return` has `{name}` there", spec.name),
                    ));
                }
                match lookup(name) {
                    Some(Imported::Tensor(value)) => Some(*value),
                    // Left out of a size program: the output keeps its printed type, and the graph
                    // returns sizes instead (the caller's business).
                    Some(Imported::Skipped) => None,
                    Some(Imported::SymInt(SymExpr::Int(value))) => Some(constant(builder, Scalar::Int(*value))),
                    Some(Imported::SymBool(Some(value))) => Some(constant(builder, Scalar::Bool(*value))),
                    Some(_) => {
                        return Err(error(
                            program,
                            *span,
                            format!("return value `{name}` is neither a tensor nor a number known at compile time"),
                        ));
                    }
                    None => {
                        return Err(Error::UndefinedName {
                            at: Location::new(&program.path, &program.source, *span),
                            name: name.clone(),
                        });
                    }
                }
            }
            _ => {
                return Err(error(
                    program,
                    program.return_span,
                    format!(
                        "return value {index} is `{}`, neither a tensor nor a number; such outputs are not supported",
                        show(returned)
                    ),
                ));
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
            OutputKind::LossOutput => {
                if outputs.iter().any(|output: &ModelOutput| output.role == OutputRole::Loss) {
                    return Err(error(program, spec.span, "a joint graph has one LOSS_OUTPUT".into()));
                }
                ("loss".to_owned(), OutputRole::Loss)
            }
            OutputKind::GradientToParameter => {
                let target = target("GRADIENT_TO_PARAMETER", &|role| *role == InputRole::Parameter)?;
                (format!("grad.{target}"), OutputRole::GradientToParameter { target })
            }
            OutputKind::GradientToUserInput => {
                let input = gradient_input(program, spec)?;
                (format!("grad_input.{input}"), OutputRole::GradientToUserInput { input })
            }
            OutputKind::Other(kind) => {
                return Err(error(
                    program,
                    spec.span,
                    format!("output kind `{kind}` of `{}` is not supported", spec.name),
                ));
            }
        };
        let ty = match value {
            Some(value) => {
                values.push(value);
                builder.ty(value).clone()
            }
            None => annotated(&spec.name)?,
        };
        outputs.push(ModelOutput { key, role, ty });
    }
    Ok((values, outputs))
}

/// The placeholder a `GRADIENT_TO_USER_INPUT` output belongs to. PyTorch names it by flat input
/// position (`arg9_1` is the tenth placeholder of `forward`), not by the placeholder's name.
fn gradient_input(program: &Program, spec: &crate::ast::OutputSpec) -> Result<String> {
    let target = spec.target.as_deref().unwrap_or_default();
    let position = target
        .strip_prefix("arg")
        .and_then(|rest| rest.strip_suffix("_1"))
        .and_then(|index| index.parse::<usize>().ok());
    let placeholder = position.and_then(|index| program.placeholders.get(index)).or_else(|| {
        // A target that is a placeholder name is taken as it is.
        program.placeholders.iter().find(|placeholder| placeholder.name == target)
    });
    let Some(placeholder) = placeholder else {
        return Err(error(
            program,
            spec.span,
            format!(
                "GRADIENT_TO_USER_INPUT target `{target}` names no input (`argN_1` is the N-th of {} placeholders)",
                program.placeholders.len()
            ),
        ));
    };
    let is_user =
        program.signature.inputs.iter().any(|input| {
            program.names_placeholder(&input.name, &placeholder.name) && input.kind == InputKind::UserInput
        });
    if !is_user {
        return Err(error(
            program,
            spec.span,
            format!("GRADIENT_TO_USER_INPUT target `{target}` is `{}`, which is not a user input", placeholder.name),
        ));
    }
    Ok(placeholder.name.clone())
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
