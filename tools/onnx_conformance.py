"""ONNX conformance: onnx's node test cases and light models run through the ONNX backend
(import, compile, run) and checked against their reference outputs.

Each case runs in a worker process with a time limit (tools.isolation), so a case that
hangs or crashes the process counts as one failure with its cause. ``scripts/conformance.py`` runs them all and
writes docs/bench/conformance.md; the tests run a subset through the same code.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import time

import numpy as np
import onnx
from onnx import numpy_helper

from . import isolation

LIGHT_PREFIX = "onnx/backend/test/data/light/"
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-5


@dataclasses.dataclass
class Case:
    name: str
    kind: str  # "node" or "light"
    op: str  # the op type the case tests
    model: onnx.ModelProto
    inputs: list
    outputs: list
    rtol: float
    atol: float


@dataclasses.dataclass
class Result:
    name: str
    kind: str
    op: str
    passed: bool
    cause: str = ""  # the failure's group: what went wrong, without case-specific names
    detail: str = ""  # the full message
    seconds: float = 0.0


# -- cases -------------------------------------------------------------------------------------

def node_cases() -> list[Case]:
    """onnx's node test cases (1884 with onnx 1.23), each with its own tolerances."""
    from onnx.backend.test.case.node import collect_testcases

    cases = collect_testcases(None)
    single_ops = {c.name: c.model.graph.node[0].op_type for c in cases
                  if len(c.model.graph.node) == 1}
    result = []
    for c in cases:
        base = re.sub(r"_expanded.*$", "", c.name)
        op = single_ops.get(base) or single_ops.get(c.name) or c.model.graph.node[0].op_type
        (inputs, outputs), = c.data_sets
        result.append(Case(c.name, "node", op, c.model, [_normalized(a) for a in inputs],
                           [_normalized(a) for a in outputs],
                           c.rtol if c.rtol is not None else DEFAULT_RTOL,
                           c.atol if c.atol is not None else DEFAULT_ATOL))
    return result


def _normalized(data):
    """Test data as onnx's runner hands it over: arrays for tensors (sequences stay lists)."""
    if isinstance(data, onnx.TensorProto):
        return numpy_helper.to_array(data)
    return np.asarray(data) if isinstance(data, np.generic) else data


def light_cases() -> list[Case]:
    """The real CNNs in onnx/backend/test/data/light with their reference outputs, fed the
    inputs onnx's runner generates for them."""
    from onnx.backend.test.case.model import collect_testcases
    from onnx.backend.test.runner import Runner

    root = os.path.dirname(os.path.dirname(onnx.__file__))  # the urls start with "onnx/"
    result = []
    for c in collect_testcases():
        if not (c.url or "").startswith(LIGHT_PREFIX):
            continue
        path = os.path.join(root, c.url)
        model = onnx.load(path)
        initializers = {t.name for t in model.graph.initializer}
        inputs = [Runner.generate_dummy_data(i, seed=0, name=c.name, random=False)
                  for i in model.graph.input if i.name not in initializers]
        outputs = [numpy_helper.to_array(onnx.load_tensor(f"{path[:-5]}_output_{i}.pb"))
                   for i in range(len(model.graph.output))]
        result.append(Case(c.name, "light", "model", model, inputs, outputs,
                           c.rtol or DEFAULT_RTOL, c.atol or DEFAULT_ATOL))
    return result


def all_cases() -> list[Case]:
    return node_cases() + light_cases()


# -- checking ----------------------------------------------------------------------------------

def compare(outputs, expected, rtol: float, atol: float) -> tuple[str, str] | None:
    """None when ``outputs`` match ``expected``; else (cause, detail)."""
    if len(outputs) != len(expected):
        return "output count differs", f"{len(outputs)} outputs, expected {len(expected)}"
    for i, (out, ref) in enumerate(zip(outputs, expected)):
        if not isinstance(ref, np.ndarray):
            return "non-tensor output (sequence or optional)", f"output {i} is a {type(ref)}"
        out = np.asarray(out)
        if out.shape != ref.shape:
            return "shape differs", f"output {i} has shape {out.shape}, expected {ref.shape}"
        if out.dtype != ref.dtype:
            return "dtype differs", f"output {i} has dtype {out.dtype}, expected {ref.dtype}"
        if ref.dtype.kind in "fc" or ref.dtype.name == "bfloat16":
            # As onnx's runner: bfloat16 results may differ by two units in the last place.
            tolerance = max(rtol, 2 ** -6) if ref.dtype.name == "bfloat16" else rtol
            a, b = out.astype(np.float64), ref.astype(np.float64)
            close = np.isclose(a, b, rtol=tolerance, atol=atol, equal_nan=True)
        else:
            close = out == ref
        if not np.all(close):
            bad = np.flatnonzero(~np.asarray(close))
            first = np.unravel_index(bad[0], ref.shape) if ref.ndim else ()
            return "values differ", (f"output {i}: {bad.size} of {ref.size} elements differ, "
                                     f"first at {tuple(int(j) for j in first)}: {out[first]!r} "
                                     f"vs expected {ref[first]!r} (rtol {rtol}, atol {atol})")
    return None


_NAMES = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBERS = re.compile(r"-?\b\d+(\.\d+)?(e-?\d+)?\b")


def cause_of(message: str) -> str:
    """A failure message without the names and numbers of one case, so that failures with
    the same cause group together."""
    first = message.strip().splitlines()[0] if message.strip() else "no message"
    first = re.sub(r"^ONNX node [^:]*: ", "", first)
    return _NUMBERS.sub("N", _NAMES.sub("'…'", first))[:200]


def run_case(case: Case, device: str = "CPU") -> Result:
    """Imports, compiles and runs one case through the ONNX backend and checks its outputs."""
    from odla_tvm.frontends import onnx_backend
    from odla_tvm.types import OdlaError, Status

    start = time.perf_counter()

    def failed(cause, detail):
        return Result(case.name, case.kind, case.op, False, cause, detail,
                      time.perf_counter() - start)

    stage = "import"
    try:
        if not all(isinstance(a, np.ndarray) for a in case.inputs):
            return failed("non-tensor input (sequence or optional)",
                          "ODLA arguments are tensors")
        rep = onnx_backend.prepare(case.model, device)
        stage = "run"
        outputs = list(rep.run(case.inputs))
    except OdlaError as err:
        if err.status is Status.UNSUPPORTED_OP and "cannot express:" in err.message:
            ops = re.sub(r" \(\d+\)", "", err.message.split("cannot express: ")[1])
            return failed(f"unsupported op types: {ops}", err.message)
        if err.message.startswith("TVM failed to compile"):
            stage = "compile"
        return failed(f"{stage}: [{err.status.name}] {cause_of(err.message)}", err.message)
    except Exception as err:  # noqa: BLE001 (any failure of one case is that case's result)
        return failed(f"{stage}: {type(err).__name__}: {cause_of(str(err))}",
                      f"{type(err).__name__}: {err}")
    mismatch = compare(outputs, case.outputs, case.rtol, case.atol)
    if mismatch:
        return failed(*mismatch)
    return Result(case.name, case.kind, case.op, True, seconds=time.perf_counter() - start)


# -- running many cases, each in a worker process ----------------------------------------------

def _case_runner(device: str):
    """In a worker: runs cases by name."""
    cases = {c.name: c for c in all_cases()}
    return lambda name: run_case(cases[name], device)


def run_cases(cases: list[Case], jobs: int = 2, timeout: float = 300.0, device: str = "CPU",
              progress=None, recycle_after: int = 150) -> list[Result]:
    """Runs ``cases`` in ``jobs`` worker processes (restarted after ``recycle_after`` cases to
    bound memory); a case running past ``timeout`` seconds or killing its worker fails.
    ``progress(result)`` is called after each case."""
    by_name = {c.name: c for c in cases}

    def result_of(name, outcome):
        if isinstance(outcome, isolation.Lost):
            case = by_name[name]
            return Result(name, case.kind, case.op, False, outcome.detail, outcome.detail,
                          outcome.seconds)
        return outcome

    results = isolation.run_isolated(
        list(by_name), _case_runner, (device,), jobs, timeout, recycle_after,
        progress and (lambda name, outcome: progress(result_of(name, outcome))))
    return [result_of(c.name, results[c.name]) for c in cases]


# -- the report --------------------------------------------------------------------------------

def summary(results: list[Result]) -> dict[str, tuple[int, int]]:
    """(passed, total) per kind of case."""
    counts = {}
    for kind in ("node", "light"):
        of_kind = [r for r in results if r.kind == kind]
        counts[kind] = (sum(r.passed for r in of_kind), len(of_kind))
    return counts


def report(results: list[Result], header: str) -> str:
    """docs/bench/conformance.md: counts, a per-op table and every failure grouped by cause."""
    counts = summary(results)
    lines = ["# ONNX conformance", "", header, "",
             "| cases | passed | total |", "| --- | --- | --- |"]
    lines += [f"| {kind} | {passed} | {total} |" for kind, (passed, total) in counts.items()]
    lines += ["", "## Per op", "", "| op | passed | total | failed cases |",
              "| --- | --- | --- | --- |"]
    by_op = collections.defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    for op in sorted(by_op):
        rs = by_op[op]
        failed = ", ".join(r.name for r in rs if not r.passed)
        lines.append(f"| {op} | {sum(r.passed for r in rs)} | {len(rs)} | {failed} |")
    lines += ["", "## Failures by cause", ""]
    by_cause = collections.defaultdict(list)
    for r in results:
        if not r.passed:
            by_cause[r.cause].append(r)
    for cause, rs in sorted(by_cause.items(), key=lambda item: (-len(item[1]), item[0])):
        lines += [f"### {len(rs)}: {cause}", ""]
        lines += [f"- {r.name}: {r.detail.strip().splitlines()[0][:300] if r.detail else ''}"
                  for r in rs]
        lines.append("")
    return "\n".join(lines)
