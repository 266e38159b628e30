"""The bench report's int8 section (``--precision int8``): each quantized file on odla-tvm's
DEFAULT device, onnxruntime and OpenVINO, beside odla-tvm's float32 build of the file it was
made from, each path's outputs against float32's, and the CPU class that decides oneDNN's
int8 kernels."""

from __future__ import annotations

import math
import statistics

from .results import FLOAT32_PATH, INT8, ModelResult, ms

_CLASS_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni", "avx512f", "avx2")


def _geo_mean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def _over(result: ModelResult, path: str, base: str) -> float | None:
    seconds, reference = result.seconds(path), result.seconds(base)
    return seconds / reference if seconds and reference else None


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _cpu_class() -> str:
    """The class oneDNN reaches here, and the CPU's flags that name it."""
    from targets.plugins.onednn.isa import onednn_isa
    from targets.specs import host_cpu_flags

    flags = [f for f in _CLASS_FLAGS if f in host_cpu_flags()]
    return f"oneDNN reaches `{onednn_isa()}` (CPU flags: {', '.join(flags) or 'none of those'})"


def int8_section(results: list[ModelResult]) -> list[str]:
    rows = [r for r in results if r.precision == INT8 and not r.error]
    if not rows:
        return []
    lines = [
        "## int8", "",
        (f"Files quantized by onnxruntime's quantizer (scripts/quantize_models.py: QDQ per "
         f"channel for the CNNs, dynamic for the transformers), the same file on every path; "
         f"*float32*: odla-tvm's DEFAULT device on the float32 file it was made from, timed in "
         f"the same turns. {_cpu_class()}. Accuracy: each path's outputs against onnxruntime's "
         "on the float32 file (the largest absolute difference; the cosine similarity of all "
         "outputs)."), "",
        ("| model | default ms | tvm ms | onnxruntime ms | openvino ms | float32 ms "
         "| default / ort | default / ov | default / float32 "
         "| max abs diff (default / ort / ov) | cosine (default / ort / ov) |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    three = ("default", "onnxruntime", "openvino")
    for r in rows:
        acc = [r.paths[p].accuracy if p in r.paths else None for p in three]
        lines.append(
            f"| {r.name} | "
            + " | ".join(ms(r.seconds(p)) for p in ("default", "tvm", "onnxruntime", "openvino",
                                                     FLOAT32_PATH))
            + f" | {_x(_over(r, 'default', 'onnxruntime'))} | {_x(_over(r, 'default', 'openvino'))}"
            f" | {_x(_over(r, 'default', FLOAT32_PATH))} | "
            + " / ".join("-" if a is None else f"{a.max_abs_diff:.3g}" for a in acc) + " | "
            + " / ".join("-" if a is None else f"{a.cosine:.5f}" for a in acc) + " |")
    means = {(p, base): _geo_mean(_over(r, p, base) for r in rows)
             for p, base in (("default", "onnxruntime"), ("default", "openvino"),
                             ("default", FLOAT32_PATH), ("tvm", "onnxruntime"))}
    return lines + ["", "Geo-means over the models: " + "; ".join(
        f"{p} / {base} {_x(mean)}" for (p, base), mean in means.items()) + ".", ""]
