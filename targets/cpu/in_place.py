"""Kernels that write their result over an operand dying with them: a residual block's sum
(a convolution, its bias and the block's input, whose last reader it is).

Written to a buffer of its own, such a result costs the kernel a third stream through memory
(the result's lines read in before they are written), as onnxruntime's fused Sum avoids. The
call becomes TVM's call_tir_inplace; its kernel, ``<name>_inplace``, is the scheduled kernel
with its output buffer bound to the operand's (PrimFunc.specialize). A call writes over an
operand only where nothing can tell (``overwritable`` and ``_plan`` say when).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import relax

from ..relax_rewrites import called_kernels, op_name, rewrite_functions, without_uncalled

SUFFIX = "_inplace"

_MAKERS = ("relax.call_tir", "relax.call_tir_inplace", "relax.call_dps_packed")
_READERS = ("relax.call_tir", "relax.call_dps_packed")


def _nodes(node, kind) -> list:
    """The nodes of type ``kind`` under ``node`` (a statement, an expression or a block)."""
    found = []
    tvm_ffi.structural_walk(node, (kind, found.append), order="post")
    return found


def _same(a, b) -> bool:
    return tvm_ffi.structural_equal(a, b)


def _reached_otherwise(func: tvm.tirx.PrimFunc) -> list:
    """The buffers ``func`` reaches otherwise than by loads and stores: given to a call (their
    data pointer, an access pointer, an extern), their address taken, or matched by a block
    to a region."""
    buffers = []
    for call in _nodes(func.body, tvm.ir.expr.Call):
        if isinstance(call, tvm.ir.expr.TensorLoad):
            continue
        for arg in call.args:
            if isinstance(arg, tvm.tirx.Var):
                buffers.append(arg)
            elif isinstance(arg, tvm.ir.expr.TensorLoad) and op_name(call) == "tirx.address_of":
                buffers.append(arg.source)
    for block in _nodes(func.body, tvm.s_tir.SBlock):
        buffers.extend(m.source.source for m in block.match_buffers)
    return buffers


def _written_once(func: tvm.tirx.PrimFunc, store: tvm.tirx.BufferStore) -> bool:
    """Whether ``store`` lies in a block of spatial iterators and indexes by distinct ones of
    them (or constants): each element it writes is written once."""
    block = next((b for b in _nodes(func.body, tvm.s_tir.SBlock)
                  if any(s.same_as(store) for s in _nodes(b.body, tvm.tirx.BufferStore))),
                 None)
    if block is None or any(iv.iter_type != tvm.tirx.IterVar.DataPar for iv in block.iter_vars):
        return False
    positions = []
    for index in store.indices:
        if isinstance(index, tvm.tirx.IntImm):
            continue
        position = next((n for n, iv in enumerate(block.iter_vars) if index.same_as(iv.var)),
                        None)
        if position is None or position in positions:
            return False
        positions.append(position)
    return True


def overwritable(func: tvm.tirx.PrimFunc, operands: int) -> list[int]:
    """The operands (indices among the first ``operands`` parameters) that ``func`` may write
    its one output over (see the module's docstring)."""
    params = list(func.params)
    if len(params) != operands + 1:
        return []
    out = params[-1]
    stores = _nodes(func.body, tvm.tirx.BufferStore)
    out_stores = [s for s in stores if s.buffer.same_as(out)]
    if len(out_stores) != 1 or not _written_once(func, out_stores[0]):
        return []
    store = out_stores[0]
    loads = _nodes(func.body, tvm.ir.expr.TensorLoad)
    reached = _reached_otherwise(func)
    if any(load.source.same_as(out) for load in loads) or any(b.same_as(out) for b in reached):
        return []
    in_store = _nodes(store.value, tvm.ir.expr.TensorLoad)
    fits = []
    for index, r in enumerate(params[:operands]):
        if (str(r.dtype) != str(out.dtype) or not _same(list(r.shape), list(out.shape))
                or not _same(list(r.strides), list(out.strides))
                or any(b.same_as(r) for b in reached)
                or any(s.buffer.same_as(r) for s in stores)):
            continue
        reads = [load for load in loads if load.source.same_as(r)]
        inside = [load for load in in_store if load.source.same_as(r)]
        if reads and len(reads) == len(inside) and all(
                _same(list(load.indices), list(store.indices)) for load in inside):
            fits.append(index)
    return fits


def _operands(call: relax.Call) -> list:
    args = call.args[1]
    return list(args.fields) if isinstance(args, relax.Tuple) else [args]


def _kernel_call(value, mod: tvm.IRModule) -> bool:
    """Whether ``value`` calls a kernel of ``mod`` for one new tensor (no shape variables)."""
    return (op_name(value) == "relax.call_tir" and len(value.args) == 2
            and isinstance(mod[value.args[0]], tvm.tirx.PrimFunc)
            and isinstance(value.ty, relax.TensorType))


def _values(bindings: list) -> dict:
    """Variable -> the variable first naming its value: FuseTIR leaves bindings of one
    variable to another (``lv = lv1``), each a second name of the same tensor."""
    first = {}
    for binding in bindings:
        if isinstance(binding.value, relax.Var):
            first[binding.var] = first.get(binding.value, binding.value)
    return first


def _uses(bindings: list, first: dict) -> dict:
    """Value (its first variable) -> (position, whether the binding there only reads it: an
    operand of a call returning new tensors) for each binding of ``bindings`` that mentions
    it by any name, but the bindings naming it again."""
    uses = {}
    for position, binding in enumerate(bindings):
        value = binding.value
        if isinstance(value, relax.Var):
            continue
        read = ([a for a in _operands(value) if isinstance(a, relax.Var)]
                if op_name(value) in _READERS else [])
        for var in relax.analysis.free_vars(value):
            uses.setdefault(first.get(var, var), []).append(
                (position, any(r.same_as(var) for r in read)))
    return uses


def _plan(block: relax.DataflowBlock, mod: tvm.IRModule) -> list:
    """(call, operand index) for each kernel call of ``block`` that may write its result over
    a dying operand (the first such operand): one the block made by a kernel or an extern,
    named only by dataflow variables (none outside the block), read before only by calls
    that return new tensors, by none after."""
    bindings = list(block.bindings)
    first = _values(bindings)
    made = {b.var for b in bindings if op_name(b.value) in _MAKERS}
    for var, value in first.items():
        if not isinstance(var, relax.DataflowVar):
            made.discard(value)  # the block gives the value out
    uses = _uses(bindings, first)
    plan = []
    for position, binding in enumerate(bindings):
        value = binding.value
        if not (isinstance(binding, relax.VarBinding) and _kernel_call(value, mod)):
            continue
        operands = _operands(value)
        for index in overwritable(mod[value.args[0]], len(operands)):
            r = first.get(operands[index], operands[index])
            if (r in made and isinstance(r, relax.DataflowVar)
                    and sum(1 for o in operands if first.get(o, o).same_as(r)) == 1
                    and all(n <= position and read for n, read in uses[r])):
                plan.append((value, index))
                break
    return plan


@relax.expr_functor.mutator
class _InPlace(relax.expr_functor.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, func: relax.Function):
        super().__init__(mod)
        self.plan = [step for block in func.body.blocks if isinstance(block, relax.DataflowBlock)
                     for step in _plan(block, mod)]
        self.kernels = {}  # (kernel name, operand index) -> its in-place kernel's global var

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        index = next((i for c, i in self.plan if c.same_as(call)), None)
        if index is None:
            return super().visit_call_(call)
        kernel = call.args[0]
        key = (kernel.name_hint, index)
        if key not in self.kernels:
            func = self.builder_.get()[kernel]
            params = list(func.params)
            self.kernels[key] = self.builder_.add_func(
                func.specialize({params[-1]: params[index]}), kernel.name_hint + SUFFIX)
        return relax.call_tir_inplace(self.kernels[key], call.args[1], index, call.ty)


@tvm.transform.module_pass(opt_level=0, name="ResidualsInPlace")
def residuals_in_place(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Each kernel call of the module's dataflow blocks that may write its result over an
    operand dying with it (see the module's docstring) made so; the kernels no call is left
    to dropped. Reshapes must be views by now (RewriteDataflowReshape): a reshaping kernel's
    new tensor would share its input's memory after."""
    return without_uncalled(rewrite_functions(mod, _InPlace), called_kernels(mod))
