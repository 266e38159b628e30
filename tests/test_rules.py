"""The house rules scripts/check_rules.py checks (scripts/test.sh runs it before the tests, so
that .ci/run fails on a finding): ruff with the configured rules, the 700-line cap of library
modules, and every name of every lazy ``__getattr__`` map resolving and imported under
``if TYPE_CHECKING:``; each check also shown to find what it looks for. The layers are
tests/test_imports.py's."""

import sys

import pytest

from scripts import check_rules  # scripts/ is no package; the repository root is on the path

try:
    from .test_imports import ROOT, _tree
except ImportError:
    from test_imports import ROOT, _tree


def test_ruff_finds_nothing_with_the_configured_rules():
    assert check_rules.ruff_findings(ROOT) == []


def test_ruff_reports_a_finding(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    _tree(tmp_path, {"odla_tvm/bad.py": "import os\n"})
    lines = check_rules.ruff_findings(tmp_path)
    assert len(lines) == 1 and "odla_tvm/bad.py:1:8: F401" in lines[0], lines


def test_library_modules_are_within_the_line_cap():
    assert check_rules.over_the_cap(ROOT) == []


def test_the_line_cap_counts_python_and_cpp_and_flags_a_stale_exemption(tmp_path):
    _tree(tmp_path, {"targets/long.py": "x = 1\n" * 701, "libodla/src/long.cc": ";\n" * 701,
                     "toolchain/full.py": "x = 1\n" * 700, "tools/long.py": "x = 1\n" * 900})
    lines = check_rules.over_the_cap(tmp_path)
    assert lines[:2] == ["libodla/src/long.cc: 701 lines, the cap is 700: split it by job",
                         "targets/long.py: 701 lines, the cap is 700: split it by job"]
    # the exempt files are not in this tree: each is reported as an exemption to remove
    assert [line.split()[0] for line in lines[2:]] == sorted(check_rules.OVER_THE_CAP)


def test_every_lazy_name_resolves_and_is_imported_for_editors():
    maps = check_rules.lazy_maps(ROOT)
    assert {"odla_tvm", "relay_bridge", "targets", "targets.tuning", "targets.cuda",
            "targets.plugins", "targets.plugins.onednn"} <= maps.keys()
    assert all(mapping for mapping, _ in maps.values())
    assert check_rules.unresolved_lazy_names(ROOT) == []


@pytest.fixture
def lazy_package(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield _tree(tmp_path, {
        "lazypkg/__init__.py": """\
            import importlib
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from .real import present, stale

            _LAZY = {"present": ".real", "gone": ".real", "stale": ".moved"}


            def __getattr__(name):
                return getattr(importlib.import_module(_LAZY[name], __name__), name)
            """,
        "lazypkg/real.py": "present = 1\nstale = 2\n",
        "lazypkg/moved.py": "stale = 2\n",
        "lazypkg/opaque/__init__.py": "def __getattr__(name):\n    raise AttributeError(name)\n",
    })
    for name in [m for m in sys.modules if m.split(".")[0] == "lazypkg"]:
        del sys.modules[name]


def test_a_lazy_name_that_does_not_resolve_is_found(lazy_package):
    lines = check_rules.unresolved_lazy_names(lazy_package, packages=("lazypkg",))
    assert lines == [
        "lazypkg.gone (from lazypkg.real) does not resolve: AttributeError: module "
        "'lazypkg.real' has no attribute 'gone'",
        "lazypkg: lazy name 'gone' from lazypkg.real is not imported from it under "
        "`if TYPE_CHECKING:`",
        "lazypkg: lazy name 'stale' from lazypkg.moved is not imported from it under "
        "`if TYPE_CHECKING:`",
        "lazypkg.opaque: a module-level __getattr__ without a map this check reads (a dict "
        "given to compiling_attributes or named in __getattr__)",
    ]
