"""The import graph follows the layers of docs/architecture.md: no cycle among the project's
modules (imports inside functions count) and no import the layers forbid, checked as
scripts/import_graph.py checks it."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("import_graph", ROOT / "scripts" / "import_graph.py")
import_graph = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_graph)


def test_the_project_has_no_import_cycle_and_no_forbidden_import():
    assert import_graph.violations(ROOT) == []


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_cycle_through_a_function_and_a_package_reexport_is_found(tmp_path):
    # odla_tvm re-exports b; a imports the package from inside a function; b imports a.
    root = _tree(tmp_path, {
        "odla_tvm/__init__.py": "from .b import run\n",
        "odla_tvm/a.py": "def f():\n    import odla_tvm\n",
        "odla_tvm/b.py": "from . import a\n\ndef run():\n    pass\n",
        "odla_tvm/ops/__init__.py": "",
        "odla_tvm/ops/c.py": "from ..a import f\nfrom .. import b\n",
        "relay_bridge/__init__.py": "",
        "targets/__init__.py": "",
    })
    graph = import_graph.build_graph(root)
    assert graph["odla_tvm.ops.c"] == {"odla_tvm.a", "odla_tvm.b"}  # the parent is no edge
    assert import_graph.cycles(graph) == [["odla_tvm", "odla_tvm.a", "odla_tvm.b"]]


def test_the_bridge_importing_targets_is_forbidden(tmp_path):
    root = _tree(tmp_path, {
        "odla_tvm/__init__.py": "",
        "relay_bridge/__init__.py": "",
        "relay_bridge/custom.py": "def g():\n    from targets.plugins import h\n",
        "targets/__init__.py": "",
        "targets/plugins.py": "def h():\n    pass\n",
    })
    assert import_graph.violations(root) == [
        "forbidden import: relay_bridge.custom -> targets",
        "forbidden import: relay_bridge.custom -> targets.plugins",
    ]


def test_the_library_importing_tools_is_forbidden_and_tools_importing_it_is_not(tmp_path):
    root = _tree(tmp_path, {
        "odla_tvm/__init__.py": "",
        "odla_tvm/session.py": "def f():\n    from tools import fuzzing\n",
        "tools/__init__.py": "",
        "tools/fuzzing.py": "from odla_tvm import session\nfrom examples import train\n",
        "examples/train.py": "import odla_tvm\n",
        "relay_bridge/__init__.py": "",
        "relay_bridge/graph.py": "import examples.train\n",
        "targets/__init__.py": "",
    })
    assert import_graph.violations(root) == [
        "import cycle of 2 modules:",
        "  odla_tvm.session -> tools.fuzzing",
        "  tools.fuzzing -> odla_tvm.session",
        "forbidden import: odla_tvm.session -> tools",
        "forbidden import: odla_tvm.session -> tools.fuzzing",
        "forbidden import: relay_bridge.graph -> examples.train",
    ]


def test_targets_importing_the_bridge_is_forbidden(tmp_path):
    root = _tree(tmp_path, {
        "odla_tvm/__init__.py": "",
        "relay_bridge/__init__.py": "",
        "targets/__init__.py": "",
        "targets/cpu/__init__.py": "",
        "targets/cpu/layouts.py": "import relay_bridge\n",
    })
    assert import_graph.violations(root) == ["forbidden import: targets.cpu.layouts -> relay_bridge"]


_TORCH_AFTER_ODLA = """
import sys
import numpy as np
import odla_tvm as odla
from odla_tvm import ElementType as E, ValueType as VT
assert "torch" not in sys.modules, "importing odla_tvm imported torch"
import torch  # the program's own import still works once TVM is loaded
comp = odla.create_computation()
x = odla.create_argument(VT(E.FLOAT32, (2, 3)), "x")
odla.set_value_as_output(odla.add(x, x, "y"))
fed = torch.arange(6, dtype=torch.float32).reshape(2, 3)
(y,) = odla.Session(comp).run({"x": fed})
np.testing.assert_array_equal(y, 2 * fed.numpy())
print("ok")
"""


def test_odla_tvm_does_not_import_torch_and_takes_torch_tensors_afterwards():
    # TVM imports torch when installed (240 MB, a second); toolchain.load_tvm hides it.
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", _TORCH_AFTER_ODLA], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_odla_tvm_imported_after_torch_uses_it():
    pytest.importorskip("torch")
    code = ("import torch, sys, odla_tvm, tvm_ffi._convert as c; "
            "print(c.torch is sys.modules['torch'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]


def test_odla_tvm_does_not_import_torch():
    # Holds with or without torch installed; the CI machine has none.
    code = "import sys, odla_tvm; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_the_run_layer_importing_the_compiler_side_is_forbidden(tmp_path):
    # targets.runtime reaches the compiler through a module that imports tvm at module level
    # (from inside a function: still forbidden); odla_tvm's own import reaches tvm as well.
    root = _tree(tmp_path, {
        "odla_tvm/__init__.py": "from . import session\n",
        "odla_tvm/session.py": "import targets\n",
        "relay_bridge/__init__.py": "",
        "targets/__init__.py": "from .specs import key\n",
        "targets/specs.py": "def key():\n    import tvm\n",
        "targets/runtime.py": "from .specs import key\n\ndef vm():\n    from . import build\n",
        "targets/build.py": "import tvm\n",
        "targets/lean.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tvm\n",
    })
    assert import_graph.compiler_side(root) == {"targets.build"}
    assert import_graph.violations(root) == [
        "run layer imports the compiler: targets.runtime -> targets.build"]
    (root / "targets/__init__.py").write_text("from . import build\n")
    assert import_graph.violations(root)[1:] == [
        "importing odla_tvm imports the compiler (tvm)",
        "importing targets.runtime imports the compiler (tvm)"]


_COMPILER_LOADED = """
import sys
loaded = [name for name in ("tvm", "onnx") if name in sys.modules]
mapped = [line.split()[-1] for line in open("/proc/self/maps") if "libtvm_compiler" in line]
print(loaded, mapped[:1])
"""


def test_importing_odla_tvm_loads_neither_the_compiler_nor_onnx():
    # The compiler (libtvm_compiler.so, 259 MB) is loaded at the first build; tvm_ffi is not it.
    code = "import odla_tvm, tvm_ffi\n" + _COMPILER_LOADED
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "[] []", done.stdout + done.stderr[-2000:]


_LEAN_IMPORT_THEN_CACHED_RUN = """
import sys
import numpy as np
import odla_tvm as odla
loaded = [name for name in ("tvm_ffi", "asyncio", "tvm") if name in sys.modules]
assert not loaded, f"importing odla_tvm imported {loaded}"
session = odla.Session.from_onnx(sys.argv[1], engine_cache=True, cache_dir=sys.argv[2])
a = np.array([7, -7, 9, 1], np.int32)
(y,) = session.run({"a": a, "b": np.array([2, 3, -4, 1], np.int32)})
np.testing.assert_array_equal(y, [3, -2, -2, 1])
try:
    session.run({"a": a, "b": np.array([2, 3, 0, 1], np.int32)})
except odla.OdlaError as err:  # the check and its error type, registered as tvm_ffi loaded
    print(err.status.name, type(err.__context__).__name__)
"""


def test_importing_odla_tvm_loads_no_tvm_ffi_and_a_cached_run_then_loads_it(tmp_path):
    # tvm_ffi and asyncio are imported at their first use: a load, compile or run, an await.
    onnx = pytest.importorskip("onnx")
    import odla_tvm as odla
    from onnx import TensorProto, helper

    int32 = [helper.make_tensor_value_info(name, TensorProto.INT32, [4]) for name in "aby"]
    graph = helper.make_graph([helper.make_node("Div", ["a", "b"], ["y"])], "div", int32[:2],
                              int32[2:])
    path = str(tmp_path / "div.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    odla.Session.from_onnx(path, engine_cache=True, cache_dir=tmp_path / "cache")
    done = subprocess.run([sys.executable, "-c", _LEAN_IMPORT_THEN_CACHED_RUN, path,
                           str(tmp_path / "cache")], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "INVALID_PARAM DivisionByZero", done.stdout + done.stderr[-2000:]
