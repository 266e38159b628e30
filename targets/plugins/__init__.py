"""Vendor plugins: a vendor library takes the parts of a graph it matches (TVM's BYOC).

A plugin declares its name and the ODLA device it serves, the patterns it takes (each with a
check on shapes, dtypes and attributes), a codegen that turns the matched functions into a
runtime module, what linking and running that module needs, and the vendor-specific
computation items it understands. Plugins come from the ``odla_tvm.plugins`` entry point
group, so a package outside this repository adds a vendor by declaring::

    [project.entry-points."odla_tvm.plugins"]
    myvendor = "myvendor_odla:PLUGIN"      # a VendorPlugin, or a function returning one

Partitioning is TVM's (FuseOpsByPattern, MergeCompositeFunctions, RunCodegen); what the plugin
does not take stays with TVM's own code generation in the same module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata

import tvm
from tvm import relax
from tvm.relax import dpl
from tvm.relax.dpl import DFPattern

import toolchain
from toolchain import relax_ir

from ..cpu.layouts import fold_constant_layouts

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "odla_tvm.plugins"


class PluginUnavailable(RuntimeError):
    """A plugin cannot build or run here; the message says what to install."""


@dataclass(frozen=True)
class PluginPattern:
    """A subgraph a plugin takes: ``pattern`` (the root is what the composite computes),
    ``annotations`` naming the pattern's parts for ``check``, and ``check``, given TVM's
    PatternCheckContext, saying whether this match (its shapes, dtypes, attributes) is taken."""

    name: str  # "<plugin>.<what>": the composite function's name, which the codegen reads
    pattern: DFPattern
    annotations: Mapping[str, DFPattern] = field(default_factory=dict)
    check: Callable[[relax.transform.PatternCheckContext], bool] | None = None
    # Matched once before the graph's constants fold as well: a pattern that takes a
    # constant's transpose as it is, which folding would copy (see partition).
    before_folding: bool = False

    def fusion_pattern(self) -> relax.transform.FusionPattern:
        return relax.transform.FusionPattern(self.name, self.pattern, dict(self.annotations),
                                             self.check)


def _nothing_needed() -> None:
    return None


def _no_options() -> list[str]:
    return []


@dataclass(frozen=True)
class VendorPlugin:
    """A vendor library behind an ODLA device."""

    name: str  # the codegen's name: composites are "<name>.<what>", the codegen relax.ext.<name>
    device_name: str  # the ODLA DeviceName member it serves, e.g. "INTEL_DNNL"
    description: str
    # The patterns it takes, given the computation's items for this plugin (see ``items``).
    patterns: Callable[[Mapping[str, object]], Sequence[PluginPattern]]
    # The regions RunCodegen gives it (relax Functions holding composite calls; see
    # composite_steps) and the items, to runtime modules that export_library links, e.g.
    # static_library(...).
    codegen: Callable[[list[relax.Function], Mapping[str, object]], list[tvm.runtime.Module]]
    link_options: Callable[[], list[str]] = _no_options  # for export_library: -L, -l, rpath
    check_available: Callable[[], None] = _nothing_needed  # raises PluginUnavailable
    # Vendor-specific computation items it understands, "<name>.<item>" -> what it means and
    # the value it takes; set_computation_item(computation, "<name>.<item>", value) sets them.
    items: Mapping[str, str] = field(default_factory=dict)
    # Checks an item's value: raises ValueError saying what it expects, else returns it.
    check_item: Callable[[str, object], object] = lambda _name, value: value
    # A rewrite of the whole module before partitioning (a layout change, say), given the
    # items as ``patterns`` is, or None.
    prepare: Callable[[tvm.IRModule, Mapping[str, object]], tvm.IRModule] | None = None
    # Why it leaves a whole graph to TVM's own code, which runs that graph faster, or None;
    # asked on targets that let it (TargetSpec.plugins_may_decline).
    declines: Callable[[tvm.IRModule], str | None] = lambda _mod: None
    # How many times TVM's idle pool workers poll for the next kernel in a process running its
    # regions (registry.default_pool_spin), or None for targets.runtime's; set when a module
    # with its regions is built or first run (targets.runtime), before the pool starts.
    pool_spin: int | None = None


_PLUGINS: dict[str, VendorPlugin] = {}
_entry_points_loaded = False
_load_lock = threading.Lock()


def register_plugin(plugin: VendorPlugin) -> VendorPlugin:
    """Makes ``plugin`` available by name (entry points do this for installed packages)."""
    if not isinstance(plugin, VendorPlugin):
        raise TypeError(f"register_plugin expects a targets.VendorPlugin, got {type(plugin).__name__}")
    _PLUGINS[plugin.name] = plugin
    return plugin


def _load_entry_points() -> None:
    global _entry_points_loaded
    with _load_lock:
        if _entry_points_loaded:
            return
        _entry_points_loaded = True
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = entry.load()
                register_plugin(loaded() if callable(loaded) else loaded)
            except Exception as err:  # a broken third-party plugin must not break the others
                log.warning("plugin entry point %s = %s failed to load: %s; it is skipped",
                            entry.name, entry.value, err)


def reload_plugins() -> None:
    """Reads the entry points again (after a package was installed in this process)."""
    global _entry_points_loaded
    _entry_points_loaded = False
    _load_entry_points()


def get_plugin(name: str) -> VendorPlugin:
    _load_entry_points()
    if name not in _PLUGINS:
        raise KeyError(f"unknown vendor plugin {name!r}; available: "
                       f"{', '.join(sorted(_PLUGINS)) or 'none'}")
    return _PLUGINS[name]


def available_plugins() -> list[VendorPlugin]:
    _load_entry_points()
    return [_PLUGINS[n] for n in sorted(_PLUGINS)]


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
    # RunCodegen finds the codegen by this global name; registering here (not at import) keeps
    # the newest definition of a plugin of that name, as a re-registered plugin expects.
    tvm.register_global_func(
        f"relax.ext.{plugin.name}",
        lambda functions, _options, _constants: plugin.codegen(list(functions), mine),
        override=True)
    if plugin.prepare is not None:
        mod = plugin.prepare(mod, mine)
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


def check_item(name: str, value) -> object:
    """``value`` as plugin item ``name`` ("<plugin>.<item>") takes it; KeyError for an item
    no plugin declares, ValueError for a value the plugin refuses (messages say why)."""
    plugin_name = name.split(".", 1)[0]
    plugin = get_plugin(plugin_name)
    if name not in plugin.items:
        raise KeyError(f"the {plugin.name} plugin has no item {name!r}; its items: "
                       f"{', '.join(sorted(plugin.items)) or 'none'}")
    return plugin.check_item(name, value)


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


# ---- what codegens share -----------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One composite call in a region, in the order the region computes them."""

    composite: str  # the pattern's name
    calls: tuple[relax.Call, ...]  # the composite's op calls in order (their .op.name, .attrs)
    inputs: tuple[tuple[str, int], ...]  # ("param", i) of the region or ("step", j) before it
    output: relax.TensorType
    # Per call, where each argument comes from: ("input", k) the step's k-th input, ("call", j)
    # the j-th call's result, ("other", -1) anything else (a constant, a shape); a Tuple
    # argument (concat's) as the tuple of its fields' sources. Patterns match commutative ops
    # either way round, and a composite takes a repeated operand once, so a codegen needs this
    # to tell its operands apart.
    arguments: tuple[tuple[tuple[str, int], ...], ...] = ()


def composite_steps(region: relax.Function) -> tuple[list[Step], list[tuple[str, int]]]:
    """The steps of a region made by MergeCompositeFunctions, and what it returns (operands
    as in Step.inputs). Raises ValueError for a binding that is not a composite call."""
    operands: dict[relax.Var, tuple[str, int]] = {p: ("param", i) for i, p in enumerate(region.params)}
    composites: dict[relax.Var, relax.Function] = {}
    steps: list[Step] = []
    for block in region.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                inner = composites[value.op]
                calls, arguments = _op_calls(inner)
                steps.append(Step(str(inner.attrs["Composite"]), tuple(calls),
                                  tuple(operands[a] for a in value.args), binding.var.ty,
                                  tuple(arguments)))
                operands[binding.var] = ("step", len(steps) - 1)
            elif isinstance(value, relax.Var):
                operands[binding.var] = operands[value]
            else:
                raise ValueError(f"region {region.attrs['global_symbol']}: unexpected binding "
                                 f"{binding.var.name} = {value}")
    body = region.body.body
    results = body.fields if isinstance(body, relax.Tuple) else [body]
    return steps, [operands[r] for r in results]


def _op_calls(composite: relax.Function) -> tuple[list[relax.Call], list[tuple]]:
    """The composite's op calls in order, and per call where its arguments come from."""
    sources: dict[relax.Var, tuple[str, int]] = {p: ("input", i)
                                                 for i, p in enumerate(composite.params)}
    calls, arguments = [], []

    def source(argument):
        if isinstance(argument, relax.Tuple):
            return tuple(source(f) for f in argument.fields)
        return sources.get(argument, ("other", -1))

    for block in composite.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                calls.append(binding.value)
                arguments.append(tuple(source(a) for a in binding.value.args))
                sources[binding.var] = ("call", len(calls) - 1)
    return calls, arguments


def static_library(source: str, function_names: Sequence[str],
                   flags: Sequence[str] = (), headers: Sequence[str] = ()) -> tvm.runtime.Module:
    """A runtime module of the functions ``source`` exports (TVM_FFI_DLL_EXPORT_TYPED_FUNC),
    which export_library links into the model's shared library; ``headers`` as for
    toolchain.compile_object."""
    return tvm.runtime.load_static_library(toolchain.compile_object(source, flags, headers=headers),
                                           list(function_names))
