"""Partitioning a module for a vendor plugin (TVM's BYOC passes): what the plugin takes is
compiled by its codegen, the rest stays with TVM."""

from __future__ import annotations

import logging
from collections.abc import Mapping

import tvm
from tvm import relax
from tvm.relax import dpl
from tvm.relax.dpl import DFPattern

from toolchain import relax_ir

from ..cpu.layouts import fold_constant_layouts
from . import PRECISION_ATTR, PRECISION_ITEM, PREPARED_ITEMS_ATTR, VendorPlugin

log = logging.getLogger(__name__)


def partition(mod: tvm.IRModule, plugin: VendorPlugin, items: Mapping[str, object] | None = None,
              may_decline: bool = False) -> tvm.IRModule:
    """``mod`` with what ``plugin`` takes compiled by its codegen (kept in the module's
    external_mods, called with call_dps_packed) and the rest left for TVM. ``items``: the
    computation's items named "<plugin>.<item>" (others are ignored). ``may_decline``: the
    plugin may leave the graph to TVM whole (VendorPlugin.declines)."""
    plugin.check_available()
    whole = mod
    unpartitionable = _unpartitionable(mod)
    if unpartitionable is not None:
        log.info("the %s plugin leaves this graph to TVM: it has %s", plugin.name, unpartitionable)
        return mod
    declined = plugin.declines(mod) if may_decline else None
    if declined is not None:
        log.info("the %s plugin leaves this graph to TVM: %s", plugin.name, declined)
        return mod
    mine = {k: v for k, v in (items or {}).items() if k.startswith(f"{plugin.name}.")}
    if PRECISION_ATTR in mod.attrs:
        mine[PRECISION_ITEM] = str(mod.attrs[PRECISION_ATTR])
    # RunCodegen finds the codegen by this global name; registering here (not at import) keeps
    # the newest definition of a plugin of that name, as a re-registered plugin expects.
    tvm.register_global_func(
        f"relax.ext.{plugin.name}",
        lambda functions, _options, _constants: plugin.codegen(list(functions), mine),
        override=True)
    if plugin.prepare is not None:
        mod = plugin.prepare(mod, mine)
        if PREPARED_ITEMS_ATTR in mod.attrs:
            mine.update({str(k): str(v) for k, v in mod.attrs[PREPARED_ITEMS_ATTR].items()})
            mod = mod.without_attr(PREPARED_ITEMS_ATTR)
    # Only patterns that can match here: FuseOpsByPattern walks the whole graph once per
    # pattern, found or not.
    present = frozenset().union(*(relax_ir.op_names(f) for f in mod.functions.values()
                                  if isinstance(f, relax.Function)))
    patterns = [p for p in plugin.patterns(mine) if _required_ops(p.pattern) <= present]
    # Those that take a constant's transpose as it is come first: folded, a transposed weight
    # is a copy held beside the original until compiling ends.
    early = [p.fusion_pattern() for p in patterns if p.before_folding]
    if early:
        mod = relax.transform.FuseOpsByPattern(early, bind_constants=False)(mod)
    # Then folded, so that weights and biases computed from constants (a reshape of a bias,
    # a batch norm's factors) reach the patterns as the constants they are; reshapes and
    # transposes first with NumPy (FoldConstant builds a kernel for each).
    mod = relax.transform.FoldConstant()(fold_constant_layouts(mod))
    mod = relax.transform.FuseOpsByPattern([p.fusion_pattern() for p in patterns],
                                           bind_constants=False)(mod)
    mod = _merged(_host_calls_in_functions(mod))
    if mod is None:
        log.info("the %s plugin leaves this graph to TVM: merging its matches into regions "
                 "ordered a value after its use", plugin.name)
        return whole
    return relax.transform.RunCodegen()(mod)


def _merged(mod: tvm.IRModule) -> tvm.IRModule | None:
    """``mod`` with its matches merged into regions (MergeCompositeFunctions), or None where
    TVM merged two matches that a TVM op between them links (one's result feeds the op, whose
    result feeds the other): the region would use the op's result before computing its
    input, and the merge fails or leaves a graph that does (onnx's GridSample cases: "Var lv
    is not defined", "Variable sub_46_36 was used before its definition")."""
    try:
        merged = relax.transform.MergeCompositeFunctions()(mod)
    except tvm.error.InternalError:  # the merge's own use-before-definition check
        return None
    try:  # TVM 0.27 raises what it finds malformed (and answers None where it finds nothing)
        relax.analysis.well_formed(relax.transform.Normalize()(merged))
    except (TypeError, ValueError):
        return None
    return merged


def _required_ops(pattern: DFPattern) -> frozenset[str]:
    """Names of the ops that every match of ``pattern`` calls (of alternatives, those both
    call): a graph that calls none of one of them holds no match."""
    known: dict[DFPattern, frozenset[str]] = {}  # patterns share parts: each part once

    def required(part: DFPattern) -> frozenset[str]:
        if part not in known:
            known[part] = _required_by(part, required)
        return known[part]

    return required(pattern)


def _required_by(part: DFPattern, required) -> frozenset[str]:
    if isinstance(part, dpl.CallPattern):
        op = part.op.expr if isinstance(part.op, dpl.ExprPattern) else None
        return frozenset({op.name} if isinstance(op, tvm.ir.Op) else ()).union(
            *(required(a) for a in part.args or []))
    if isinstance(part, dpl.OrPattern):
        return required(part.left) & required(part.right)
    if isinstance(part, dpl.AndPattern):
        return required(part.left) | required(part.right)
    if isinstance(part, (dpl.TuplePattern, dpl.UnorderedTuplePattern)):
        return frozenset().union(*(required(f) for f in part.fields))
    if isinstance(part, dpl.TupleGetItemPattern):
        return required(part.tuple)
    inner = getattr(part, "pattern", None)  # a constraint (attributes, shape, dtype) on one
    return required(inner) if isinstance(inner, DFPattern) else frozenset()


def _host_calls_in_functions(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with each pure host call of main (call_pure_packed, as a bounds check makes)
    moved into a function of its own that main calls: MergeCompositeFunctions cannot visit
    the external function such a call names."""
    builder = relax.BlockBuilder(mod)
    hide = _HostCallsHidden(builder.get(), builder)
    main = builder.get().get_global_var("main")
    builder.update_func(main, hide.visit_expr(builder.get()[main]))
    return builder.get()


# At module level: a mutator class made inside a function was never freed (TVM's derived-object
# machinery keeps it), nor what its methods' closure held: the module, every weight of it, one
# more model's worth with each compile.
@relax.expr_functor.mutator
class _HostCallsHidden(relax.PyExprMutator):
    def __init__(self, mod: tvm.IRModule, builder: relax.BlockBuilder):
        super().__init__(mod)
        self.builder = builder

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if getattr(call.op, "name", "") != "relax.call_pure_packed":
            return call
        # Tensors become the function's parameters; strings and numbers stay in it.
        tensors = [a for a in call.args[1:] if isinstance(a, relax.Var)]
        params = {a: relax.Var(f"arg{i}", a.ty) for i, a in enumerate(tensors)}
        body = relax.Call(call.op, [params.get(a, a) for a in call.args], call.attrs,
                          call.ty_args)
        function = relax.Function(list(params.values()), body, call.ty_args[0], is_pure=True)
        callee = self.builder.add_func(function, "host_call")
        return relax.Call(callee, tensors)


def _unpartitionable(mod: tvm.IRModule) -> str | None:
    """What in ``mod`` TVM's partitioning passes (FuseOpsByPattern, MergeCompositeFunctions)
    cannot group, or None: branches and loops, symbolic shapes, calls of external functions
    (custom ops; a pure host call between kernels, as a bounds check makes, is fine), more
    than one function of graph code (training steps, loop bodies)."""
    graphs = [gv.name_hint for gv, f in mod.functions.items() if isinstance(f, relax.Function)]
    if graphs != ["main"]:
        return f"graph functions {graphs}"
    found = []

    def visit(expr):
        if isinstance(expr, relax.If):
            found.append("a branch")
        elif isinstance(expr, relax.MatchCast):
            found.append("a run-time shape")
        elif isinstance(expr, relax.Call) and (
                isinstance(expr.op, relax.ExternFunc)
                or getattr(expr.op, "name", "") == "relax.call_dps_packed"):
            found.append("an external function call")

    relax.analysis.post_order_visit(mod["main"], visit)
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.MatchCast):
                found.append("a run-time shape")
    if any(isinstance(p.ty, relax.TensorType) and p.ty.shape is not None
           and not all(isinstance(d, int) or hasattr(d, "value") for d in p.ty.shape.values)
           for p in mod["main"].params):
        found.append("a symbolic input shape")
    return found[0] if found else None


def offloaded_regions(mod: tvm.IRModule) -> list[str]:
    """The external functions ``main`` calls with call_dps_packed (vendor regions RunCodegen
    made, custom ops' C functions), in call order."""
    names: list[str] = []

    def visit(expr):
        if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and \
                expr.op.name == "relax.call_dps_packed" and isinstance(expr.args[0], relax.ExternFunc):
            names.append(str(expr.args[0].global_symbol))

    if mod.attrs is not None and "external_mods" in mod.attrs:
        relax.analysis.post_order_visit(mod["main"], visit)
    return names
