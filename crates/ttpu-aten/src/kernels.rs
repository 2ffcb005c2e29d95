//! User kernels by op name: what a frontend does with a call of an op outside the table.
//!
//! A PyTorch custom op (`torch.library.custom_op("mylib::foo", ...)`) reaches ttpu as the
//! overload `mylib.foo.default` (`torch.ops.mylib.foo.default` in `.fx` text). When a
//! [`Kernels`] registry holds a kernel of that name, the call becomes one `kernel` node
//! ([`ttpu_ir::Op::Kernel`]): its operands must be tensors of exactly the kernel's input types, and
//! its results have the kernel's result types (which the `.fx` walk then checks against the
//! node's annotation, as for every op). Every mismatch is an error naming the op and what differs,
//! raised while importing, before anything compiles.

use std::sync::Arc;

use indexmap::IndexMap;
use ttpu_ir::{Kernel, ValueId};

use crate::ctx::{Cx, Imported};
use crate::{Error, Result};

/// User kernels by name (`mylib::foo`), in registration order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Kernels {
    by_name: IndexMap<String, Arc<Kernel>>,
}

/// Why a kernel cannot be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// The name is not `namespace::name` of Python identifiers.
    #[error("kernel name `{name}` is not `namespace::name` (as `torch.library` names ops)")]
    BadName {
        /// The name given.
        name: String,
    },
    /// Another kernel has the name.
    #[error("kernel `{name}` is registered twice")]
    Twice {
        /// The name.
        name: String,
    },
}

/// Whether `text` is a Python identifier (ASCII).
fn identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Kernels {
    /// An empty registry.
    pub fn new() -> Kernels {
        Kernels::default()
    }

    /// Adds `kernel` under its name; a name that is not `namespace::name`, or is taken, is refused.
    pub fn insert(&mut self, kernel: Arc<Kernel>) -> Result<(), KernelError> {
        let name = kernel.name.to_string();
        let well_formed = name.split_once("::").is_some_and(|(namespace, op)| identifier(namespace) && identifier(op));
        if !well_formed {
            return Err(KernelError::BadName { name });
        }
        if self.by_name.contains_key(&name) {
            return Err(KernelError::Twice { name });
        }
        self.by_name.insert(name, kernel);
        Ok(())
    }

    /// The kernel named `name` (`mylib::foo`).
    pub fn get(&self, name: &str) -> Option<&Arc<Kernel>> {
        self.by_name.get(name)
    }

    /// The kernel a call of the overload `target` runs: `mylib.foo.default` is the kernel
    /// `mylib::foo` (custom ops have the one overload `default`).
    pub fn for_overload(&self, target: &str) -> Option<&Arc<Kernel>> {
        let target = target.strip_prefix("torch.ops.").unwrap_or(target);
        let rest = target.strip_suffix(".default")?;
        let (namespace, op) = rest.split_once('.')?;
        self.by_name.get(&format!("{namespace}::{op}"))
    }

    /// Every kernel, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Kernel>> {
        self.by_name.values()
    }

    /// Whether no kernel is registered.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The call of `kernel` (the overload `op`) on `operands`: one `kernel` node, its results a
/// tensor or, for several, a tuple. The operands are checked first: their count, and each one's
/// type against the kernel's. A symbolic operand is [`Error::DynamicDims`], so a model with
/// symbolic sizes is imported again at concrete ones (a kernel is compiled at its own sizes).
pub fn call(cx: &mut Cx<'_>, kernel: &Arc<Kernel>, op: &str, operands: &[ValueId]) -> Result<Imported> {
    let bad = |cx: &Cx<'_>, message: String| Error::BadArguments {
        at: cx.site.location(cx.site.span),
        op: op.to_string(),
        node: cx.site.node.clone(),
        message,
    };
    if operands.len() != kernel.inputs.len() {
        let message = format!(
            "kernel `{}` takes {} tensors, the call passes {}",
            kernel.name,
            kernel.inputs.len(),
            operands.len()
        );
        return Err(bad(cx, message));
    }
    for (index, (&operand, expected)) in operands.iter().zip(&kernel.inputs).enumerate() {
        let found = cx.b.ty(operand).clone();
        if !found.shape.is_static() {
            return Err(Error::DynamicDims {
                at: cx.site.location(cx.site.span),
                message: format!(
                    "kernel `{}` takes static types, and argument {index} of `{}` is {found}",
                    kernel.name, cx.site.node
                ),
            });
        }
        if &found != expected {
            let message = format!("argument {index} is {found}, but kernel `{}` takes {expected}", kernel.name);
            return Err(bad(cx, message));
        }
    }
    let results = cx.b.kernel(kernel.clone(), operands).map_err(|error| bad(cx, error.to_string()))?;
    Ok(match results.as_slice() {
        [single] => Imported::Tensor(*single),
        several => Imported::Tuple(several.iter().map(|&value| Imported::Tensor(value)).collect()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttpu_ir::{DType, KernelBody, Shape, TensorType};

    fn kernel(name: &str) -> Arc<Kernel> {
        let ty = TensorType::new(DType::F32, Shape::from_static(&[2]));
        Arc::new(Kernel { name: name.into(), inputs: vec![ty.clone()], results: vec![ty], body: KernelBody::Host })
    }

    #[test]
    fn names_are_checked_and_taken_once() {
        let mut kernels = Kernels::new();
        kernels.insert(kernel("mylib::foo")).unwrap();
        assert_eq!(
            kernels.insert(kernel("mylib::foo")).unwrap_err().to_string(),
            "kernel `mylib::foo` is registered twice"
        );
        for bad in ["foo", "mylib::", "::foo", "my lib::foo", "mylib::foo.default", "1lib::foo"] {
            assert_eq!(
                kernels.insert(kernel(bad)).unwrap_err().to_string(),
                format!("kernel name `{bad}` is not `namespace::name` (as `torch.library` names ops)")
            );
        }
        assert!(kernels.for_overload("mylib.foo.default").is_some());
        assert!(kernels.for_overload("torch.ops.mylib.foo.default").is_some());
        assert!(kernels.for_overload("mylib.foo.Tensor").is_none());
        assert!(kernels.for_overload("mylib.bar.default").is_none());
    }
}
