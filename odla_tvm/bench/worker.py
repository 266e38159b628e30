"""One path of ``odla-tvm bench`` in a process of its own, so that its import and compile time
and its peak memory are its own.

process.PathProcess starts it as ``python -P`` with this file's path. Nothing here imports
odla_tvm at module level, so onnxruntime's and OpenVINO's processes never load TVM. main()
describes the protocol.
"""

import importlib
import os
import pickle
import resource
import statistics
import sys
import time

ODLA_PATHS = {"default": "DEFAULT", "tvm": "INTEL_X86", "tuned": "INTEL_X86",
              "cached": "DEFAULT", "float32": "DEFAULT"}
# OpenVINO's INFERENCE_PRECISION_HINT for the job's precision (odla_tvm.session.PRECISIONS).
OPENVINO_HINTS = {None: "f32", "fp32": "f32", "bf16": "bf16", "fp16": "f16"}


def _odla(job):
    """What a user's Session.from_onnx does, the engine cache on in the job's cache_dir (but
    on the tuned path, whose cache_dir is the user's): the default and tvm paths' processes
    compile and keep the engine there and run from the kept library and weights, as a user's
    first load does; the cached path's next process reads the one default kept."""
    import odla_tvm as odla
    from odla_tvm.c_library_module import CLibraryModule

    import relay_bridge

    path = job["path"]
    device = odla.allocate_device(device_name=odla.DeviceName[ODLA_PATHS[path]])
    session = odla.Session.from_onnx(job["model"], device,
                                     engine_cache=path != "tuned",
                                     cache_dir=job["cache_dir"], precision=job["precision"])
    module, feeds = session.executable.module, job["feeds"]
    info = {"target": device.target.name, "tuned_kernels": len(module.tuned_kernels),
            "kernels": len(module.kernel_bindings),
            "runner": "C library" if isinstance(module, CLibraryModule) else "tvm_ffi"}
    inputs = [feeds[arg.id] for arg in session.executable.args]

    def checks() -> float:
        spent = []
        module.run(inputs, on_call=lambda symbol, _start, seconds: spent.append(seconds)
                   if relay_bridge.is_check_call(symbol) else None)
        return sum(spent)

    return lambda: session.run(feeds), info, checks


def _onnxruntime(job):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = job["threads"]
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(job["model"], options,
                                           providers=["CPUExecutionProvider"])
    feeds = job["feeds"]
    return lambda: session.run(None, feeds), {}, None


def _openvino(job):
    import openvino

    # The precision of the other paths, told: on CPUs with bfloat16 units (AMX, AVX512-BF16)
    # OpenVINO's CPU plugin computes in bfloat16 unless told, even for a float32 bench.
    compiled = openvino.Core().compile_model(job["model"], "CPU", {
        "INFERENCE_NUM_THREADS": job["threads"],
        "INFERENCE_PRECISION_HINT": OPENVINO_HINTS[job["precision"]]})
    request, feeds = compiled.create_infer_request(), job["feeds"]

    def run():
        request.infer(feeds)
        return [request.get_output_tensor(i).data for i in range(len(compiled.outputs))]

    return run, {}, None


LOADERS = {"onnxruntime": _onnxruntime, "openvino": _openvino,
           **{path: _odla for path in ODLA_PATHS}}
# What each path imports before the clock of its load starts (timed apart as ``import_s``):
# the cached path imports odla_tvm alone, as a served process does (no ONNX frontend).
MODULES = {"onnxruntime": "onnxruntime", "openvino": "openvino",
           **{path: "odla_tvm.frontends.onnx" for path in ODLA_PATHS}, "cached": "odla_tvm"}


def _load(job) -> tuple:
    """(the run function or None, the function timing a run's checks or None, the reply to
    the job)."""
    try:
        started = time.perf_counter()
        importlib.import_module(MODULES[job["path"]])
        import_s = time.perf_counter() - started
        started = time.perf_counter()
        run, info, checks = LOADERS[job["path"]](job)
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        outputs = [o.copy() for o in run()]
        return run, checks, {"import_s": import_s, "load_s": load_s,
                             "first_s": time.perf_counter() - started,
                             "outputs": outputs, "compiler_mapped": compiler_mapped(), **info}
    except Exception as err:  # noqa: BLE001 (the bench reports why a path did not run)
        return None, None, {"error": f"{type(err).__name__}: {err}"}


def compiler_mapped() -> bool | None:
    """Whether TVM's compiler library is mapped into this process (None: no /proc here)."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libtvm_compiler" in line for line in maps)
    except OSError:
        return None


def _turn(run, untimed: int, timed: int) -> list[float]:
    for _ in range(untimed):
        run()
    times = []
    for _ in range(timed):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return times


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: Linux's VmHWM, which starts afresh at exec.
    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries that across exec, so a child
    started from the bench's process (which holds TVM) would report the bench's peak too
    (a child of a large parent would report about the parent's peak)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # elsewhere: KB too


def main() -> None:
    """Serves the bench: pickles on stdin, replies pickled on the process's original stdout
    (what libraries print goes to stderr). The job (a dict: path, model, feeds, threads,
    cache_dir, precision) comes first; the reply gives ``import_s`` (the path's package),
    ``load_s`` (ONNX import and compile, or session creation), ``first_s`` and ``outputs`` of
    the first run and ``compiler_mapped`` then, or ``error``. Then
    ``("turn", untimed, timed)`` runs the model that many times and answers the timed runs'
    seconds, ``("checks", runs)`` answers the median seconds an ODLA run spends in its run-time
    checks (their kernels and host calls, from that many profiled runs; None on other paths),
    and ``("close",)`` answers the peak RSS in MB (``peak_rss_mb``) and exits."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what TVM or OpenVINO print goes to stderr, not into the replies
    requests = sys.stdin.buffer

    def reply(message) -> None:
        pickle.dump(message, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()

    run, checks, answer = _load(pickle.load(requests))
    reply(answer)
    while True:
        command, *args = pickle.load(requests)
        if command == "turn" and run is not None:
            reply(_turn(run, *args))
        elif command == "checks":
            reply(None if checks is None else statistics.median(checks() for _ in range(*args)))
        elif command == "close":
            reply(peak_rss_mb())
            return
        else:
            reply({"error": f"unknown command {command!r}"})


if __name__ == "__main__":
    main()
