"""Running a computation: ``odla_ExecuteComputation`` (odla_compute.h), which compiles and
launches it (odla_tvm.executable) or, in TRAINING mode, runs a training step
(odla_tvm.training); it lives above both so that neither calls up to the other."""

from __future__ import annotations

from .computation import Computation, _computation
from .context import Context
from .device import Device, checked_device
from .executable import compile_computation
from .types import ComputeMode, odla_enum


def execute_computation(computation: Computation, context: Context,
                        mode: ComputeMode = ComputeMode.DEFAULT, device: Device | None = None) -> None:
    """Runs a computation, compiling it on first use for this device and caching the result;
    in TRAINING mode runs one training step (odla_tvm.training)."""
    comp = _computation(computation)
    mode = odla_enum(ComputeMode, mode, "compute mode")
    if mode is ComputeMode.TRAINING:
        from .training import training_step  # imported by a program that trains only

        training_step(comp, context, device)
        return
    device = checked_device(device)
    key = (device.key, comp.revision)
    with comp.compile_lock:  # concurrent first runs compile once
        if key not in comp.executables:
            comp.executables = {k: v for k, v in comp.executables.items() if k[1] == comp.revision}
            comp.executables[key] = compile_computation(comp, device)
        executable = comp.executables[key]
    executable.launch(context)


# The object form of these calls: one implementation behind both (docs/architecture.md), set
# here because computation.py lies below compiling and cannot import it.
Computation.compile = compile_computation
Computation.execute = execute_computation
