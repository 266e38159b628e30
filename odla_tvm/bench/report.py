"""The bench's report (as docs/bench/perf.md) and chart (as docs/bench/perf.png) from its results."""

from __future__ import annotations

import importlib.metadata
import math
import platform
import statistics

import numpy as np

import targets

from ..device import _cpu_model
from ..version import odla_tvm_version
from .cached_section import cached_section
from .driver import BENCH_EXTRA, IN_TURNS, IN_TURNS_MAX_S
from .models import TARGET_MODELS
from .int8_section import int8_section
from .precision_report import precision_section
from .results import INT8, MATCH_ATOL, MATCH_RTOL, ModelResult, ms
from .timing import ALONE_BUDGET_S, SLOW_RUN_S
from .worker import OPENVINO_HINTS

# The report's first line: how `odla-tvm bench` knows a file it may replace.
TITLE = "# Performance: ODLA-TVM against onnxruntime and OpenVINO"
COMPARED = ("default", "tvm", "openvino")  # ratios over onnxruntime, in the chart
# Goals over onnxruntime: (geo-mean at most, no model above).
GOALS = {"default": (1.0, 1.5), "tvm": (4.0, 10.0)}


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _each(values, fmt) -> str:
    """``a / b / c``, one per path, ``-`` where missing."""
    return " / ".join("-" if v is None else fmt(v) for v in values)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def geo_mean(values) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _ratios(results: list[ModelResult], path: str) -> dict[str, float]:
    return {r.name: r.ratio(path) for r in results if not r.error and r.ratio(path) is not None}


def _machine_section(threads, seconds, load) -> list[str]:
    cores = targets.cpu_count()
    return [
        TITLE,
        "",
        (f"Written by `scripts/bench.py` (`odla-tvm bench`) in {seconds / 60:.0f} min on "
         f"{_cpu_model()}, {cores} cores usable, {platform.system()} {platform.release()}; "
         f"odla-tvm {odla_tvm_version()}, TVM {targets.tvm_version()}, onnxruntime "
         f"{_version('onnxruntime')}, OpenVINO {_version('openvino')}, NumPy {np.__version__}. "
         f"Load average (1 min) {load[0]:.1f} at the start and {load[1]:.1f} at the end: above "
         f"{cores}, other work shared the cores and every figure is slower than on an idle "
         "machine."),
        "",
        (f"Batch 1 (or `--batch`), {threads} threads on every path (TVM_NUM_THREADS, which "
         "oneDNN follows; onnxruntime's intra_op_num_threads; OpenVINO's "
         "INFERENCE_NUM_THREADS, with float32 inference precision unless `--precision` says; "
         "see the accuracy section then), "
         "the same inputs (floats seeded standard normal, masks ones, token ids seeded in "
         "[0, 1000)), no tuning records but in *tuned*. Each path runs in a process of its own "
         "that imports and compiles the model, runs it and reports its peak RSS "
         "(VmHWM: compiling counts; ODLA's processes also hold TVM, about 230 MB). "
         "*default*: odla-tvm's DEFAULT device (oneDNN takes convolutions, matmuls, softmax and "
         "layer norms; TVM compiles the rest; a graph with 35% or more of its multiply-adds "
         "in 3x3 stride-1 convolutions, which TVM computes by Winograd, or 95% or more in "
         "matmuls, as transformers have, goes to TVM whole). *tvm*: the INTEL_X86 device, "
         "TVM's build alone, "
         f"timed in the turns where its first run took at most {IN_TURNS_MAX_S:g} s, else alone "
         f"after a warm-up run: 5 runs, at least 3 once they take {ALONE_BUDGET_S:.0f} s, 1 "
         f"where the warm-up took over {SLOW_RUN_S:.0f} s. "
         "*default*, *tvm*, onnxruntime, OpenVINO, *tuned* and *cached* are timed in turns of about 0.25 s "
         "(each after 0.1 s idle and 0.05 s of untimed runs) until each has at least 5 runs and "
         "3 s of them. Figures are medians; ratios are latency over onnxruntime's (under 1.0x: "
         f"faster). *Match*: outputs within rtol {MATCH_RTOL:g}, atol {MATCH_ATOL:g} of "
         "onnxruntime's. *Compile*: ONNX import and compile (odla-tvm; *default* and *tvm* also "
         "keep the engine in the engine cache, on by default, and run from the kept library "
         "and its memory-mapped weights, as a user's first Session.from_onnx does), session "
         "creation "
         "(onnxruntime, OpenVINO); the cached path has a section of its own below. "
         "*Checks*: what a run spends in its run-time checks (indices, "
         "divisors, run-time shapes and sizes: their counting kernels and host calls), the "
         "median of profiled runs, and its share of the path's latency."),
        "",
    ]


def _table_section(results: list[ModelResult]) -> list[str]:
    lines = [
        ("| model | default ms | tvm ms | onnxruntime ms | openvino ms | default / ort "
         "| tvm / ort | openvino / ort | compile s (default / tvm / ort / ov) "
         "| peak RSS MB (default / tvm / ort / ov) | match (default / tvm / ov) "
         "| checks ms (default / tvm) | runs (turns / tvm) |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- "
        "| ---: | ---: |",
    ]
    four = ("default", "tvm", "onnxruntime", "openvino")
    for r in results:
        if r.error:
            lines.append(f"| {r.name} | failed: {r.error.replace('|', '/')} |" + " |" * 12)
            continue
        path = r.paths.get
        turns = min((path(p).runs for p in IN_TURNS if p != "tvm" and path(p) and path(p).runs),
                    default=None)
        lines.append(
            f"| {r.name} | {' | '.join(ms(r.seconds(p)) for p in four)} | "
            f"{' | '.join(_x(r.ratio(p)) for p in COMPARED)} | "
            f"{_each([path(p) and path(p).load_s for p in four], '{:.1f}'.format)} | "
            f"{_each([path(p) and path(p).peak_rss_mb for p in four], '{:.0f}'.format)} | "
            f"{_each([path(p) and path(p).match for p in COMPARED], _yes_no)} | "
            f"{_each([_check_share(r, p) for p in ('default', 'tvm')], str)} | "
            f"{_each([turns, path('tvm') and path('tvm').runs or None], str)} |")
    return lines + [""]


def _accuracy_section(results: list[ModelResult]) -> list[str]:
    """In a reduced precision: each path's outputs against the float32 model's."""
    rows = [(r.name, p, result.accuracy) for r in results for p, result in r.paths.items()
            if result.accuracy is not None and r.precision != INT8]  # int8: its own section
    if not rows:
        return []
    precision = next(r.precision for r in results if r.precision)
    return [f"## Accuracy in {precision} against float32", "",
            f"*default*, *tvm* (odla-tvm's `--precision {precision}`: FP16_MODE, or BF16_MODE's "
            "performance mode) and OpenVINO (INFERENCE_PRECISION_HINT "
            f"{OPENVINO_HINTS[precision]}) against onnxruntime's float32 outputs: the largest "
            "absolute difference, the cosine similarity of all outputs, and for a classifier "
            "the share of batch rows whose top-1 class agrees.", "",
            "| model | path | max abs diff | cosine similarity | top-1 agreement |",
            "| --- | --- | ---: | ---: | ---: |"] + [
        f"| {name} | {path} | {a.max_abs_diff:.2e} | {a.cosine:.6f} | "
        f"{'-' if a.top1 is None else f'{a.top1:.2f}'} |" for name, path, a in rows] + [""]


def _check_share(result: ModelResult, path: str) -> str | None:
    """A run's time in run-time checks on ``path``, and its share of the path's latency."""
    checks, seconds = (getattr(result.paths.get(path), name, None)
                       for name in ("checks_s", "seconds"))
    if checks is None or not seconds:
        return None
    return f"{checks * 1e3:.2f} ({checks / seconds:.1%})"


def _yes_no(match: bool) -> str:
    return "yes" if match else "no"


def _notes_section(results: list[ModelResult]) -> list[str]:
    """Why a path did not run, and which target each ODLA path compiled for."""
    notes = [f"- {r.name}, {p}: did not run: {result.error.replace(chr(10), ' ')[:300]}"
             for r in results for p, result in r.paths.items() if result.error]
    compiled = {(p, result.target) for r in results for p, result in r.paths.items()
                if result.target}
    if compiled:
        notes.append("- Targets compiled for: " + ", ".join(
            f"{p} `{target}`" for p, target in sorted(compiled)) + ".")
    return notes + [""] if notes else []


def _geo_mean_section(results: list[ModelResult]) -> list[str]:
    lines = ["## Geo-means over onnxruntime", "",
             "| path | models | geo-mean | max (model) | goal | goal met |",
             "| --- | ---: | ---: | --- | --- | --- |"]
    for path in COMPARED:
        ratios = _ratios(results, path)
        if not ratios:
            lines.append(f"| {path} | 0 | - | - | {_goal_text(path)} | - |")
            continue
        worst = max(ratios, key=ratios.get)
        lines.append(f"| {path} | {len(ratios)} | {_x(geo_mean(ratios.values()))} | "
                     f"{_x(ratios[worst])} ({worst}) | {_goal_text(path)} | "
                     f"{_goal_met(path, ratios)} |")
    return lines + [""]


def _goal_text(path: str) -> str:
    if path not in GOALS:
        return "-"
    geo, most = GOALS[path]
    return f"geo-mean at most {geo:.1f}x, no model above {most:.1f}x"


def _goal_met(path: str, ratios: dict[str, float]) -> str:
    if path not in GOALS:
        return "-"
    geo, most = GOALS[path]
    above = [name for name, ratio in ratios.items() if ratio > most]
    failed = ([f"geo-mean {geo_mean(ratios.values()):.2f}x"] if geo_mean(ratios.values()) > geo
              else []) + ([f"above {most:.1f}x: {', '.join(above)}"] if above else [])
    return "met" if not failed else f"not met ({'; '.join(failed)})"


def _tuned_section(results: list[ModelResult], cache_dir) -> list[str]:
    tuned = [r for r in results if "tuned" in r.paths]
    if not tuned:
        return []
    records = f"`{cache_dir}`" if cache_dir else "the user's cache directory"
    lines = ["## Tuned builds", "",
             (f"INTEL_X86 compiled with the host-cpu tuning database in {records} "
              "(`odla-tvm tune`), for the models tuned into it, timed in the turns; *tuned "
              "kernels*: those that took a schedule from its records, of all the kernels."), "",
             "| model | tuned ms | tuned / ort | tuned kernels | tuning spent | match |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    for r in tuned:
        lines.append(f"| {r.name} | {ms(r.seconds('tuned'))} | {_x(r.ratio('tuned'))} | "
                     f"{r.tuned_kernels} of {r.kernels} | {r.tuning_trials} trials, "
                     f"{r.tuning_minutes:.1f} min | {_each([r.paths['tuned'].match], _yes_no)} |")
    goal = [r for r in results if r.name in TARGET_MODELS and not r.error]
    missed = [r.name for r in goal if r.ratio("tuned") is None or r.ratio("tuned") > 1.0]
    if goal:
        lines += ["", f"Goal: tuned at most 1.0x onnxruntime on {', '.join(r.name for r in goal)}: "
                  + (f"not met for {', '.join(missed)}." if missed else "met.")]
    return lines + [""]


def _chart_section(chart: str | None, why_not: str) -> list[str]:
    if chart:
        return [f"![Latency over onnxruntime's per model]({chart})", ""]
    return [f"No chart: {why_not}.", ""]


def overhead_section(overhead: dict[str, float]) -> list[str]:
    # C's rows are set against the bare call from C++, Python's against the one from Python.
    bare_c = overhead.get("bare VM call (C++)")
    bare = {name: bare_c if name.endswith(("(C)", "(C++)")) else overhead["bare VM call"]
            for name in overhead}
    lines = [
        "## ODLA's own cost per call",
        "",
        ("A tiny model (one add of a 1x4 float32 argument), CPU microseconds per call (the "
         "process's CPU time, so other work on the machine does not count), the fastest of 7 "
         "loops of 20000 calls. The bare VM call gets device tensors made beforehand and "
         "returns TVM tensors; every other path takes and returns NumPy arrays. The C rows "
         "(libodla_tvm.so, rebinding input and output each call as HALO's generated code "
         "does) are set against the bare VM call from C++."),
        "",
        "| call | µs per call | over the bare VM call |",
        "| --- | ---: | ---: |",
    ]
    return lines + [f"| {name} | {us:.2f} | {us - bare[name]:+.2f} |"
                    for name, us in overhead.items()]


def report(results: list[ModelResult], overhead: dict[str, float], threads: int,
           seconds: float, load: tuple[float, float], cache_dir=None, chart: str | None = None,
           why_no_chart: str = "") -> str:
    """docs/bench/perf.md. ``load``: the 1-minute load average when the run started and when it
    ended; ``cache_dir``: where the tuning records came from (None: the user's cache);
    ``chart``: the chart's file name beside the report (None: ``why_no_chart``)."""
    lines = (_machine_section(threads, seconds, load) + _table_section(results)
             + _accuracy_section(results) + precision_section(results)
             + int8_section(results) + _notes_section(results) + _geo_mean_section(results)
             + cached_section(results) + _chart_section(chart, why_no_chart)
             + _tuned_section(results, cache_dir)
             + overhead_section(overhead))
    return "\n".join(lines) + "\n"


def chart(results: list[ModelResult], path: str, threads: int = 2) -> str | None:
    """Writes the PNG chart of each model's ratios over onnxruntime (default, tvm, openvino;
    log axis, value labels, a line at 1.0, hatched where outputs did not match) to ``path``.
    None when written, else why not (no matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"matplotlib is not installed; {BENCH_EXTRA}"
    ratios = {p: _ratios(results, p) for p in COMPARED}
    names = [r.name for r in results if any(r.name in ratios[p] for p in COMPARED)]
    if not names:
        return "no model ran on a path beside onnxruntime"
    width = 0.8 / len(COMPARED)
    figure, axes = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2), 4.5))
    missed = []  # bars of paths whose outputs missed onnxruntime's: hatched
    by_name = {r.name: r for r in results}
    for i, p in enumerate(COMPARED):
        shown = [name for name in names if name in ratios[p]]
        values = [ratios[p][name] for name in shown]
        bars = axes.bar([names.index(name) + (i - 1) * width for name in shown], values, width,
                        label=p)
        missed += [bar for bar, name in zip(bars, shown) if by_name[name].paths[p].match is False]
        axes.bar_label(bars, [f"{v:.2f}x" if v < 10 else f"{v:.0f}x" for v in values],
                       fontsize=7, rotation=90, padding=2)
    axes.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="onnxruntime")
    axes.set_yscale("log")
    every = [v for p in COMPARED for v in ratios[p].values()]
    axes.set_ylim(min(0.5, min(every) / 1.5), max(2.0, max(every)) * 4)  # room for the labels
    axes.set_xticks(range(len(names)), names, rotation=30, ha="right")
    axes.set_ylabel("latency / onnxruntime's (log; lower is faster)")
    axes.set_title(f"odla-tvm and OpenVINO over onnxruntime, batch 1, {threads} threads"
                   "\n(hatched: outputs differ from onnxruntime's)", fontsize=10)
    axes.legend(fontsize=8, loc="upper left")
    for bar in missed:  # after the legend, which would copy the first bar's hatch
        bar.set_hatch("//")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return None
