"""Default CPU schedules (targets.cpu.schedules): each rule takes the kernels it is for, on
odd, tiny and ordinary shapes and several dtypes, and the scheduled build computes what NumPy
does; every kernel of a default CPU build is scheduled (a small CNN, a transformer block, for
the host and for cross targets); tuning records still come first."""

import dataclasses
import logging

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax

import odla_tvm as odla
import targets
from odla_tvm import ElementType, ValueType, ops
from targets.cpu import schedules as cs
from targets.cpu.schedules import contraction, primitives
from targets.cpu.layouts import fold_constant_layouts
from targets.compiler import compile_module
from targets.compiler.kernel_recorder import kernel_names
from targets.compiler.pipeline import _scheduled

from examples.quickstart import build_small_cnn

# This CPU's float32 rules, without AMX where it has it (targets.cpu.amx would take the matmuls).
HOST = dataclasses.replace(targets.host_cpu(), cpu_flags=(), target={
    key: value for key, value in targets.host_cpu().target.items() if key != "mattr"})
# An AVX-512 CPU of 4 cores (16 float32 lanes, 32 vector registers): the tests of a schedule's
# shape schedule for it, so that they check the same tiles on every machine; its code is never
# run (its cpu_flags keep it from running where the CPU lacks AVX-512).
AVX512 = dataclasses.replace(HOST, name="skylake-avx512", arch="x86_64", cpu_flags=("avx512f",),
                             target={"kind": "llvm", "mtriple": "x86_64-linux-gnu",
                                     "mcpu": "skylake-avx512", "num-cores": 4})
RNG = np.random.default_rng(7)


def data(shape, dtype="float32", low=-2, high=3):
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(low, high, shape).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def relax_module(inputs, body):
    """A module whose main takes ``inputs`` (name -> (shape, dtype)) and returns ``body(*vars)``
    (an expr or a list of them) as a tuple."""
    bb = relax.BlockBuilder()
    params = [relax.Var(name, relax.TensorType(shape, dtype))
              for name, (shape, dtype) in inputs.items()]
    with bb.function("main", params):
        with bb.dataflow():
            results = body(*params)
            results = results if isinstance(results, list) else [results]
            outputs = [bb.emit_output(r) for r in results]
        bb.emit_func_output(relax.Tuple(outputs))
    return bb.get()


def _scheduled_kernels(mod, spec=HOST):
    with tvm.transform.PassContext(opt_level=3), spec.tvm_target():
        return _scheduled(mod, spec, None)


def rules_of(mod, spec=HOST):
    """Kernel name -> the rule that scheduled it, in the module a default build compiles."""
    with tvm.transform.PassContext(opt_level=3), spec.tvm_target():
        scheduled = _scheduled(mod, spec, None)
    assert kernel_names(scheduled, scheduled=False) == []
    return {gv.name_hint: str(f.attrs[cs.RULE_ATTR]) for gv, f in scheduled.functions_items()
            if isinstance(f, tvm.tirx.PrimFunc) and cs.RULE_ATTR in f.attrs}


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def check(mod, arrays, expected, rule=None, rtol=1e-5, atol=1e-5):
    """Compiles ``mod`` as a default CPU build (not the generic build compile_module falls
    back to where the schedules fail to compile), runs it on ``arrays`` and compares with
    ``expected``; ``rule``, when given, must have scheduled one of its kernels."""
    if rule is not None:
        assert rule in rules_of(mod).values(), rules_of(mod)
    warnings, logger = _Warnings(), logging.getLogger("targets.compiler.pipeline")
    logger.addHandler(warnings)
    try:
        module = compile_module(mod, HOST)
    finally:
        logger.removeHandler(warnings)
    # Neither the generic build of the whole module nor of some kernels (their schedules
    # failed to build: compiler.pipeline._compile builds those unscheduled).
    assert not [m for m in warnings.messages if "schedules failed" in m or "fail to build" in m], \
        warnings.messages
    outputs = module.run(arrays)
    for got, want in zip(outputs, expected):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def const(array):
    return relax.const(array, str(array.dtype))


# --- what the target offers --------------------------------------------------------------

def test_vector_lanes_follow_the_targets_features():
    avx2 = targets.get_target("x86-64-avx2").tvm_target()
    arm = targets.specs.AARCH64_LINUX.tvm_target()
    assert cs.vector_lanes(avx2, "float32") == 8 and cs.vector_lanes(avx2, "int64") == 4
    assert cs.vector_lanes(arm, "float32") == 4 and cs.vector_lanes(arm, "float16") == 8
    assert cs.vector_registers(avx2) == 16 and cs.vector_registers(arm) == 32
    avx512 = tvm.target.Target({"kind": "llvm", "mcpu": "skylake-avx512"})
    assert cs.vector_lanes(avx512, "float32") == 16 and cs.vector_lanes(avx512, "bool") == 64
    host = HOST.tvm_target()
    assert cs.vector_lanes(host, "float32") in (4, 8, 16)


def test_tile_sizes_divide_or_waste_little():
    assert primitives._pow2_divisor(1008, 16) == 16 and primitives._pow2_divisor(1000, 16) == 8
    assert primitives._pow2_divisor(3, 16) == 1 and primitives._divisor(49, 8) == 7
    assert [contraction._row_tile(e, 8) for e in (1, 3, 13, 49, 56, 128)] == [1, 3, 7, 7, 8, 8]


# --- Injective ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float16"])
@pytest.mark.parametrize("shape,other", [((1,), (1,)), ((3,), (1,)), ((7, 5), (5,)),
                                         ((2, 3, 17), (3, 1)), ((4, 64), (4, 1)),
                                         ((2, 33, 16), (16,))])
def test_elementwise_with_broadcast(shape, other, dtype):
    a, b = data(shape, dtype), data(other, dtype)
    mod = relax_module({"a": (shape, dtype), "b": (other, dtype)},
                       lambda x, y: relax.op.maximum(relax.op.multiply(relax.op.add(x, y), x), y))
    check(mod, [a, b], [np.maximum((a + b) * a, b)], "Injective",
          rtol=1e-3 if dtype == "float16" else 1e-5)


@pytest.mark.parametrize("shape,axes", [((5, 7), (1, 0)), ((2, 3, 5, 7), (0, 2, 3, 1)),
                                        ((1, 3, 224, 3), (0, 3, 1, 2)), ((1, 1, 1), (2, 0, 1))])
def test_transposes_reshapes_and_casts(shape, axes):
    a = data(shape)
    mod = relax_module({"a": (shape, "float32")}, lambda x: [
        relax.op.astype(relax.op.permute_dims(x, axes), "int32"),
        relax.op.reshape(relax.op.permute_dims(x, axes), (int(np.prod(shape)),))])
    moved = np.transpose(a, axes)
    check(mod, [a], [moved.astype("int32"), moved.reshape(-1)], "Injective")


@pytest.mark.parametrize("shape,axes,serial", [((1, 3, 224, 224), (0, 2, 3, 1), 2),
                                               ((1, 7, 7, 2048), (0, 3, 1, 2), 2),
                                               ((1, 3, 8000), (0, 2, 1), 1)])
def test_a_transpose_to_an_odd_innermost_axis_runs_whole_rows_in_parallel(shape, axes, serial):
    """A CNN's NCHW input moved to NHWC (3 channels innermost), its NHWC output back to NCHW
    (7 columns): no vector divides the innermost axis, so the two innermost loops stay apart
    and serial inside the parallel loop over the rest; fused into one parallel loop, every
    element paid a division and a modulo to find its indices (ResNet-50's input transpose
    0.132 -> 0.107 ms, its output's 0.139 -> 0.097, untuned, on a 2-core AMD EPYC)."""
    a = data(shape)
    mod = relax_module({"a": (shape, "float32")}, lambda x: relax.op.permute_dims(x, axes))
    (func,) = [f for _, f in _scheduled_kernels(mod).functions_items()
               if isinstance(f, tvm.tirx.PrimFunc)]
    loops = []
    tvm_ffi.structural_walk(func.body, (tvm.tirx.For, lambda loop: loops.append(
        (loop.kind, int(loop.extent)))), order="pre")
    moved = np.transpose(a, axes)
    # Where the loops outside the rows are too few to share out (one, around 8000 rows of 3),
    # only the innermost stays serial.
    parallel = int(np.prod(moved.shape[:-serial]))
    assert loops == [(tvm.tirx.ForKind.PARALLEL, parallel)] + [
        (tvm.tirx.ForKind.SERIAL, extent) for extent in moved.shape[-serial:]]
    check(mod, [a], [moved], "Injective")


def test_padding_gather_and_concatenation():
    a, b = data((2, 5, 3)), data((2, 4, 3))
    idx = np.array([3, 0, 4, 4, 1], "int64")
    mod = relax_module({"a": ((2, 5, 3), "float32"), "b": ((2, 4, 3), "float32"),
                        "i": ((5,), "int64")}, lambda x, y, i: [
        relax.op.nn.pad(x, (0, 0, 1, 2, 0, 1), pad_value=0.5),
        relax.op.take(x, i, axis=1),
        relax.op.concat([x, y], axis=1)])
    padded = np.pad(a, ((0, 0), (1, 2), (0, 1)), constant_values=0.5)
    check(mod, [a, b, idx], [padded, a[:, idx], np.concatenate([a, b], 1)], "Injective")


def _windows_of_three(x, costly, n):
    """Twice: each element of (sin x if ``costly`` else 2 x) summed with its two neighbours,
    along the second axis of ``n`` elements."""
    for n in (n, n - 2):
        y = relax.op.sin(x) if costly else relax.op.multiply(x, relax.const(2.0, "float32"))
        x = relax.op.add(relax.op.add(relax.op.strided_slice(y, [1], [0], [n - 2]),
                                      relax.op.strided_slice(y, [1], [1], [n - 1])),
                         relax.op.strided_slice(y, [1], [2], [n]))
    return x


@pytest.mark.parametrize("costly", [True, False])
def test_a_costly_value_read_at_several_places_is_computed_once(costly):
    """A window reading a sine at three places keeps the sine a block of its own, so each is
    computed once an element (two windows inlined into each other would compute 12); a cheap
    value is inlined all the same. Chained LRNs inlined so took 55 s to build."""
    x = data((3, 40))
    mod = relax_module({"x": ((3, 40), "float32")}, lambda v: _windows_of_three(v, costly, 40))
    want = x
    for _ in range(2):
        y = np.sin(want) if costly else 2 * want
        want = y[:, :-2] + y[:, 1:-1] + y[:, 2:]
    check(mod, [x], [want], "Injective", rtol=1e-5, atol=1e-5)
    (kernel,) = [f for f in _scheduled_kernels(mod).functions.values()
                 if isinstance(f, tvm.tirx.PrimFunc) and str(f.attrs[cs.RULE_ATTR]) == "Injective"]
    sines, blocks = [], []
    tvm_ffi.structural_map(kernel.body, (tvm.ir.expr.Call, lambda c: sines.append(c) or c))
    tvm_ffi.structural_map(kernel.body, (tvm.s_tir.SBlock, lambda b: blocks.append(b) or b))
    assert sum(str(c.op.name) == "tirx.sin" for c in sines) == (2 if costly else 0)
    assert len([b for b in blocks if b.name_hint != "root"]) == (3 if costly else 1)


def test_booleans_a_kernel_stores_and_loads_again_keep_their_values():
    """A row's maximum of not(is_inf(x)) as float32 (an attention's check for rows with every
    key masked, as the ONNX converter builds it): the test and the not are blocks of their
    own in the kernel, and vectorized, the not of a loaded vector of booleans flipped their
    bytes' every bit (rows gave -1 and -2, not 1 and 0)."""
    x = data((4, 4))
    x[1] = -np.inf
    x[2, ::2] = -np.inf
    computation = odla.create_computation()
    value = odla.create_argument(ValueType(ElementType.FLOAT32, x.shape), "x")
    attends = ops.process.cast(ops.math.not_(ops.math.is_inf(value, False, True)),
                               ElementType.FLOAT32)
    odla.set_value_as_output(ops.math.reduce_max(attends, 1, [1], True))
    executable = odla.compile_computation(computation, odla.allocate_device(
        device_name=odla.DeviceName.INTEL_X86))
    (got,) = odla.Session(executable).run({"x": x})
    odla.destroy_computation(computation)
    want = np.logical_not(x == -np.inf).astype(np.float32).max(1, keepdims=True)
    assert want.ravel().tolist() == [1, 0, 1, 1]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("parts,lanes", [((64, 32, 96), 16), ((48, 40), 8), ((3, 5), 1)])
def test_a_concatenation_of_channels_copies_whole_vectors(parts, lanes):
    """DenseNet's and Inception's concatenations in NHWC: each element picks its part by its
    channel, and TVM's vectorizer scalarized the loop whose lanes could take either; the
    channel loop is now partitioned where the parts meet, by vectors of the largest power of
    two (at most the target's 16) dividing every part, each part a loop of whole vectors.
    Parts no even count divides keep the one loop."""
    arrays = [data((1, 5, 7, c)) for c in parts]
    mod = relax_module({f"x{n}": ((1, 5, 7, c), "float32") for n, c in enumerate(parts)},
                       lambda *xs: relax.op.concat(list(xs), axis=3))
    (kernel,) = [f.script() for f in _scheduled_kernels(mod).functions.values()
                 if isinstance(f, tvm.tirx.PrimFunc)]
    with HOST.tvm_target() as target:
        lanes = min(lanes, cs.vector_lanes(target, "float32"))  # 8 with AVX2
    if lanes > 1:
        assert kernel.count("_partition") == len(parts), kernel
        assert kernel.count(f"T.vectorized(T.int64({lanes}))") == len(parts), kernel
    else:
        assert "_partition" not in kernel, kernel
    check(mod, arrays, [np.concatenate(arrays, axis=3)], "Injective")


def _outermost_loop(mod, name):
    kernel = next(f for gv, f in _scheduled_kernels(mod).functions_items() if gv.name_hint == name)
    loops = []
    tvm_ffi.structural_walk(kernel.body, (tvm.tirx.For, loops.append), order="pre")
    return loops[0]


def test_a_channel_shuffle_loops_over_its_channel_vectors_outermost():
    """ShuffleNet's channel shuffle in NHWC (channels as (groups, channels per group),
    transposed, with each shuffled channel's scale and shift): a vector of channels gathers
    its lanes, so the loop over the vectors goes outermost and the per-channel gathers stay
    the same over the pixels inside (ShuffleNet's such kernels took 39% of its time); a merge
    of heads, whose lanes read side by side, keeps the pixels outermost."""
    h, w, groups, per = 12, 14, 4, 28  # enough work to run in parallel
    x, scale, shift = data((1, h, w, groups * per)), data((groups * per,)), data((groups * per,))
    op = relax.op

    def shuffle(v, s, t):
        moved = op.reshape(op.permute_dims(op.reshape(v, (1, h, w, groups, per)),
                                           (0, 1, 2, 4, 3)), (1, h, w, groups * per))
        return op.nn.relu(op.add(op.multiply(moved, s), t))

    c = groups * per
    mod = relax_module({"x": ((1, h, w, c), "float32"), "s": ((c,), "float32"),
                        "t": ((c,), "float32")}, shuffle)
    (name,) = rules_of(mod)
    outer = _outermost_loop(mod, name)
    with HOST.tvm_target() as target:
        vectors = c // cs.vector_lanes(target, "float32")  # 7 with AVX-512, 14 with AVX2
        # In parallel where there are 4 a core to share out, else serial around the pixels.
        kind = (tvm.tirx.ForKind.PARALLEL if vectors >= 4 * primitives._cores(target)
                else tvm.tirx.ForKind.SERIAL)
    assert int(outer.extent) == vectors and outer.kind == kind, outer
    moved = x.reshape(1, h, w, groups, per).transpose(0, 1, 2, 4, 3).reshape(1, h, w, c)
    check(mod, [x, scale, shift], [np.maximum(moved * scale + shift, 0)], "Injective")
    heads = relax_module({"q": ((1, 12, 16, 64), "float32")}, lambda q: op.reshape(
        op.permute_dims(q, (0, 2, 1, 3)), (1, 16, 768)))
    (name,) = rules_of(heads)
    lanes = c // vectors
    assert int(_outermost_loop(heads, name).extent) == 16 * 768 // lanes  # tokens x vectors


# --- Contraction -------------------------------------------------------------------------

@pytest.mark.parametrize("m,k,n", [(1, 32, 10), (7, 13, 48), (13, 5, 1008), (128, 64, 96),
                                   (3, 1, 16), (33, 17, 2)])
def test_matmul_with_constant_weights_bias_and_relu(m, k, n):
    x, w, bias = data((m, k)), data((k, n)), data((n,))
    mod = relax_module({"x": ((m, k), "float32")}, lambda v: relax.op.nn.relu(
        relax.op.add(relax.op.matmul(v, const(w)), const(bias))))
    check(mod, [x], [np.maximum(x @ w + bias, 0)], "Contraction" if k > 1 else None, rtol=1e-4)


@pytest.mark.parametrize("stack_max", [16 << 10, 1 << 10])
def test_register_tiles_stay_on_the_stack(monkeypatch, stack_max):
    """A matmul's tile of 8 rows by 3 vectors of 16 accumulators (1.5 KB, AVX-512's: its code
    is inspected, the host's run): TVM's lowering takes a local buffer of 1 KB or more from
    its workspace pool, once per tile; targets.compiler.codegen keeps local buffers up to its
    line on the stack (LLVM's registers), and the workspace takes those above it."""
    from targets.compiler import codegen

    monkeypatch.setattr(codegen, "_STACK_LOCAL_MAX_BYTES", stack_max)
    x, w = data((128, 64)), data((64, 96))
    mod = relax_module({"x": ((128, 64), "float32")},
                       lambda v: relax.op.matmul(v, const(w)))
    module = compile_module(mod, AVX512)
    code = "".join(m.inspect_source("ll") for m in module.library.mod.imports)
    workspace = code.count("@__TVMBackendAllocWorkspace, align")
    assert (workspace == 0) == (stack_max > 1536), workspace
    (got,) = compile_module(mod, HOST).run([x])
    np.testing.assert_allclose(got, x @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "int32", "int64"])
@pytest.mark.parametrize("b,m,k,n", [(1, 1, 1, 2), (3, 17, 8, 24), (2, 5, 64, 64), (12, 16, 8, 16)])
def test_batch_matmul_of_two_inputs(b, m, k, n, dtype):
    x, y = data((b, m, k), dtype), data((b, k, n), dtype)
    mod = relax_module({"x": ((b, m, k), dtype), "y": ((b, k, n), dtype)},
                       lambda u, v: relax.op.matmul(u, v))
    check(mod, [x, y], [np.matmul(x, y)], "Contraction" if k > 1 else None, rtol=1e-4)


def test_matmul_of_a_transposed_constant_and_a_residual():
    """A dense layer (weights stored N x K): laid out again when compiling."""
    x, w, r = data((6, 40)), data((24, 40)), data((6, 24))
    mod = relax_module({"x": ((6, 40), "float32"), "r": ((6, 24), "float32")}, lambda v, s:
                       relax.op.add(relax.op.matmul(v, relax.op.permute_dims(const(w))), s))
    check(mod, [x, r], [x @ w.T + r], "Contraction", rtol=1e-4)


def _first_column_of_tiles(scheduled) -> list[int]:
    """For the multiply-accumulate of the one scheduled kernel: the first column of j its
    first two parallel tiles compute (the other loops at 0)."""
    (func,) = [f for f in scheduled.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    realizes, loops = [], []
    tvm_ffi.structural_walk(func.body, [
        (tvm.s_tir.SBlockRealize, lambda r: realizes.append(r)
         if r.block.name_hint.endswith("_update") else None),
        (tvm.tirx.For, loops.append)], order="pre")
    (update,) = realizes
    fused = next(loop for loop in loops if loop.kind == tvm.tirx.ForKind.PARALLEL)
    j = next(n for n, v in enumerate(update.block.iter_vars)
             if update.block.writes[0].region[-1].min.same_as(v.var))
    def column(first):  # the loops at 0, the parallel one at ``first``
        analyzer = tvm.sym.Analyzer()
        for loop in loops:
            analyzer.bind(loop.loop_var, tvm.tirx.const(first if loop.same_as(fused) else 0,
                                                         "int64"))  # TVM's loops here
        return int(analyzer.simplify(update.iter_values[j]))

    return [column(0), column(1)]


@pytest.mark.parametrize("k,inside", [(64, True), (1024, False)])
def test_matmul_walks_its_tiles_of_j_innermost_where_its_weights_fit_half_of_l2(k, inside):
    """64 x k by k x 256 constant weights: 64 KiB of weights fit half of L2, so one tile of
    rows of x computes every tile of j in turn (the next parallel tile is the next columns);
    1 MiB does not, so the tiles of one j go over all rows first (the same columns)."""
    x, w = data((64, k)), data((k, 256)) * 0.1
    mod = relax_module({"x": ((64, k), "float32")}, lambda v: relax.op.matmul(v, const(w)))
    first, second = _first_column_of_tiles(_scheduled_kernels(mod))
    assert first == 0 and (second > 0) == inside, (first, second)
    check(mod, [x], [x @ w], "Contraction", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n,avx512_columns,avx2_columns", [
    (96, 48, 24), (768, 48, 24), (256, 32, 16), (80, 16, 16)])
def test_matmul_tiles_take_three_vectors_of_columns_where_they_divide(n, avx512_columns,
                                                                      avx2_columns):
    """64 x 64 by 64 x n: a tile is three vectors of columns where they divide n (16 columns
    each with AVX-512: 24 accumulators with its 8 rows; 8 with AVX2), else two, else one; the
    next parallel tile is the next columns (the weights fit half of L2)."""
    x, w = data((64, 64)), data((64, n)) * 0.1
    mod = relax_module({"x": ((64, 64), "float32")}, lambda v: relax.op.matmul(v, const(w)))
    assert _first_column_of_tiles(_scheduled_kernels(mod, AVX512)) == [0, avx512_columns]
    avx2 = targets.get_target("x86-64-avx2")
    assert _first_column_of_tiles(_scheduled_kernels(mod, avx2)) == [0, avx2_columns]
    check(mod, [x], [x @ w], "Contraction", rtol=1e-4, atol=1e-4)


def test_matmul_with_a_dynamic_batch():
    w = data((24, 32))
    n = tvm.tirx.Var("n", "int64")
    mod = relax_module({"x": ((n, 24), "float32")}, lambda v: relax.op.matmul(v, const(w)))
    module = compile_module(mod, HOST)
    assert "Contraction" in rules_of(mod).values()
    for rows in (1, 5, 16):
        x = data((rows, 24))
        np.testing.assert_allclose(module.run([x])[0], x @ w, rtol=1e-4, atol=1e-5)


def _guards_of_updates(scheduled) -> list:
    """The predicates of every multiply-accumulate step of the scheduled kernels (a tile's
    guard against running past the output)."""
    found = []
    for func in scheduled.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlockRealize, lambda r: found.append(
                r.predicate) if r.block.name_hint.endswith("_update") else None), order="post")
    return [g for g in found if not (isinstance(g, tvm.tirx.IntImm) and int(g) == 1)]


@pytest.mark.parametrize("b,m,k,n,padded", [(12, 197, 64, 197, 224), (2, 5, 8, 33, 48),
                                             (3, 13, 7, 17, 32)])
def test_batch_matmul_of_odd_extents_is_padded_to_whole_tiles(b, m, k, n, padded):
    """Attention scores over an odd number of tokens (ViT's 197): no vector width divides j
    and no row tile divides i; both are padded (the Fallback rule took them before), and no
    step is guarded. j is padded to whole tiles of two or three vectors, not one (ViT's 13
    vectors to 14: 16-18% faster)."""
    x, y, s = data((b, m, k)), data((b, k, n)), data((n,))
    mod = relax_module({"x": ((b, m, k), "float32"), "y": ((b, k, n), "float32")},
                       lambda u, v: relax.op.add(relax.op.multiply(
                           relax.op.matmul(u, v), relax.const(0.125)), const(s)))
    assert list(rules_of(mod).values()) == ["Contraction"]
    assert _guards_of_updates(_scheduled_kernels(mod)) == []
    # The padded extents above are AVX-512's.
    (kernel,) = [f.script() for f in _scheduled_kernels(mod, AVX512).functions.values()
                 if isinstance(f, tvm.tirx.PrimFunc)]
    assert f"y_pad = T.sblock_alloc_buffer((T.int64({b}), T.int64({k}), T.int64({padded})))" \
        in kernel, kernel
    check(mod, [x, y], [np.matmul(x, y) * np.float32(0.125) + s], rtol=1e-4)


def _tail_kernel(lane_index: str):
    """y = 2 x over 12 rows of 37 in parallel, each row in vectors of 16, the last one
    guarded (the guard a split by 16 makes), the "falling" kernel's elements 0 to 10 too."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def kernel(x: T.Buffer((12, 37), "float32"), y: T.Buffer((12, 37), "float32")):
        T.func_attr({"global_symbol": "kernel", "tirx.noalias": True})
        for r in T.parallel(12):
            for o in range(3):
                for i in T.vectorized(16):
                    with T.sblock("double"):
                        vr = T.axis.spatial(12, r)
                        v = T.axis.spatial(37, o * 16 + i)
                        T.where(o * 16 + i < 37 and (lane_index == "rising"
                                                     or 47 - o * 16 - i < 37))
                        y[vr, v] = x[vr, v] * T.float32(2)
    return kernel


def _vector_stores(func) -> int:
    """How many stores of whole float32 vectors of 16 ``func``'s LLVM code for AVX-512 has
    (the kernels' vectors are AVX-512's; that code is not run)."""
    library = tvm.compile(tvm.IRModule({"kernel": func}), target=AVX512.tvm_target())
    return library.mod.inspect_source("ll").count("store <16 x float>")


@pytest.mark.parametrize("lane_index", ["rising", "falling"])
def test_a_guarded_vector_loop_runs_its_whole_vectors_unguarded(lane_index):
    """targets.cpu.vector_tails: TVM's vectorizer scalarizes a loop whose guard differs by lane,
    every vector of it; the pass runs the loop as whole vectors where its last lane meets the
    guard (every lane does, the guard's index rising with the lane) and as it was otherwise.
    A guard it cannot bound by the last lane is left alone."""
    from targets.cpu.vector_tails import whole_vectors

    kernel = _tail_kernel(lane_index)
    split = whole_vectors(tvm.IRModule({"kernel": kernel}))["kernel"]
    branches = []
    tvm_ffi.structural_walk(split.body, (tvm.tirx.IfThenElse, branches.append), order="post")
    x = data((12, 37))
    if lane_index == "rising":
        (branch,) = branches
        assert branch.then_case.kind == tvm.tirx.ForKind.VECTORIZED
        assert int(branch.then_case.body.predicate) == 1  # the whole vectors: no guard
        assert "T.where" in branch.else_case.script()  # the tail, as it was
        assert _vector_stores(split) > _vector_stores(kernel)
        want = 2 * x
    else:
        assert not branches and split.same_as(kernel)
        want = np.where(np.arange(37) > 10, 2 * x, 0)
    library = tvm.compile(tvm.IRModule({"kernel": split}), target=HOST.tvm_target())
    got = tvm.runtime.tensor(np.zeros((12, 37), np.float32))
    library["kernel"](tvm.runtime.tensor(x), got)
    np.testing.assert_array_equal(got.numpy(), want)


def test_a_matmul_tvm_refuses_to_pad_keeps_its_guarded_tail(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise tvm.error.TVMError("pad_einsum refused")

    monkeypatch.setattr(primitives._Schedule, "pad_einsum", refuse)
    x, y = data((2, 197, 16)), data((2, 16, 64))
    mod = relax_module({"x": ((2, 197, 16), "float32"), "y": ((2, 16, 64), "float32")},
                       lambda u, v: relax.op.matmul(u, v))
    assert list(rules_of(mod).values()) == ["Contraction"]
    assert _guards_of_updates(_scheduled_kernels(mod)) != []
    check(mod, [x, y], [np.matmul(x, y)], rtol=1e-4)


@pytest.mark.parametrize("m,k,n,columns", [(1, 64, 1001, 1008), (197, 96, 48, 48),
                                           (7, 13, 33, 48)])
def test_odd_constant_weights_are_padded_once_when_compiling(m, k, n, columns):
    """An odd count of output features (1001 classes) or rows (197 tokens): the weights'
    padded copy is made when compiling, packed (the kernel takes it, not the weights), and
    the rows of the input are padded in the kernel. ``columns``: n padded to whole vectors of
    AVX-512's 16 lanes (what the scheduled kernel is for)."""
    x, w, bias = data((m, k)), data((k, n)), data((n,))
    mod = relax_module({"x": ((m, k), "float32")}, lambda v: relax.op.nn.relu(
        relax.op.add(relax.op.matmul(v, const(w)), const(bias))))
    scheduled = _scheduled_kernels(mod, AVX512)
    (kernel,) = [f for f in scheduled.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert str(kernel.attrs[cs.RULE_ATTR]) == "Contraction"
    assert _guards_of_updates(scheduled) == []
    (packed,) = [p for p in kernel.params if len(p.shape) == 3]  # [j / tile, k, tile]
    assert int(np.prod([int(d) for d in packed.shape])) == k * columns
    check(mod, [x], [np.maximum(x @ w + bias, 0)], rtol=1e-4)


@pytest.mark.parametrize("c_in,c_out,size,kernel,stride,pad", [
    (3, 16, 9, 3, 1, 1), (4, 8, 7, 1, 1, 0), (5, 32, 11, 3, 2, 1), (8, 24, 6, 5, 1, 2),
    (16, 10, 13, 1, 1, 0), (3, 5, 4, 2, 2, 0)])
def test_convolutions_with_bias_and_relu(c_in, c_out, size, kernel, stride, pad):
    """NCHW graphs: host builds convert convolutions to NHWC (odd channels padded, see
    conv_rewrites)."""
    x = data((1, c_in, size, size))
    w, bias = data((c_out, c_in, kernel, kernel)) * 0.3, data((1, c_out, 1, 1))
    mod = relax_module({"x": (x.shape, "float32")}, lambda v: relax.op.nn.relu(relax.op.add(
        relax.op.nn.conv2d(v, const(w), strides=stride, padding=pad), const(bias))))
    expected = np.maximum(_conv_nchw(x, w, stride, pad) + bias, 0)
    check(mod, [x], [expected], "Contraction" if c_out % 2 == 0 else None, rtol=1e-4, atol=1e-4)


def _conv_nchw(x, w, stride, pad, groups=1):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    per_group = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                rows, cols = slice(i, i + stride * oh, stride), slice(j, j + stride * ow, stride)
                patch = x[:, g * cg:(g + 1) * cg, rows, cols]
                out[:, g * per_group:(g + 1) * per_group] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * per_group:(g + 1) * per_group, :, i, j])
    return out.astype(np.float32)


# --- SpatialReduction, Stages, row reductions --------------------------------------------

@pytest.mark.parametrize("layout,shape", [("NHWC", (1, 9, 9, 16)), ("NHWC", (2, 7, 7, 3)),
                                          ("NCHW", (1, 8, 12, 12)), ("NHWC", (1, 5, 5, 1024))])
def test_pools(layout, shape):
    x = data(shape)
    mod = relax_module({"x": (shape, "float32")}, lambda v: [
        relax.op.nn.max_pool2d(v, 3, 2, 1, layout=layout),
        relax.op.nn.avg_pool2d(v, 2, 1, 0, layout=layout),
        relax.op.mean(v, axis=[1, 2] if layout == "NHWC" else [2, 3], keepdims=True)])
    nchw = x if layout == "NCHW" else x.transpose(0, 3, 1, 2)
    padded = np.pad(nchw, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    h = (nchw.shape[2] + 2 - 3) // 2 + 1
    maxed = np.max([padded[:, :, i:i + 2 * h:2, j:j + 2 * h:2]
                    for i in range(3) for j in range(3)], 0)
    k = nchw.shape[2] - 1
    averaged = np.mean([nchw[:, :, i:i + k, j:j + k] for i in range(2) for j in range(2)], 0)
    back = (lambda a: a) if layout == "NCHW" else (lambda a: a.transpose(0, 2, 3, 1))
    mean = nchw.mean(axis=(2, 3), keepdims=True)
    # Three channels in NHWC have no vector width: other rules take those.
    check(mod, [x], [back(maxed), back(averaged), back(mean)],
          "SpatialReduction" if shape[-1] % 2 == 0 else None)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_sums_over_outer_axes(dtype):
    x = data((6, 5, 32), dtype)
    mod = relax_module({"x": ((6, 5, 32), dtype)}, lambda v: [
        relax.op.sum(v, axis=0), relax.op.max(v, axis=[0, 1])])
    check(mod, [x], [x.sum(0, dtype=dtype), x.max((0, 1))], "SpatialReduction")


@pytest.mark.parametrize("channels,groups,kernel", [(16, 2, 1), (136, 4, 1), (24, 3, 3),
                                                   (64, 4, 3)])
def test_grouped_convolutions(channels, groups, kernel):
    """Each tile of output channels lies within one group (groups of 34, ShuffleNet's, are
    padded to 48 first: conv_rewrites)."""
    x = data((1, channels, 9, 9))
    w = data((channels, channels // groups, kernel, kernel)) * 0.2
    mod = relax_module({"x": (x.shape, "float32")}, lambda v: relax.op.nn.conv2d(
        v, const(w), padding=kernel // 2, groups=groups))
    check(mod, [x], [_conv_nchw(x, w, 1, kernel // 2, groups=groups)], "Contraction",
          rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("size,stride,rows", [(10, 1, 5), (14, 2, 7), (13, 1, 1)])
def test_depthwise_convolution(size, stride, rows):
    """Each tile accumulates ``rows`` outputs along a row (a divisor of the row's width, at
    most 8; 13 is prime, so one) over the taps, each vector of weights loaded once for them."""
    x, w = data((1, 32, size, size)), data((32, 1, 3, 3))
    mod = relax_module({"x": (x.shape, "float32")}, lambda v: relax.op.nn.conv2d(
        v, const(w), strides=stride, padding=1, groups=32))
    scheduled = _scheduled_kernels(mod)
    unrolled = []
    for func in scheduled.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc) and \
                str(func.attrs[cs.RULE_ATTR]) == "SpatialReduction":
            tvm_ffi.structural_walk(func.body, (tvm.tirx.For, lambda loop: unrolled.append(
                int(loop.extent)) if loop.kind == tvm.tirx.ForKind.UNROLLED else None),
                order="post")
    assert max(unrolled, default=1) == rows
    check(mod, [x], [_conv_nchw(x, w, stride, 1, groups=32)], "SpatialReduction", rtol=1e-4,
          atol=1e-4)


def _paddings_per_tile(scheduled) -> list[bool]:
    """For each padding block of the scheduled kernels: whether the parallel loop running it
    runs the reduction reading it too (padded per tile), not one of its own (padded whole)."""
    pads, per_tile = [], []
    for func in scheduled.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            def parallel(loop):
                names = []
                tvm_ffi.structural_walk(loop.body, (tvm.s_tir.SBlock, lambda b: names.append(
                    b.name_hint)), order="post")
                per_tile.extend(n for n in names if n.startswith("pad")
                                and any(not m.startswith("pad") for m in names))
            tvm_ffi.structural_walk(func.body, [
                (tvm.s_tir.SBlock, lambda b: pads.append(b.name_hint)
                 if b.name_hint.startswith("pad") else None),
                (tvm.tirx.For, lambda loop: parallel(loop)
                 if loop.kind == tvm.tirx.ForKind.PARALLEL else None)], order="post")
    return [name in per_tile for name in pads]


@pytest.mark.parametrize("op,per_tile", [
    ("max_pool", True),  # 3x3 stride 2: each tile pads 1.4 times its share of the input
    ("depthwise", True),  # 3x3 stride 1 in bands of 4 rows: 1.7 times
    ("first_conv", True),  # 3 input channels, stride 2: 1.6 times
    ("wide_conv", False)])  # 64 input channels, each window padded again per 32 outputs: 4.8
def test_a_padding_is_computed_per_tile_where_tiles_pad_little_twice(op, per_tile):
    """Padded per tile of the reduction (in its parallel loop, a window of at most 4096
    elements), or whole before it where the tiles would pad more than twice the input. The
    ratios above are AVX-512's tiles' (AVX2's hold half the output channels and fewer rows)."""
    x = data({"first_conv": (1, 3, 32, 32), "wide_conv": (1, 64, 8, 8)}.get(op, (1, 32, 32, 32)))
    w = {"depthwise": data((32, 1, 3, 3)), "wide_conv": data((64, 64, 3, 3)) * 0.1}.get(
        op, data((32, 3, 3, 3)))
    ops = {"max_pool": lambda v: relax.op.nn.max_pool2d(v, 3, 2, 1),
           "depthwise": lambda v: relax.op.nn.conv2d(v, const(w), padding=1, groups=32),
           "first_conv": lambda v: relax.op.nn.conv2d(v, const(w), strides=2, padding=1),
           "wide_conv": lambda v: relax.op.nn.conv2d(v, const(w), padding=1)}
    mod = relax_module({"x": (x.shape, "float32")}, ops[op])
    assert _paddings_per_tile(_scheduled_kernels(mod, AVX512)) == [per_tile]
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    expected = {
        "max_pool": lambda: np.max([padded[:, :, i:i + 32:2, j:j + 32:2]
                                    for i in range(3) for j in range(3)], 0),
        "depthwise": lambda: _conv_nchw(x, w, 1, 1, groups=32),
        "first_conv": lambda: _conv_nchw(x, w, 2, 1),
        "wide_conv": lambda: _conv_nchw(x, w, 1, 1)}[op]()
    check(mod, [x], [expected], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels,size", [(32, 16), (48, 14), (64, 13)])
def test_winograd_convolutions(channels, size):
    """3x3 stride-1 convolutions of 32 channels or more become Winograd kernels (conv_rewrites):
    input transform, batched products and inverse transform, each scheduled by Stages."""
    x, w = data((1, channels, size, size)), data((32, channels, 3, 3)) * 0.1
    mod = relax_module({"x": (x.shape, "float32")}, lambda v: relax.op.nn.relu(
        relax.op.nn.conv2d(v, const(w), padding=1)))
    check(mod, [x], [np.maximum(_conv_nchw(x, w, 1, 1), 0)], "Stages", rtol=1e-3, atol=1e-3)


def _loops_around(func, block_name):
    """The kinds of the loops around ``block_name``'s block in ``func``, outermost first."""
    found = []

    def visit(loop):
        names = []
        tvm_ffi.structural_walk(loop.body, (tvm.s_tir.SBlock, lambda b: names.append(b.name_hint)),
                                order="post")
        if block_name in names:
            found.append(loop.kind)

    tvm_ffi.structural_walk(func.body, (tvm.tirx.For, visit), order="post")
    return list(reversed(found))


def test_winograd_transforms_unroll_with_their_weights_as_constants():
    """The input and inverse transforms weight each tile's elements by B's and A's entries:
    the tables are inlined and their loops unrolled, so the weights are constants of the
    code (their zeros drop out) rather than loads from a table at every step. The input's
    padding is computed per tile, a 6 x 6 window of channel vectors in a local buffer, which
    the unrolled sum reads with no bounds test: tested at each of its 676 products, TVM's
    simplifier took most of the kernel's build (ResNet-50's: 1.8 -> 1.0 s each)."""
    x, w = data((1, 64, 28, 28)), data((64, 64, 3, 3)) * 0.1
    mod = relax_module({"x": (x.shape, "float32")}, lambda v: relax.op.nn.relu(
        relax.op.nn.conv2d(v, const(w), padding=1)))
    kernels = _scheduled_kernels(mod)
    (func,) = [f for gv, f in kernels.functions_items() if "winograd" in gv.name_hint]
    blocks = []
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, lambda b: blocks.append(b.name_hint)),
                            order="post")
    assert "A" not in blocks and "B" not in blocks, blocks
    unrolled = tvm.tirx.ForKind.UNROLLED
    for transform in ("data_pack_update", "inverse_update"):
        kinds = _loops_around(func, transform)
        # parallel over tiles and channel vectors; 6 x 6 (or 4 x 4) outputs and 6 x 6 steps
        # unrolled; the channels' vector
        assert kinds[0] == tvm.tirx.ForKind.PARALLEL and kinds[-1] == tvm.tirx.ForKind.VECTORIZED
        assert kinds[1:-1] == [unrolled] * 4, (transform, kinds)
    found, tests = {}, []
    tvm_ffi.structural_walk(func.body, (tvm.s_tir.SBlock, lambda b: found.update(
        {b.name_hint: b})), order="post")
    assert _loops_around(func, "data_pad")[0] == tvm.tirx.ForKind.PARALLEL
    assert found["data_pad"].writes[0].source.scope() == "local"
    if_then_else = tvm.ir.Op.get("prim.if_then_else")
    tvm_ffi.structural_walk(found["data_pack_update"].body, (tvm.ir.Call, lambda c: tests.append(
        c) if c.op.same_as(if_then_else) else None), order="post")
    assert not tests
    check(mod, [x], [np.maximum(_conv_nchw(x, w, 1, 1), 0)], "Stages", rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 10), (1, 1000), (4, 37), (2, 12, 16, 16)])
def test_softmax_and_layer_norm(shape):
    x = data(shape)
    gamma, beta = data(shape[-1:]), data(shape[-1:])
    mod = relax_module({"x": (shape, "float32")}, lambda v: [
        relax.op.nn.softmax(v, axis=-1),
        relax.op.nn.layer_norm(v, const(gamma), const(beta), axes=[-1])])
    e = np.exp(x - x.max(-1, keepdims=True))
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    check(mod, [x], [e / e.sum(-1, keepdims=True), (x - mean) / np.sqrt(var + 1e-5) * gamma + beta],
          rtol=1e-4, atol=1e-5)


def _vector_lanes_of_row_reductions(scheduled) -> dict[str, list[int]]:
    """Kernel name -> the lanes of each vectorized loop computing a reduction's partial
    results (rfactor's ``*_rf`` blocks)."""
    found = {}
    for gv, func in scheduled.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            lanes = found.setdefault(gv.name_hint, [])
            tvm_ffi.structural_walk(func.body, (tvm.tirx.For, lambda loop: lanes.append(
                int(loop.extent)) if loop.kind == tvm.tirx.ForKind.VECTORIZED and isinstance(
                    loop.body, tvm.s_tir.SBlockRealize) and loop.body.block.name_hint.endswith(
                        "_rf") else None), order="post")
    return found


def _row_stages(x, gamma, beta):
    """Softmax, layer norm and x / RMS(x) over the last axis, in NumPy (float64 inside)."""
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    mean, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    return [(e / e.sum(-1, keepdims=True)).astype(x.dtype),
            ((x64 - mean) / np.sqrt(var + 1e-5) * gamma + beta).astype(x.dtype),
            (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)).astype(x.dtype)]


def _row_stages_module(shape, dtype, gamma, beta):
    op = relax.op
    return relax_module({"x": (shape, dtype)}, lambda v: [
        op.nn.softmax(v, axis=-1), op.nn.layer_norm(v, const(gamma), const(beta), axes=[-1]),
        op.divide(v, op.sqrt(op.add(op.mean(op.multiply(v, v), axis=-1, keepdims=True),
                                    relax.const(1e-6, dtype))))])


@pytest.mark.parametrize("shape,dtype,lanes", [
    ((3, 128), "float32", 16), ((2, 5, 768), "float32", 16), ((4, 100), "float32", 16),
    ((4, 37), "float32", 16), ((2, 197), "float32", 16), ((2, 12), "float32", 4),
    ((2, 16), "float32", 8), ((3, 64), "float16", 32)])
def test_row_reductions_accumulate_a_vector_of_partial_results(shape, dtype, lanes):
    """Softmax, layer norm and RMS norm over rows: Rows rfactors each reduction along the row
    into a vector of partial results (dlight's kept one scalar chain), the last partial vector
    of a row no vector divides guarded (37, 197), fewer lanes where the row is short (``lanes``
    are AVX-512's); the results match NumPy's."""
    x = data(shape, dtype)
    gamma, beta = data(shape[-1:], dtype), data(shape[-1:], dtype)
    mod = _row_stages_module(shape, dtype, gamma, beta)
    for spec in (HOST, AVX512):  # x * x of the RMS norm is a kernel of its own
        rules = rules_of(mod, spec)
        assert sorted(r for r in rules.values() if r != "Injective") == ["Rows"] * 3, rules
    partials = _vector_lanes_of_row_reductions(_scheduled_kernels(mod, AVX512))
    # softmax: max and sum; layer norm: mean and variance (or sum of squares); RMS: mean
    assert sum(len(p) for p in partials.values()) >= 4 and \
        {n for p in partials.values() for n in p} == {lanes}, partials
    # atol: a normalized value times gamma plus beta is O(1) to O(5) before it cancels to
    # near 0 (1.3e-6 off seen there for float32 with 768-element rows).
    tolerance, atol = (1e-5, 5e-6) if dtype == "float32" else (1e-2, 1e-3)
    check(mod, [x], _row_stages(x, gamma, beta), rtol=tolerance, atol=atol)


@pytest.mark.parametrize("shape", [(3, 50), (4, 37), (2, 768)])
def test_reductions_over_rows_alone_are_rows(shape):
    """A sum, mean, arg-max and arg-min over the last axis, each a kernel of one reduction:
    Rows rfactors them too (ties go to the first index, as NumPy's do)."""
    x = np.round(data(shape) * 2) / 2  # many ties
    mod = relax_module({"x": (shape, "float32")}, lambda v: [
        relax.op.sum(v, axis=-1), relax.op.mean(v, axis=-1), relax.op.argmax(v, axis=-1),
        relax.op.argmin(v, axis=-1)])
    assert set(rules_of(mod).values()) == {"Rows"}, rules_of(mod)
    assert all(_vector_lanes_of_row_reductions(_scheduled_kernels(mod)).values())
    check(mod, [x], [x.sum(-1), x.mean(-1), x.argmax(-1), x.argmin(-1)], rtol=1e-5, atol=1e-5)


def test_rows_shorter_than_eight_keep_dlights_schedule():
    x = data((3, 5))
    gamma, beta = data((5,)), data((5,))
    mod = _row_stages_module((3, 5), "float32", gamma, beta)
    assert "Rows" not in rules_of(mod).values()
    check(mod, [x], _row_stages(x, gamma, beta), rtol=1e-5, atol=1e-6)


def test_a_global_average_pool_over_rows_compiles_as_rows():
    """NCHW global average pooling: each row's one value is computed under the parallel rows,
    not vectorized again inside them (TVM refused the nested vectorized loop and the whole
    build fell back to TVM's generic one)."""
    x = data((1, 32, 8, 8))
    mod = relax_module({"x": (x.shape, "float32")},
                       lambda v: relax.op.nn.avg_pool2d(v, pool_size=(8, 8)))
    check(mod, [x], [x.mean(axis=(2, 3), keepdims=True)], "Rows")


def test_a_rule_leaves_the_kernel_it_is_given_as_it_was():
    """Each rule schedules its own copy: TVM's schedules change the function they are given
    in place, so a rule that normalized a kernel (or split, or rfactored it) and then declined
    it handed the next rule a changed kernel."""
    x = tvm.te.placeholder((4, 37), name="x")
    func = tvm.te.create_prim_func([x, tvm.topi.nn.softmax(x, axis=-1)])
    before = tvm.ir.load_json(tvm.ir.save_json(func))
    with HOST.tvm_target() as target:
        scheduled = [rule.apply(func, target, False) for rule in cs.default_rules()]
    tvm.ir.assert_structural_equal(func, before)
    assert any(s is not None for s in scheduled)


def test_whatever_no_rule_fits_still_runs_right():
    """Scans, and a product over a row too short for Rows: the fallback's."""
    x, y = data((3, 50)), data((3, 5))
    product = relax_module({"y": ((3, 5), "float32")}, lambda w: relax.op.prod(w, axis=1))
    assert set(rules_of(product).values()) == {"Fallback"}, rules_of(product)
    mod = relax_module({"x": ((3, 50), "float32"), "y": ((3, 5), "float32")}, lambda v, w: [
        relax.op.cumsum(v, axis=1), relax.op.prod(w, axis=1)])
    check(mod, [x, y], [np.cumsum(x, 1), y.prod(1)], rtol=1e-4)


# --- vector math -------------------------------------------------------------------------

SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 88.7, 88.72, 89.0, -87.3, -87.4, -103.0, -200.0,
           np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("name,ulps", [("exp", 2), ("erf", 8), ("tanh", 8), ("sigmoid", 4),
                                       ("sinh", 4), ("cosh", 4)])
def test_vector_math_is_accurate_and_calls_no_libm(name, ulps):
    """float32 exp, erf, tanh and sigmoid of default-scheduled kernels are polynomials that
    vectorize: within a few units in the last place of float64 NumPy, right at inf, NaN,
    overflow and underflow, no scalar libm call per lane, and TVM's vectors of the target's
    width (its vectorizer scalarized a parallel kernel's loop holding TVM's isnan, and LLVM
    vectorized that at half AVX-512's width)."""
    import math
    import re

    xs = np.concatenate([np.linspace(-100, 100, 100001), np.linspace(-6, 6, 100001),
                         SPECIAL]).astype(np.float32)
    mod = relax_module({"x": (xs.shape, "float32")}, lambda v: {
        "exp": relax.op.exp, "erf": relax.op.erf, "tanh": relax.op.tanh,
        "sigmoid": relax.op.sigmoid, "sinh": relax.op.sinh, "cosh": relax.op.cosh}[name](v))
    module = compile_module(mod, HOST)
    assembly = module.library.mod.imports[0].inspect_source("asm")
    assert not {"expf", "erff", "tanhf", "sinhf", "coshf"} & set(
        re.findall(r"call\w*\s+(\w+)", assembly))
    assert "cpu_schedule_rule" in str(_scheduled_kernels(mod))  # not the generic build
    with HOST.tvm_target() as target:
        lanes = cs.vector_lanes(target, "float32")
    code = module.library.mod.imports[0].inspect_source("ll")
    assert f"<{lanes} x float>" in code
    assert not re.findall(r"<(\d+) x float>", code.replace(f"<{lanes} x float>", "")), lanes
    (got,) = module.run([xs])
    x = xs.astype(np.float64)
    with np.errstate(over="ignore"):
        want = {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
                "sinh": np.sinh, "cosh": np.cosh,
                "erf": np.vectorize(lambda v: math.erf(v) if np.isfinite(v) else
                                    (v if np.isnan(v) else np.sign(v)))}[name](x)
        want32 = want.astype(np.float32)  # correctly rounded float32: inf past the top
    special = ~np.isfinite(want32) | (np.abs(want32) < np.finfo(np.float32).tiny)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want32))
    np.testing.assert_array_equal(got[np.isinf(want32)], want32[np.isinf(want32)])
    assert np.all(np.abs(got[special & np.isfinite(want32)]) < 2 * np.finfo(np.float32).tiny)
    ok = ~special
    error = np.abs(got[ok] - want[ok]) / np.spacing(np.abs(want32[ok]))
    assert error.max() <= ulps, (xs[ok][np.argmax(error)], error.max())


@pytest.mark.parametrize("name", ["exp", "erf", "tanh", "sigmoid"])
def test_float16_vector_math_computes_in_float32(name):
    """float16 exp, erf, tanh and sigmoid go through the same float32 polynomials (cast in
    and out), not LLVM's float16 lowering: each within one float16 unit in the last place of
    float64 NumPy's, right at inf and NaN."""
    import math

    xs = np.concatenate([np.linspace(-12, 12, 20001), [0.0, np.inf, -np.inf, np.nan]]).astype(
        np.float16)
    op = {"exp": relax.op.exp, "erf": relax.op.erf, "tanh": relax.op.tanh,
          "sigmoid": relax.op.sigmoid}[name]
    mod = relax_module({"x": (xs.shape, "float16")}, op)
    kernels = _scheduled_kernels(mod)
    rewritten = [cs.vector_math(f).script() for f in kernels.functions.values()
                 if isinstance(f, tvm.tirx.PrimFunc)]
    assert not any(f"T.{name}(" in script for script in rewritten), rewritten
    (got,) = compile_module(mod, HOST).run([xs])
    x = xs.astype(np.float64)
    with np.errstate(over="ignore"):
        want = {"exp": np.exp, "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
                "erf": np.vectorize(lambda v: math.erf(v) if np.isfinite(v) else
                                    (v if np.isnan(v) else np.sign(v)))}[name](x)
        want16 = want.astype(np.float16)  # correctly rounded: inf past float16's top
    assert got.dtype == np.float16
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want16))
    finite = np.isfinite(want16)
    np.testing.assert_array_equal(got[~finite], want16[~finite])
    error = np.abs(got[finite].astype(np.float64) - want[finite]) / np.spacing(
        np.maximum(np.abs(want16[finite]), np.finfo(np.float16).tiny))
    assert error.max() <= 1, (xs[finite][np.argmax(error)], error.max())


def test_bfloat16_math_keeps_its_schedule():
    """bfloat16 exp and tanh stay LLVM's (TVM's legalizing of bfloat16 arithmetic rebinds
    the float32 polynomials' variable, and their build failed): scheduled, and within
    bfloat16's precision of NumPy's."""
    import ml_dtypes

    xs = np.linspace(-8, 8, 4096).astype(ml_dtypes.bfloat16)
    mod = relax_module({"x": (xs.shape, "bfloat16")},
                       lambda v: [relax.op.exp(v), relax.op.tanh(v)])
    x = xs.astype(np.float64)
    check(mod, [xs], [np.exp(x).astype(ml_dtypes.bfloat16), np.tanh(x).astype(ml_dtypes.bfloat16)],
          "Injective", rtol=1e-2, atol=1e-2)


def test_isnan_vectorizes_at_the_targets_width():
    """ONNX's IsNaN (and the NaN tests of the vector math) as a test of the bits, which TVM's
    vectorizer takes (it scalarized a parallel kernel's loop holding TVM's own isnan)."""
    import re

    # NaNs of other payloads and signs too, made as bits.
    xs = np.concatenate([np.linspace(-5, 5, 4096 - len(SPECIAL) - 4, dtype=np.float32),
                         np.array(SPECIAL, np.float32),
                         np.array([0x7F800001, 0x7FFFFFFF, 0xFF800001, 0xFFC00000],
                                  np.uint32).view(np.float32)])
    mod = relax_module({"x": (xs.shape, "float32")}, lambda v: relax.op.isnan(v))
    module = compile_module(mod, HOST)
    with HOST.tvm_target() as target:
        lanes = cs.vector_lanes(target, "bool")  # the output's width sets the vectors'
    code = module.library.mod.imports[0].inspect_source("ll")
    assert f"<{lanes} x i32>" in code, lanes
    assert not re.findall(r"<(\d+) x (?:float|i32)>", code.replace(f"<{lanes} x ", "")), lanes
    (got,) = module.run([xs])
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, np.isnan(xs))


# --- whole builds ------------------------------------------------------------------------

def transformer_block(seq=16, width=64, heads=4):
    """LayerNorm, attention (QKV matmuls, scaled QK^T, softmax, @V), GELU MLP, residuals,
    and its NumPy reference."""
    d = width // heads
    w = {name: data(shape) * 0.2 for name, shape in [
        ("q", (width, width)), ("k", (width, width)), ("v", (width, width)),
        ("o", (width, width)), ("up", (width, 4 * width)), ("down", (4 * width, width))]}
    gamma, beta, bias = data((width,)), data((width,)), data((4 * width,))
    op = relax.op

    def body(x):
        h = op.nn.layer_norm(x, const(gamma), const(beta), axes=[-1])
        def split(t):
            return op.permute_dims(op.reshape(t, (1, seq, heads, d)), (0, 2, 1, 3))
        q, k, v = (split(op.matmul(h, const(w[n]))) for n in "qkv")
        scores = op.multiply(op.matmul(q, op.permute_dims(k, (0, 1, 3, 2))),
                             relax.const(1 / np.sqrt(d), "float32"))
        att = op.matmul(op.nn.softmax(scores, axis=-1), v)
        att = op.reshape(op.permute_dims(att, (0, 2, 1, 3)), (1, seq, width))
        x = op.add(x, op.matmul(att, const(w["o"])))
        up = op.nn.gelu(op.add(op.matmul(x, const(w["up"])), const(bias)))
        return op.add(x, op.matmul(up, const(w["down"])))

    def reference(x):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        h = (x - mean) / np.sqrt(var + 1e-5) * gamma + beta
        split = lambda t: t.reshape(1, seq, heads, d).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = (split(h @ w[n]) for n in "qkv")
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
        e = np.exp(s - s.max(-1, keepdims=True))
        att = (e / e.sum(-1, keepdims=True)) @ v
        x = x + att.transpose(0, 2, 1, 3).reshape(1, seq, width) @ w["o"]
        u = x @ w["up"] + bias
        erf = np.vectorize(__import__("math").erf)
        return x + (0.5 * u * (1 + erf(u / np.sqrt(2)))).astype(np.float32) @ w["down"]

    return relax_module({"x": ((1, seq, width), "float32")}, body), reference


def test_every_kernel_of_a_transformer_block_is_scheduled():
    mod, reference = transformer_block()
    rules = rules_of(mod)
    matmuls = [k for k in rules if "matmul" in k]
    # Seven matmuls, six kernels: q, k and v share one (the weight layouts, folded, are none).
    assert len(matmuls) == 6 and all(rules[k] == "Contraction" for k in matmuls), rules
    assert not [k for k in rules if k.endswith("_weight_prepack")], rules
    assert "Fallback" not in rules.values(), rules
    x = data((1, 16, 64))
    check(mod, [x], [reference(x).astype(np.float32)], rtol=1e-3, atol=1e-3)


@pytest.mark.slow
def test_every_kernel_of_a_small_cnn_is_scheduled():
    mod = build_small_cnn(batch=2).build_module()
    rules = rules_of(mod)
    assert [k for k, r in rules.items() if "conv2d" in k and r != "Contraction"] == []
    assert "Fallback" not in [r for k, r in rules.items() if k != "softmax"], rules
    images = data((2, 3, 32, 32))
    generic = dataclasses.replace(HOST, name="generic", schedules=("database",))
    (expected,) = compile_module(mod, generic).run([images])
    (got,) = compile_module(mod, HOST).run([images])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["x86-64-avx2", "aarch64-linux"])
def test_cross_targets_schedule_every_kernel_too(name):
    spec = targets.get_target(name) if name != "aarch64-linux" else targets.specs.AARCH64_LINUX
    mod, _ = transformer_block(seq=8, width=32, heads=2)
    assert "Contraction" in rules_of(mod, spec).values()
    assert "Contraction" in rules_of(build_small_cnn(batch=1).build_module(), spec).values()
    compile_module(mod, spec)  # and it compiles (aarch64: cross-compiled, not run)


def test_targets_without_default_cpu_schedules_keep_the_generic_build():
    generic = dataclasses.replace(HOST, name="generic", schedules=("database",))
    with generic.tvm_target():
        assert _scheduled(build_small_cnn(batch=1).build_module(), generic, None) is None


def test_a_kernel_whose_schedule_fails_to_build_is_built_unscheduled(monkeypatch, caplog):
    """The code generator refusing one kernel's schedule (here a softmax's loop over rows
    vectorized around its vectorized partial results): that kernel alone is built
    unscheduled, the matmul keeps its schedule and packed weight (the whole module was
    TVM's generic build, its constants inside the library)."""
    rows = cs.Rows.schedule

    def refused(self, sch, func, target):
        if not rows(self, sch, func, target):
            return False
        partials = next(b for b in primitives._root_blocks(sch)
                        if sch.get(b).name_hint.endswith("_rf"))
        sch.vectorize(sch.get_loops(partials)[0])
        return True

    monkeypatch.setattr(cs.Rows, "schedule", refused)
    x, w = data((8, 64)), data((64, 64)) * 0.1
    mod = relax_module({"x": ((8, 64), "float32")},
                       lambda v: relax.op.nn.softmax(relax.op.matmul(v, const(w)), axis=-1))
    with caplog.at_level(logging.WARNING, logger="targets.compiler.pipeline"):
        module = compile_module(mod, HOST)
    assert "the default schedules of softmax fail to build" in caplog.text, caplog.text
    assert "default CPU schedules failed" not in caplog.text
    # Tiles of two vectors of columns (64 columns are 4, 8 or 16 vectors: 3 divides none).
    tile = 2 * cs.vector_lanes(HOST.tvm_target(), "float32")
    assert [np.asarray(weight).shape for weight in module.weights] == [(64 // tile, 64, tile)]
    y = x @ w
    e = np.exp(y - y.max(-1, keepdims=True))
    np.testing.assert_allclose(module.run([x])[0], e / e.sum(-1, keepdims=True), rtol=1e-5,
                               atol=1e-6)


def test_a_module_the_default_schedules_fail_on_compiles_generically(monkeypatch, caplog):
    """A graph pass or the code generator refusing a default build: the generic one instead."""
    import targets.compiler.pipeline as pipeline

    @tvm.transform.module_pass(opt_level=0, name="Refuses")
    def refuses(mod, _ctx):
        raise RuntimeError("no schedule for this")

    monkeypatch.setattr(pipeline, "default_schedules", lambda: refuses)
    x = data((4, 8))
    mod = relax_module({"x": ((4, 8), "float32")}, lambda v: relax.op.nn.relu(v))
    with caplog.at_level(logging.WARNING, logger="targets.compiler.pipeline"):
        module = compile_module(mod, HOST)
    assert "default CPU schedules failed" in caplog.text and "no schedule for this" in caplog.text
    np.testing.assert_array_equal(module.run([x])[0], np.maximum(x, 0))


def test_constant_kernels_fold_as_tvm_folds_them():
    """Weights laid out when compiling (transposes, layouts, chains of them) come out of the
    one-module folding exactly as out of relax's FoldConstant."""
    from targets.compiler.constant_folding import fold_constants

    w = data((8, 3, 3, 5))
    mod = relax_module({"x": ((2, 45), "float32")}, lambda v: relax.op.matmul(
        v, relax.op.reshape(relax.op.permute_dims(relax.op.multiply(
            const(w), relax.const(2.0, "float32")), (3, 1, 2, 0)), (45, 8))))
    with tvm.transform.PassContext(opt_level=3), HOST.tvm_target():
        legal = relax.transform.LegalizeOps()(mod)
        ours, theirs = fold_constants(legal), relax.transform.FoldConstant()(legal)
    assert ours["main"].script().count("R.call_tir") == 1  # the matmul; its weight a constant
    tvm.ir.assert_structural_equal(ours["main"], theirs["main"], map_free_vars=True)


def test_a_product_of_constants_folds_with_numpy_before_any_kernel_is_made():
    """Winograd's weight transform (kron(G, G) times the reshaped taps) leaves a matmul of
    constants: it folds in NumPy with its transpose and reshapes, to relax's values."""
    g, w = data((36, 9)), data((8, 3, 3, 5))
    taps = w.transpose(1, 2, 0, 3).reshape(9, 40)
    mod = relax_module({"x": ((36, 40), "float32")}, lambda v: relax.op.add(v, relax.op.matmul(
        const(g), relax.op.reshape(relax.op.permute_dims(const(w), (1, 2, 0, 3)), (9, 40)))))
    folded = fold_constant_layouts(mod)
    assert "R.matmul" not in folded["main"].script()
    constants = []
    relax.analysis.post_order_visit(folded["main"].body, lambda e: constants.append(e.value)
                                    if isinstance(e, tvm.ir.expr.Constant)
                                    and isinstance(e.value, tvm.runtime.Tensor) else None)
    (product,) = constants
    assert product.dtype == "float32" and tuple(product.shape) == (36, 40)
    np.testing.assert_allclose(product.numpy(), g @ taps, rtol=1e-6, atol=1e-6)
    with tvm.transform.PassContext(opt_level=3), HOST.tvm_target():
        theirs = relax.transform.FoldConstant()(relax.transform.LegalizeOps()(mod))
    x = data((36, 40))
    np.testing.assert_allclose(compile_module(folded, HOST).run([x])[0],
                               compile_module(theirs, HOST).run([x])[0], rtol=1e-6, atol=1e-6)
