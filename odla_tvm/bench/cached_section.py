"""The report's section on the cached path: a served process that imports odla_tvm alone and
loads a kept engine, set against onnxruntime's whole process and the default path's engine."""

from __future__ import annotations

from .results import FIRST_RESULT_PROCESSES, ModelResult, ms

# A cached load's peak RSS: at most this times onnxruntime's whole process, or its plus the
# margin where that is more.
RSS_RATIO_GOAL, RSS_MARGIN_MB = 1.2, 40


def rss_allowed_mb(onnxruntime_mb: float) -> float:
    return max(RSS_RATIO_GOAL * onnxruntime_mb, onnxruntime_mb + RSS_MARGIN_MB)


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _row(r: ModelResult) -> tuple[str, dict[str, bool], float | None]:
    """The model's table row, which goals it met, and its cached / default latency."""
    cached, ort, default = (r.paths.get(p) for p in ("cached", "onnxruntime", "default"))
    load, ort_load = cached.load_to_first_result_s(), ort.load_to_first_result_s()
    allowed = rss_allowed_mb(ort.peak_rss_mb) if ort.peak_rss_mb else None
    speed = (cached.seconds / default.seconds
             if cached.seconds and default and default.seconds else None)
    met = {"rss": None not in (cached.peak_rss_mb, allowed) and cached.peak_rss_mb <= allowed,
           "load": None not in (load, ort_load) and load <= ort_load,
           "compiler": cached.compiler_mapped is False}
    mark = {True: "", False: " ✗"}
    row = (f"| {r.name} | {_f(cached.import_s, '{:.2f}')} | {_f(load, '{:.3f}')}{mark[met['load']]}"
           f" | {_f(ort_load, '{:.3f}')} | {ms(cached.seconds)} | {ms(default and default.seconds)}"
           f" | {_f(speed, '{:.2f}x')} | {_f(cached.peak_rss_mb, '{:.0f}')}{mark[met['rss']]}"
           f" | {_f(ort.peak_rss_mb, '{:.0f}')} | {_f(allowed, '{:.0f}')} | "
           f"{'no' if met['compiler'] else 'yes'} | {cached.runner or '-'} | "
           f"{'yes' if cached.match else 'no'} |")
    return row, met, speed


def cached_section(results: list[ModelResult]) -> list[str]:
    rows = [r for r in results if not r.error and "cached" in r.paths
            and not r.paths["cached"].error and "onnxruntime" in r.paths]
    if not rows:
        return []
    lines = ["## Cached load: the run path without TVM's compiler", "",
             ("*cached*: a new process imports odla_tvm (*import*), loads the engine *default* "
              "kept in the engine cache and runs it once (*load + first run*, against "
              "onnxruntime's session creation and first run: each the median of "
              f"{FIRST_RESULT_PROCESSES} processes started in turns); it is then timed in the turns "
              "beside *default* (the same engine in the process that compiled it). *Runs in*: "
              "ODLA's C library (libodla_tvm.so, no tvm_ffi in the process) or, for an engine it "
              "cannot run (run-time checks registered from Python, dynamic shapes), tvm_ffi. "
              "Peak RSS is "
              "the whole process's, import included, against onnxruntime's whole process; "
              f"*allowed*: {RSS_RATIO_GOAL:g}x onnxruntime's, or its plus {RSS_MARGIN_MB} MB "
              "where that is more. ✗ marks a model past its goal."), "",
             ("| model | import s | load + first run s | onnxruntime creation + first run s "
              "| cached ms | default ms | cached / default | peak RSS MB | onnxruntime MB "
              "| allowed MB | compiler mapped | runs in | match |"),
             ("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- "
              "| --- |")]
    misses = {"rss": [], "load": [], "compiler": []}
    speeds = []
    for r in rows:
        row, met, speed = _row(r)
        lines.append(row)
        for goal, ok in met.items():
            if not ok:
                misses[goal].append(r.name)
        if speed is not None:
            speeds.append(speed)
    goals = {"rss": "peak RSS within the allowed", "load": "load to first result at most "
             "onnxruntime's creation and first run", "compiler": "TVM's compiler not mapped"}
    lines.append("")
    for goal, text in goals.items():
        missed = misses[goal]
        lines.append(f"- {text}, on every model ({len(rows)}): "
                     + (f"not met ({', '.join(missed)})." if missed else "met."))
    if speeds:
        lines.append(f"- cached / default latency: {min(speeds):.2f}x to {max(speeds):.2f}x "
                     f"over {len(speeds)} models.")
    return lines + [""]
