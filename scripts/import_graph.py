"""Checks the project's imports against the layers of docs/architecture.md: no import cycle
among the modules of its packages (imports inside functions count), no package importing one
it must not (the bridge and the targets import nothing of each other; the library imports
nothing from the tooling beside it, tools/ and examples/, which are not installed), and the
run side apart from TVM's compiler (RUN_LAYER imports nothing of the compiler side, anywhere;
importing odla_tvm or a RUN_LAYER module imports no `tvm`). Prints each violation and exits
1; exits 0 when there is none. tests/test_imports.py runs the same check.

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


# The run layer: running a compiled module on TVM's runtime alone (apache-tvm-ffi and
# libtvm_runtime.so). Its modules import nothing of the compiler side, inside functions
# included: `tvm` (whose import loads libtvm_compiler.so) and every project module that
# imports it at module level.
RUN_LAYER = ("targets.runtime", "toolchain.tensors", "toolchain.tvm_loader",
             "relay_bridge.checks", "relay_bridge.errors", "libodla.binding",
             "odla_tvm.c_library_module")
# What importing these must never import `tvm` (through module-level imports, transitively).
LEAN_IMPORTS = ("odla_tvm",) + RUN_LAYER
COMPILER = "tvm"


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


def _run_nodes(tree, module_level):
    """The nodes of tree that can run: all but what `if TYPE_CHECKING:` holds (for type
    checkers and editors only), and where ``module_level`` only those that run when the module
    is imported (functions' bodies left out)."""
    skipped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda) if module_level else ()
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        pending.extend(child for child in ast.iter_child_nodes(node)
                       if not isinstance(child, skipped))


def _imports(tree, module, is_package, module_level=False):
    """Yields (module name, imported names or None) for every import statement in tree,
    functions' bodies included unless ``module_level``; relative names are resolved against
    module's package."""
    package = module if is_package else module.rpartition(".")[0]
    for node in _run_nodes(tree, module_level):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            source = node.module
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            yield source, [alias.name for alias in node.names]


def build_graph(root, module_level=False, outside=()):
    """{module: set of project modules it imports} (only at module level where
    ``module_level``; with the top-level packages named in ``outside`` too, such as tvm).

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
        tree = ast.parse(path.read_text(), str(path))
        for source, names in _imports(tree, module, is_package, module_level):
            steps = source.split(".")
            passed = {".".join(steps[:i]) for i in range(1, len(steps) + 1)} - holders
            named = {f"{source}.{n}" if f"{source}.{n}" in modules else source
                     for n in names} if names else {source}
            edges |= (passed | named) & modules.keys()
            edges |= {source.split(".")[0]} & set(outside)
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


def compiler_side(root):
    """The project's modules that import the compiler (tvm) at module level, transitively."""
    graph = build_graph(root, module_level=True, outside=(COMPILER,))
    return {module for module in graph if COMPILER in _closure(graph, module)}


def _closure(graph, module):
    """What importing ``module`` imports, through ``graph``'s edges."""
    seen, pending = set(), [module]
    while pending:
        for imported in graph.get(pending.pop(), ()):
            if imported not in seen:
                seen.add(imported)
                pending.append(imported)
    return seen


def run_layer_violations(root):
    """Lines for each RUN_LAYER module importing the compiler side (anywhere) and each
    LEAN_IMPORTS module whose import imports the compiler."""
    compiling = compiler_side(root) | {COMPILER}
    anywhere = build_graph(root, outside=(COMPILER,))
    lines = [f"run layer imports the compiler: {module} -> {imported}"
             for module in RUN_LAYER if module in anywhere
             for imported in sorted(anywhere[module] & compiling)]
    module_level = build_graph(root, module_level=True, outside=(COMPILER,))
    for module in LEAN_IMPORTS:
        if module not in module_level:  # not in this tree
            continue
        parts = module.split(".")  # importing a module imports its packages first
        run = {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & module_level.keys()
        if run and any(COMPILER in _closure(module_level, m) | {m} for m in run):
            lines.append(f"importing {module} imports the compiler (tvm)")
    return lines


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
    return lines + run_layer_violations(root)


def main(argv):
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    lines = violations(root)
    print("\n".join(lines) if lines else f"{len(find_modules(root))} modules: no import cycle, "
          "no forbidden import")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
