"""Checks the house rules of CONTRIBUTING.md that a program can check, each printing one line per
finding: ruff with the rules of pyproject.toml; the line cap of the library's modules (Python and
C++); that every name of every lazy ``__getattr__`` map resolves, and that each such module
imports the same names under ``if TYPE_CHECKING:`` (so that editors follow them); the layers
(scripts/import_graph.py). Exits 1 on any finding. scripts/test.sh runs it before the tests,
and tests/test_rules.py runs the same checks in the quick tier.

Usage: python scripts/check_rules.py [ROOT]   (ROOT: the repository, by default this script's)
"""

import ast
import importlib
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("import_graph",
                                               Path(__file__).with_name("import_graph.py"))
import_graph = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(import_graph)

LIBRARY = import_graph.LIBRARY
MAX_LINES = 700
SOURCE_SUFFIXES = (".py", ".c", ".cc", ".h")
# Library modules allowed over the cap, each until it is split; the list is meant to be empty.
OVER_THE_CAP: set[str] = set()


def ruff_findings(root: Path) -> list[str]:
    """ruff's findings with the configured rules, one line each."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        return ["ruff is not installed: pip install -e '.[test]' (it pins ruff)"]
    done = subprocess.run([ruff, "check", "--quiet", "--output-format", "concise", "."],
                          cwd=root, capture_output=True, text=True)
    if done.returncode == 0:
        return []
    return [f"ruff: {line}" for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def library_sources(root: Path) -> list[Path]:
    return sorted(path for package in LIBRARY for path in (root / package).rglob("*")
                  if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts)


def over_the_cap(root: Path) -> list[str]:
    """Library modules of more than MAX_LINES lines outside OVER_THE_CAP, and entries of
    OVER_THE_CAP that are back under it (or gone)."""
    lines = []
    for path in library_sources(root):
        name = path.relative_to(root).as_posix()
        count = len(path.read_bytes().splitlines())
        if count > MAX_LINES and name not in OVER_THE_CAP:
            lines.append(f"{name}: {count} lines, the cap is {MAX_LINES}: split it by job")
    for name in sorted(OVER_THE_CAP):
        path = root / name
        if not path.exists() or len(path.read_bytes().splitlines()) <= MAX_LINES:
            lines.append(f"{name} is exempt from the line cap but no longer over it: remove it "
                         "from OVER_THE_CAP in scripts/check_rules.py")
    return lines


def _defines_getattr(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return True
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__getattr__" for t in node.targets):
            return True
    return False


def _map_nodes(tree: ast.Module) -> list[ast.Dict]:
    """The dicts a module's lazy ``__getattr__`` reads: those given to compiling_attributes at
    module level (literal or by name) and those the ``def __getattr__`` names."""
    named = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
             and isinstance(node.value, ast.Dict) for t in node.targets if isinstance(t, ast.Name)}
    found, names = [], set()
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef):
            if statement.name == "__getattr__":
                names |= {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}
            continue
        for node in ast.walk(statement):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "compiling_attributes":
                found += [a for a in node.args if isinstance(a, ast.Dict)]
                names |= {a.id for a in node.args if isinstance(a, ast.Name)}
    return found + [named[n] for n in sorted(names) if n in named]


def _type_checking_imports(tree: ast.Module, package: str) -> dict[str, str]:
    """{name: module} imported under the module's top-level ``if TYPE_CHECKING:``."""
    imported = {}
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom):
                    source = importlib.util.resolve_name(
                        "." * statement.level + (statement.module or ""), package)
                    imported.update({a.asname or a.name: source for a in statement.names})
    return imported


def lazy_maps(root: Path, packages=LIBRARY) -> dict[str, tuple[dict, dict]]:
    """{module: (its lazy map, name -> absolute module; its TYPE_CHECKING imports)} for every
    module of ``packages`` with a module-level ``__getattr__``."""
    maps = {}
    for path in sorted(p for package in packages for p in (root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(), str(path))
        if not _defines_getattr(tree):
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        mapping = {}
        for node in _map_nodes(tree):
            for key, value in zip(node.keys, node.values):
                mapping[ast.literal_eval(key)] = importlib.util.resolve_name(
                    ast.literal_eval(value), package)
        maps[module] = (mapping, _type_checking_imports(tree, package))
    return maps


def unresolved_lazy_names(root: Path, packages=LIBRARY) -> list[str]:
    """Lines for each lazy name that does not resolve, each lazy map the check cannot read, and
    each difference between a map and its module's TYPE_CHECKING imports (``packages``
    imported from ``root``)."""
    lines = []
    for module, (mapping, declared) in lazy_maps(root, packages).items():
        if not mapping:
            lines.append(f"{module}: a module-level __getattr__ without a map this check reads "
                         "(a dict given to compiling_attributes or named in __getattr__)")
            continue
        package = importlib.import_module(module)
        for name, source in sorted(mapping.items()):
            try:
                getattr(package, name)
            except Exception as error:  # any failure to resolve is the finding
                lines.append(f"{module}.{name} (from {source}) does not resolve: "
                             f"{type(error).__name__}: {error}")
            if declared.get(name) != source:
                lines.append(f"{module}: lazy name {name!r} from {source} is not imported from "
                             f"it under `if TYPE_CHECKING:`")
        lines += [f"{module}: {name!r} is imported from {declared[name]} under `if "
                  "TYPE_CHECKING:` but is not in its lazy map"
                  for name in sorted(declared.keys() - mapping.keys())
                  if declared[name] in mapping.values()]
    return lines


CHECKS = {
    "ruff": ruff_findings,
    "line cap": over_the_cap,
    "lazy names": unresolved_lazy_names,
    "layers": import_graph.violations,
}


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    failed = False
    for title, check in CHECKS.items():
        lines = check(root)
        print(f"{title}: " + ("ok" if not lines else f"{len(lines)} finding(s)"))
        for line in lines:
            print(f"  {line}")
        failed = failed or bool(lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
