"""The bench report's section for a reduced precision (`--precision`): each model's DEFAULT
build in that precision against the DEFAULT float32 build of the same run (the ``fp32`` path)
and against OpenVINO with the matching INFERENCE_PRECISION_HINT, the CPU class named (which
decides whether anything computes in the precision at all)."""

from __future__ import annotations

from statistics import geometric_mean

from targets.plugins.onednn.isa import onednn_isa
from targets.specs import host_cpu_flags

from .results import FLOAT32_PATH, INT8, ModelResult, ms
from .worker import OPENVINO_HINTS

# The CPU classes reduced precision differs by, highest first, and the /proc/cpuinfo flag
# that makes each.
CPU_CLASSES = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"),
               ("avx512_vnni", "AVX512-VNNI"), ("avx2", "AVX2"))


def cpu_class(flags=None) -> str:
    """This CPU's class (CPU_CLASSES' names) for reduced precision."""
    flags = host_cpu_flags() if flags is None else flags
    return next((name for flag, name in CPU_CLASSES if flag in flags), "below AVX2")


def _ratio(numerator: float | None, denominator: float | None) -> str:
    return "-" if not numerator or not denominator else f"{numerator / denominator:.2f}x"


def _error(result: ModelResult, path: str) -> str:
    accuracy = result.paths[path].accuracy if path in result.paths else None
    return "-" if accuracy is None else f"{accuracy.max_abs_diff:.2e}"


def precision_section(results: list[ModelResult]) -> list[str]:
    """Empty in a float32 run and in an int8 one (int8_section's)."""
    precision = next((r.precision for r in results if r.precision), None)
    if precision in (None, INT8):
        return []
    hint = OPENVINO_HINTS.get(precision, precision)  # int8 files need no hint
    ok = [r for r in results if not r.error]
    ours = [r.seconds("default") / r.seconds(FLOAT32_PATH) for r in ok
            if r.seconds("default") and r.seconds(FLOAT32_PATH)]
    theirs = [r.seconds("default") / r.seconds("openvino") for r in ok
              if r.seconds("default") and r.seconds("openvino")]
    cpu = cpu_class()
    lines = [f"## {precision} against float32 and OpenVINO's {hint}", "",
             (f"CPU class {cpu} (oneDNN reaches {onednn_isa()}). *{precision}*: the DEFAULT "
             f"device with `--precision {precision}`; *fp32*: the DEFAULT device in float32, "
             f"timed in the same turns; OpenVINO with INFERENCE_PRECISION_HINT {hint}. Error: "
             "the largest absolute difference from onnxruntime's float32 outputs.")]
    if cpu == "AVX2" and precision == "bf16":
        lines += ["", ("On AVX2 OpenVINO's CPU plugin ignores the bf16 hint and computes in "
                  "float32 (it runs bf16 only where avx512_core_bf16 holds), and odla-tvm's "
                  "bf16 is its float32 fallback (float32 products, weights rounded to "
                  "bfloat16): oneDNN 3.2 has no bf16 convolution or matmul here.")]
    lines += ["", (f"| model | {precision} ms | fp32 ms | {precision} / fp32 | openvino ms "
              f"| {precision} / openvino | error ({precision} / fp32 / openvino) |"),
              "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in ok:
        lines.append(f"| {r.name} | {ms(r.seconds('default'))} | {ms(r.seconds(FLOAT32_PATH))} | "
                     f"{_ratio(r.seconds('default'), r.seconds(FLOAT32_PATH))} | "
                     f"{ms(r.seconds('openvino'))} | "
                     f"{_ratio(r.seconds('default'), r.seconds('openvino'))} | "
                     f"{' / '.join(_error(r, p) for p in ('default', 'fp32', 'openvino'))} |")
    if ours:
        lines += ["", f"Geo-mean {precision} / fp32 {geometric_mean(ours):.2f}x over "
                  f"{len(ours)} models"
                  + (f", {precision} / openvino {geometric_mean(theirs):.2f}x over {len(theirs)}"
                     if theirs else "") + "."]
    return lines + [""]
