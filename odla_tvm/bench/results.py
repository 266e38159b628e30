"""What the bench found: a path's result on a model and a model's over every path."""

from __future__ import annotations

import dataclasses
import statistics

from .accuracy import Accuracy

# A path's outputs match where they lie this close to onnxruntime's.
MATCH_RTOL, MATCH_ATOL = 1e-3, 1e-4
# fp32: in a reduced precision, the DEFAULT device in float32 (the precision sections' baseline;
# in int8, on the float32 file the quantized one was made of).
PATHS = ("default", "tvm", "onnxruntime", "openvino", "tuned", "cached", "fp32")
INT8 = "int8"  # the bench's precision of files quantized by onnxruntime (quantize.py)
FLOAT32_PATH = "fp32"
# Processes that measure the cached path's load + first run, and onnxruntime's (the median).
FIRST_RESULT_PROCESSES = 3


@dataclasses.dataclass
class PathResult:
    """One model on one path. ``seconds``: the median of ``runs`` timed runs (None: it did not
    run, ``error`` says why); ``import_s``: importing the path's package; ``load_s``: ONNX
    import and compile (ODLA paths), the engine cache's load (cached) or session creation;
    ``first_s``: the first run; ``match``: its outputs against onnxruntime's."""

    seconds: float | None = None
    runs: int = 0
    load_s: float | None = None
    peak_rss_mb: float | None = None
    match: bool | None = None
    target: str = ""  # ODLA paths: the target the device compiled for
    error: str = ""
    checks_s: float | None = None  # ODLA paths: a run's time in its run-time checks
    # ODLA paths: whether TVM's compiler (libtvm_compiler.so) was mapped after the first run.
    compiler_mapped: bool | None = None
    runner: str = ""  # ODLA paths: what ran the engine, "C library" or "tvm_ffi"
    import_s: float | None = None
    first_s: float | None = None
    # In a reduced precision: its outputs against the float32 model's (onnxruntime's).
    accuracy: Accuracy | None = None
    # cached and onnxruntime: load + first run in further processes started for it alone
    more_first_results_s: list[float] = dataclasses.field(default_factory=list)

    def load_to_first_result_s(self) -> float | None:
        """From the start of the load to the first run's outputs, the import apart: the median
        over this path's processes."""
        if self.load_s is None or self.first_s is None:
            return None
        return statistics.median([self.load_s + self.first_s, *self.more_first_results_s])


@dataclasses.dataclass
class ModelResult:
    name: str
    path: str = ""
    paths: dict[str, PathResult] = dataclasses.field(default_factory=dict)
    tuned_kernels: int = 0  # kernels of the tuned build that took a schedule from the records
    kernels: int = 0  # kernels of the tuned build
    tuning_trials: int = 0  # trials the database's run log spent on this model
    tuning_minutes: float = 0.0
    error: str = ""  # the model did not run (onnxruntime, the reference, failed)
    precision: str | None = None  # the ODLA and OpenVINO paths' ("bf16", "fp16", "int8"; None: fp32)

    def seconds(self, path: str) -> float | None:
        return self.paths[path].seconds if path in self.paths else None

    def ratio(self, path: str) -> float | None:
        """``path``'s latency over onnxruntime's (None where either did not run)."""
        seconds, reference = self.seconds(path), self.seconds("onnxruntime")
        return None if seconds is None or not reference else seconds / reference

    def summary(self) -> str:
        if self.error:
            return f"{self.name}: failed: {self.error}"
        parts = []
        for path in PATHS:
            if path in self.paths:
                ratio = self.ratio(path)
                parts.append(f"{path} {ms(self.seconds(path))} ms"
                             + (f" ({ratio:.2f}x)" if ratio and path != "onnxruntime" else ""))
        return f"{self.name}: " + ", ".join(parts)


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.1f}" if seconds >= 1e-3 else f"{seconds * 1e3:.3f}"
