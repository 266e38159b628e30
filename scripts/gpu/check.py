#!/usr/bin/env python3
"""The GPU check, run on the GPU machine with PyTorch alone (no TVM, no NumPy needed): each
odla-tvm cuda bundle of the prepared folder (scripts/gpu/prepare.py) run by odla_runner, its
outputs checked against onnxruntime's CPU outputs, its latency timed beside PyTorch eager and
torch.compile running the same architecture's graph; the results written as Markdown.

    python3 scripts/gpu/check.py CHECK_DIR [-o docs/bench/gpu.md] [--budget SECONDS]

Every latency is the median of --repeat runs, each timed to the device's synchronisation;
TF32 is off on both sides (TVM's kernels use none), so both compute in float32.
"""
import argparse
import ast
import functools
import importlib.util
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

RTOL, ATOL = 1e-3, 1e-4
_NPY_DTYPES = {"<f4": torch.float32, "<f8": torch.float64, "<i8": torch.int64,
               "<i4": torch.int32, "|b1": torch.bool, "|u1": torch.uint8}


def read_npy(path: Path) -> torch.Tensor:
    """A C-ordered .npy file (format 1 or 2) as a CPU tensor."""
    data = path.read_bytes()
    if data[:6] != b"\x93NUMPY":
        raise ValueError(f"{path} is not a .npy file")
    size_bytes = 2 if data[6] == 1 else 4
    length = int.from_bytes(data[8:8 + size_bytes], "little")
    start = 8 + size_bytes
    header = ast.literal_eval(data[start:start + length].decode("latin1"))
    if header["fortran_order"]:
        raise ValueError(f"{path}: Fortran order")
    body = bytearray(data[start + length:])
    return torch.frombuffer(body, dtype=_NPY_DTYPES[header["descr"]]).reshape(header["shape"]) \
        if body else torch.empty(header["shape"], dtype=_NPY_DTYPES[header["descr"]])


def compare(actual: torch.Tensor, expected: torch.Tensor) -> tuple[bool, float]:
    """(within rtol/atol everywhere, the largest absolute difference)."""
    if actual.shape != expected.shape:
        return False, math.inf
    a, e = actual.double(), expected.double()
    difference = (a - e).abs()
    return bool((difference <= ATOL + RTOL * e.abs()).all()), float(difference.max())


def runner(check: Path) -> Path:
    """The prepared odla_runner, or where it cannot start here (an older C library than the
    build machine's), one built here from the carried source with the host's g++."""
    prepared = check / "bin" / "odla_runner"
    done = subprocess.run([str(prepared)], capture_output=True, text=True)
    if done.returncode == 2 and "usage" in done.stderr:
        return prepared
    print(f"the prepared runner does not start here ({done.stderr.strip()[-300:]}); "
          "building it with g++", flush=True)
    local = check / "bin" / "odla_runner.local"
    subprocess.run(["g++", "-std=c++17", "-O2", "-o", str(local),
                    *sorted(map(str, (check / "src").glob("*.cc"))),
                    f"-I{check / 'include'}", f"-L{check / 'lib'}",
                    "-ltvm_runtime", "-ltvm_ffi", "-ldl", "-Wl,-rpath,$ORIGIN/../lib"],
                   check=True)
    return local


def run_bundle(program: Path, model: Path, batch: str, order: list, repeat: int, out: Path):
    """odla_runner on the batch's bundle: (median ms or None, outputs match, max difference,
    error text)."""
    out.mkdir(parents=True, exist_ok=True)
    inputs = [str(model / f"inputs-b{batch}" / f"{name}.npy") for name in order]
    done = subprocess.run([str(program), str(model / f"bundle-b{batch}"),
                           str(out), "--repeat", str(repeat), *inputs],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return None, False, math.inf, (done.stderr.strip().splitlines() or ["?"])[-1]
    latency = float(done.stdout.split("latency: median ")[1].split()[0])
    matches, worst = True, 0.0
    for expected in sorted((model / f"expected-b{batch}").glob("*.npy")):
        if not (out / expected.name).is_file():
            return latency, False, math.inf, f"odla_runner wrote no {expected.name}"
        ok, difference = compare(read_npy(out / expected.name), read_npy(expected))
        matches, worst = matches and ok, max(worst, difference)
    return latency, matches, worst, None


def load_graph(path: Path, device: str):
    """The forward function of a graph file (scripts/gpu/models.py), its tensors made on
    ``device``: the graph names the device it was exported on (arange, checks of metadata)."""
    spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
    graph = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(graph)
    graph.device = lambda *args, **kwargs: torch.device(device)
    return graph.forward


def torch_graph(model: Path, batch: str, device: str):
    """(forward, its parameters then buffers) of the model's ATen graph; the parameters made
    from a seed with the shapes, means and spreads of the exported ones."""
    forward = load_graph(model / "torch" / f"graph-b{batch}.py", device)
    kept = torch.load(model / "torch" / "buffers.pt", weights_only=True)
    generator = torch.Generator().manual_seed(0)
    values = []
    for slot in json.loads((model / "torch" / "params.json").read_text()):
        if slot["name"] in kept:
            values.append(kept[slot["name"]].to(device))
            continue
        noise = torch.randn(slot["shape"], generator=generator, dtype=torch.float64)
        values.append((slot["mean"] + slot["std"] * noise).to(getattr(torch, slot["dtype"].split(
            ".")[-1])).to(device))
    return forward, values


def timed(function, args, repeat: int, synchronize) -> float:
    """The median milliseconds of ``repeat`` calls, each to the device's synchronisation."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function(*args)
        synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run_torch(model: Path, batch: str, order: list, repeat: int, device: str, compiled: bool):
    """(ms, seconds to compile) of the model's graph run eagerly, or through torch.compile."""
    forward, values = torch_graph(model, batch, device)
    args = [*values, *[read_npy(model / f"inputs-b{batch}" / f"{n}.npy").to(device)
                       for n in order]]
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    with torch.inference_mode():
        start = time.perf_counter()
        if compiled:
            forward = torch.compile(forward)
        forward(*args)  # compiles, for torch.compile
        synchronize()
        seconds = time.perf_counter() - start
        for _ in range(3):
            forward(*args)
        return timed(forward, args, repeat, synchronize), seconds if compiled else None


@functools.cache
def odla_device_query() -> str:
    """What odla-tvm's device info says of the GPU: targets/cuda/devices.py asks the driver
    by ctypes alone, so it runs here without TVM (loaded by its path, not through targets)."""
    path = Path(__file__).resolve().parents[2] / "targets" / "cuda" / "devices.py"
    spec = importlib.util.spec_from_file_location("odla_cuda_devices", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        devices = module.cuda_devices()
    except module.CudaUnavailable as err:
        return f"no CUDA device ({err})"
    return "; ".join(f"{d.describe()}, {d.total_memory / 2**30:.1f} GiB, CUDA driver "
                     f"{d.driver_version}" for d in devices)


def device_line(device: str) -> str:
    if device != "cuda":
        return f"{platform.processor() or platform.machine()} (CPU: a dry run, no GPU)"
    props = torch.cuda.get_device_properties(0)
    return (f"{props.name}, compute capability {props.major}.{props.minor}, "
            f"{props.total_memory / 2**30:.1f} GiB; PyTorch {torch.__version__} "
            f"(CUDA {torch.version.cuda})")


def geo_mean(values: list) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def markdown(check_info: dict, rows: list, device: str, seconds: float) -> str:
    def ms(value):
        return "-" if value is None else f"{value:.3f}"

    def ratio(a, b):
        return "-" if a is None or b is None else f"{a / b:.2f}x"

    lines = [
        "# The cuda target on a GPU", "",
        f"Written by `scripts/gpu_check.sh run` in {seconds:.0f} s on: {device_line(device)}.",
        f"ODLA's device info (NVIDIA_GPU, from targets/cuda/devices.py): {odla_device_query()}.",
        f"Engines: odla-tvm {check_info['odla_tvm']}, TVM {check_info['tvm']}, target "
        f"`{check_info['target']}`, default schedules (dlight), no tuning; run by odla_runner "
        "(TVM's C++ runtime). PyTorch runs the same architecture's ATen graph (torch.export "
        "of the transformers model) eagerly and through `torch.compile` (default mode), with "
        "weights of the same shapes and spread made from a seed. TF32 off on both sides.",
        f"Outputs checked against onnxruntime's CPU outputs (rtol {RTOL:g}, atol {ATOL:g}). "
        "Latency: median ms of each run timed to the device's synchronisation.", "",
        "| model | batch | outputs | max abs diff | TVM ms | eager ms | compile ms "
        "| TVM / eager | TVM / compile |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        outputs = "match" if r["matches"] else "not run" if r["tvm_ms"] is None else "**MISMATCH**"
        lines.append(f"| {r['model']} | {r['batch']} | {outputs} | {r['max_diff']:.2e} | "
                     f"{ms(r['tvm_ms'])} | {ms(r['eager_ms'])} | {ms(r['compile_ms'])} | "
                     f"{ratio(r['tvm_ms'], r['eager_ms'])} | "
                     f"{ratio(r['tvm_ms'], r['compile_ms'])} |")
    lines.append("")
    for batch in sorted({r["batch"] for r in rows}, key=int):
        of = [r for r in rows if r["batch"] == batch and r["tvm_ms"]]
        for side in ("eager", "compile"):
            mean = geo_mean([r["tvm_ms"] / r[f"{side}_ms"] for r in of if r[f"{side}_ms"]])
            if mean:
                lines.append(f"- batch {batch}: geo-mean TVM / PyTorch {side} {mean:.2f}x")
    notes = [f"- {r['model']} batch {r['batch']}: {r['error'].strip()}" for r in rows if r["error"]]
    lines += ["", "Notes:", *notes] if notes else []
    models = check_info["models"]
    lines += ["", "Models (small configurations of scripts/export_models.py's architectures):"]
    lines += [f"- {m['name']}: {m['inputs']} {m['size']}, " + ", ".join(
        f"batch {b} {v['kernels']} kernels" for b, v in m["builds"].items()) for m in models]
    return "\n".join(lines) + "\n"


def write(outputs: list, info: dict, rows: list, device: str, seconds: float) -> None:
    for output in outputs:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(markdown(info, rows, device, seconds))
        output.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", type=Path)
    parser.add_argument("-o", "--output", type=Path, action="append",
                        help="Markdown file to write (and its .json beside it); may repeat; "
                        "rewritten after every step, so a run cut short leaves what it did")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--budget", type=float, default=420,
                        help="seconds; torch.compile is skipped once less than a minute is left")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    outputs = args.output or [Path("docs/bench/gpu.md")]
    start = time.perf_counter()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    info = json.loads((args.check / "check.json").read_text())
    rows = []
    program = runner(args.check)

    def step(row: dict, side: str) -> None:
        """Times ``row``'s model on the PyTorch ``side`` (eager, compile); a failure is noted."""
        model = args.check / "models" / row["model"]
        order = next(m["inputs_order"] for m in info["models"] if m["name"] == row["model"])
        try:
            row[f"{side}_ms"], seconds = run_torch(model, row["batch"], order, args.repeat,
                                                   args.device, side == "compile")
            if seconds is not None:
                row["compile_s"] = round(seconds, 1)
        except Exception as err:  # noqa: BLE001  one model's failure is a row, not the end
            row["error"] = (row["error"] or "") + f" PyTorch {side}: {type(err).__name__}: {err}"
        print(json.dumps(row), flush=True)
        write(outputs, info, rows, args.device, time.perf_counter() - start)

    # TVM and PyTorch eager first, for every model; torch.compile (slow to compile) after,
    # batch 1 first, while the budget lasts.
    for entry in info["models"]:
        model = args.check / "models" / entry["name"]
        for batch in entry["builds"]:
            tvm_ms, matches, worst, error = run_bundle(
                program, model, batch, entry["inputs_order"], args.repeat,
                args.check / "outputs" / entry["name"] / f"b{batch}")
            rows.append({"model": entry["name"], "batch": batch, "matches": matches,
                         "max_diff": worst, "tvm_ms": tvm_ms, "eager_ms": None,
                         "compile_ms": None, "compile_s": None, "error": error})
            step(rows[-1], "eager")
    for row in sorted(rows, key=lambda r: int(r["batch"])):
        if time.perf_counter() - start > args.budget - 60:
            row["error"] = (row["error"] or "") + " torch.compile skipped: time budget spent"
            continue
        step(row, "compile")
    write(outputs, info, rows, args.device, time.perf_counter() - start)
    print(f"wrote {', '.join(map(str, outputs))} in {time.perf_counter() - start:.0f} s")
    return 0 if all(r["matches"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
