"""Executables: ``odla_executable`` (odla_compute.h): compile, launch, store and load."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import struct
import tempfile
from pathlib import Path

import numpy as np

import relay_bridge  # noqa: F401  registers the odla_tvm.check_* functions modules call
import targets

from . import profiler
from .c_library_module import c_library_module
from .computation import (
    Computation,
    Value,
    ValueKind,
    _computation,
    _index,
    cache_dir_of,
)
from .context import Context, _context
from .data_checks import check_fits_in_memory
from .device import Device, checked_device
from .types import ItemType, OdlaError, Status, ValueType, checked, run_failure
from .version import odla_tvm_version

# An exported bundle (odla_tvm.bundle writes them; load_executable reads them): a directory
# with the library, its parameters and a manifest listing every file with its sha256.
BUNDLE_FORMAT = "odla-tvm-bundle/1"
LIBRARY = "model.so"
MANIFEST = "manifest.json"
MANIFEST_DIGEST = "manifest.sha256"  # beside the manifest: its sha256 in hex

_MAGIC = b"ODLATVM\0"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sIQ")  # magic, format version, manifest length


class Executable:
    """A compiled computation: its argument, variable and output slots and the compiled module."""

    def __init__(self, module: targets.CompiledModule, device: Device, args: list[Value],
                 outputs: list[Value], variables: list[Value], bounds: dict | None = None):
        self.module = module
        self.device = device
        self.args = args
        self.outputs = outputs
        self.variables = variables
        # argument id -> (smallest, largest) run-time shape, -1 where a dim is unbounded
        self.bounds = bounds or {}
        # kernel name -> the ODLA value ids its calls compute, in call order (for profiles)
        self.kernel_values: dict[str, list[str]] = {}
        self.destroyed = False
        # What every launch checks of the bound data, worked out once when no argument shape
        # is dynamic: each argument's id, dtype and shape.
        self._static_types = None if any(a.shape.is_dynamic for a in args) else [
            (a.id, a.type.dtype, a.shape.dims) for a in args]

    def _check_alive(self):
        if self.destroyed:
            raise OdlaError(Status.INVALID_PARAM, "the executable was destroyed")

    def launch(self, context: Context) -> None:
        self._check_alive()
        ctx = _context(context)
        run_batch = ctx.items.get(ItemType.RUN_BATCH_SIZE) if ctx.items else None
        results = self._run(self._bound_inputs(ctx), run_batch)
        store_results(ctx, self.outputs, results)

    def _run(self, inputs: list[np.ndarray], run_batch: int | None = None) -> list[np.ndarray]:
        """The outputs for ``inputs``: one array per argument, already checked against its
        type (as bind_to_argument checks; Session checks its feeds so); ``run_batch``: the
        RUN_BATCH_SIZE item, if set."""
        self._check_alive()
        if self.bounds or run_batch is not None:
            self._check_bounds(inputs, run_batch)
        if self.variables:
            inputs = inputs + [v.data for v in self.variables]
        recorder = profiler.recorder_for(self.device, self.kernel_values)
        try:
            return self.module.run(inputs, on_call=recorder)
        except Exception as err:  # noqa: BLE001 (TVM raises many kinds; the caller gets one)
            raise run_failure(err, "the compiled module failed to run") from None
        finally:
            if recorder is not None:
                recorder.finish()

    def _bound_inputs(self, ctx: Context) -> list[np.ndarray]:
        """bound_inputs(), with a fast path for what nearly every launch binds: exactly the
        arguments, in their static dtypes and shapes."""
        bound, types = ctx.inputs, self._static_types
        if types is not None and len(bound) == len(types):
            inputs = []
            for value_id, dtype, dims in types:
                data = bound.get(value_id)
                if data is None or data.dtype != dtype or data.shape != dims:
                    break
                inputs.append(data)
            else:
                return inputs
        return bound_inputs(self.args, ctx, "this executable")

    def _check_bounds(self, inputs: list[np.ndarray], run_batch: int | None) -> None:
        """Refuses run-time shapes outside the ranges the computation declared
        (MIN/MAX_BATCH_SIZE, MIN/MAX_SHAPE) and batches other than RUN_BATCH_SIZE."""
        for arg, data in zip(self.args, inputs):
            if run_batch is not None and arg.shape.dims[:1] == (-1,) and data.shape[0] != run_batch:
                raise OdlaError(
                    Status.INVALID_PARAM,
                    f"argument {arg.id!r} has batch {data.shape[0]}; the context's "
                    f"RUN_BATCH_SIZE is {run_batch}",
                )
            low, high = self.bounds.get(arg.id, ((), ()))
            if any(lo != -1 and d < lo for d, lo in zip(data.shape, low)) or any(
                    hi != -1 and d > hi for d, hi in zip(data.shape, high)):
                raise OdlaError(
                    Status.INVALID_PARAM,
                    f"argument {arg.id!r} has shape {tuple(data.shape)}; this executable takes "
                    f"shapes from {tuple(low)} to {tuple(high)} (-1: unbounded)",
                )

    def store(self, location=None):
        """store_executable(location, self): a file, or the bytes when ``location`` is None."""
        return store_executable(location, self)

    @staticmethod
    def load(location, device: Device | None = None) -> "Executable":
        return load_executable(location, device)

    # -- storing --------------------------------------------------------------------------
    def manifest(self) -> dict:
        """What a loader checks before it touches the library, and the slots it restores."""
        spec = self.module.spec
        return {
            "odla_tvm_version": odla_tvm_version(),
            "tvm_version": targets.tvm_version(),
            "tvm_ffi_version": targets.tvm_ffi_version(),
            "target_name": spec.name,
            "target": spec.target,
            "target_key": spec.key(),
            "arch": spec.arch,
            "device_kind": spec.device_kind,
            "args": [_slot(v) for v in self.args],
            "outputs": [_slot(v) for v in self.outputs],
            "variables": [_slot(v) for v in self.variables],
            # what the module's main takes after the variables (targets.weights)
            "weights": [{"name": f"weight{i}", "dtype": str(w.dtype), "dims": list(w.shape),
                         "file": f"weights/weight{i}.npy"}
                        for i, w in enumerate(self.module.weights)],
            "bounds": {k: [list(lo), list(hi)] for k, (lo, hi) in self.bounds.items()},
            "kernel_values": self.kernel_values,
            # the external functions main calls, linked in (vendor plugins' regions): a plugin
            # readies the process for its regions before they first run
            "vendor_regions": self.module.vendor_regions,
        }

    def to_bytes(self) -> bytes:
        self._check_alive()
        library = self.module.to_bytes()
        variables = io.BytesIO()
        np.savez(variables, **{f"v{i}": v.data for i, v in enumerate(self.variables)})
        weights = io.BytesIO()
        np.savez(weights, **{f"w{i}": w for i, w in enumerate(self.module.weights)})
        sections = {"library": library, "variables": variables.getvalue(),
                    "weights": weights.getvalue()}
        offset, layout = 0, {}
        for name, blob in sections.items():
            layout[name] = {"offset": offset, "size": len(blob),
                            "sha256": hashlib.sha256(blob).hexdigest()}
            offset += len(blob)
        manifest = {**self.manifest(), "sections": layout}
        blob = json.dumps(manifest).encode()
        return _HEADER.pack(_MAGIC, _FORMAT_VERSION, len(blob)) + blob + b"".join(sections.values())


def bound_inputs(args: list[Value], ctx: Context, runner: str) -> list[np.ndarray]:
    """The data ``ctx`` binds to each of ``args``, checked against their types."""
    known = {v.id for v in args}
    unknown = sorted(set(ctx.inputs) - known)
    if unknown:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"context binds {unknown}, which are not arguments of {runner}; "
            f"arguments: {sorted(known)}",
        )
    inputs = []
    for arg in args:
        if arg.id not in ctx.inputs:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"argument {arg.id!r} ({arg.type}) is not bound; call bind_to_argument first",
            )
        data = ctx.inputs[arg.id]
        if data.dtype != arg.type.dtype or not arg.shape.matches(data.shape):
            raise OdlaError(
                Status.INVALID_PARAM,
                f"data bound to {arg.id!r} is {data.dtype}{list(data.shape)}; expected "
                f"{arg.type.dtype}{list(arg.shape.dims)}{arg.shape.any_size_note}",
            )
        inputs.append(data)
    return inputs


def store_results(ctx: Context, outputs: list[Value], results: list[np.ndarray]) -> None:
    """Writes a run's results to ``ctx``, checking every bound buffer before writing any."""
    if not ctx.output_buffers:  # nothing to check or fill: the results are handed over
        for value, result in zip(outputs, results):
            ctx.results[value.id] = result
        return
    unknown = sorted(set(ctx.output_buffers) - {v.id for v in outputs})
    if unknown:  # bound by id to an executable loaded alone: nothing checked the ids before
        raise OdlaError(
            Status.INVALID_PARAM,
            f"context binds buffers to {unknown}, which are not outputs; outputs: "
            f"{[v.id for v in outputs]}",
        )
    for value, result in zip(outputs, results):
        ctx.check_output_buffer(value, result)
    for value, result in zip(outputs, results):
        ctx.store_result(value, result)


def _slot(value: Value) -> dict:
    return {"id": value.id, "type": value.type.to_dict()}


def _executable(executable) -> Executable:
    checked(executable, Executable, "executable", "an Executable")
    executable._check_alive()
    return executable


def compile_computation(computation: Computation, device: Device | None = None) -> Executable:
    """Compiles for ``device`` (the host CPU when None), picking the device's target and
    applying the records tuned for it (odla_tvm.tuning) where its tuning database has any."""
    comp = _computation(computation)
    return compile_outputs(comp, checked_device(device), comp.args, comp.outputs)


def compile_outputs(comp: Computation, device: Device, args: list[Value],
                    outputs: list[Value], weight_files=None, cache_dir=None) -> Executable:
    """Compiles ``outputs`` of ``comp`` as a function of ``args`` and the variables; the
    weights the compile lays out go to ``weight_files`` (a targets.WeightFiles) if given; the
    tuning records are those in ``cache_dir``, else in the computation's CACHE_DIR."""
    mod = comp.build_module(list(args), list(outputs), device.target)
    cache_dir = cache_dir_of(comp, cache_dir)
    try:
        database = targets.find_database(device.target, cache_dir)
        module = targets.compile_module(mod, device.target, device.index, database,
                                        comp.plugin_items(), weight_files)
    except Exception as err:  # noqa: BLE001
        raise OdlaError(
            Status.FAILURE, f"TVM failed to compile the computation for {device.target.name}: {err}"
        ) from None
    executable = Executable(module, device, list(args), list(outputs),
                            list(comp.variables), comp.shape_bounds())
    executable.kernel_values = comp.value_ids_of(module.kernel_bindings)
    return executable


def launch_executable(executable: Executable, context: Context) -> None:
    _executable(executable).launch(context)


def destroy_executable(executable: Executable) -> None:
    exe = _executable(executable)
    exe.destroyed = True
    exe.module = None


def store_executable(location, executable: Executable):
    """Writes the executable to the file ``location``; with ``location=None`` returns the bytes.

    The file is written beside its destination and renamed into place, so a failure never
    leaves a half-written file over an earlier one.
    """
    blob = _executable(executable).to_bytes()
    if location is None:
        return blob
    write_atomically(location, blob)
    return None


def write_atomically(location, blob: bytes) -> None:
    """Writes ``blob`` beside the file ``location`` and renames it into place."""
    path = os.fspath(location)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise OdlaError(Status.FILE_NOT_EXIST, f"directory {directory!r} does not exist")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".odla-tvm-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _corrupt(what: str) -> OdlaError:
    return OdlaError(
        Status.INVALID_PARAM,
        f"not a valid odla-tvm executable: {what}; store it again with store_executable()",
    )


def load_executable(location, device: Device | None = None) -> Executable:
    """Loads an executable from a stored file, its bytes, or an exported bundle directory;
    it runs with no recompilation."""
    if isinstance(location, (bytes, bytearray, memoryview)):
        blob = bytes(location)
    else:
        try:
            path = os.fspath(location)
        except TypeError:
            raise OdlaError(
                Status.INVALID_PARAM,
                f"location is a {type(location).__name__}; expected a file path or bytes",
            ) from None
        if os.path.isdir(path):
            return load_bundle(path, device)
        if not os.path.isfile(path):
            raise OdlaError(Status.FILE_NOT_EXIST, f"executable file {path!r} does not exist")
        with open(path, "rb") as f:
            blob = f.read()
    manifest, sections = _parse(blob)
    device = check_compatible(manifest, device, "executable")
    try:
        weights = _weights(manifest, np.load(io.BytesIO(sections["weights"]))) \
            if "weights" in sections else []  # a file of odla-tvm before weights were kept apart
        module = targets.CompiledModule.from_bytes(sections["library"], device.target,
                                                   device.index, weights)
        arrays = np.load(io.BytesIO(sections["variables"]))
        variables = [arrays[f"v{i}"] for i in range(len(manifest["variables"]))]
        return executable_from_manifest(module, device, manifest, variables)
    except OdlaError:
        raise
    except Exception as err:  # noqa: BLE001
        raise _corrupt(f"its contents do not load ({err})") from None


def load_bundle(path, device: Device | None = None, checked: bool = False) -> Executable:
    """Loads an exported bundle after checking, before touching its library, that it was
    built for this machine and this TVM and that no file is missing or altered (its sha256
    against the manifest's). A bundle its caller has ``checked`` (the engine cache's) is not
    hashed again, and runs in ODLA's C library where it can (odla_tvm.c_library_module)."""
    root = Path(path)
    try:
        text = (root / MANIFEST).read_bytes()
        if not checked:
            _check_manifest_digest(root, text)
        manifest = json.loads(text)
    except FileNotFoundError:
        raise OdlaError(
            Status.FILE_NOT_EXIST, f"{root} has no {MANIFEST}: not an odla-tvm bundle"
        ) from None
    except (OSError, ValueError, RecursionError) as err:
        raise OdlaError(Status.INVALID_PARAM, f"{root / MANIFEST} is unreadable: {err}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{root / MANIFEST} has format {manifest.get('format') if isinstance(manifest, dict) else None!r}; "
            f"expected {BUNDLE_FORMAT!r}",
        )
    device = check_compatible(manifest, device, f"bundle {root}")
    try:
        files = manifest.get("files", {})
        _check_names(root, manifest)
        for name, digest in files.items():
            file = root / name
            if not file.is_file():
                raise OdlaError(Status.INVALID_PARAM, f"bundle file {name} is missing from {root}")
            if not checked and file_sha256(file) != digest:
                raise OdlaError(
                    Status.INVALID_PARAM,
                    f"bundle file {name} was altered: its sha256 differs from the manifest's",
                )
        if LIBRARY not in files:
            raise OdlaError(Status.INVALID_PARAM, f"{root / MANIFEST} does not list {LIBRARY}")

        def load_compiled() -> targets.CompiledModule:
            module = targets.CompiledModule.load(str(root / LIBRARY), device.target,
                                                 device.index, _mapped_weights(root, manifest))
            if checked:  # an engine-cache entry, which keeps its packed weights
                module.packed_weights_root = os.fspath(root)
            return module

        module = c_library_module(root, manifest, device, load_compiled) if checked else None
        if module is None:
            module = load_compiled()
        variables = [np.load(root / slot["file"]) for slot in manifest["variables"]]
        return executable_from_manifest(module, device, manifest, variables)
    except OdlaError:
        raise
    except Exception as err:  # noqa: BLE001 (an altered manifest fails in many ways)
        raise OdlaError(Status.INVALID_PARAM, f"{root / MANIFEST} does not describe a loadable "
                        f"bundle: {type(err).__name__}: {err}") from None


def _check_manifest_digest(root: Path, text: bytes) -> None:
    """Refuses a manifest whose sha256 is not the one kept beside it (MANIFEST_DIGEST)."""
    try:
        expected = (root / MANIFEST_DIGEST).read_text().strip()
    except (OSError, UnicodeDecodeError):
        expected = None
    if expected != hashlib.sha256(text).hexdigest():
        raise OdlaError(Status.INVALID_PARAM, f"{root / MANIFEST} was altered or has no "
                        f"{MANIFEST_DIGEST}: its sha256 differs from the one kept beside it")


_PLAIN_PART = re.compile(r"[A-Za-z0-9_.-]+")


def _check_names(root: Path, manifest: dict) -> None:
    """Refuses a bundle naming a file outside it: every name a plain relative path (no "..",
    no absolute path, no symbolic link on the way) and every file its entries name listed in
    its files, with their sha256."""
    files = manifest.get("files", {})
    entries = [s.get("file") if isinstance(s, dict) else None
               for s in [*manifest.get("variables", []), *manifest.get("weights", [])]]
    for name in [*files, *entries]:
        parts = name.split("/") if isinstance(name, str) else [""]
        if not all(_PLAIN_PART.fullmatch(p) and p not in (".", "..") for p in parts):
            raise OdlaError(Status.INVALID_PARAM, f"{root / MANIFEST} names the file {name!r}, "
                            "not a plain relative name inside the bundle")
        if name not in files:
            raise OdlaError(Status.INVALID_PARAM, f"{root / MANIFEST} names {name}, which its "
                            "files (with their sha256) do not list")
        if any((root / "/".join(parts[:i + 1])).is_symlink() for i in range(len(parts))):
            raise OdlaError(Status.INVALID_PARAM, f"bundle file {name} is a symbolic link")


def _mapped_weights(root: Path, manifest: dict) -> list[np.ndarray]:
    """The weights of the bundle at ``root``, memory-mapped copy-on-write: read where they lie,
    as TVM reads them (the .npy header keeps the data 64-byte aligned), never written back."""
    return _weights(manifest, {f"w{i}": _mapped_npy(root / slot["file"], slot)
                               for i, slot in enumerate(manifest.get("weights", []))})


def _mapped_npy(path: Path, slot: dict) -> np.ndarray:
    """The .npy file at ``path``, mapped copy-on-write: where its header is the one np.save
    writes for the manifest's dtype and dims, mapped past it unparsed (np.load evaluates each
    header as Python); else as np.load maps it, for _weights to check."""
    try:
        dtype, shape = np.dtype(slot["dtype"]), tuple(slot["dims"])
    except TypeError:  # a dtype NumPy knows only by its object (bfloat16)
        return np.load(path, mmap_mode="c")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape})
    expected = header.getvalue()
    with open(path, "rb") as f:
        if f.read(len(expected)) == expected and os.fstat(f.fileno()).st_size == \
                len(expected) + dtype.itemsize * math.prod(shape):
            return np.memmap(f, dtype, mode="c", offset=len(expected), shape=shape)
    return np.load(path, mmap_mode="c")


def run_from_bundle(exe: Executable, path) -> None:
    """``exe``, not yet run, runs from then on from the bundle it was just exported to at
    ``path``: its library, loaded, and its weights, memory-mapped, rather than its own build
    and weights, which it lets go. The pages of file-mapped weights that a vendor region
    packs leave memory once packed (targets/plugins/onednn/weight_packing.h), so the originals
    and their packed copies are not both held."""
    root = Path(path)
    exe.module.run_from_library(os.fspath(root / LIBRARY),
                                _mapped_weights(root, json.loads((root / MANIFEST).read_text())))
    exe.module.packed_weights_root = os.fspath(root)


def _weights(manifest: dict, arrays) -> list[np.ndarray]:
    """The weights ``arrays`` ("w0", "w1", ...) holds, checked against the manifest's."""
    weights = []
    for i, slot in enumerate(manifest.get("weights", [])):
        array = arrays[f"w{i}"]
        if str(array.dtype) != slot["dtype"] or list(array.shape) != slot["dims"]:
            raise _corrupt(f"weight {i} is {array.dtype}{list(array.shape)}; its manifest "
                           f"says {slot['dtype']}{slot['dims']}")
        weights.append(array)
    return weights


def file_sha256(path: Path) -> str:
    with open(path, "rb") as f:  # in chunks: a model's library may be most of its weights
        return hashlib.file_digest(f, "sha256").hexdigest()


def check_compatible(manifest: dict, device: Device | None, what: str) -> Device:
    """The device to load on, after refusing code for another machine, target or TVM."""
    device = checked_device(device)
    machine = targets.host_cpu().arch
    try:
        arch, tvm_version, key = manifest["arch"], manifest["tvm_version"], manifest["target_key"]
    except (KeyError, TypeError):
        raise _corrupt("its manifest lacks arch, tvm_version or target_key") from None
    if not all(isinstance(v, str) for v in (arch, tvm_version, key)):
        raise _corrupt(f"its manifest gives arch {arch!r}, tvm_version {tvm_version!r} and "
                       f"target_key {key!r}; expected strings")
    if arch != machine:
        raise OdlaError(
            Status.UNSUPPORTED_DEVICE_TYPE,
            f"{what} holds {arch} code; this machine is {machine}; run it on a machine of that kind "
            "(a bundle's bin/odla_runner needs no Python) or recompile it for this one",
        )
    if tvm_version != targets.tvm_version():
        raise OdlaError(
            Status.UNSUPPORTED_DEVICE_TYPE,
            f"{what} was built by TVM {tvm_version}; this is TVM {targets.tvm_version()}; "
            "recompile it from its computation",
        )
    if not device.target.runs_code_of(key):
        raise OdlaError(
            Status.UNSUPPORTED_DEVICE_TYPE,
            f"{what} was compiled for target {key}; device {device.name.name} compiles for "
            f"{device.target.key()}; recompile it for this device",
        )
    return device


def executable_from_manifest(module, device: Device, manifest: dict, variables: list) -> Executable:
    args = [_slot_value(s, ValueKind.ARGUMENT) for s in manifest["args"]]
    outputs = [_slot_value(s, ValueKind.RESULT) for s in manifest["outputs"]]
    slots = [_slot_value(s, ValueKind.VARIABLE, data)
             for s, data in zip(manifest["variables"], variables, strict=True)]
    bounds = {k: (tuple(lo), tuple(hi)) for k, (lo, hi) in manifest.get("bounds", {}).items()}
    executable = Executable(module, device, args, outputs, slots, bounds)
    executable.kernel_values = manifest.get("kernel_values", {})
    module.vendor_regions = manifest.get("vendor_regions", [])
    return executable


def _slot_value(slot: dict, kind: ValueKind, data=None) -> Value:
    if not isinstance(slot["id"], str):
        raise TypeError(f"value id {slot['id']!r} is not a string")
    value_type = ValueType.from_dict(slot["type"])
    check_fits_in_memory(slot["id"], value_type)
    return Value(slot["id"], value_type, kind, None, None, data)


def _parse(blob: bytes) -> tuple[dict, dict[str, memoryview]]:
    """The manifest and the checked sections (views of ``blob``, not copies: a library can be
    large)."""
    view = memoryview(blob)
    if len(blob) < _HEADER.size:
        raise _corrupt(f"{len(blob)} bytes is shorter than its {_HEADER.size}-byte header")
    magic, version, manifest_len = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        raise _corrupt(f"it starts with {magic!r}; expected {_MAGIC!r}")
    if version != _FORMAT_VERSION:
        raise _corrupt(f"format version {version}; this odla-tvm reads {_FORMAT_VERSION}")
    body = _HEADER.size + manifest_len
    try:
        manifest = json.loads(blob[_HEADER.size:body].decode())
        layout = manifest["sections"]
    except (ValueError, KeyError, TypeError, RecursionError):  # (nested past Python's stack)
        raise _corrupt("its manifest is truncated or unreadable") from None
    sections = {}
    for name in ("library", "variables", "weights"):
        entry = layout.get(name) if isinstance(layout, dict) else None
        if name == "weights" and entry is None:
            continue  # stored by odla-tvm before weights were kept apart: in the library
        offset, size = (entry.get("offset"), entry.get("size")) if isinstance(entry, dict) else (None, None)
        if not (type(offset) is int and type(size) is int and offset >= 0 and size >= 0):
            raise _corrupt(f"its manifest gives section {name!r} offset {offset!r} and size "
                           f"{size!r}; expected byte counts")
        chunk = view[body + offset:body + offset + size]
        if len(chunk) != size:
            raise _corrupt(f"section {name!r} is truncated ({len(chunk)} of {size} bytes)")
        if hashlib.sha256(chunk).hexdigest() != entry.get("sha256"):
            raise _corrupt(f"section {name!r} fails its sha256 checksum (altered or damaged)")
        sections[name] = chunk
    return manifest, sections


def get_num_of_args_from_executable(executable: Executable) -> int:
    return len(_executable(executable).args)


def get_arg_from_executable_by_idx(executable: Executable, arg_idx: int) -> Value:
    return _index(_executable(executable).args, arg_idx, "argument")


def get_num_of_outputs_from_executable(executable: Executable) -> int:
    return len(_executable(executable).outputs)


def get_output_from_executable_by_idx(executable: Executable, output_idx: int) -> Value:
    return _index(_executable(executable).outputs, output_idx, "output")
