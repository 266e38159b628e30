"""Performance monitoring: per-kernel times of real runs mapped back to ODLA values, as a
Chrome trace and a text summary."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import Status

from examples.quickstart import build_small_cnn


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    comp = build_small_cnn(batch=2)
    # TVM's own kernels, each mapped to the values it computes (a oneDNN region computes many).
    device = odla.allocate_device(device_name=odla.DeviceName.INTEL_X86)
    exe = odla.compile_computation(comp, device)
    ctx = odla.create_context()
    images = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    odla.bind_to_argument(comp.args[0], images, ctx)
    odla.launch_executable(exe, ctx)
    expected = odla.get_value_data(comp.outputs[0], None, ctx)
    odla.start_device_profiler(device)
    for _ in range(3):
        odla.launch_executable(exe, ctx)
    odla.stop_device_profiler(device)
    odla.launch_executable(exe, ctx)  # after stop: not recorded
    trace = odla.retrieve_device_trace(device)
    return comp, trace, ctx, expected


def test_profiled_runs_still_compute_the_same(profiled):
    comp, trace, ctx, expected = profiled
    np.testing.assert_array_equal(odla.get_value_data(comp.outputs[0], None, ctx), expected)


def test_trace_maps_kernels_to_odla_values(profiled):
    comp, trace, ctx, expected = profiled
    assert len(trace.runs) == 3
    kernels = [e for e in trace.events if not e.name.startswith("vm.")]
    conv_ids = {v.id for v in comp._values.values() if v.id.startswith("conv")}
    assert conv_ids and conv_ids <= {v for e in kernels for v in e.values}
    softmax = [e for e in kernels if e.name == "softmax"]
    assert len(softmax) == 3 and all(e.values == ("probabilities",) for e in softmax)
    # Every call lies inside its run, and calls of one run never overlap.
    for run, (start, duration) in enumerate(trace.runs):
        calls = sorted((e for e in trace.events if e.run == run), key=lambda e: e.start_s)
        assert calls[0].start_s >= start and calls[-1].start_s + calls[-1].duration_s <= start + duration
        assert all(a.start_s + a.duration_s <= b.start_s for a, b in zip(calls, calls[1:]))
    assert 0 < trace.kernel_time_s <= trace.run_time_s


def test_chrome_trace_and_summary(profiled, tmp_path):
    comp, trace, ctx, expected = profiled
    path = tmp_path / "trace.json"
    trace.save(path)
    events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} == {"run", "kernel", "builtin"}
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    # Each kernel span names the ODLA values it computes (not the longest one: which kernel
    # takes longest is timing, which a loaded machine reorders).
    named = [e["args"]["odla_values"] for e in spans if e["cat"] == "kernel"]
    assert all(named) and any(values[0].startswith("conv") for values in named)
    summary = trace.summary(top=5)
    assert "3 runs" in summary and "ms run time" in summary
    assert len(summary.splitlines()) == 3 + 5


def test_profiler_state_errors():
    device = odla.allocate_device(None, odla.DeviceName.INTEL_X86, 0)
    odla.start_device_profiler(device)
    with pytest.raises(odla.OdlaError) as err:
        odla.retrieve_device_trace(device)
    assert err.value.status == Status.INVALID_PARAM and "still running" in str(err.value)
    odla.stop_device_profiler(device)
    with pytest.raises(odla.OdlaError) as err:
        odla.stop_device_profiler(device)
    assert "not running" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.start_device_profiler("toaster")  # device names are strings too; not this one
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE and "INTEL_X86" in str(err.value)
    with pytest.raises(odla.OdlaError) as err:
        odla.start_device_profiler(3.5)
    assert err.value.status == Status.INVALID_PARAM and "expected a Device" in str(err.value)


@pytest.mark.slow
def test_profile_command(tmp_path):
    script = os.path.join(os.path.dirname(sys.executable), "odla-tvm")
    out = tmp_path / "trace.json"
    builder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "examples", "quickstart.py:build_small_cnn")
    done = subprocess.run([script, "profile", builder, "--runs", "2",
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "unprofiled run: median" in done.stdout and str(out) in done.stdout
    assert json.loads(out.read_text())["traceEvents"]
