"""The ``odla-tvm`` command."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
import time

from . import gpu_device
from .bench import driver as bench_driver
from .bench import report as bench_report
from .bench import scenarios as bench_scenarios
from .bench.models import LIGHT_MODELS, model_files
from .bench.quantize import float_model
from .bench.timing import call_overhead
from .bundle import check_destination as check_bundle_destination
from .bundle import export as export_bundle
from .cli_checks import (UsageError, check_count, check_directory, check_input_file,
                         check_model, check_output_file, check_writable_folder)
from .device import (
    DEFAULT_PLUGIN,
    allocate_device,
    available_devices,
    default_plugin_missing,
    device_name_of,
    get_device_info,
)
from .executable import Executable, compile_computation, load_executable
from .profiler import compare_to_unprofiled, profile_executable
from .types import ODLA_API_VERSION, DeviceInfo, DeviceName, OdlaError, Status
from .version import odla_tvm_version


def info(args) -> None:
    import relay_bridge
    import targets

    if args.target_spec:
        write_target_spec(args.target_spec, args.force)
        return
    print(f"odla-tvm {odla_tvm_version()}")
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
    if DeviceName.NVIDIA_GPU not in available_devices():
        print(f"  NVIDIA_GPU: unavailable: {gpu_device.missing()}")
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


def check_info(args) -> None:
    if args.target_spec is not None:
        check_output_file(args.target_spec, "--target-spec", args.force)


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


def check_precision(precision: str | None, model: str | None = None, also=()) -> None:
    """--precision: a name of session.PRECISIONS (or of ``also``), and other than fp32 only
    for a ``model`` that compiles here (not a stored executable or bundle)."""
    from .session import PRECISIONS

    names = (*PRECISIONS, *also)
    if precision is not None and precision not in names:
        raise UsageError(f"--precision is {precision!r}; expected one of {', '.join(names)}")
    compiled = model is not None and not model.endswith(".onnx") and os.path.exists(model)
    if compiled and precision not in (None, "fp32"):
        raise UsageError(f"--precision {precision} applies where MODEL compiles here; "
                         f"{model!r} is compiled already (give its ONNX model)")


def check_run(args) -> None:
    check_model(args.model)
    check_count(args.runs, 1, "--runs")
    check_precision(args.precision, args.model)
    try:
        device_name_of(args.device)
    except OdlaError as err:
        raise UsageError(f"--device: {err.message}") from None
    if args.output is not None:
        check_output_file(args.output, "--output", args.force)


def load_session(model: str, device, precision: str | None):
    """A Session over MODEL: an ONNX file through Session.from_onnx (the engine cache
    included), a stored executable or bundle loaded for ``device``, or a computation of
    ``package.module:function`` compiled in ``precision``."""
    from .computation import Computation
    from .session import Session, set_precision

    if model.endswith(".onnx"):
        return Session.from_onnx(model, device, precision=precision)
    if os.path.exists(model):
        return Session(load_executable(model, device))
    computation = load_model(model)
    if not isinstance(computation, Computation):
        raise OdlaError(Status.INVALID_PARAM, f"MODEL {model!r} returned a "
                        f"{type(computation).__name__}; expected an ODLA Computation")
    set_precision(computation, precision)
    return Session(computation, device)


def run(args) -> None:
    from .cli_run import feeds, read_input_files, save_outputs, summary, time_runs

    given = read_input_files(args.input)
    device = allocate_device(device_name=args.device)
    session = load_session(args.model, device, args.precision)
    data = feeds(session.executable, given)
    outputs = dict(zip(session.output_types, session.run(data)))
    for name, array in outputs.items():
        print(summary(name, array))
    if args.output is not None:
        try:
            save_outputs(args.output, outputs)
        except OSError as err:
            raise OdlaError(Status.FAILURE, f"--output {args.output!r} cannot be written "
                            f"({err.strerror or err})") from None
        print(f"outputs written to {args.output} (keys: {', '.join(outputs)})")
    print(f"{time_runs(session, data, args.runs)} (device {device.name.name}, "
          f"{args.precision or 'fp32'})")


def check_target(name: str, option: str) -> None:
    import targets

    try:
        targets.get_target(name)
    except KeyError as err:
        raise UsageError(f"{option}: {err.args[0]}") from None
    except (OSError, ValueError) as err:
        raise UsageError(f"{option}: {err}") from None


def check_export(args) -> None:
    check_model(args.model)
    check_precision(args.precision, args.model)
    check_target(args.target, "--target")
    try:
        check_bundle_destination(args.output)
    except OdlaError as err:
        raise UsageError(f"-o: {err.message}") from None
    check_writable_folder(args.output, "-o")


def export(args) -> None:
    from .computation import Computation
    from .session import set_precision

    model = load_model(args.model)
    if isinstance(model, Computation):
        set_precision(model, args.precision)
    bundle = export_bundle(model, args.target, args.output, with_runner=args.with_runner)
    print(f"exported {args.model} for {args.target} to {bundle}")
    print((bundle / "README.txt").read_text())


def _starts_with(path: str, marker: bytes) -> bool:
    """Whether the file at ``path`` starts with ``marker`` (how a command knows its own)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(marker)) == marker
    except OSError:
        return False


def check_profile(args) -> None:
    check_model(args.model)
    check_count(args.runs, 1, "--runs")
    check_count(args.top, 1, "--top")
    # A Chrome trace written before (this command's default file) is replaced.
    check_output_file(args.output, "-o", args.force,
                      ours=lambda path: _starts_with(path, b'{"traceEvents"'))


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
                        rpc_key=args.rpc_key, precision=args.precision)
    print(report.summary())


def check_tune(args) -> None:
    check_precision(args.precision, args.model)


def check_rpc_server(args) -> None:
    check_target(args.target, "--target")
    if args.tracker is not None:
        host, _, port = args.tracker.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise UsageError(f"--tracker is {args.tracker!r}; expected HOST:PORT")


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
    start = f"./odla_rpc_server --tracker {tracker} --key {key} --host BOARD_ADDRESS"
    print(f"odla_rpc_server for {spec.name} ({spec.arch}), with its TVM runtime: {directory}")
    print(f"on the board: copy that directory there (scp -r {directory} BOARD:odla-rpc-server)"
          f" and in it run\n  {start}")
    print("(it listens on 127.0.0.1 without --host; whoever reaches its port runs code on the "
          "board: give --host the address of a network you trust)")
    if spec.arch != platform.machine():
        print(f"(to try it here: qemu-{spec.arch}-static -L /usr/{spec.arch}-linux-gnu "
              f"{directory}/odla_rpc_server --tracker {tracker} --key {key})")
    print(f"then here: odla-tvm tune MODEL --target {spec.name} --rpc-tracker {tracker} "
          f"--rpc-key {key}")


def check_bench(args) -> None:
    for path in args.files:
        check_input_file(path, "model file")
    if args.precision == "int8":  # files quantized by onnxruntime, each naming its float32 one
        for path in args.files:
            float_model(path)
    else:
        check_precision(args.precision, also=("int8",))
    try:
        model_files(names=args.models or [])
    except OdlaError as err:
        raise UsageError(f"--{err.message}") from None
    check_count(args.threads, 1, "--threads")
    check_count(args.runs, 3, "--runs")
    check_count(args.batch, 1, "--batch")
    check_directory(args.cache_dir, "--cache-dir")
    if args.scenarios:
        check_count(args.calls, 20, "--calls")
        args.output = args.output or os.path.join("odla-bench", "scenarios.md")
        check_output_file(args.output, "-o", args.force or _starts_with(
            args.output, bench_scenarios.TITLE.encode()))
        return
    args.output = args.output or os.path.join("odla-bench", "perf.md")
    # A bench report is replaced (the chart beside it too); any other file only with --force.
    ours = args.force or _starts_with(args.output, bench_report.TITLE.encode())
    check_output_file(args.output, "-o", ours)
    check_output_file(os.path.splitext(args.output)[0] + ".png", "-o's chart", ours)


def bench(args) -> None:
    models = model_files(args.files, args.models or ([] if args.files else LIGHT_MODELS))
    # TVM's thread pool reads this when it starts, at the first parallel kernel: nothing ran yet
    # (each path's own process gets it too).
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    if args.scenarios:
        results = bench_scenarios.scenario_bench(
            models, args.threads, args.calls,
            on_result=lambda result: print(bench_scenarios.summary(result), flush=True))
        _write_report(args.output, bench_scenarios.report(results, args.threads))
        return
    started, load = time.monotonic(), os.getloadavg()[0]
    results = bench_driver.bench_models(
        models, args.threads, args.runs, args.cache_dir, args.batch,
        on_result=lambda result: print(result.summary(), flush=True), precision=args.precision)
    overhead = call_overhead()
    if os.path.dirname(args.output):
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
    chart_path = os.path.splitext(args.output)[0] + ".png"
    why_no_chart = bench_report.chart(results, chart_path, args.threads)
    text = bench_report.report(results, overhead, args.threads, time.monotonic() - started,
                            (load, os.getloadavg()[0]), args.cache_dir,
                            None if why_no_chart else os.path.basename(chart_path), why_no_chart)
    _write_report(args.output, text, None if why_no_chart else chart_path)


def _write_report(path: str, text: str, chart_path: str | None = None) -> None:
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    print(text)
    print(f"written to {path}" + ("" if chart_path is None else f" and {chart_path}"))


def check_cache(args) -> None:
    check_directory(args.cache_dir, "--cache-dir")


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


def config(args) -> None:
    """The C library's compile and link flags (built first where it is not yet)."""
    import libodla

    libodla.build(force=args.build)
    flags = ([*libodla.cflags()] if args.cflags else []) + ([*libodla.libs()] if args.libs else [])
    if args.libdir:
        flags.append(str(libodla.library_dir()))
    if not (args.cflags or args.libs or args.libdir):
        flags = [*libodla.cflags(), *libodla.libs()]
    print(" ".join(flags))


COMMANDS = {"info": info, "run": run, "export": export, "profile": profile, "tune": tune,
            "bench": bench, "rpc-server": rpc_server, "cache": cache, "config": config}
# Each command's arguments checked before it starts (its own checks of what it reads follow).
CHECKS = {"info": check_info, "run": check_run, "export": check_export, "profile": check_profile,
          "tune": check_tune, "bench": check_bench, "rpc-server": check_rpc_server,
          "cache": check_cache}


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--precision", metavar="fp32|bf16|fp16",
                        help="compile in this precision (default fp32; bf16: BF16_MODE's "
                        "performance mode, fp16: FP16_MODE; float32 with rounded weights on a "
                        "CPU without their instructions)")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors on one line (exit status 2, as argparse's)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv=None) -> int:
    parser = _Parser(prog="odla-tvm", description=__doc__)
    parser.add_argument("--version", action="version", version=f"odla-tvm {odla_tvm_version()}")
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
    add_precision_argument(export_parser)
    profile_parser = commands.add_parser(
        "profile", help="time MODEL's kernels on this CPU, per ODLA value; write a Chrome trace")
    profile_parser.add_argument("model", help="as for export")
    profile_parser.add_argument("--runs", type=int, default=5)
    profile_parser.add_argument("--top", type=int, default=15, help="kernels in the summary")
    profile_parser.add_argument("--force", action="store_true",
                                help="replace the -o file even if it is no Chrome trace")
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
    add_precision_argument(tune_parser)
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
        "the report and its chart where -o says")
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
    bench_parser.add_argument("-o", "--output",
                              help="the report (default odla-bench/perf.md here, "
                              "odla-bench/scenarios.md with --scenarios; it replaces an "
                              "earlier report of its kind only); the chart goes beside it as .png")
    bench_parser.add_argument("--scenarios", action="store_true",
                              help="time odla-tvm and onnxruntime quiet, right after a NumPy "
                              "matmul, alternated, and two odla-tvm models alternated, in one "
                              "process per model, instead of the paths")
    bench_parser.add_argument("--calls", type=int, default=30,
                              help="calls per scenario with --scenarios (>= 20)")
    bench_parser.add_argument("--force", action="store_true",
                              help="replace the -o files even if they are no bench report")
    bench_parser.add_argument("--precision", metavar="fp32|bf16|fp16|int8",
                              help="as for export; int8: MODEL files quantized by "
                              "scripts/quantize_models.py, run as they are, accuracy against "
                              "the float32 file each names")
    cache_parser = commands.add_parser(
        "cache", help="list or clear the compiled engines kept by Session.from_onnx")
    cache_parser.add_argument("action", nargs="?", choices=["list", "clear"], default="list")
    cache_parser.add_argument("--cache-dir", help="the cache directory (default "
                              "$ODLA_TVM_CACHE_DIR or ~/.cache/odla-tvm)")
    config_parser = commands.add_parser(
        "config", help="flags to compile and link a C program against ODLA's C API "
        "(libodla_tvm.so, built here first if need be)")
    config_parser.add_argument("--cflags", action="store_true", help="the headers' folder")
    config_parser.add_argument("--libs", action="store_true", help="link flags, with an rpath")
    config_parser.add_argument("--libdir", action="store_true",
                               help="the library's folder (odla_tvm.pc is there)")
    config_parser.add_argument("--build", action="store_true", help="rebuild the library")
    run_parser = commands.add_parser(
        "run", help="run MODEL once on given or seeded random inputs: print and save its "
        "outputs, then time a few runs")
    run_parser.add_argument("model", help="an ONNX model (.onnx, through Session.from_onnx and "
                            "its engine cache), a stored executable (.odla), a bundle directory, "
                            "or package.module:function or FILE.py:function")
    run_parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                            help="an input's data (np.save's file of its dtype and shape); "
                            "inputs not given get seeded random data, dynamic dims 1")
    run_parser.add_argument("--output", metavar="FILE.npz",
                            help="save the outputs there, keyed by their names (np.load)")
    run_parser.add_argument("--force", action="store_true",
                            help="replace the --output file if it exists")
    run_parser.add_argument("--device", default="DEFAULT",
                            help="an ODLA device name (odla-tvm info lists them), or CPU")
    add_precision_argument(run_parser)
    run_parser.add_argument("--runs", type=int, default=10,
                            help="timed runs after the first (default 10)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version and usage errors: main returns the status
        return done.code or 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return _run_command(args, commands.choices[args.command])


def _run_command(args, parser: argparse.ArgumentParser) -> int:
    """Checks the arguments and runs the command: 0, or 2 for a mistake in its arguments, 1
    for a failure of its job, each said in one line; 141 where stdout was closed early (as
    by ``| head``), quietly."""
    try:
        CHECKS.get(args.command, lambda _args: None)(args)
        COMMANDS[args.command](args)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
    except UsageError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    except OdlaError as err:
        print(f"odla-tvm: error: {err}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        # Python's recipe: stdout to devnull, so that its flush at exit raises nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("odla-tvm: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 (a bug: one line, the traceback on request)
        if os.environ.get("ODLA_TVM_DEBUG") == "1":
            raise
        line = next((ln for ln in str(err).splitlines() if ln.strip()), "")
        print(f"odla-tvm: internal error: {type(err).__name__}: {line} (rerun with "
              "ODLA_TVM_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
