"""Tensors to and from the native module's form: `(raw bytes, IR dtype name, shape)`.

Bytes rather than NumPy arrays cross the boundary so that every dtype PyTorch has and the IR
knows (bfloat16 and complex included) goes through the same path.
"""

from __future__ import annotations

from typing import Any

from ._ttpu import TtpuError

# The IR's dtype names (`ttpu_ir::DType::name`) by NumPy dtype name; PyTorch's are added lazily.
_NUMPY_TO_IR = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "bool",
    "complex64": "c64",
    "complex128": "c128",
}
_IR_TO_NUMPY = {ir: name for name, ir in _NUMPY_TO_IR.items()}

_torch_maps: tuple[dict, dict] | None = None


def _torch_dtypes() -> tuple[dict, dict]:
    global _torch_maps
    if _torch_maps is None:
        import torch

        to_ir = {
            torch.float64: "f64",
            torch.float32: "f32",
            torch.float16: "f16",
            torch.bfloat16: "bf16",
            torch.int64: "i64",
            torch.int32: "i32",
            torch.int16: "i16",
            torch.int8: "i8",
            torch.uint8: "u8",
            torch.uint16: "u16",
            torch.uint32: "u32",
            torch.uint64: "u64",
            torch.bool: "bool",
            torch.complex32: "c32",
            torch.complex64: "c64",
            torch.complex128: "c128",
        }
        _torch_maps = (to_ir, {ir: dtype for dtype, ir in to_ir.items()})
    return _torch_maps


def is_torch_tensor(value: Any) -> bool:
    torch = _torch_module()
    return torch is not None and isinstance(value, torch.Tensor)


def is_numpy_array(value: Any) -> bool:
    import numpy as np

    return isinstance(value, np.ndarray)


def _torch_module():
    import sys

    # Only look at PyTorch if the program already uses it: NumPy users never pay its import.
    return sys.modules.get("torch")


def to_wire(name: str, value: Any) -> tuple[Any, str, list[int]]:
    """`value` (a `torch.Tensor` or NumPy array) as `(uint8 buffer, dtype, shape)`."""
    if is_torch_tensor(value):
        import torch

        to_ir, _ = _torch_dtypes()
        dtype = to_ir.get(value.dtype)
        if dtype is None:
            raise TtpuError(f"tensor `{name}`: dtype {value.dtype} has no ttpu dtype")
        tensor = value.detach()
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        if tensor.is_conj():
            tensor = tensor.resolve_conj()
        if tensor.is_neg():
            tensor = tensor.resolve_neg()
        shape = list(tensor.shape)
        flat = tensor.contiguous().reshape(-1)
        return flat.view(torch.uint8).numpy(), dtype, shape
    if is_numpy_array(value):
        import numpy as np

        dtype = _NUMPY_TO_IR.get(value.dtype.name)
        if dtype is None:
            raise TtpuError(f"array `{name}`: dtype {value.dtype} has no ttpu dtype")
        array = np.ascontiguousarray(value)
        if not array.dtype.isnative:
            array = array.astype(array.dtype.newbyteorder("="))
        return array.reshape(-1).view(np.uint8), dtype, list(array.shape)
    raise TtpuError(f"input `{name}`: expected a torch.Tensor or numpy.ndarray, found {type(value).__name__}")


def to_torch(wire: tuple[bytearray, str, list[int]], device: Any = None):
    """The tensor a native result describes (sharing its bytes), on `device` if given."""
    import torch

    data, dtype, shape = wire
    _, from_ir = _torch_dtypes()
    torch_dtype = from_ir[dtype]
    if len(data) == 0:
        tensor = torch.empty(shape, dtype=torch_dtype)
    else:
        tensor = torch.frombuffer(data, dtype=torch.uint8).view(torch_dtype).reshape(shape)
    if device is not None and tensor.device != torch.device(device):
        tensor = tensor.to(device)
    return tensor


def to_numpy(wire: tuple[bytearray, str, list[int]]):
    """The NumPy array a native result describes (sharing its bytes)."""
    import numpy as np

    data, dtype, shape = wire
    name = _IR_TO_NUMPY.get(dtype)
    if name is None:
        raise TtpuError(f"a {dtype} result has no NumPy dtype: pass torch tensors to get it")
    return np.frombuffer(data, dtype=name).reshape(shape)
