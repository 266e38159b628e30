"""The cuda target's own parts: the check that every kernel of a GPU build is scheduled (a
kernel binding no GPU thread cannot run there), and the CUDA devices of this machine."""

from .devices import CudaDevice, CudaUnavailable, cuda_devices
from .kernels import default_gpu_kernels, thread_bound, unscheduled_kernels

__all__ = ["CudaDevice", "CudaUnavailable", "cuda_devices", "default_gpu_kernels",
           "thread_bound", "unscheduled_kernels"]
