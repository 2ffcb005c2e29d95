"""``ttpu.distributed``: distributed training on the ttpu device.

Several processes (one per device or host, launched by ``torchrun`` or ``ttpu launch``) use
PyTorch's own APIs: ``dist.init_process_group("ttpu")``, then DDP, FSDP2 ``fully_shard`` or
tensor parallelism, unchanged from CUDA but for the device name (see ``ttpu._distributed``).
"""

from __future__ import annotations

from ._distributed import set_debug

__all__ = ["set_debug"]
