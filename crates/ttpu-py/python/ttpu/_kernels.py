"""User kernels: the implementation of a PyTorch custom op as a StableHLO module.

``ttpu.register_kernel("mylib::foo", implementation)`` gives every model ttpu loads or lowers from
then on (``ttpu.load``, ``ttpu.lower``, ``torch.compile(backend="ttpu")``), and the ``"ttpu"``
device, a kernel for the op ``torch.ops.mylib.foo.default``: its calls on ttpu tensors run the
kernel, recorded and fused with the calls around them. The implementation is

- StableHLO text (an MLIR module whose public ``@main`` takes the op's tensors and returns its
  results); ttpu reads StableHLO in MLIR's generic op form, and text in the readable form is
  converted with JAX's MLIR bindings when JAX is installed;
- what ``jax.export`` gives: an ``Exported``, or its serialized bytes (read back with JAX);
- a JAX function and example arguments (arrays, tensors or ``jax.ShapeDtypeStruct``s of the
  op's operands), exported here with ``jax.export`` for the CPU (or ``platform=``).

The module is checked when registered (it must parse and have a usable ``@main``) and each call
when a model is imported or the device records it (its arity and types against ``@main``'s),
before anything compiles.
"""

from __future__ import annotations

from . import _ttpu


def register_kernel(name: str, implementation, *example_args, platform: str = "cpu") -> None:
    """Registers ``implementation`` as the kernel of the custom op ``name`` (``"mylib::foo"``)."""
    _ttpu.register_kernel(name, stablehlo_text(implementation, example_args, platform))


def registered_kernels() -> list[str]:
    """The names of the registered kernels, in registration order."""
    return list(_ttpu.registered_kernels())


def stablehlo_text(implementation, example_args=(), platform: str = "cpu") -> str:
    """The generic-form StableHLO text of ``implementation`` (see the module docs)."""
    if isinstance(implementation, str):
        return _generic(implementation) if _needs_conversion(implementation) else implementation
    import jax

    if isinstance(implementation, (bytes, bytearray, memoryview)):
        implementation = jax.export.deserialize(bytearray(implementation))
    if callable(implementation) and not isinstance(implementation, jax.export.Exported):
        if not example_args:
            raise TypeError("a JAX function needs example arguments (the op's operands, or their shapes)")
        shapes = [_shape_of(arg) for arg in example_args]
        implementation = jax.export.export(jax.jit(implementation), platforms=[platform])(*shapes)
    if isinstance(implementation, jax.export.Exported):
        return _generic(implementation.mlir_module())
    raise TypeError(
        f"expected StableHLO text, a jax.export.Exported, its bytes or a JAX function, "
        f"found {type(implementation).__name__}"
    )


def _needs_conversion(text: str) -> bool:
    """Whether ``text`` writes StableHLO ops in their readable form (``stablehlo.add %a, %b``)."""
    return "= stablehlo." in text or "\n    stablehlo." in text


def _generic(text: str) -> str:
    """``text`` printed in generic op form, without locations, by JAX's MLIR bindings."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir
    except ImportError:  # without JAX the text goes as it is; ttpu says if it does not parse
        return text
    with mlir.make_ir_context() as context:
        module = ir.Module.parse(text, context=context)
        return module.operation.get_asm(print_generic_op_form=True, enable_debug_info=False)


def _shape_of(arg):
    """A ``jax.ShapeDtypeStruct`` of an example argument (a JAX or NumPy array, a tensor, or a
    shape already)."""
    import jax

    if isinstance(arg, jax.ShapeDtypeStruct):
        return arg
    dtype = arg.dtype
    if type(dtype).__module__.startswith("torch"):
        import jax.numpy as jnp
        import torch

        by_torch = {
            torch.float32: jnp.float32, torch.float64: jnp.float64, torch.float16: jnp.float16,
            torch.bfloat16: jnp.bfloat16, torch.int64: jnp.int64, torch.int32: jnp.int32,
            torch.int16: jnp.int16, torch.int8: jnp.int8, torch.uint8: jnp.uint8, torch.bool: jnp.bool_,
        }
        if dtype not in by_torch:
            raise TypeError(f"no JAX dtype for {dtype}")
        dtype = by_torch[dtype]
    return jax.ShapeDtypeStruct(tuple(arg.shape), dtype)
