//! What `.fx` syntax means as call arguments: literals and names resolved to the table's values
//! ([`Val`]), and which nodes feed each parameter (for what is known about them beyond their
//! values: their memory layout).

use ttpu_aten::args::Val;

use crate::Result;
use crate::ast::{Arg, Span};

/// Converts syntax to a value; `resolve` looks names up.
pub(super) fn resolve_arg(arg: &Arg, resolve: &mut dyn FnMut(&str, Span) -> Result<Val>) -> Result<Val> {
    Ok(match arg {
        Arg::Name(name, span) => resolve(name, *span)?,
        Arg::Int(value) => Val::Int(*value),
        Arg::Float(value) => Val::Float(*value),
        Arg::Bool(value) => Val::Bool(*value),
        Arg::None => Val::None,
        Arg::Str(text) => Val::Str(text.clone()),
        Arg::List(items) | Arg::Tuple(items) => {
            Val::List(items.iter().map(|item| resolve_arg(item, resolve)).collect::<Result<_>>()?)
        }
        Arg::DType(dtype) => Val::DType(*dtype),
        Arg::Device(device) => Val::Opaque(format!("device {device}")),
        Arg::Enum(name) => Val::Opaque(name.clone()),
        Arg::Op(target) => Val::Opaque(format!("the op {target}")),
    })
}

/// The node names passed to each parameter of `params` (inside lists too), for what is known
/// about those nodes beyond their values (their memory layout). Call after [`bind`] succeeded.
pub(super) fn param_sources<'a>(
    params: &'static str,
    positional: &'a [Arg],
    keywords: &'a [(String, Arg)],
) -> Vec<(&'static str, &'a str)> {
    fn names<'a>(arg: &'a Arg, out: &mut Vec<&'a str>) {
        match arg {
            Arg::Name(name, _) => out.push(name),
            Arg::List(items) | Arg::Tuple(items) => items.iter().for_each(|item| names(item, out)),
            _ => {}
        }
    }
    let declared: Vec<&'static str> =
        params.split(',').map(str::trim).filter(|param| !param.is_empty() && *param != "*").collect();
    let mut sources = Vec::new();
    let given = positional
        .iter()
        .zip(declared.iter().copied())
        .map(|(arg, param)| (param, arg))
        .chain(keywords.iter().filter_map(|(name, arg)| Some((*declared.iter().find(|p| *p == name)?, arg))));
    for (param, arg) in given {
        let mut found = Vec::new();
        names(arg, &mut found);
        sources.extend(found.into_iter().map(|name| (param, name)));
    }
    sources
}
