"""The cuda target on a machine without a GPU: a small CNN and a transformer block compile for
it with every kernel scheduled (bound to GPU threads), a cuda bundle holds what odla_runner
needs and its runner fails cleanly without a GPU, and NVIDIA_GPU's device info comes from the
CUDA driver (a stand-in driver here)."""

import json
import os
import shutil
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
from examples.quickstart import build_small_cnn
from targets.cuda.kernels import default_gpu_kernels, unscheduled_kernels
from targets.compiler import fused_kernels

CUDA = targets.get_target("cuda")
# TVM's CUDA build runs nvcc: without it nothing compiles for the target (CI has it).
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not os.path.exists(
    "/usr/local/cuda/bin/nvcc"), reason="nvcc (the CUDA toolkit) is not installed here, so "
    "nothing compiles for the cuda target")


def transformer_block(seq: int = 16, hidden: int = 64, heads: int = 4, ffn: int = 128):
    """One encoder block (BERT's): attention of ``heads`` heads, then a GELU feed-forward,
    each added to its input and layer-normalised; seeded weights."""
    rng = np.random.default_rng(0)

    def const(*shape):
        data = (rng.standard_normal(shape) * 0.1).astype(np.float32)
        return odla.create_constant(VT(E.FLOAT32, shape), data)

    def dense(x, inputs, outputs):
        return odla.gemm(x, False, const(inputs, outputs), False, 1.0, 1.0, const(outputs))

    def norm(x):
        return odla.layer_norm(x, 1, (1,), 1e-5, const(hidden), const(hidden))

    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (seq, hidden)), "x")
    q, k, v = (odla.transpose(odla.reshape(dense(x, hidden, hidden), (seq, heads, -1)),
                              (1, 0, 2)) for _ in range(3))
    attention = odla.softmax(odla.batch_mat_mul(q, False, k, True), -1)
    mixed = odla.transpose(odla.batch_mat_mul(attention, False, v, False), (1, 0, 2))
    h = norm(odla.add(x, dense(odla.reshape(mixed, (seq, hidden)), hidden, hidden)))
    feed_forward = dense(odla.gelu(dense(h, hidden, ffn)), ffn, hidden)
    odla.set_value_as_output(norm(odla.add(h, feed_forward)))
    return comp


@pytest.mark.parametrize("build", [build_small_cnn, transformer_block], ids=["cnn", "block"])
def test_every_kernel_of_a_default_cuda_build_is_scheduled(build):
    comp = build()
    mod = comp.build_module()
    kernels = default_gpu_kernels(mod, CUDA)
    assert any(isinstance(f, tvm.tirx.PrimFunc) for _, f in kernels.functions_items())
    assert unscheduled_kernels(kernels) == []
    module = targets.compile_module(mod, CUDA)
    device_code = [m for m in module.library.mod.imports[0].imports if m.kind == "cuda"]
    # Every kernel the build calls is GPU code.
    assert device_code and module.kernel_bindings and all(
        name in device_code[0].inspect_source() for name in module.kernel_bindings)
    odla.destroy_computation(comp)


def roi_align():
    """ROI pooling: a reduction over a window found at run time, whose reads dlight's
    Reduction rule asserts against (every CUDA build holding one failed)."""
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (1, 4, 10, 10)), "x")
    rois = odla.create_argument(VT(E.FLOAT32, (3, 5)), "rois")
    odla.set_value_as_output(odla.roi_align(x, odla.MemoryLayout.CHANNELS_FIRST, rois, 2, 1.0,
                                            (3, 4, 5, 5)))
    return comp


def test_a_kernel_dlight_cannot_analyse_is_scheduled_by_the_next_rule():
    comp = roi_align()
    assert unscheduled_kernels(default_gpu_kernels(comp.build_module(), CUDA)) == []
    assert targets.compile_module(comp.build_module(), CUDA).kernel_bindings
    odla.destroy_computation(comp)


def test_the_check_names_a_kernel_left_unscheduled():
    comp = build_small_cnn()
    with CUDA.tvm_target():
        kernels = fused_kernels(comp.build_module(), CUDA)  # no schedule applied
    unscheduled = unscheduled_kernels(kernels)
    assert unscheduled and set(unscheduled) <= {gv.name_hint for gv, _ in kernels.functions_items()}
    odla.destroy_computation(comp)


def test_a_cuda_bundle_carries_the_cuda_runtime_and_its_runner_says_no_gpu(tmp_path):
    bundle = odla.export(build_small_cnn(), "cuda", tmp_path / "cnn", with_runner=True)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["device_kind"] == "cuda" and "model.so" in manifest["files"]
    assert (bundle / "lib" / "libtvm_runtime_cuda.so").is_file()
    np.save(tmp_path / "image.npy", np.zeros((1, 3, 32, 32), np.float32))
    done = subprocess.run([str(bundle / "bin" / "odla_runner"), str(bundle), str(tmp_path),
                           str(tmp_path / "image.npy")], capture_output=True, text=True)
    if _gpu_here():
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "probabilities.npy").is_file()
    else:
        assert done.returncode == 1 and "no CUDA device" in done.stderr, done.stderr


def _gpu_here() -> bool:
    try:
        return bool(targets.cuda.cuda_devices())
    except targets.cuda.CudaUnavailable:
        return False


# The driver calls targets.cuda.devices makes, answering as one H100 would.
STAND_IN_DRIVER = r"""
#include <string.h>
#include <stddef.h>
int cuInit(unsigned flags) { return 0; }
int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
int cuDeviceGetCount(int* n) { *n = 1; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return i == 0 ? 0 : 101; }
int cuDeviceGetName(char* s, int len, int d) { strncpy(s, "NVIDIA H100 80GB HBM3", len); return 0; }
int cuDeviceTotalMem_v2(size_t* b, int d) { *b = (size_t)85031714816; return 0; }
int cuDeviceGetUuid_v2(char* u, int d) { memset(u, 7, 16); return 0; }
int cuDeviceGetAttribute(int* v, int attr, int d) { *v = attr == 75 ? 9 : 0; return 0; }
"""


def test_info_reports_a_cuda_device_through_odla_device_info(tmp_path):
    source = tmp_path / "driver.c"
    source.write_text(STAND_IN_DRIVER)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(source)],
                   check=True)
    script = textwrap.dedent("""
        import odla_tvm as odla
        from odla_tvm import DeviceInfo, DeviceName
        from odla_tvm.cli import main
        assert DeviceName.NVIDIA_GPU in odla.available_devices()
        gpu = odla.allocate_device(device_name=DeviceName.NVIDIA_GPU)
        print(odla.get_device_info(gpu, DeviceInfo.TOTAL_MEMORY),
              odla.get_device_info(gpu, DeviceInfo.DRIVER_VERSION), gpu.target.name)
        main(["info"])
    """)
    env = {**os.environ, "LD_LIBRARY_PATH": f"{tmp_path}:{os.environ.get('LD_LIBRARY_PATH', '')}"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "85031714816 CUDA driver 13.0 cuda" in done.stdout
    assert "NVIDIA_GPU (index 0): NVIDIA H100 80GB HBM3, compute capability 9.0" in done.stdout


def test_without_a_driver_info_says_there_is_no_cuda_device():
    if _gpu_here():
        pytest.skip("this machine has a CUDA device")
    assert odla.DeviceName.NVIDIA_GPU not in odla.available_devices()
    with pytest.raises(odla.OdlaError, match="no CUDA device"):
        odla.allocate_device(device_name=odla.DeviceName.NVIDIA_GPU)
