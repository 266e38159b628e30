"""Which graph bindings each kernel of a compiled module computes, recorded as the passes run,
and which kernels took their schedule from tuning records."""

from __future__ import annotations

import tvm
from tvm import relax


@tvm.ir.instrument.pass_instrument
class KernelRecorder:
    """Records, once ops are lowered (and again once kernels are fused), which graph bindings
    each kernel computes: the VM calls a kernel once per binding, in binding order, which maps
    calls to values. A fused kernel is recorded as computing the binding its last op had
    before FuseOps renamed it. Also records which kernels took their schedule from a tuning
    database."""

    def __init__(self):
        self.kernels: dict[str, list[str]] = {}
        self.tuned: list[str] = []
        self._unscheduled: set[str] = set()
        self._calls: dict[tuple, str] = {}  # (kernel, operand names) -> binding, before FuseOps
        self._fused: dict[str, str] = {}  # binding of a fused call -> the binding it replaced
        self._called: list[str] = []  # the kernel of each call, in order, before ResidualsInPlace

    def run_before_pass(self, mod, info):
        if info.name == "MetaScheduleApplyDatabase":
            self._unscheduled = set(kernel_names(mod, scheduled=False))
        if info.name == "FuseOps":
            self._calls = {_call_key(value): var.name for var, value in kernel_calls(mod["main"])}
        if info.name == "ResidualsInPlace":
            self._called = [value.args[0].name_hint for _, value in kernel_calls(mod["main"])]

    def run_after_pass(self, mod, info):
        if info.name == "MetaScheduleApplyDatabase":
            self.tuned = sorted(self._unscheduled & set(kernel_names(mod, scheduled=True)))
        if info.name == "FuseOps":
            self._fused = self._fused_outputs(mod)
        if info.name == "SplitLayoutRewritePreproc":
            self._follow_prepacked(mod)
        if info.name == "ResidualsInPlace":
            self._follow_in_place(mod)
        if info.name not in ("LegalizeOps", "FuseTIR"):
            return
        self.kernels = {}
        for var, value in kernel_calls(mod["main"]):
            self.kernels.setdefault(value.args[0].name_hint, []).append(
                self._fused.get(var.name, var.name))

    def _follow_in_place(self, mod) -> None:
        """A call made to write over its operand calls ``<name>_inplace`` (targets.cpu.in_place):
        same value, in the same place among the calls, under a new name."""
        called = [value.args[0].name_hint for _, value in kernel_calls(mod["main"])]
        remaining = {name: iter(bindings) for name, bindings in self.kernels.items()}
        kernels: dict[str, list[str]] = {}
        for before, after in zip(self._called, called):
            if before in remaining:
                kernels.setdefault(after, []).append(next(remaining[before]))
        for name, rest in remaining.items():  # kernels no call names (reshapes made views)
            kernels.setdefault(name, []).extend(rest)
        self.kernels = {name: bindings for name, bindings in kernels.items() if bindings}

    def _follow_prepacked(self, mod) -> None:
        """A kernel whose schedule reads its weights in another layout becomes ``<name>_prepacked``
        (its weights' ``<name>_weight_prepack`` is folded away at compile time): same calls,
        same values, new name."""
        names = {g.name_hint for g in mod.get_global_vars()}
        renamed = {k: f"{k}_prepacked" for k in names if f"{k}_prepacked" in names}
        self.kernels = {renamed.get(k, k): v for k, v in self.kernels.items()}
        self.tuned = sorted(renamed.get(k, k) for k in self.tuned)

    def _fused_outputs(self, mod) -> dict[str, str]:
        """For each call of a fused function in ``main``, the binding name its last kernel
        call had before fusion, found by that call's kernel and operands (the fused
        function's parameters stand for the call's arguments)."""
        outputs = {}
        for block in mod["main"].body.blocks:
            for binding in block.bindings:
                value = binding.value
                if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar)):
                    continue
                fused = mod[value.op]
                if not (fused.attrs and fused.attrs.get("Primitive", False)):
                    continue
                outer = {p.name: _operand_name(a) for p, a in zip(fused.params, value.args)}
                last = kernel_calls(fused)[-1][1]
                original = self._calls.get(_call_key(last, outer))
                if original is not None:
                    outputs[binding.var.name] = original
        return outputs


def kernel_calls(func: relax.Function) -> list[tuple[relax.Var, relax.Call]]:
    """The call_tir (and call_tir_inplace) bindings of ``func``, in order."""
    return [(b.var, b.value) for block in func.body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and isinstance(b.value.op, tvm.ir.Op)
            and b.value.op.name in ("relax.call_tir", "relax.call_tir_inplace")]


def _operand_name(expr) -> str:
    return expr.name if isinstance(expr, relax.Var) else "<constant>"


def _call_key(call: relax.Call, renamed: dict[str, str] | None = None) -> tuple:
    operands = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else [call.args[1]]
    names = [_operand_name(a) for a in operands]
    return (call.args[0].name_hint, *(renamed.get(n, n) if renamed else n for n in names))


def kernel_names(mod: tvm.IRModule, scheduled: bool) -> list[str]:
    """Names of the module's kernels that are (or are not yet) scheduled."""
    return [gv.name_hint for gv, func in mod.functions.items()
            if isinstance(func, tvm.tirx.PrimFunc)
            and bool(func.attrs and func.attrs.get("tirx.is_scheduled", False)) == scheduled]
