"""The vendor plugin door: a toy plugin packaged outside odla-tvm (tests/toy_plugin, with the
dist-info an installed package has) registers through the entry point, takes its pattern,
and its generated C++ runs inside the compiled module; what it does not take stays with TVM."""

import gc
import logging
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

import odla_tvm as odla
import targets
from odla_tvm import DeviceName, Status
from odla_tvm import ElementType as E
from odla_tvm import ValueType as VT
from targets import plugins
from targets.plugins import partitioning

TOY_PLUGIN_DIR = Path(__file__).parent / "toy_plugin"


@pytest.fixture(scope="module")
def toy_plugin():
    sys.path.insert(0, str(TOY_PLUGIN_DIR))
    plugins.reload_plugins()
    yield targets.get_plugin("toy")
    sys.path.remove(str(TOY_PLUGIN_DIR))
    plugins.reload_plugins()


def _relu_sub_relu(dtype=E.FLOAT32, shape=(2, 3)):
    """relu(relu(a) - 0.5): two ReLUs the toy plugin can take, a subtraction it cannot."""
    comp = odla.create_computation()
    a = odla.create_argument(VT(dtype, shape), "a")
    half = np.full(shape, 0.5, odla.types.numpy_dtype(dtype))
    shifted = odla.sub(odla.relu(a), odla.create_constant(VT(dtype, shape), half))
    odla.set_value_as_output(odla.relu(shifted, "r"))
    return comp


def _run(comp, device, x):
    exe = odla.compile_computation(comp, device)
    ctx = odla.create_context()
    odla.bind_to_argument_by_id("a", x, ctx)
    odla.launch_executable(exe, ctx)
    return exe, odla.get_value_data(odla.find_value_by_id("r", comp), None, ctx)


def _toy_calls(exe) -> int:
    library = exe.module.runtime_library
    return library.get_function("odla_toy_plugin_calls", query_imports=True)()


def test_entry_point_registers_the_plugin_and_its_device(toy_plugin):
    assert toy_plugin.name == "toy"
    assert "toy" in [p.name for p in targets.available_plugins()]
    assert DeviceName.CAMBRICON_MLU220 in odla.device.available_devices()
    device = odla.allocate_device(device_name=DeviceName.CAMBRICON_MLU220)
    assert device.target.plugins == ("toy",)
    assert device.target.key() != odla.allocate_device().target.key()


def test_plugin_takes_its_pattern_and_tvm_the_rest(toy_plugin):
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    device = odla.allocate_device(device_name=DeviceName.CAMBRICON_MLU220)
    exe, out = _run(_relu_sub_relu(), device, x)
    np.testing.assert_array_equal(out, np.maximum(np.maximum(x, 0) - 0.5, 0))
    assert out.dtype == np.float32 and out.shape == (2, 3)
    # Two regions (the subtraction, which TVM compiles, sits between the ReLUs), one run.
    assert _toy_calls(exe) == 2
    assert len(exe.module.vendor_regions) == 2


def test_plugin_check_refuses_what_it_cannot_run(toy_plugin):
    x = np.random.default_rng(1).standard_normal((4,))
    device = odla.allocate_device(device_name=DeviceName.CAMBRICON_MLU220)
    exe, out = _run(_relu_sub_relu(E.FLOAT64, (4,)), device, x)
    np.testing.assert_array_equal(out, np.maximum(np.maximum(x, 0) - 0.5, 0))
    assert out.dtype == np.float64
    assert exe.module.vendor_regions == []
    assert exe.module.runtime_library is exe.module.library  # nothing offloaded, nothing linked


def test_module_with_plugin_code_runs_after_store_and_load_in_a_fresh_process(toy_plugin, tmp_path):
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    device = odla.allocate_device(device_name=DeviceName.CAMBRICON_MLU220)
    exe = odla.compile_computation(_relu_sub_relu(), device)
    path = tmp_path / "toy.odla"
    odla.store_executable(str(path), exe)
    np.save(tmp_path / "x.npy", x)
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(TOY_PLUGIN_DIR)!r})
        import numpy as np, odla_tvm as odla
        exe = odla.load_executable({str(path)!r}, odla.allocate_device(
            device_name=odla.DeviceName.CAMBRICON_MLU220))
        ctx = odla.create_context()
        odla.bind_to_argument_by_id("a", np.load({str(tmp_path / 'x.npy')!r}), ctx)
        odla.launch_executable(exe, ctx)
        out = odla.get_value_data(odla.get_output_from_executable_by_idx(exe, 0), None, ctx)
        np.save({str(tmp_path / 'out.npy')!r}, out)
        lib = exe.module.library
        print(lib.get_function("odla_toy_plugin_calls", query_imports=True)())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "2"
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), np.maximum(np.maximum(x, 0) - 0.5, 0))


def test_broken_entry_point_is_skipped_with_a_warning(toy_plugin, tmp_path, caplog):
    info = tmp_path / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[odla_tvm.plugins]\nbroken = no_such_module:PLUGIN\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with caplog.at_level(logging.WARNING, logger="targets.plugins"):
            plugins.reload_plugins()
        assert "broken" in caplog.text and "no_such_module" in caplog.text
        assert targets.get_plugin("toy") is not None  # the others still load
        with pytest.raises(KeyError, match="unknown vendor plugin 'broken'"):
            targets.get_plugin("broken")
    finally:
        sys.path.remove(str(tmp_path))
        plugins.reload_plugins()


def test_register_plugin_refuses_what_is_not_a_plugin():
    with pytest.raises(TypeError, match="targets.VendorPlugin, got dict"):
        targets.register_plugin({"name": "x"})


def test_device_no_plugin_serves_is_refused():
    with pytest.raises(odla.OdlaError) as err:
        odla.allocate_device(device_name=DeviceName.QUALCOMM_AIC100)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    assert "QUALCOMM_AIC100" in str(err.value) and "available: DEFAULT" in str(err.value)


def test_plugin_that_cannot_run_here_says_what_to_install(toy_plugin, monkeypatch):
    def missing():
        raise targets.PluginUnavailable("libtoy.so is missing: pip install toy-runtime")

    broken = plugins.VendorPlugin(**{**toy_plugin.__dict__, "check_available": missing})
    monkeypatch.setitem(plugins._PLUGINS, "toy", broken)
    with pytest.raises(odla.OdlaError) as err:
        odla.allocate_device(device_name=DeviceName.CAMBRICON_MLU220)
    assert err.value.status == Status.UNSUPPORTED_DEVICE_TYPE
    assert "pip install toy-runtime" in str(err.value)
    x = np.ones((2, 3), np.float32)  # the plain CPU device still works
    _, out = _run(_relu_sub_relu(), odla.allocate_device(), x)
    np.testing.assert_array_equal(out, np.full((2, 3), 0.5, np.float32))


def test_info_lists_plugins_and_says_which_device_is_unavailable(toy_plugin, monkeypatch, capsys):
    from odla_tvm.cli import main as cli

    def missing():
        raise targets.PluginUnavailable("libtoy.so is missing: pip install toy-runtime")

    broken = plugins.VendorPlugin(**{**toy_plugin.__dict__, "check_available": missing})
    monkeypatch.setitem(plugins._PLUGINS, "toy", broken)
    assert cli(["info"]) in (0, None)
    out = capsys.readouterr().out
    assert "toy: device CAMBRICON_MLU220" in out
    assert "CAMBRICON_MLU220: unavailable" in out and "pip install toy-runtime" in out
    assert "DEFAULT (index 0)" in out


def test_vendor_items_reach_the_plugin(toy_plugin):
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    device = odla.allocate_device(device_name=DeviceName.CAMBRICON_MLU220)
    comp = _relu_sub_relu()
    odla.set_computation_item(comp, "toy.min_elements", 7)  # both ReLUs have 6 elements
    exe, out = _run(comp, device, x)
    np.testing.assert_array_equal(out, np.maximum(np.maximum(x, 0) - 0.5, 0))
    assert exe.module.vendor_regions == []
    odla.set_computation_item(comp, "toy.min_elements", 6)  # a new revision: compiled again
    exe, out = _run(comp, device, x)
    assert len(exe.module.vendor_regions) == 2 and _toy_calls(exe) == 2


def test_bad_vendor_items_are_refused(toy_plugin):
    comp = _relu_sub_relu()
    _refused = lambda name, value, *fragments: _assert_refused(  # noqa: E731
        lambda: odla.set_computation_item(comp, name, value), *fragments)
    _refused("toy.no_such_item", 1, "'toy.no_such_item'", "toy.min_elements")
    _refused("nobody.item", 1, "unknown vendor plugin 'nobody'")
    _refused("toy.min_elements", -1, "-1", "integer >= 0")


def _assert_refused(call, *fragments):
    with pytest.raises(odla.OdlaError) as err:
        call()
    assert err.value.status == Status.INVALID_PARAM
    for fragment in fragments:
        assert fragment in str(err.value), str(err.value)


def test_partitioning_keeps_nothing_of_the_module_it_was_given(toy_plugin):
    """Each compile's module (every weight of it) is freed once compiled: a module kept by
    the partitioning held a whole model's weights per compile of it."""
    memory = np.empty(6 + 16, np.float32)  # the constant's memory, 64-byte aligned as TVM wants
    start = (-memory.ctypes.data % 64) // 4
    memory[start:start + 6] = 0.5
    freed = weakref.ref(memory)
    half = tvm_tensor = None
    builder = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((2, 3), "float32"))
    with builder.function("main", [a]):
        with builder.dataflow():
            tvm_tensor = tvm.runtime.from_dlpack(memory[start:start + 6].reshape(2, 3))
            half = relax.const(tvm_tensor)
            shifted = builder.emit(relax.op.subtract(builder.emit(relax.op.nn.relu(a)), half))
            out = builder.emit_output(relax.op.nn.relu(shifted))
        builder.emit_func_output(out)
    mod = builder.get()
    partitioned = plugins.partition(mod, toy_plugin)
    assert len(plugins.offloaded_regions(partitioned)) == 2  # both ReLUs taken
    del memory, half, tvm_tensor, builder, mod, partitioned, shifted, out, a
    gc.collect()
    assert freed() is None


def test_a_pattern_requires_the_ops_every_match_calls():
    """What partition filters patterns by: a conv2d feeding an add requires both; of two
    alternatives, only what both call; a constraint on a pattern requires what it does; a
    wildcard or a call of any op requires nothing."""
    from tvm.relax.dpl import is_op, wildcard

    conv_add = is_op("relax.add")(is_op("relax.nn.conv2d")(wildcard(), wildcard()), wildcard())
    matmul_add = is_op("relax.add")(is_op("relax.matmul")(wildcard(), wildcard()), wildcard())
    assert partitioning._required_ops(conv_add) == {"relax.add", "relax.nn.conv2d"}
    assert partitioning._required_ops(conv_add | matmul_add) == {"relax.add"}
    assert partitioning._required_ops(conv_add.has_dtype("float32")) == {"relax.add", "relax.nn.conv2d"}
    assert partitioning._required_ops(wildcard()) == frozenset()
    assert partitioning._required_ops(wildcard()(wildcard())) == frozenset()
    # Parts shared many times over are walked once (an exponential walk took seconds).
    shared = is_op("relax.nn.relu")(wildcard())
    for _ in range(40):
        shared = is_op("relax.add")(shared, shared) | is_op("relax.multiply")(shared, shared)
    assert partitioning._required_ops(shared) == {"relax.nn.relu"}
