"""compile_module: a Relax module to a CompiledModule for a target, through its passes in
order: vendor plugins' partitions, graph rewrites, fused kernels, schedules (tuning records, then
the target's default rules), constants folded, weights lifted out, lowering and code generation."""

from __future__ import annotations

import logging
import threading

import tvm
import tvm_ffi
from tvm import relax
from tvm.s_tir import dlight as dl

from .. import plugins as vendor_plugins
from ..cpu.amx import amx_products, has_amx, parts_schedules
from ..cpu.conv_rewrites import conv_rewrites
from ..cpu.in_place import SUFFIX as IN_PLACE_SUFFIX, residuals_in_place
from ..cpu.layouts import constant_layouts_folded, layout_passes
from ..cpu.math_rewrites import powers_by_roots
from ..cpu.schedules import default_schedules
from ..cuda.rules import gpu_rules
from ..runtime import ready_to_run_plugins, release_freed_memory
from .built import BuiltModule
from ..specs import TargetSpec
from ..weights import WeightFiles, lift_weights
from . import codegen
from .constant_folding import fold_constants, fold_kernel_calls
from .custom_rules import unknown_schedule_rules_dropped
from .kernel_recorder import KernelRecorder, kernel_calls, kernel_names

log = logging.getLogger(__name__)

# TVM's compiler keeps global state (TE tag scopes among it): one compile at a time.
_compile_lock = threading.Lock()


@tvm.transform.module_pass(opt_level=0, name="MarkLayoutFreeConstants")
def _layout_free_constants(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """Marks the operands that are constants at every call of a kernel as layout-free, so that
    its tuned schedule may read them in another layout, made from the constants when compiling
    (MetaSchedule's RewriteLayout, then SplitLayoutRewritePreproc and FoldConstant). TVM's
    AttachAttrLayoutFreeBuffers does the same but renames every kernel it passes."""
    constant_operands: dict[tvm.ir.GlobalVar, set[int]] = {}
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for _var, call in kernel_calls(func):
            operands = call.args[1].fields if isinstance(call.args[1], relax.Tuple) else []
            constants = {i for i, a in enumerate(operands) if isinstance(a, tvm.ir.expr.Constant)}
            kernel = call.args[0]
            constant_operands[kernel] = constant_operands.get(kernel, constants) & constants
    for kernel, constants in constant_operands.items():
        if constants:
            mod[kernel] = mod[kernel].with_attr("layout_free_buffers", sorted(constants))
    return mod


def _kernel_passes(spec: TargetSpec, weight_files: WeightFiles | None = None) -> list:
    """Ops to fused kernels: the form tuning takes its tasks from and records apply to. Where
    the target prepacks weights, each kernel's constant operands are marked layout-free, so a
    schedule may read them in another layout (MetaSchedule's RewriteLayout). The weights
    folded with NumPy go to ``weight_files`` where given. Schedule-rule annotations that no
    rule of the target serves are dropped (custom_rules)."""
    return [constant_layouts_folded(weight_files), relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            fold_constants, relax.transform.FuseOps(), relax.transform.FuseTIR(),
            unknown_schedule_rules_dropped,
            *([_layout_free_constants] if spec.prepack_weights else [])]


def _partitioned(mod: tvm.IRModule, spec: TargetSpec, plugin_items=None) -> tvm.IRModule:
    """``mod`` with what the target's vendor plugins take compiled by them."""
    for name in spec.plugins:
        mod = vendor_plugins.partition(mod, vendor_plugins.get_plugin(name), plugin_items,
                                       may_decline=spec.plugins_may_decline)
    if vendor_plugins.offloaded_regions(mod):
        ready_to_run_plugins(spec)  # compiling may run kernels, which starts TVM's pool
    return mod


def fused_kernels(mod: tvm.IRModule, spec: TargetSpec, plugin_items=None,
                  weight_files: WeightFiles | None = None) -> tvm.IRModule:
    """``mod`` with its ops lowered to fused kernels (after the target's vendor plugins took
    theirs), exactly as compile_module does before it applies tuning records (so a tuned
    workload matches at compile time); weights it lays out go to ``weight_files``."""
    target = spec.tvm_target()
    cpu_default = "cpu-default" in spec.schedules
    amx = [amx_products(weight_files)] if cpu_default and has_amx(target) else []
    rewrites = conv_rewrites(target, amx) if spec.conv_rewrites else amx
    if cpu_default:
        rewrites.append(powers_by_roots)
    with target:
        return tvm.transform.Sequential(
            layout_passes(spec.layouts) + rewrites + relax.pipeline.library_dispatch_passes(target)
            + _kernel_passes(spec, weight_files) + ([parts_schedules] if amx else [])
        )(_partitioned(mod, spec, plugin_items))


def default_scheduled(kernels: tvm.IRModule, spec: TargetSpec) -> tvm.IRModule:
    """``kernels`` (fused, under ``spec``'s target) with every kernel still unscheduled given
    the target's default rules: dlight's on GPUs, targets.cpu.schedules' on CPUs (none for a
    target with neither). The rules change the module they are given as well."""
    if "dlight" in spec.schedules:
        kernels = dl.ApplyDefaultSchedule(*gpu_rules())(kernels)
    if "cpu-default" in spec.schedules:
        kernels = default_schedules()(kernels)
    return kernels


def _scheduled(mod: tvm.IRModule, spec: TargetSpec, database, plugin_items=None,
               weight_files: WeightFiles | None = None,
               unscheduled: frozenset = frozenset()) -> tvm.IRModule | None:
    """``mod`` as fused kernels scheduled from ``database`` (records tuned for ``spec``), then
    by the target's default rules for every kernel still unscheduled (dlight's on GPUs,
    targets.cpu.schedules' on CPUs) but those named in ``unscheduled``, which keep TVM's
    generic code; None for a target with neither source when no record applies, so the
    module keeps TVM's generic build. The weights laid out for the schedules go to
    ``weight_files`` where given."""
    tuned = database is not None and "database" in spec.schedules and database.tuned_for(mod)
    dlight = "dlight" in spec.schedules
    cpu_rules = "cpu-default" in spec.schedules
    if not (tuned or dlight or cpu_rules):
        return None
    kernels = fused_kernels(mod, spec, plugin_items, weight_files)
    for gv, func in list(kernels.functions_items()):
        if gv.name_hint in unscheduled:  # what the rules skip
            kernels[gv] = func.with_attr("tirx.is_scheduled", True)
    if tuned:
        with database.records(kernels):
            kernels = relax.transform.MetaScheduleApplyDatabase()(kernels)
    if not (dlight or cpu_rules) and not kernel_names(kernels, scheduled=True):
        return None
    kernels = default_scheduled(kernels, spec)
    if spec.prepack_weights and (tuned or cpu_rules):
        # The weight layouts the schedules read, made once here from the constants.
        kernels = fold_kernel_calls(_split_layout_rewrites(kernels), weight_files)
        if cpu_rules:
            kernels = default_schedules()(kernels)  # a layout of something else than constants
    return kernels


def _has_layout_rewrite(func: tvm.tirx.PrimFunc) -> bool:
    found = []
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, lambda block: found.append(
        "meta_schedule.layout_rewrite_preproc" in block.annotations)), order="post")
    return any(found)


def _split_layout_rewrites(mod: tvm.IRModule) -> tvm.IRModule:
    """SplitLayoutRewritePreproc: each kernel that lays out its weights again becomes a
    ``<name>_weight_prepack`` kernel (folded away at compile time) and ``<name>_prepacked``.
    The pass sees only those kernels: it fails on a kernel without a compute block (scans,
    sorts), which stands in as a trivial one meanwhile."""
    kernels = {gv: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    others = {gv: f for gv, f in kernels.items() if not _has_layout_rewrite(f)}
    if len(others) == len(kernels):
        return mod
    stand_in = tvm.te.create_prim_func([tvm.te.compute((1,), lambda _: tvm.tirx.const(0, "int8"))])
    mod = mod.clone()
    for gv in others:
        mod[gv] = stand_in
    mod = relax.transform.SplitLayoutRewritePreproc()(mod)
    for gv, func in others.items():
        mod[gv] = func
    return mod


def _lowering(spec: TargetSpec) -> tvm.transform.Pass:
    """Scheduled kernels to VM code: relax.pipeline's dataflow lowering (spelled out: its
    function fails for llvm and cuda in TVM 0.27, whose backends do not export it), with the
    kernels that may write over a dying operand made to (targets.cpu.in_place), and the target's
    finalizing passes."""
    return tvm.transform.Sequential([
        relax.transform.RewriteDataflowReshape(), residuals_in_place,
        relax.transform.ToNonDataflow(),
        relax.transform.RemovePurityChecking(), relax.transform.CallTIRRewrite(),
        *relax.pipeline.finalize_passes(spec.tvm_target())])


def compile_module(mod: tvm.IRModule, spec: TargetSpec, device_index: int = 0,
                   database=None, plugin_items=None,
                   weight_files: WeightFiles | None = None) -> BuiltModule:
    """Compiles ``mod`` for ``spec``; ``database`` (a targets.tuning.TuningDatabase of this
    target: see find_database) schedules the kernels it has records for; ``plugin_items``
    ("<plugin>.<item>" -> value) go to the target's vendor plugins; the weights the compile
    lays out go to ``weight_files`` where given (the module's ``weight_paths``). A kernel
    whose default schedule the code generator refuses is built unscheduled (see _compile);
    where the default CPU schedules fail otherwise on a module no record applies to (a graph
    pass refusing what they make), it compiles as TVM's generic build instead, saying why."""
    target = spec.tvm_target()
    recorder = KernelRecorder()
    with _compile_lock, target:
        try:
            library, regions, weights = _compile(mod, spec, database, plugin_items, recorder,
                                                 weight_files=weight_files)
        except Exception as err:  # noqa: BLE001
            if "cpu-default" not in spec.schedules or recorder.tuned:
                raise
            log.warning("default CPU schedules failed (%s: %s); compiling TVM's generic build",
                        type(err).__name__, (str(err).strip().splitlines() or [""])[-1][:200])
            recorder = KernelRecorder()
            library, regions, weights = _compile(mod, spec, None, plugin_items, recorder,
                                                 schedule=False)
    release_freed_memory()  # what the compile's passes held
    module = BuiltModule(library, spec, device_index, recorder.kernels, recorder.tuned,
                            regions, weights)
    if weight_files is not None:
        module.weight_paths = [weight_files.file_of(w) for w in weights]
    return module


def _compile(mod: tvm.IRModule, spec: TargetSpec, database, plugin_items,
             recorder: KernelRecorder, schedule: bool = True,
             weight_files: WeightFiles | None = None, unscheduled: frozenset = frozenset()):
    """(library, vendor regions, weights) of one build: scheduled (see _scheduled) unless
    ``schedule`` is False or nothing schedules it, else TVM's generic build (whose constants
    stay in the library: its pipeline folds them yet). Kernels whose default schedules fail
    to build are built again unscheduled, the others keeping theirs (one such kernel made
    the whole module TVM's generic build)."""
    target = spec.tvm_target()
    with tvm.transform.PassContext(opt_level=3, instruments=[recorder]):
        scheduled = _scheduled(mod, spec, database, plugin_items, weight_files, unscheduled) \
            if schedule else None
        if scheduled is None:
            mod = _partitioned(mod, spec, plugin_items)
            regions = vendor_plugins.offloaded_regions(mod)
            return tvm.compile(mod, target=target), regions, []
        regions = vendor_plugins.offloaded_regions(scheduled)
        scheduled, weights = lift_weights(scheduled)
        lowered = _lowering(spec)(scheduled)
        try:
            return codegen.build(lowered, target), regions, weights
        except Exception as err:  # noqa: BLE001
            failing = {name.removesuffix(IN_PLACE_SUFFIX).removesuffix("_prepacked")
                       for name in codegen.failing_kernels(lowered, target)}
            if "cpu-default" not in spec.schedules or recorder.tuned or \
                    not failing or failing <= unscheduled:
                raise
            log.warning("the default schedules of %s fail to build (%s: %s); those kernels "
                        "are built unscheduled", ", ".join(sorted(failing)), type(err).__name__,
                        (str(err).strip().splitlines() or [""])[-1][:200])
    return _compile(mod, spec, database, plugin_items, recorder, schedule, weight_files,
                    unscheduled | failing)
