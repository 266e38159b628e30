"""Checks the project's imports against the layers of docs/architecture.md: no import cycle
among the modules of its packages (imports inside functions count), and no package importing
one it must not (the bridge and the targets import nothing of each other; the library imports
nothing from the tooling beside it, tools/ and examples/, which are not installed). Prints each
violation and exits 1; exits 0 when there is none. tests/test_imports.py runs the same check.

Usage: python scripts/import_graph.py [ROOT]   (ROOT: the repository, by default this script's)
"""

import ast
import sys
from pathlib import Path

LIBRARY = ("odla_tvm", "relay_bridge", "targets", "toolchain", "libodla")
# Not installed: they may import the library, which must never import them.
TOOLING = ("tools", "examples")
PACKAGES = LIBRARY + TOOLING
# package -> the packages it must not import (data flows down; lowering is target-neutral, and
# targets compile any Relax module, the bridge's or not; toolchain lies below both).
FORBIDDEN = {
    "relay_bridge": {"odla_tvm", "targets"},
    "targets": {"odla_tvm", "relay_bridge"},
    "toolchain": {"odla_tvm", "relay_bridge", "targets"},
    # the C library's builder: below odla_tvm (its CLI prints the flags), reaching nothing
    "libodla": {"odla_tvm", "relay_bridge", "targets", "toolchain"},
}


def find_modules(root):
    """{dotted module name: path} for every .py file of PACKAGES under root."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imports(tree, module, is_package):
    """Yields (module name, imported names or None) for every import statement in tree,
    functions' bodies included; relative names are resolved against module's package."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            source = node.module
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            yield source, [alias.name for alias in node.names]


def build_graph(root):
    """{module: set of project modules it imports}.

    `import a.b` imports a and a.b (each package's __init__ runs); `from a import x` imports
    a.x where x is a submodule, else a itself (whose __init__ defines x). A package that holds
    the importer counts only where it is named: Python started its __init__ before the
    importer, so passing through it to a submodule is no edge back up."""
    modules = find_modules(root)
    graph = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        parts = module.split(".")
        holders = {".".join(parts[:i]) for i in range(1, len(parts) + is_package)}
        edges = set()
        for source, names in _imports(ast.parse(path.read_text(), str(path)), module, is_package):
            steps = source.split(".")
            passed = {".".join(steps[:i]) for i in range(1, len(steps) + 1)} - holders
            named = {f"{source}.{n}" if f"{source}.{n}" in modules else source
                     for n in names} if names else {source}
            edges |= (passed | named) & modules.keys()
        edges.discard(module)
        graph[module] = edges
    return graph


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def forbidden_imports(graph):
    """(importer, imported) pairs that cross a FORBIDDEN boundary, or go from the library to
    the TOOLING."""
    def forbidden(package):
        return FORBIDDEN.get(package, set()) | (set(TOOLING) if package in LIBRARY else set())

    return sorted((module, imported) for module, edges in graph.items() for imported in edges
                  if imported.split(".")[0] in forbidden(module.split(".")[0]))


def violations(root):
    """Lines describing each cycle and forbidden import under root; empty when there is none."""
    graph = build_graph(root)
    lines = []
    for component in cycles(graph):
        lines.append(f"import cycle of {len(component)} modules:")
        for module in component:
            inside = sorted(graph[module] & set(component))
            lines.append(f"  {module} -> {', '.join(inside)}")
    for module, target in forbidden_imports(graph):
        lines.append(f"forbidden import: {module} -> {target}")
    return lines


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    lines = violations(root)
    print("\n".join(lines) if lines else f"{len(find_modules(root))} modules: no import cycle, "
          "no forbidden import")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
