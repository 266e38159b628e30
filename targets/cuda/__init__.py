"""The cuda target's own parts: its default schedule rules (dlight's, made to decline what
they cannot analyse), this machine's CUDA devices, and, in targets.cuda.kernels, the check
that every kernel of a GPU build is scheduled (a kernel binding no GPU thread cannot run).
Asking for the devices loads no compiler; the rules load it when first used."""

from typing import TYPE_CHECKING

from toolchain import compiling_attributes

from .devices import CudaDevice, CudaUnavailable, cuda_devices

if TYPE_CHECKING:  # the names below, for editors and type checkers (tests/test_rules.py)
    from .rules import Declining, gpu_rules

__getattr__ = compiling_attributes(__name__, {"Declining": ".rules", "gpu_rules": ".rules"})

__all__ = ["CudaDevice", "CudaUnavailable", "Declining", "cuda_devices", "gpu_rules"]
