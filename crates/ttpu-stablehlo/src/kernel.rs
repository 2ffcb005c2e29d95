//! User kernels in the lowered module: the signature of a kernel's StableHLO module, its
//! functions inlined as private functions of the program, and host kernels as typed FFI calls.
//!
//! A kernel module is MLIR text whose top level holds `func.func` operations only, one of them
//! the public `@main`. Every function is copied into the program under a name of its own
//! (`kernel<k>_<op>_<function>`, `k` counting distinct kernels in the order the graph first uses
//! them), made private, with every symbol reference inside it renamed the same way, so two
//! kernels with a function of one name never clash and the program's `@main` stays the only
//! public function. StableHLO ops stay in MLIR's generic form, as everywhere in this crate (the
//! dialect is not registered here): a kernel module must be written, or printed, in that form.

use std::collections::HashMap;
use std::sync::Arc;

use melior::Context;
use melior::dialect::func;
use melior::ir::attribute::{ArrayAttribute, FlatSymbolRefAttribute, StringAttribute, TypeAttribute};
use melior::ir::operation::{OperationLike, OperationMutLike, OperationRefMut};
use melior::ir::r#type::{FunctionType, RankedTensorType, ShapedTypeLike};
use melior::ir::{Attribute, BlockLike, Location, Module, Operation, OperationRef, RegionLike, Type, Value};
use ttpu_ir::{DType, Graph, Kernel, KernelBody, Op, Shape, TensorType};

use crate::Error;
use crate::context::Session;
use crate::ops::{self, internal};
use crate::types::element_type;

/// The custom-call target of every host kernel: the runtime registers one XLA FFI handler under
/// this name, and the call's `kernel` attribute says which kernel runs.
pub const HOST_KERNEL_TARGET: &str = "ttpu_host_kernel";

/// How deeply regions may nest inside a kernel's functions; deeper input is refused rather than
/// walked recursively without bound.
const MAX_REGION_DEPTH: usize = 256;

/// The types of a kernel module's `@main`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSignature {
    /// The argument types, in order.
    pub inputs: Vec<TensorType>,
    /// The result types, in order.
    pub results: Vec<TensorType>,
}

/// Parses a kernel module and reads the signature of its `@main`: what a kernel registered with
/// this module must take and return. Fails with [`Error::KernelModule`] when the text does not
/// parse, holds anything but functions, has no public `@main`, or has a type that is not a static
/// tensor of a dtype the IR knows.
pub fn kernel_signature(module: &str) -> Result<KernelSignature, Error> {
    let session = Session::new();
    let parsed = parse(session.context(), &session, module)?;
    let functions = functions(&parsed)?;
    main_signature(session.context(), &functions)
}

/// `text` parsed in `context`, or the parser's diagnostics.
fn parse<'c>(context: &'c Context, session: &Session, text: &str) -> Result<Module<'c>, Error> {
    Module::parse(context, text).ok_or_else(|| {
        let diagnostics = session.take_diagnostics();
        let hint = if diagnostics.contains("is unknown") || diagnostics.contains("custom op") {
            " (write StableHLO ops in MLIR's generic form, `\"stablehlo.add\"(%a, %b) : (...) -> ...`, \
             as `jax.jit(f).lower(...).compiler_ir(\"stablehlo\").operation.get_asm(print_generic_op_form=True)` \
             prints them)"
        } else {
            ""
        };
        Error::KernelModule { message: format!("the module does not parse: {diagnostics}{hint}") }
    })
}

/// The module's top-level operations, each checked to be a `func.func`, with their names.
fn functions<'c, 'm>(module: &'m Module<'c>) -> Result<Vec<(String, OperationRef<'c, 'm>)>, Error> {
    let mut res = Vec::new();
    let mut next = module.body().first_operation();
    while let Some(operation) = next {
        let name = operation.name().as_string_ref().as_str().map(str::to_owned).unwrap_or_default();
        if name != "func.func" {
            return Err(Error::KernelModule {
                message: format!("the module holds `{name}`; only `func.func` operations are inlined"),
            });
        }
        let symbol = operation
            .attribute("sym_name")
            .ok()
            .and_then(|attribute| StringAttribute::try_from(attribute).ok())
            .map(|name| name.value().to_owned())
            .ok_or_else(|| Error::KernelModule { message: "a function has no name".into() })?;
        res.push((symbol, operation));
        next = operation.next_in_block();
    }
    Ok(res)
}

/// The signature of the public `@main` among `functions`.
fn main_signature(context: &Context, functions: &[(String, OperationRef<'_, '_>)]) -> Result<KernelSignature, Error> {
    let Some((_, main)) = functions.iter().find(|(name, _)| name == "main") else {
        return Err(Error::KernelModule { message: "the module has no function `@main`".into() });
    };
    let private = main
        .attribute("sym_visibility")
        .ok()
        .and_then(|attribute| StringAttribute::try_from(attribute).ok())
        .is_some_and(|visibility| visibility.value() == "private");
    if private {
        return Err(Error::KernelModule { message: "`@main` is private; the kernel's entry must be public".into() });
    }
    let function_type = main
        .attribute("function_type")
        .ok()
        .and_then(|attribute| TypeAttribute::try_from(attribute).ok())
        .and_then(|attribute| FunctionType::try_from(attribute.value()).ok())
        .ok_or_else(|| Error::KernelModule { message: "`@main` has no function type".into() })?;
    let read = |what: &str, index: usize, ty: Result<Type<'_>, melior::Error>| -> Result<TensorType, Error> {
        let ty = ty.map_err(|error| internal("reading a function type", error))?;
        tensor_type_of(context, ty).ok_or_else(|| Error::KernelModule {
            message: format!("`@main` {what} {index} has the type `{ty}`; a kernel takes and returns static tensors"),
        })
    };
    let inputs = (0..function_type.input_count())
        .map(|index| read("argument", index, function_type.input(index)))
        .collect::<Result<Vec<_>, Error>>()?;
    let results = (0..function_type.result_count())
        .map(|index| read("result", index, function_type.result(index)))
        .collect::<Result<Vec<_>, Error>>()?;
    if results.is_empty() {
        return Err(Error::KernelModule {
            message: "`@main` returns nothing; a kernel has at least one result".into(),
        });
    }
    Ok(KernelSignature { inputs, results })
}

/// The IR type of a static ranked tensor of a known element type.
fn tensor_type_of(context: &Context, ty: Type<'_>) -> Option<TensorType> {
    let tensor = RankedTensorType::try_from(ty).ok()?;
    let element = tensor.element();
    // `c32` shares `complex<f32>` with `c64`, which is what a module's type means.
    let dtype = DType::ALL
        .into_iter()
        .filter(|&dtype| dtype != DType::C32)
        .find(|&dtype| element_type(context, dtype) == element)?;
    let dims = (0..tensor.rank())
        .map(|index| match tensor.dim_size(index) {
            Ok(melior::ir::r#type::DimSize::Static(size)) => i64::try_from(size).ok(),
            _ => None,
        })
        .collect::<Option<Vec<i64>>>()?;
    Some(TensorType::new(dtype, Shape::from_static(&dims)))
}

/// The callee of each StableHLO kernel of a program, by kernel.
pub(crate) struct Callees {
    names: HashMap<Arc<Kernel>, String>,
}

impl Callees {
    /// The function a call of `kernel` calls.
    pub(crate) fn callee(&self, kernel: &Arc<Kernel>) -> Result<&str, Error> {
        self.names
            .get(kernel)
            .map(String::as_str)
            .ok_or_else(|| internal("a kernel call", format!("`{}` was not inlined", kernel.name)))
    }
}

/// Every distinct kernel of `graph` and of its loops' graphs, in order of first use.
fn kernels_of(graph: &Graph, out: &mut Vec<Arc<Kernel>>) {
    for (_, node) in graph.nodes() {
        match &node.op {
            Op::Kernel(kernel) if !out.contains(kernel) => out.push(kernel.clone()),
            Op::While(while_loop) => {
                kernels_of(&while_loop.cond, out);
                kernels_of(&while_loop.body, out);
            }
            _ => {}
        }
    }
}

/// Appends the functions of every StableHLO kernel of `graph` to `module`, each private and
/// renamed, after checking that each module's `@main` has the kernel's types.
pub(crate) fn inline_kernels<'c>(
    context: &'c Context,
    session: &Session,
    module: &Module<'c>,
    graph: &Graph,
) -> Result<Callees, Error> {
    let mut kernels = Vec::new();
    kernels_of(graph, &mut kernels);
    let mut names = HashMap::new();
    for (number, kernel) in kernels.iter().enumerate() {
        let KernelBody::StableHlo(text) = &kernel.body else { continue };
        let at_kernel = |error: Error| match error {
            Error::KernelModule { message } => {
                Error::KernelModule { message: format!("kernel `{}`: {message}", kernel.name) }
            }
            other => other,
        };
        let parsed = parse(context, session, text).map_err(at_kernel)?;
        let functions = functions(&parsed).map_err(at_kernel)?;
        let signature = main_signature(context, &functions).map_err(at_kernel)?;
        if signature.inputs != kernel.inputs || signature.results != kernel.results {
            return Err(at_kernel(Error::KernelModule {
                message: format!(
                    "`@main` is ({}) -> ({}) but the op is ({}) -> ({})",
                    show(&signature.inputs),
                    show(&signature.results),
                    show(&kernel.inputs),
                    show(&kernel.results)
                ),
            }));
        }
        let prefix: String =
            kernel.name.replace("::", "_").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let renamed: HashMap<String, String> =
            functions.iter().map(|(name, _)| (name.clone(), format!("kernel{number}_{prefix}_{name}"))).collect();
        for (name, function) in &functions {
            // melior clones only owned operations; a parsed module's functions are references.
            #[allow(unsafe_code)]
            // SAFETY: the reference lives no longer than this loop body, during which `parsed` (the
            // module owning the function) is alive and unchanged; it is only read, to clone it.
            let function = unsafe { function.to_ref() };
            let mut copy: Operation<'c> = function.clone();
            copy.set_attribute("sym_name", StringAttribute::new(context, &renamed[name]).into());
            copy.set_attribute("sym_visibility", StringAttribute::new(context, "private").into());
            // Argument and result attributes of an entry function (layouts, shardings, result
            // names) mean nothing, or something wrong, on a private one.
            for attribute in ["arg_attrs", "res_attrs"] {
                if copy.has_attribute(attribute) {
                    copy.remove_attribute(attribute).map_err(|error| internal("dropping an attribute", error))?;
                }
            }
            rename_symbols(context, &mut copy, &renamed)?;
            module.body().append_operation(copy);
        }
        names.insert(kernel.clone(), renamed["main"].clone());
    }
    Ok(Callees { names })
}

fn show(types: &[TensorType]) -> String {
    types.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
}

/// Renames every symbol reference inside `function` (a callee, called computations, a
/// composite's decomposition) that names one of the module's functions.
fn rename_symbols<'c>(
    context: &'c Context,
    function: &mut Operation<'c>,
    renamed: &HashMap<String, String>,
) -> Result<(), Error> {
    let mut regions = Vec::new();
    for index in 0..function.region_count() {
        regions.push(function.region(index).map_err(|error| internal("reading a region", error))?);
    }
    let mut stack: Vec<(OperationRefMut<'c, '_>, usize)> = Vec::new();
    for region in regions {
        let mut block = region.first_block();
        while let Some(current) = block {
            let mut next = current.first_operation_mut();
            while let Some(operation) = next {
                next = operation.next_in_block_mut();
                stack.push((operation, 1));
            }
            block = current.next_in_region();
        }
    }
    while let Some((mut operation, depth)) = stack.pop() {
        if depth > MAX_REGION_DEPTH {
            return Err(Error::KernelModule { message: format!("regions nest more than {MAX_REGION_DEPTH} deep") });
        }
        let attributes: Vec<(String, Attribute<'c>)> = operation
            .attributes()
            .map(|(name, attribute)| (name.as_string_ref().as_str().unwrap_or_default().to_owned(), attribute))
            .collect();
        for (name, attribute) in attributes {
            if let Some(replacement) = renamed_attribute(context, attribute, renamed) {
                operation.set_attribute(&name, replacement);
            }
        }
        for index in 0..operation.region_count() {
            let region = operation.region(index).map_err(|error| internal("reading a region", error))?;
            let mut block = region.first_block();
            while let Some(current) = block {
                let mut next = current.first_operation_mut();
                while let Some(inner) = next {
                    next = inner.next_in_block_mut();
                    stack.push((inner, depth + 1));
                }
                block = current.next_in_region();
            }
        }
    }
    Ok(())
}

/// `attribute` with its symbol references renamed, if it is one (or an array holding some).
fn renamed_attribute<'c>(
    context: &'c Context,
    attribute: Attribute<'c>,
    renamed: &HashMap<String, String>,
) -> Option<Attribute<'c>> {
    if let Ok(symbol) = FlatSymbolRefAttribute::try_from(attribute) {
        return renamed.get(symbol.value()).map(|name| FlatSymbolRefAttribute::new(context, name).into());
    }
    let array = ArrayAttribute::try_from(attribute).ok()?;
    let elements: Vec<Attribute<'c>> = (0..array.len()).filter_map(|index| array.element(index).ok()).collect();
    let mut changed = false;
    let elements: Vec<Attribute<'c>> = elements
        .into_iter()
        .map(|element| match renamed_attribute(context, element, renamed) {
            Some(replacement) => {
                changed = true;
                replacement
            }
            None => element,
        })
        .collect();
    changed.then(|| ArrayAttribute::new(context, &elements).into())
}

/// The call of `kernel` on `operands`: `func.call` of its inlined `@main`, or for a host kernel
/// `stablehlo.custom_call @ttpu_host_kernel` with the typed FFI API (`api_version = 4`) and the
/// kernel's name as the `kernel` attribute the handler reads.
pub(crate) fn call<'c>(
    context: &'c Context,
    callees: &Callees,
    kernel: &Arc<Kernel>,
    operands: &[Value<'c, '_>],
    results: &[Type<'c>],
    location: Location<'c>,
) -> Result<Operation<'c>, Error> {
    match &kernel.body {
        KernelBody::StableHlo(_) => {
            let callee = callees.callee(kernel)?;
            Ok(func::call(context, FlatSymbolRefAttribute::new(context, callee), operands, results, location))
        }
        KernelBody::Host => {
            ops::custom_call_ffi(context, HOST_KERNEL_TARGET, &[("kernel", &kernel.name)], operands, results, location)
        }
    }
}

/// Whether `ty` prints as MLIR's type of `expected` (a check for tests of the type mapping).
#[cfg(test)]
fn same_type(context: &Context, ty: Type<'_>, expected: &TensorType) -> bool {
    tensor_type_of(context, ty).as_ref() == Some(expected) && melior::ir::TypeLike::is_ranked_tensor(&ty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_maps_back() {
        let session = Session::new();
        let context = session.context();
        // `complex32` is held as `complex<f32>`, which reads back as `c64`.
        for dtype in DType::ALL.into_iter().filter(|&dtype| dtype != DType::C32) {
            let expected = TensorType::new(dtype, Shape::from_static(&[2, 3]));
            let ty = crate::types::tensor_type(context, &expected).unwrap();
            assert!(same_type(context, ty, &expected), "{dtype}");
        }
    }
}
