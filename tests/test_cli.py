"""The odla-tvm command: info prints versions, devices and targets; and the quickstart example
builds, runs and times its CNN."""

import os
import re
import subprocess
import sys

import pytest
import tvm

import odla_tvm as odla

QUICKSTART = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "examples", "quickstart.py")

# The first op set (issue 2), by ODLA name.
FOUNDATION_OPS = set(
    "Conv DeConv BatchNormalization MaxPool AveragePool Gemm BatchMatMul Relu LeakyRelu Sigmoid "
    "Tanh Gelu Softmax LogSoftmax Add Sub Mul Div Pow Sqrt Exp Log Max Min Abs Neg Clamp Reshape "
    "Transpose Concat Slice Gather Pad Cast ReduceMean ReduceSum ReduceMax Squeeze ExpandDims".split()
)


def _run(*args):
    # The console script lives beside the interpreter in the venv.
    script = os.path.join(os.path.dirname(sys.executable), "odla-tvm")
    done = subprocess.run([script, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_info_prints_versions_devices_and_targets():
    out = _run("info")
    assert f"odla-tvm {odla.__version__}" in out
    assert "ODLA API 0.5.0" in out
    assert f"TVM {tvm.__version__}" in out
    assert re.search(r"DEFAULT \(index 0\): .*GiB, target host-cpu", out)
    assert re.search(r"INTEL_X86 \(index 0\)", out)
    mcpu = tvm.target.codegen.llvm_get_system_cpu()
    assert f"'mcpu': '{mcpu}'" in out and f"'num-cores': {len(os.sched_getaffinity(0))}" in out
    listed = set(re.search(r"ops lowered: \d+: (.*)", out).group(1).split(", "))
    assert FOUNDATION_OPS <= listed, FOUNDATION_OPS - listed


@pytest.mark.slow
def test_quickstart_prints_outputs_and_latency():
    done = subprocess.run([sys.executable, QUICKSTART, "--runs", "3", "--batch", "2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    rows = re.findall(r"image (\d): class (\d) \(p=([0-9.]+)\), probabilities \[([^\]]+)\]", out)
    assert [r[0] for r in rows] == ["0", "1"]
    for _, cls, p, probs in rows:
        values = [float(v) for v in probs.split()]
        assert len(values) == 10 and abs(sum(values) - 1.0) < 1e-3
        assert abs(max(values) - float(p)) < 1e-3 and values.index(max(values)) == int(cls)
    assert re.search(r"latency over 3 runs: median [0-9.]+ ms.*\(batch 2, device DEFAULT", out)
    # TVM's own code (INTEL_X86) too, with the same numbers.
    tvm_only = re.search(r"device INTEL_X86: TVM's own code; max difference from DEFAULT's "
                         r"([0-9.e+-]+)\)", out)
    assert tvm_only and float(tvm_only.group(1)) < 1e-5
