"""The cuda target's own parts: its default schedule rules (dlight's, made to decline what
they cannot analyse), this machine's CUDA devices, and, in targets.cuda.kernels, the check
that every kernel of a GPU build is scheduled (a kernel binding no GPU thread cannot run)."""

from .devices import CudaDevice, CudaUnavailable, cuda_devices
from .rules import Declining, gpu_rules

__all__ = ["CudaDevice", "CudaUnavailable", "Declining", "cuda_devices", "gpu_rules"]
