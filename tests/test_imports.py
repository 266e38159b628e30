"""The import graph follows DESIGN.md's layers: no cycle among the project's modules (imports
inside functions count) and no import the layers forbid, checked as scripts/import_graph.py
checks it."""

import importlib.util
import textwrap
from pathlib import Path

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
