"""Matrix products on AMX tiles (targets.cpu.amx): the bfloat16 parts of a float32 sum to it, the
kernels lay them out as AMX reads them, and where the host has AMX a matmul by constant
weights computes on it with float32's accuracy (against float64 NumPy) and float32's
infinities and NaNs."""

import itertools
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.target.codegen import llvm_lookup_intrinsic_id

import targets
from targets.cpu import amx
from targets.cpu.amx import kernel as amx_kernels, parts as amx_parts, products as amx_rewrite
from targets.compiler import compile_module, default_scheduled, fused_kernels
from targets.tuning.search import _scheduled_already

from test_cpu_schedules import const, relax_module

HOST = targets.host_cpu()
HOST_HAS_AMX = amx.has_amx(HOST.tvm_target())
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_amx = pytest.mark.skipif(not HOST_HAS_AMX, reason="this CPU has no AMX (amx_tile, amx_bf16)")
RNG = np.random.default_rng(11)
SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -3.0, 3.4e38, -1e-30, 1.5e-38],
                   np.float32)


def as_float(parts):
    return (parts.astype(np.uint32) << 16).view(np.float32)


def test_parts_sum_to_the_float32():
    values = np.concatenate([RNG.standard_normal(4000).astype(np.float32) * scale
                             for scale in (1e-20, 1e-3, 1.0, 7e3, 1e30)] + [SPECIAL])
    parts = amx.float32_parts(values)
    assert len(parts) == amx.PARTS and all(p.dtype == np.uint16 for p in parts)
    total = sum(as_float(p).astype(np.float64) for p in parts)
    finite = np.isfinite(values)
    # Exact, but for the smallest normals standing in for a nonzero number's zero parts.
    np.testing.assert_array_less(np.abs(total[finite] - values[finite]), 2.0 ** -124)
    first = as_float(parts[0])
    assert np.array_equal(first[~finite], values[~finite], equal_nan=True)
    for later in parts[1:]:
        assert not as_float(later)[~finite].any()  # infinities and NaNs: the first part alone
        nonzero = finite & (values != 0)
        assert (as_float(later)[nonzero] != 0).all()
        assert (np.signbit(as_float(later)[nonzero]) == np.signbit(values[nonzero])).all()


def test_the_parts_kernel_lays_out_each_values_parts_as_numpy_does():
    """Runs on any CPU: the activations' parts, [M / 16, Kp / 32, parts, 16, 32], computed by
    the scheduled parts kernel from a 37 x 45 matrix holding infinities and NaNs, zeros past
    its edges."""
    rows, depth = 37, 45
    values = RNG.standard_normal((rows, depth)).astype(np.float32)
    values.flat[::97][:SPECIAL.size] = SPECIAL
    kernel, shape = amx.parts_kernel(amx_parts._activation_parts, (rows, depth), 64, 64)
    assert shape == [4, 2, amx.PARTS, 16, 32]
    kernel = amx.scheduled_parts(kernel)
    module = tvm.compile(tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")}),
                         target="llvm")
    got = tvm.runtime.tensor(np.zeros((4, 2, amx.PARTS, 16, 32), np.uint16))
    module["main"](tvm.runtime.tensor(values), got)
    want = np.zeros((amx.PARTS, 64, 64), np.uint16)
    for index, part in enumerate(amx.float32_parts(values)):
        want[index, :rows, :depth] = part
    want = want.reshape(amx.PARTS, 4, 16, 2, 32).transpose(1, 3, 0, 2, 4)
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("stride, padding", [(1, (1, 1)), (2, (1, 0))])
def test_a_windows_parts_are_its_padded_inputs_phases(stride, padding):
    """Runs on any CPU: row (n, i, j) of phase (a, b) holds the parts of padded pixel
    (n, stride i + a, stride j + b), zeros in the padding and past the images."""
    x_shape = (2, 5, 7, 64)
    values = RNG.standard_normal(x_shape).astype(np.float32)
    window = amx.Window(2, -(-(5 + 2 * padding[0]) // stride), -(-(7 + 2 * padding[1]) // stride),
                        2, (3, 3), stride)
    kernel, shape = amx.parts_kernel(amx_parts._window_parts, x_shape, window, padding)
    assert shape == list(window.shape)
    kernel = amx.scheduled_parts(kernel)
    module = tvm.compile(tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")}),
                         target="llvm")
    got = tvm.runtime.tensor(np.full(window.shape, 7, np.uint16))
    module["main"](tvm.runtime.tensor(values), got)
    images = np.zeros((amx.PARTS, 2, window.height * stride, window.width * stride, 64),
                      np.uint16)
    for index, part in enumerate(amx.float32_parts(values)):
        images[index, :, padding[0]:padding[0] + 5, padding[1]:padding[1] + 7] = part
    for a in range(stride):
        for b in range(stride):
            phase = images[:, :, a::stride, b::stride].reshape(amx.PARTS, -1, 2, 32)
            want = np.zeros((window.shape[1], 2, amx.PARTS, 32), np.uint16)
            want[:phase.shape[1]] = phase.transpose(1, 2, 0, 3)
            np.testing.assert_array_equal(got.numpy()[a * stride + b], want)


# Runs a kernel, built as builds build it for this CPU, on its inputs and output each in
# memory with an inaccessible page right before it, then right after it: an access outside
# them ends the process (SIGSEGV), so the script runs in a process of its own. The case, an
# expression: parts(KIND, x dims, *args), a parts kernel of a float32 x; or products(rows,
# depth, columns[, window]), the AMX kernel.
_GUARDED_RUN = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np, tvm
    import targets
    from targets.compiler import codegen
    from targets.cpu import amx
    from targets.cpu.amx import parts as amx_parts

    rng = np.random.default_rng(3)

    def parts(kind, dims, *args):
        kernel, shape = amx.parts_kernel(kind, dims, *args)
        x = rng.standard_normal(dims).astype(np.float32)
        return amx.scheduled_parts(kernel), [x], np.zeros(shape, np.uint16)

    def products(rows, depth, columns, window=None):
        step_blocks, pairs = -(-depth // amx.STEPS), -(-rows // (2 * amx.ROWS))
        a_shape = window.shape if window else (2 * pairs, step_blocks, amx.PARTS, 16, 32)
        b_shape = amx.weight_parts_shape(depth, columns)
        a, b = ((0x3F00 + rng.integers(0, 255, shape)).astype(np.uint16)
                for shape in (a_shape, b_shape))
        return (amx.amx_kernel(rows, depth, columns, window), [a, b],
                np.zeros((rows, columns), np.float32))

    kernel, inputs, output = eval(sys.argv[1], {**vars(amx), **vars(amx_parts), "parts": parts,
                                                "products": products})
    module = codegen.build_kernels(tvm.IRModule({"main": kernel.with_attr(
        "global_symbol", "main")}), targets.host_cpu().tvm_target())
    want = tvm.runtime.tensor(output)
    module["main"](*[tvm.runtime.tensor(x) for x in inputs], want)
    mprotect = ctypes.CDLL(None).mprotect
    mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page, kept = mmap.PAGESIZE, []

    def guarded(values, at_end):
        pages = -(-values.nbytes // page) + 2
        memory = mmap.mmap(-1, pages * page)
        start = ctypes.addressof(ctypes.c_char.from_buffer(memory))
        assert mprotect(start, page, 0) == 0 and mprotect(start + (pages - 1) * page, page, 0) == 0
        offset = (pages - 1) * page - values.nbytes if at_end else page
        x = np.frombuffer(memory, values.dtype, values.size, offset).reshape(values.shape)
        x[...] = values
        kept.append(memory)
        return tvm.runtime.from_dlpack(x)

    for at_end in (False, True):
        got = guarded(output, at_end)
        module["main"](*[guarded(x, at_end) for x in inputs], got)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        print("inside", flush=True)
""")


def run_guarded(case):
    done = subprocess.run([sys.executable, "-c", _GUARDED_RUN, case], cwd=REPO,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, f"exit code {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.split("\n")[:2] == ["inside"] * 2


@pytest.mark.parametrize("case", [
    "parts(_window_parts, (1, 56, 56, 64), Window(1, 58, 58, 2, (3, 3), 1), (1, 1))",
    "parts(_window_parts, (1, 9, 9, 32), Window(1, 6, 6, 1, (3, 3), 2), (1, 1))",
    "parts(_activation_parts, (37, 48), 64, 64)",  # rows and depth padded
    "parts(_pointwise_parts, (1, 7, 7, 64), (1, 1), 64)",
])
def test_a_parts_kernel_reads_nothing_outside_its_input(case):
    """Runs on any CPU. A Select loaded its value in the padding too, at indices whose clamps
    TVM's simplifier dropped: ResNet-50's cached engine crashed one load in six on a Xeon."""
    run_guarded(case)


@needs_amx
@pytest.mark.parametrize("case", [
    "products(37, 100, 48)",  # a block past C's edges, depth padded
    "products(49, 1024, 2048)",  # tasks of columns
    "products(30, 288, 64, Window(1, 6, 6, 1, (3, 3), 2))",
])
def test_an_amx_product_touches_nothing_outside_its_operands(case):
    run_guarded(case)


def _intrinsic_calls(stmt, scalars, loops, conditions, found):
    """Into ``found``: the kernel's LLVM intrinsic calls, each with the scalars stored before it
    (TVMScript's assigned values: one-element buffers, by name), its loops and its conditions."""
    if isinstance(stmt, tirx.SeqStmt):
        scalars = dict(scalars)
        for inner in stmt.seq:
            _intrinsic_calls(inner, scalars, loops, conditions, found)
    elif isinstance(stmt, tirx.BufferStore) and [int(d) for d in stmt.buffer.shape] == [1]:
        scalars[stmt.buffer.name] = stmt.value
    elif isinstance(stmt, tirx.For):
        _intrinsic_calls(stmt.body, scalars, loops + [stmt], conditions, found)
    elif isinstance(stmt, tirx.IfThenElse):
        _intrinsic_calls(stmt.then_case, scalars, loops, conditions + [stmt.condition], found)
        if stmt.else_case is not None:
            _intrinsic_calls(stmt.else_case, scalars, loops,
                             conditions + [tirx.Not(stmt.condition)], found)
    elif isinstance(stmt, tirx.Evaluate) and isinstance(stmt.value, tvm.ir.expr.Call):
        if stmt.value.op.name == "tirx.call_llvm_intrin":
            found.append((stmt.value, scalars, loops, conditions))
    elif hasattr(stmt, "body"):
        _intrinsic_calls(stmt.body, scalars, loops, conditions, found)


def lines_at(kernel, task, block, step_block):
    """What task ``task`` does at step block ``step_block`` of its block ``block``, as sets of
    (buffer, 64-byte line): the lines its tile loads read and those its block's tile stores
    write; and the list of (buffer, line, for writing) it prefetches."""
    prefetch, tile_load, tile_store = (llvm_lookup_intrinsic_id(f"llvm.{name}") for name in (
        "prefetch.p0", "x86.tileloadd64", "x86.tilestored64"))
    found = []
    _intrinsic_calls(kernel.body, {}, [], [], found)
    analyzer = tvm.sym.Analyzer()
    fixed = {"task": task, "block": block, "step_block": step_block}
    read, stored, prefetched = set(), set(), []
    for call, scalars, loops, conditions in found:
        intrinsic = int(call.args[0])
        if intrinsic not in (prefetch, tile_load, tile_store):
            continue
        unrolled = [loop for loop in loops if loop.loop_var.name not in fixed]
        for values in itertools.product(*[range(int(loop.extent)) for loop in unrolled]):
            value_of = {loop.loop_var: tirx.const(fixed.get(loop.loop_var.name, 0),
                                                  loop.min.ty.dtype) for loop in loops}
            value_of.update({loop.loop_var: tirx.const(value, loop.min.ty.dtype)
                             for loop, value in zip(unrolled, values)})

            def known(expr):
                return analyzer.simplify(tvm_ffi.structural_map(expr, [
                    (tvm.ir.expr.TensorLoad, lambda load: known(scalars[load.source.name])
                     if load.source.name in scalars else load),
                    (tirx.Var, lambda var: value_of.get(var, var))]))

            if not all(int(known(condition)) for condition in conditions):
                continue
            load = call.args[1 if intrinsic == prefetch else 2].args[0]  # address_of's
            shape = [int(d) for d in load.source.shape]
            byte = load.ty.dtype.bits // 8 * sum(int(known(index)) * math.prod(
                shape[axis + 1:]) for axis, index in enumerate(load.indices))
            if intrinsic == prefetch:
                prefetched.append((load.source.name, byte // 64, int(call.args[2])))
            else:  # 16 rows, call.args[3] bytes apart
                (read if intrinsic == tile_load else stored).update(
                    (load.source.name, (byte + row * int(known(call.args[3]))) // 64)
                    for row in range(amx.ROWS))
    return read, stored, prefetched


@pytest.mark.parametrize("sizes", [
    (784, 512, 128, None),  # tasks of rows
    (49, 1024, 2048, None),  # tasks of columns
    (3248, 576, 64, amx.Window(1, 58, 58, 2, (3, 3), 1)),  # tasks of rows, a 3x3 window
    (224, 2304, 256, amx.Window(1, 16, 16, 8, (3, 3), 1)),  # tasks of columns, a 3x3 window
])
def test_each_step_block_prefetches_what_the_next_one_reads(sizes):
    """Runs on any CPU (the kernel's TIR, evaluated at a task's first block): between a step
    block's products, the prefetches are the lines of both operands that the next step block's
    tile loads read, each once, a window's rows included, and in the last step block, the
    lines of C the block's tile stores write, for writing. The tile loads waited on L2
    otherwise (ResNet-50 25.10 -> 23.21 ms on a 2-core Xeon)."""
    kernel = amx.amx_kernel(*sizes)
    read_next = lines_at(kernel, 0, 0, 1)[0]
    assert {operand for operand, _ in read_next} == {"a", "b"}
    assert sorted(lines_at(kernel, 0, 0, 0)[2]) == sorted(
        (operand, line, 0) for operand, line in read_next)
    _, stored, prefetched = lines_at(kernel, 0, 0, -(-sizes[1] // amx.STEPS) - 1)
    assert len(stored) == 2 * amx.ROWS * 2 and {buffer for buffer, _ in stored} == {"c"}
    assert sorted(prefetched) == sorted((buffer, line, 1) for buffer, line in stored)


def test_weight_tiles_pair_two_reduction_steps_per_column():
    depth, columns = 70, 40
    weight = RNG.standard_normal((depth, columns)).astype(np.float32)
    tiles = np.full(amx.weight_parts_shape(depth, columns), 7, np.uint16)
    slabs = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(amx_parts, "_SLAB_COLUMNS", 32)  # two slabs: the second holds the edge
        amx.weight_parts(weight, tiles, lambda: slabs.append(1))
    assert len(slabs) == 2
    assert tiles.shape == (64 // 16, 96 // 32, amx.PARTS, 16, 32) and tiles.dtype == np.uint16
    parts = amx.float32_parts(weight)
    for column_block, step_block, part, pair, lane in [(0, 0, 0, 0, 0), (1, 2, 2, 2, 13),
                                                        (2, 1, 1, 15, 31), (3, 0, 0, 3, 9)]:
        k, n = step_block * 32 + pair * 2 + lane % 2, column_block * 16 + lane // 2
        want = parts[part][k, n] if k < depth and n < columns else 0
        assert tiles[column_block, step_block, part, pair, lane] == want


def matmul_module(x_shape, weight):
    return relax_module({"x": (x_shape, "float32")},
                        lambda x: relax.op.nn.relu(relax.op.matmul(x, const(weight))))


def kernel_names(mod, spec=HOST):
    with spec.tvm_target():
        return {gv.name_hint for gv, f in fused_kernels(mod, spec).functions_items()
                if isinstance(f, tvm.tirx.PrimFunc)}


@pytest.fixture
def small_products_on_amx(monkeypatch):
    """The tests' small products taken by AMX too (the rewrite leaves those under MIN_FLOPS)."""
    monkeypatch.setattr(amx_rewrite, "MIN_FLOPS", 0)


def test_only_a_target_with_amx_rewrites_matmuls(small_products_on_amx):
    mod = matmul_module((64, 96), RNG.standard_normal((96, 64)).astype(np.float32))
    avx2 = targets.get_target("x86-64-avx2")
    assert not any(name.startswith("amx") for name in kernel_names(mod, avx2))
    amx_spec = targets.get_target("llvm:sapphirerapids:4")
    assert amx.has_amx(amx_spec.tvm_target())
    assert {"amx_matmul", "amx_parts"} <= kernel_names(mod, amx_spec)


def test_tuning_leaves_the_amx_kernels_alone(small_products_on_amx):
    """The AMX kernel and the parts kernel come scheduled; the ReLU after is tuned."""
    from tvm.s_tir import meta_schedule as ms

    spec = targets.get_target("llvm:sapphirerapids:4")
    mod = matmul_module((64, 96), RNG.standard_normal((96, 64)).astype(np.float32))
    with spec.tvm_target():
        tasks = ms.relax_integration.extract_tasks(fused_kernels(mod, spec), spec.tvm_target())
    kept = sorted(t.task_name for t in tasks if not _scheduled_already(t))
    assert {"amx_matmul", "amx_parts"} <= {t.task_name for t in tasks}
    assert kept == ["relu"]


def two_products_module(activation, rows=64):
    """x @ w1 + bias, ``activation`` (a relax op or None), then @ w2; and float64 NumPy's."""
    w1 = (RNG.standard_normal((96, 64)) * 0.1).astype(np.float32)
    bias = RNG.standard_normal(64).astype(np.float32)
    w2 = (RNG.standard_normal((64, 48)) * 0.1).astype(np.float32)
    mod = relax_module({"x": ((rows, 96), "float32")}, lambda x: relax.op.matmul(activation(
        relax.op.add(relax.op.matmul(x, const(w1)), const(bias))), const(w2)))
    exact_activation = {relax.op.nn.relu: lambda v: np.maximum(v, 0), relax.op.nn.gelu:
                        lambda v: v * 0.5 * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))}
    return mod, lambda x: exact_activation[activation](
        x.astype(np.float64) @ w1 + bias) @ w2.astype(np.float64)


@pytest.mark.parametrize("activation", [relax.op.nn.relu, relax.op.nn.gelu])
def test_the_activation_between_two_products_is_written_as_the_seconds_parts(
        activation, small_products_on_amx):
    """Runs on any CPU (the AMX target's kernels are listed, not run): the bias and the
    activation fuse into the second product's parts kernel, which comes scheduled (its
    vectors, and vector_math's erf for GELU) and which tuning leaves."""
    from tvm.s_tir import meta_schedule as ms

    spec = targets.get_target("llvm:sapphirerapids:4")
    mod, _ = two_products_module(activation)
    with spec.tvm_target():
        kernels = fused_kernels(mod, spec)
        tasks = ms.relax_integration.extract_tasks(kernels, spec.tvm_target())
    fused = {gv.name_hint: f for gv, f in kernels.functions_items()
             if gv.name_hint.startswith("fused_") and "amx_parts" in gv.name_hint}
    assert len(fused) == 1, sorted(gv.name_hint for gv in kernels.get_global_vars())
    [(name, kernel)] = fused.items()
    assert activation.__name__ in name and "add" in name
    assert kernel.attrs["tirx.is_scheduled"] and kernel.attrs["cpu_schedule_rule"] == "AMX parts"
    script = kernel.script()
    assert "T.vectorized" in script and "T.parallel" in script and "T.unroll" in script
    blocks = [line.split('"')[1] for line in script.splitlines()
              if line.lstrip().startswith("with T.sblock(")]
    assert blocks == ["amx_parts"]  # the bias and the activation computed within
    assert [t.task_name for t in tasks if not _scheduled_already(t)] == []
    with spec.tvm_target():  # GELU's erf written as vector arithmetic, not called a lane
        assert "erf" not in default_scheduled(kernels, spec)[name].script()


@needs_amx
@pytest.mark.parametrize("activation", [relax.op.nn.relu, relax.op.nn.gelu])
def test_two_products_with_an_activation_between_match_float64(activation,
                                                               small_products_on_amx):
    mod, exact = two_products_module(activation, rows=70)
    x = RNG.standard_normal((70, 96)).astype(np.float32)
    (got,) = compile_module(mod, HOST).run([x])
    assert got.shape == (70, 48) and got.dtype == np.float32
    np.testing.assert_allclose(got, exact(x), rtol=1e-5, atol=4e-6)


@needs_amx
@pytest.mark.parametrize("x_shape, columns", [
    ((64, 96), 64), ((2, 37, 72), 50), ((1, 128, 768), 96),
    # Fewer columns than a block, in tasks of rows: every block goes through the stack's
    # staged block, which TVM shrinks to what its reads cover where it can bound them, though
    # the tile stores write all of it (a prototype crashed so).
    ((300, 64), 16)])
def test_amx_matmul_has_float32_accuracy(x_shape, columns, small_products_on_amx):
    weight = (RNG.standard_normal((x_shape[-1], columns)) * 0.05).astype(np.float32)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    mod = matmul_module(x_shape, weight)
    names = kernel_names(mod)
    assert "amx_matmul" in names and any(name.endswith("amx_parts") for name in names)
    (got,) = compile_module(mod, HOST).run([x])
    exact = np.maximum(x.astype(np.float64) @ weight.astype(np.float64), 0)
    float32_error = np.abs(np.maximum(x @ weight, 0) - exact).max()
    assert got.shape == exact.shape and got.dtype == np.float32
    assert np.abs(got - exact).max() <= 4 * float32_error + 1e-7


@needs_amx
def test_amx_matmul_gives_float32s_infinities_and_nans(small_products_on_amx):
    depth, columns = 64, 48
    # Weights bfloat16 holds exactly (their low parts zero) and zeros, among others.
    weight = RNG.integers(-4, 5, (depth, columns)).astype(np.float32) / 4
    weight[:, :16] = RNG.standard_normal((depth, 16)).astype(np.float32)
    x = RNG.standard_normal((40, depth)).astype(np.float32)
    x[0, 3], x[1, 5], x[2, 7], x[3, 9] = np.inf, -np.inf, np.nan, 3e38
    x[4, :2] = [np.inf, -np.inf]
    mod = relax_module({"x": ((40, depth), "float32")},
                       lambda v: relax.op.matmul(v, const(weight)))
    (got,) = compile_module(mod, HOST).run([x])
    with np.errstate(invalid="ignore", over="ignore"):
        want = x @ weight
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    np.testing.assert_array_equal(np.signbit(got[np.isinf(got)]), np.signbit(want[np.isinf(want)]))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)


@needs_amx
def test_a_matmul_of_fewer_rows_than_a_task_keeps_the_float32_kernels(small_products_on_amx):
    mod = matmul_module((1, 16, 64), RNG.standard_normal((64, 64)).astype(np.float32))
    assert not any(name.startswith("amx") for name in kernel_names(mod))


@needs_amx
def test_little_arithmetic_keeps_the_float32_kernels():
    small = matmul_module((64, 96), RNG.standard_normal((96, 64)).astype(np.float32))
    assert not any(name.startswith("amx") for name in kernel_names(small))
    large = matmul_module((128, 512), RNG.standard_normal((512, 512)).astype(np.float32))
    assert 2 * 128 * 512 * 512 >= amx.MIN_FLOPS and "amx_matmul" in kernel_names(large)


def conv_module(x_shape, weight, strides, padding):
    """An NHWC convolution by OHWI weights made from OIHW constants (as the layouts pass does)."""
    oihw = const(np.ascontiguousarray(weight.transpose(0, 3, 1, 2)))
    return relax_module({"x": (x_shape, "float32")}, lambda x: relax.op.nn.conv2d(
        x, relax.op.permute_dims(oihw, [0, 2, 3, 1]), strides=strides, padding=padding,
        data_layout="NHWC", kernel_layout="OHWI"))


def numpy_conv(x, weight, strides, padding):
    """NHWC by OHWI in float64, zero padding [top, left, bottom, right]."""
    _, kernel_h, kernel_w, _ = weight.shape
    padded = np.pad(x.astype(np.float64), [(0, 0), (padding[0], padding[2]),
                                           (padding[1], padding[3]), (0, 0)])
    out_h = (padded.shape[1] - kernel_h) // strides[0] + 1
    out_w = (padded.shape[2] - kernel_w) // strides[1] + 1
    out = np.zeros((x.shape[0], out_h, out_w, weight.shape[0]))
    for kh in range(kernel_h):
        for kw in range(kernel_w):
            window = padded[:, kh:kh + strides[0] * out_h:strides[0],
                            kw:kw + strides[1] * out_w:strides[1], :]
            out += window @ weight[:, kh, kw, :].astype(np.float64).T
    return out


@needs_amx
@pytest.mark.parametrize("x_shape, out_channels, strides", [
    ((1, 9, 11, 64), 48, (1, 1)), ((2, 14, 14, 96), 64, (2, 2)),
    ((1, 17, 17, 32), 40, (1, 1))])  # 10 tasks of rows across the columns, both edges partial
def test_a_1x1_convolution_on_amx_matches_float64(x_shape, out_channels, strides,
                                                  small_products_on_amx):
    weight = (RNG.standard_normal((out_channels, 1, 1, x_shape[-1])) * 0.1).astype(np.float32)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    mod = conv_module(x_shape, weight, strides, [0, 0, 0, 0])
    assert "amx_matmul" in kernel_names(mod)
    (got,) = compile_module(mod, HOST).run([x])
    exact = numpy_conv(x, weight, strides, [0, 0, 0, 0])
    assert got.shape == exact.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=2e-6)


@needs_amx
@pytest.mark.parametrize("x_shape, out_channels, kernel, strides, padding", [
    ((1, 14, 14, 64), 48, 3, (1, 1), [1, 1, 1, 1]),  # C's columns past the edge
    ((2, 9, 11, 32), 64, 3, (1, 1), [0, 0, 0, 0]),  # two images, no padding
    ((1, 15, 13, 64), 32, 3, (2, 2), [1, 1, 1, 1]),  # four phases, odd sizes
    ((1, 16, 16, 32), 32, 3, (2, 2), [0, 1, 1, 0]),  # padding on two sides only
    ((1, 32, 32, 32), 40, 3, (2, 2), [1, 1, 1, 1]),  # four phases in tasks of rows (10)
    ((1, 12, 10, 32), 40, 5, (1, 1), [2, 2, 2, 2]),
    ((1, 20, 20, 32), 32, 1, (1, 1), [1, 1, 1, 1])])  # a padded 1x1 one: a 1-tap window
def test_a_windowed_convolution_on_amx_matches_float64(x_shape, out_channels, kernel, strides,
                                                       padding, small_products_on_amx):
    weight = (RNG.standard_normal((out_channels, kernel, kernel, x_shape[-1]))
              * 0.1).astype(np.float32)
    x = RNG.standard_normal(x_shape).astype(np.float32)
    mod = conv_module(x_shape, weight, strides, padding)
    assert "amx_matmul" in kernel_names(mod)
    (got,) = compile_module(mod, HOST).run([x])
    exact = numpy_conv(x, weight, strides, padding)
    assert got.shape == exact.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=4e-6)


@pytest.mark.parametrize("strides, dilation, groups", [((3, 3), 1, 1), ((1, 2), 1, 1),
                                                       ((1, 1), 2, 1), ((1, 1), 1, 2)])
def test_a_convolution_amx_does_not_take_keeps_its_float32_kernels(strides, dilation, groups,
                                                                   small_products_on_amx):
    """Strides other than 1 or 2 in both directions, dilations and groups stay float32."""
    weight = const(RNG.standard_normal((64, 64 // groups, 3, 3)).astype(np.float32))
    mod = relax_module({"x": ((1, 14, 14, 64), "float32")}, lambda x: relax.op.nn.conv2d(
        x, relax.op.permute_dims(weight, [0, 2, 3, 1]), strides=strides, padding=[1, 1, 1, 1],
        dilation=dilation, groups=groups, data_layout="NHWC", kernel_layout="OHWI"))
    assert not any(name.startswith("amx") for name in kernel_names(
        mod, targets.get_target("llvm:sapphirerapids:4")))


@needs_amx
def test_a_first_load_leaves_no_cycle_holding_its_graph(tmp_path, small_products_on_amx):
    """Parsing the AMX kernel (TVMScript) keeps the compile's frames in a cycle, and with them
    the graph and its weights: the load collects it (pure-TVM BERT-base kept 340 MB so)."""
    import gc
    import types

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import odla_tvm as odla

    weight = RNG.standard_normal((96, 80)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (33, 96))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (33, 80))],
        [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "matmul.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    amx_kernels._amx_template.cache_clear()  # parsed in this load
    amx.amx_kernel.cache_clear()
    gc.collect()
    session = odla.Session.from_onnx(str(path), odla.allocate_device(
        device_name=odla.DeviceName.INTEL_X86), engine_cache=True, cache_dir=tmp_path)
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection would free, kept to look at
    try:
        gc.collect()
        held = [type(o).__name__ for o in gc.garbage
                if isinstance(o, (types.FrameType, tvm.IRModule, tvm.ir.expr.Constant))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert held == []
    x = RNG.standard_normal((33, 96)).astype(np.float32)
    (got,) = session.run({"x": x})
    np.testing.assert_allclose(got, x.astype(np.float64) @ weight, rtol=1e-5, atol=1e-5)
