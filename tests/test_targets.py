"""Target specs: the host CPU, a generic AVX2 x86-64 CPU, aarch64 Linux and CUDA; a CNN
compiles for each on this machine, runs where it can and agrees with the host CPU; and the
runtime's lean run path (staged inputs, copied outputs) keeps results right."""

import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tvm

import odla_tvm as odla
import targets
from odla_tvm import ElementType as E
from odla_tvm import ValueType as VT
from odla_tvm.device import default_plugin_missing
from targets.compiler import compile_module

from examples.quickstart import build_small_cnn

HAS_AVX2 = targets.get_target("x86-64-avx2").runs_here()
HAS_GPU = tvm.cuda(0).exist


@pytest.fixture(scope="module")
def cnn():
    """The demo CNN's module, an input and the host CPU's result."""
    mod = build_small_cnn(batch=1).build_module()
    images = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (expected,) = compile_module(mod, targets.host_cpu()).run([images])
    return mod, images, expected


def test_builtin_targets_describe_what_they_compile_to():
    names = {spec.name for spec in targets.available_targets()}
    assert {"host-cpu", "x86-64-avx2", "cuda"} <= names
    assert "aarch64-linux" in names or os.uname().machine == "aarch64"
    host = targets.get_target("host-cpu")
    assert host.target["mcpu"] == tvm.target.codegen.llvm_get_system_cpu()
    assert host.schedules == ("database", "cpu-default") and host.runs_here()
    avx2 = targets.get_target("x86-64-avx2")
    assert avx2.target["mcpu"] == "x86-64-v3" and avx2.cpu_flags == ("avx2", "fma")
    cuda = targets.get_target("cuda")
    assert cuda.target == {"kind": "cuda", "arch": "sm_90"} and cuda.device_kind == "cuda"
    assert cuda.schedules == ("database", "dlight") and cuda.runs_here() == HAS_GPU
    # The key is what stored code is checked against: distinct per target, stable per spec
    # (apart from llvm:MCPU:CORES of this very CPU, which other tests may have named: the same
    # target as host-cpu).
    named = [s for s in targets.available_targets() if not s.name.startswith("llvm:")]
    assert len({spec.key() for spec in named}) == len(named)
    assert host.key() == str(host.tvm_target())


def test_a_spec_names_only_known_schedule_sources():
    with pytest.raises(ValueError, match="unknown schedule sources \\['vendor'\\]"):
        dataclasses.replace(targets.host_cpu(), name="odd", schedules=("vendor",))


def test_cnn_compiles_for_cuda_without_a_gpu(cnn):
    mod, _, _ = cnn
    module = compile_module(mod, targets.get_target("cuda"))
    host_code = module.library.mod.imports[0]
    device_code = [m for m in host_code.imports if m.kind == "cuda"]
    assert host_code.kind == "llvm" and device_code, [m.kind for m in host_code.imports]
    # dlight scheduled every fused kernel: the GPU code has one entry per kernel.
    assert module.kernel_bindings and all(
        name in device_code[0].inspect_source() for name in module.kernel_bindings)
    assert module.tuned_kernels == []  # no tuning records were given


def test_a_gather_compiles_for_cuda_without_a_gpu():
    """A checked gather's kernel calls back to the host for a bad index, which GPU code
    cannot: on CUDA it addresses a safe row instead (no read out of bounds), and compiles."""
    comp = odla.create_computation()
    table = odla.create_argument(VT(E.FLOAT32, (10, 4)), "table")
    ids = odla.create_argument(VT(E.INT64, (3,)), "ids")
    odla.set_value_as_output(odla.gather(table, ids, 0))
    module = compile_module(comp.build_module(), targets.get_target("cuda"))
    odla.destroy_computation(comp)
    assert [m.kind for m in module.library.mod.imports[0].imports if m.kind == "cuda"]


def test_cnn_compiles_for_aarch64_on_this_machine(cnn):
    mod, _, _ = cnn
    spec = targets.specs.AARCH64_LINUX
    module = compile_module(mod, spec)
    assembly = module.library.mod.imports[0].inspect_source("asm")
    assert "fmla" in assembly or "fmul" in assembly  # Arm floating-point instructions
    if os.uname().machine != "aarch64":
        with pytest.raises(RuntimeError, match="cannot run on this"):
            module.run([np.zeros((1, 3, 32, 32), np.float32)])


@pytest.mark.skipif(not HAS_AVX2, reason="this CPU lacks AVX2 or FMA: x86-64-avx2 code cannot "
                    "run here (it is still compiled by test_builtin_targets)")
def test_generic_avx2_code_runs_here_and_matches_the_host(cnn):
    mod, images, expected = cnn
    module = compile_module(mod, targets.get_target("x86-64-avx2"))
    kernels = module.library.mod.imports[0]  # the first kernel's code, importing the others'
    code = [m.inspect_source("asm") for m in (kernels, *kernels.imports) if m.kind == "llvm"]
    assert len(code) > 1 and any("vfmadd" in asm for asm in code)  # FMA in use
    np.testing.assert_allclose(module.run([images])[0], expected, rtol=1e-5, atol=1e-6)


def test_host_kernels_are_built_in_groups_and_the_library_runs_them_all(tmp_path):
    """targets.compiler.codegen builds a CPU module's kernels in groups (in a pool of threads), the
    first group's library importing the others': in memory and once exported and loaded,
    the module runs every kernel and matches NumPy."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (4, 16)), "x")
    hidden = odla.tanh(odla.gemm(x, False, odla.create_constant(VT(E.FLOAT32, (16, 8)), w),
                                 False, 1.0, 0.0))
    odla.set_value_as_output(odla.softmax(odla.sigmoid(hidden), -1, "y"))
    module = odla.compile_computation(
        comp, odla.allocate_device(device_name=odla.DeviceName.INTEL_X86)).module
    first = module.library.mod.imports[0]
    libraries = [m for m in (first, *first.imports) if m.kind == "llvm"]
    assert 1 < len(libraries) <= len(module.kernel_bindings)
    data = rng.standard_normal((4, 16)).astype(np.float32)
    logits = 1 / (1 + np.exp(-np.tanh(data @ w)))
    expected = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    module.export(str(tmp_path / "m.so"))
    loaded = targets.CompiledModule.load(str(tmp_path / "m.so"), module.spec,
                                         weights=module.weights)
    for out in (module.run([data])[0], loaded.run([data])[0]):
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
        assert out.dtype == np.float32 and out.shape == (4, 8)


@pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU on this machine: the CUDA module is "
                    "compiled (test_cnn_compiles_for_cuda_without_a_gpu) but cannot run")
def test_cuda_module_runs_and_matches_the_cpu(cnn):
    mod, images, expected = cnn
    module = compile_module(mod, targets.get_target("cuda"))
    np.testing.assert_allclose(module.run([images])[0], expected, rtol=1e-4, atol=1e-5)


def test_runs_copy_results_and_reuse_staging_correctly():
    """Outputs never alias inputs (a reshape returns a view in TVM), staged input buffers
    follow new shapes and new data, and the same array runs again with its new contents."""
    comp = odla.create_computation()
    odla.set_computation_item(comp, odla.ItemType.DYNAMIC_BATCH, True)
    x = odla.create_argument(VT(E.FLOAT32, (-1, 4)), "x")
    odla.set_values_as_output([odla.reshape(x, (-1, 2, 2)), odla.add(x, x)])
    module = odla.compile_computation(comp).module
    raw = np.arange(9, dtype=np.float32)
    unaligned = raw[1:] if raw.ctypes.data % 64 == 0 else raw[:8]  # never 64-byte aligned
    unaligned = unaligned.reshape(2, 4)
    view, _ = module.run([unaligned])
    np.testing.assert_array_equal(view.reshape(2, 4), unaligned)
    view[...] = -1
    assert (unaligned >= 0).all()  # the result was a copy
    unaligned += 1  # the same array, new contents
    np.testing.assert_array_equal(module.run([unaligned])[1], 2 * unaligned)
    three = np.full((3, 4), 7, np.float32)
    np.testing.assert_array_equal(module.run([three])[1], 14 * np.ones((3, 4)))
    np.testing.assert_array_equal(module.run([unaligned])[1], 2 * unaligned)


def test_run_time_parameter_checks_compile_for_cuda_without_a_gpu():
    """The checks of a slice's run-time sizes and steps and of an integer division's
    divisors (zero, and the least value by -1) are counting kernels and host calls, which
    CUDA code compiles."""
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (4, 6)), "x")
    start, size, stride = (odla.create_argument(VT(E.INT64, (2,)), n)
                           for n in ("start", "size", "stride"))
    a = odla.create_argument(VT(E.INT32, (8,)), "a")
    b = odla.create_argument(VT(E.INT32, (8,)), "b")
    odla.set_values_as_output([odla.slice_dynamic(x, start, size, stride), odla.div(a, b)])
    module = compile_module(comp.build_module(), targets.get_target("cuda"))
    odla.destroy_computation(comp)
    assert [m.kind for m in module.library.mod.imports[0].imports if m.kind == "cuda"]


_POOL_SPIN_SCRIPT = textwrap.dedent("""
    import os, sys
    import numpy as np
    import odla_tvm as odla
    from odla_tvm import ElementType as E, MemoryLayout as L, ValueType as VT

    def spin():
        print(os.environ["TVM_THREAD_POOL_SPIN_COUNT"])

    def compiled(build):
        comp = odla.create_computation()
        x = odla.create_argument(VT(E.FLOAT32, (1, 8, 4, 4)), "x")
        odla.set_value_as_output(build(x))
        return odla.compile_computation(comp, odla.allocate_device())

    def run(exe):
        odla.Session(exe).run({"x": np.ones((1, 8, 4, 4), np.float32)})

    ones = lambda *shape: odla.create_constant(VT(E.FLOAT32, shape), np.ones(shape, np.float32))
    if sys.argv[1] == "load":
        run(odla.load_executable(sys.argv[2]))
        spin()
    else:
        spin()
        matmul = compiled(lambda x: odla.gemm(odla.reshape(x, (8, 16)), False, ones(16, 16),
                                              False, 1.0, 0.0))
        run(matmul)
        spin()
        conv = compiled(lambda x: odla.conv(x, L.CHANNELS_FIRST, 1, ones(8, 8, 1, 1), L.OIS,
                                            (1, 1), (1, 1), (0, 0), (0, 0)))
        assert conv.module.vendor_regions
        spin()
        odla.store_executable(sys.argv[2], conv)
""")


def _pool_spin(env: dict, path) -> list[str]:
    """TVM_THREAD_POOL_SPIN_COUNT in a new process: at first, after DEFAULT compiled and ran a
    matmul (left to TVM) and after it compiled a convolution (taken by oneDNN), stored at
    ``path``; then in another new process after loading and running that convolution."""
    spins = []
    for step in ("compile", "load"):
        done = subprocess.run([sys.executable, "-c", _POOL_SPIN_SCRIPT, step, str(path)],
                              capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        spins += done.stdout.split()
    return spins


@pytest.mark.skipif(default_plugin_missing() is not None, reason="DEFAULT has no oneDNN here")
@pytest.mark.slow
def test_the_thread_pool_spins_as_what_runs_wants_unless_told_otherwise(tmp_path):
    """A process that runs oneDNN's regions runs TVM's pool without polling for the next
    kernel (its polls slowed the oneDNN region after it; targets.plugins.onednn), one that runs
    TVM's code alone polls 10,000 times (a graph DEFAULT leaves to TVM among them: no spin had
    slowed it), whether it compiles the module or loads it; a user's
    TVM_THREAD_POOL_SPIN_COUNT stands in all."""
    env = {k: v for k, v in os.environ.items() if k != "TVM_THREAD_POOL_SPIN_COUNT"}
    assert _pool_spin(env, tmp_path / "a.odla") == ["10000", "10000", "0", "0"]
    assert _pool_spin({**env, "TVM_THREAD_POOL_SPIN_COUNT": "300000"},
                      tmp_path / "b.odla") == ["300000"] * 4
