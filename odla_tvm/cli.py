"""The ``odla-tvm`` command."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
import time

from .bench import driver as bench_driver
from .bench import report as bench_report
from .bench.models import LIGHT_MODELS, model_files
from .bench.timing import call_overhead
from .bundle import export as export_bundle
from .device import (
    DEFAULT_PLUGIN,
    allocate_device,
    available_devices,
    default_plugin_missing,
    get_device_info,
)
from .executable import Executable, compile_computation, load_executable
from .profiler import compare_to_unprofiled, profile_executable
from .types import ODLA_API_VERSION, DeviceInfo, DeviceName, OdlaError, Status
from .version import __version__


def info(args) -> None:
    import relay_bridge
    import targets

    if args.target_spec:
        write_target_spec(args.target_spec, args.force)
        return
    print(f"odla-tvm {__version__}")
    print(f"ODLA API {ODLA_API_VERSION}")
    print(f"TVM {targets.tvm_version()}")
    print("devices:")
    for name in available_devices():
        try:
            device = allocate_device(None, name, 0)
        except OdlaError as err:  # a plugin device whose library is missing here
            print(f"  {name.name}: unavailable: {err.message}")
            continue
        memory = get_device_info(device, DeviceInfo.TOTAL_MEMORY) / 2**30
        print(f"  {name.name} (index 0): {get_device_info(device, DeviceInfo.DEV_TYPE)}, "
              f"{memory:.1f} GiB, target {device.target.name}")
        plugins = device.target.plugins
        taking = ("takes what it can but in graphs it leaves to TVM whole, as faster there"
                  if device.target.plugins_may_decline else "takes what it can")
        path = (f"{', '.join(plugins)} {taking}; TVM compiles the rest" if plugins
                else "TVM compiles everything")
        missing = default_plugin_missing() if name == DeviceName.DEFAULT else None
        print(f"    path: {path}" + (f" ({DEFAULT_PLUGIN} cannot run: {missing})" if missing else ""))
    print("targets:")
    for spec in targets.available_targets():
        print(f"  {spec.name}: {spec.target} ({spec.description})")
    print("vendor plugins:")
    for plugin in targets.available_plugins():
        print(f"  {plugin.name}: device {plugin.device_name} ({plugin.description})")
        for item, meaning in plugin.items.items():
            print(f"    item {item}: {meaning}")
    ops = relay_bridge.registered_ops()
    print(f"ops lowered: {len(ops)}: {', '.join(ops)}")


def write_target_spec(path: str, overwrite: bool) -> None:
    import targets

    try:
        fields = targets.write_target_spec_file(path, overwrite)
    except FileExistsError:
        raise OdlaError(Status.INVALID_PARAM, f"--target-spec {path!r} exists; refusing to "
                        "overwrite it (give another FILE, or add --force to replace it)") from None
    except ValueError as err:
        raise OdlaError(Status.INVALID_PARAM, f"--target-spec: {err}") from None
    except OSError as err:
        raise OdlaError(Status.FAILURE, f"--target-spec {path!r}: cannot write it "
                        f"({err.strerror})") from None
    print(f"wrote {path}: this machine's CPU, {fields['mcpu']} ({fields['arch']}, "
          f"{fields['cores']} cores; vector features: {' '.join(fields['vector_features'])})")
    print(f"elsewhere, with {path} copied there: odla-tvm tune MODEL --target {path} "
          f"--rpc-tracker HOST:PORT --rpc-key KEY (servers on machines like this one), or "
          f"odla-tvm export MODEL --target {path} -o BUNDLE")


def load_model(model: str):
    """A computation or executable from MODEL: a stored executable (.odla), an ONNX file, or
    ``package.module:function`` or ``FILE.py:function`` returning a computation built through
    the ODLA API."""
    if ":" in model and not os.path.exists(model):
        module_name, _, function_name = model.partition(":")
        try:
            builder = getattr(_import_module(module_name), function_name)
        except (ImportError, AttributeError, OSError) as err:
            raise OdlaError(
                Status.INVALID_PARAM, f"MODEL {model!r}: cannot find {function_name} in "
                f"{module_name} ({err}); expected package.module:function or FILE.py:function"
            ) from None
        return builder()
    if model.endswith(".onnx"):
        from .frontends.onnx import import_model

        return import_model(model)
    return load_executable(model)


def _import_module(name: str):
    """The module ``name``: a dotted name on sys.path, or a Python file (a script such as
    examples/quickstart.py, which is no installed module)."""
    if not name.endswith(".py"):
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(os.path.basename(name)[:-3], name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export(args) -> None:
    model = load_model(args.model)
    bundle = export_bundle(model, args.target, args.output, with_runner=args.with_runner)
    print(f"exported {args.model} for {args.target} to {bundle}")
    print((bundle / "README.txt").read_text())


def profile(args) -> None:
    model = load_model(args.model)
    device = allocate_device()
    executable = model if isinstance(model, Executable) else compile_computation(model, device)
    trace, plain = profile_executable(executable, args.runs)
    trace.save(args.output)
    print(trace.summary(args.top))
    print(compare_to_unprofiled(trace, plain))
    print(f"Chrome trace (open in https://ui.perfetto.dev): {args.output}")


def tune(args) -> None:
    from .computation import Computation
    from .tuning import tune as tune_model

    if args.verbose:  # MetaSchedule's own log lines too (search.py's _quiet_meta_schedule)
        logging.getLogger("targets.tuning").setLevel(logging.DEBUG)
    # An ONNX file is tuned by path, so the database's run log names the model by its file.
    model = args.model if args.model.endswith(".onnx") else load_model(args.model)
    if not isinstance(model, (str, Computation)):
        raise OdlaError(Status.INVALID_PARAM, f"MODEL {args.model!r} is a compiled executable; "
                        "tuning needs the computation (an ONNX file, package.module:function or "
                        "FILE.py:function)")
    report = tune_model(model, args.target, args.trials, args.minutes, args.cache_dir,
                        keep_best=args.keep_best, rpc_tracker=args.rpc_tracker,
                        rpc_key=args.rpc_key)
    print(report.summary())


def rpc_server(args) -> None:
    import platform

    import targets

    try:
        spec = targets.get_target(args.target)
        directory = targets.build_rpc_server(spec)
    except KeyError as err:
        raise OdlaError(Status.UNSUPPORTED_DEVICE_TYPE, err.args[0]) from None
    except targets.ToolchainMissing as err:
        raise OdlaError(Status.DL_ERROR, str(err)) from None
    tracker, key = args.tracker or "TRACKER_HOST:9190", args.key or "KEY"
    start = f"./odla_rpc_server --tracker {tracker} --key {key}"
    print(f"odla_rpc_server for {spec.name} ({spec.arch}), with its TVM runtime: {directory}")
    print(f"on the board: copy that directory there (scp -r {directory} BOARD:odla-rpc-server)"
          f" and in it run\n  {start}")
    if spec.arch != platform.machine():
        print(f"(to try it here: qemu-{spec.arch}-static -L /usr/{spec.arch}-linux-gnu "
              f"{directory}/odla_rpc_server --tracker {tracker} --key {key})")
    print(f"then here: odla-tvm tune MODEL --target {spec.name} --rpc-tracker {tracker} "
          f"--rpc-key {key}")


def bench(args) -> None:
    models = model_files(args.files, args.models or ([] if args.files else LIGHT_MODELS))
    # TVM's thread pool reads this when it starts, at the first parallel kernel: nothing ran yet
    # (each path's own process gets it too).
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    started, load = time.monotonic(), os.getloadavg()[0]
    results = bench_driver.bench_models(
        models, args.threads, args.runs, args.cache_dir, args.batch,
        on_result=lambda result: print(result.summary(), flush=True))
    overhead = call_overhead()
    if os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
    chart_path = os.path.splitext(args.output)[0] + ".png"
    why_no_chart = bench_report.chart(results, chart_path, args.threads)
    text = bench_report.report(results, overhead, args.threads, time.monotonic() - started,
                            (load, os.getloadavg()[0]), args.cache_dir,
                            None if why_no_chart else os.path.basename(chart_path), why_no_chart)
    with open(args.output, "w") as f:
        f.write(text)
    print(text)
    print(f"written to {args.output}" + ("" if why_no_chart else f" and {chart_path}"))


def cache(args) -> None:
    from . import engine_cache

    if args.action == "clear":
        removed = engine_cache.clear(args.cache_dir)
        print(f"removed {len(removed)} engines "
              f"({sum(e.size for e in removed) / 2**20:.1f} MiB) from "
              f"{engine_cache.cache_root(args.cache_dir)}")
        return
    found = engine_cache.entries(args.cache_dir)
    total = sum(e.size for e in found) / 2**20
    print(f"{engine_cache.cache_root(args.cache_dir)}: {len(found)} engines, {total:.1f} MiB "
          f"(limit {engine_cache.limit_bytes() / 2**20:.0f} MiB; most recently used first)")
    for entry in found:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.last_used))
        print(f"  {entry.key}  {entry.size / 2**20:8.1f} MiB  {used}  {entry.target}  "
              f"{entry.model}")


COMMANDS = {"info": info, "export": export, "profile": profile, "tune": tune, "bench": bench,
            "rpc-server": rpc_server, "cache": cache}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="odla-tvm", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    info_parser = commands.add_parser("info",
                                      help="versions, devices and targets of this machine")
    info_parser.add_argument("--target-spec", metavar="FILE.json",
                             help="instead, write this machine's CPU to FILE.json, a target for "
                             "--target on other machines (to tune and compile for this one)")
    info_parser.add_argument("--force", action="store_true",
                             help="with --target-spec: replace FILE.json if it exists")
    export_parser = commands.add_parser(
        "export", help="write a deployable bundle of MODEL for a target (see README.txt inside)"
    )
    export_parser.add_argument(
        "model", help="a stored executable (.odla), an ONNX model (.onnx), or "
        "package.module:function or FILE.py:function returning an ODLA computation")
    export_parser.add_argument("--target", default="host-cpu",
                               help="target name (odla-tvm info lists them), or for another "
                               "machine's CPU llvm:MCPU:CORES or its target spec file (FILE.json, "
                               "from odla-tvm info --target-spec there); default host-cpu")
    export_parser.add_argument("-o", "--output", required=True, help="bundle directory")
    export_parser.add_argument("--with-runner", action="store_true",
                               help="add bin/odla_runner and the TVM runtime for the target")
    profile_parser = commands.add_parser(
        "profile", help="time MODEL's kernels on this CPU, per ODLA value; write a Chrome trace")
    profile_parser.add_argument("model", help="as for export")
    profile_parser.add_argument("--runs", type=int, default=5)
    profile_parser.add_argument("--top", type=int, default=15, help="kernels in the summary")
    profile_parser.add_argument("-o", "--output", default="odla-trace.json")
    tune_parser = commands.add_parser(
        "tune", help="tune MODEL's kernels for a target with MetaSchedule; later compiles for "
        "that target use the records")
    tune_parser.add_argument("model", help="an ONNX model (.onnx), or package.module:function "
                             "or FILE.py:function returning an ODLA computation")
    tune_parser.add_argument("--target",
                             help="target name (odla-tvm info lists them), or for another "
                             "machine's CPU llvm:MCPU:CORES (LLVM's name for it, its cores) or "
                             "its target spec file (FILE.json, from odla-tvm info --target-spec "
                             "there); default: the DEFAULT device's, which Session.from_onnx "
                             "uses (host-cpu-onednn-auto where oneDNN runs)")
    tune_parser.add_argument("--trials", type=int, help="candidates to measure for the model, "
                             "counting those earlier runs recorded")
    tune_parser.add_argument("--minutes", type=float, help="wall-clock limit of this run, "
                             "building and timing the model before and after included")
    tune_parser.add_argument("--keep-best", type=int, metavar="N",
                             help="afterwards keep only the N fastest records of each kernel in "
                             "the database (to store or ship it)")
    tune_parser.add_argument("--cache-dir", help="where tuning databases live (default "
                             "$ODLA_TVM_CACHE_DIR or ~/.cache/odla-tvm)")
    tune_parser.add_argument("--rpc-tracker", metavar="HOST:PORT",
                             help="measure on the servers of this TVM RPC tracker "
                             "(python -m tvm.exec.rpc_tracker) instead of this machine")
    tune_parser.add_argument("--rpc-key", metavar="KEY", help="with --rpc-tracker: the key the "
                             "servers registered under (rpc_server --key)")
    tune_parser.add_argument("-v", "--verbose", action="store_true",
                             help="log more, MetaSchedule's own lines (its task tables) among it")
    server_parser = commands.add_parser(
        "rpc-server", help="build odla_rpc_server, the RPC server a board runs to measure "
        "tuning candidates, and print how to start it there")
    server_parser.add_argument("--target", default="aarch64-linux",
                               help="the board's target (default aarch64-linux)")
    server_parser.add_argument("--tracker", metavar="HOST:PORT",
                               help="the tracker, as the board reaches it (for the command)")
    server_parser.add_argument("--key", help="the key to register under (for the command)")
    bench_parser = commands.add_parser(
        "bench", help="time ONNX models (default: onnx's light CNNs) on odla-tvm's default "
        "device, the pure-TVM build, onnxruntime and OpenVINO, each in its own process; write "
        "docs/perf.md and docs/perf.png")
    bench_parser.add_argument("files", nargs="*", metavar="MODEL.onnx",
                              help="ONNX models to time (fixed input dims but the batch)")
    bench_parser.add_argument("--models", nargs="+", metavar="NAME",
                              help="light models to time (default, without MODEL.onnx files, "
                              f"all: {' '.join(LIGHT_MODELS)})")
    bench_parser.add_argument("--threads", type=int, default=2)
    bench_parser.add_argument("--runs", type=int, default=5, help="timed runs per path (>= 3)")
    bench_parser.add_argument("--batch", type=int, default=1,
                              help="the size of a symbolic first input dim")
    bench_parser.add_argument("--cache-dir", help="where the tuning database of the tuned "
                              "column is (as for tune); the other paths use no records")
    bench_parser.add_argument("-o", "--output", default=os.path.join("docs", "perf.md"),
                              help="the report; the chart goes beside it as .png")
    cache_parser = commands.add_parser(
        "cache", help="list or clear the compiled engines kept by Session.from_onnx")
    cache_parser.add_argument("action", nargs="?", choices=["list", "clear"], default="list")
    cache_parser.add_argument("--cache-dir", help="the cache directory (default "
                              "$ODLA_TVM_CACHE_DIR or ~/.cache/odla-tvm)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        COMMANDS[args.command](args)
    except OdlaError as err:
        print(f"odla-tvm: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
