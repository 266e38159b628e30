"""Deployable bundles: a directory with the compiled library, its parameters, a manifest and,
on request, a Python-free runner with the TVM runtime for the device's architecture.

"Generate once, link anytime, run anywhere": a bundle exported here for aarch64 runs on a
Raspberry Pi with ``bin/odla_runner`` and nothing else installed.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import mmap
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

import targets
from relay_bridge.checks import CHECKS

from .computation import Computation, cache_dir_of
from .device import target_spec
from .executable import (
    BUNDLE_FORMAT,
    LIBRARY,
    MANIFEST,
    MANIFEST_DIGEST,
    Executable,
    _computation,
    _executable,
    file_sha256,
)
from .types import ElementType, OdlaError, Status, ValueShape, numpy_dtype

log = logging.getLogger(__name__)


def _file_names(ids: list[str]) -> list[str]:
    """File-safe, unique names for value ids (ids may hold any character)."""
    names = []
    for value_id in ids:
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", value_id) or "value"
        while name in names:
            name += "_"
        names.append(name)
    return names


def _dtype(slot: dict) -> str:
    return str(numpy_dtype(ElementType[slot["type"]["element_type"]]))


def _resolve(model, target) -> Executable:
    """The executable to export: ``model`` itself, or ``model`` compiled for ``target``."""
    if isinstance(model, Computation):
        comp = _computation(model)
        spec = target_spec(target)
        try:
            database = targets.find_database(spec, cache_dir_of(comp))
            module = targets.compile_module(comp.build_module(spec=spec), spec, database=database)
        except OdlaError:
            raise
        except Exception as err:  # noqa: BLE001
            raise OdlaError(Status.FAILURE, f"TVM failed to compile for {spec.name}: {err}") from None
        return Executable(module, None, list(comp.args), list(comp.outputs), list(comp.variables))
    exe = _executable(model)
    if target is not None and target_spec(target).key() != exe.module.spec.key():
        raise OdlaError(
            Status.INVALID_PARAM,
            f"the executable was compiled for {exe.module.spec.name}, not {target}; "
            "export the computation instead to compile it for that target",
        )
    return exe


def export(model, target, path, with_runner: bool = False) -> Path:
    """Writes a deployable bundle of ``model`` (an Executable, or a Computation compiled here
    for ``target``: a target name such as "host-cpu" or "aarch64-linux", or a Device) to the
    directory ``path``. ``with_runner`` adds bin/odla_runner and the TVM runtime it needs.

    An existing bundle at ``path`` is replaced; any other existing directory is refused.
    """
    destination = check_destination(path)
    exe = _resolve(model, target)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".odla-bundle-", dir=destination.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; a bundle is meant to be shared
    try:
        _write(exe, staging, with_runner)
        if destination.exists():
            retired = Path(tempfile.mkdtemp(prefix=".odla-old-", dir=destination.parent))
            destination.rename(retired / "bundle")
            staging.rename(destination)
            shutil.rmtree(retired)
        else:
            staging.rename(destination)
    except targets.ToolchainMissing as err:
        shutil.rmtree(staging, ignore_errors=True)
        raise OdlaError(Status.DL_ERROR, str(err)) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("exported %s bundle to %s", exe.module.spec.name, destination)
    return destination


def check_destination(path) -> Path:
    """``path`` as an absolute Path, where a bundle may be written: new, an empty directory or
    an earlier bundle; INVALID_PARAM for anything else."""
    destination = Path(os.fspath(path)).absolute()
    if destination.exists() and not _replaceable(destination):
        raise OdlaError(
            Status.INVALID_PARAM,
            f"{destination} exists and is not an odla-tvm bundle; refusing to overwrite it "
            "(choose a new directory)",
        )
    return destination


def _replaceable(path: Path) -> bool:
    if path.is_dir() and not any(path.iterdir()):
        return True
    try:
        return json.loads((path / MANIFEST).read_text()).get("format") == BUNDLE_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _write(exe: Executable, root: Path, with_runner: bool) -> None:
    spec = exe.module.spec
    manifest = exe.manifest()
    digests = {}
    # The library's code generation and link (TVM and the linker, which let the GIL go) run
    # beside the writing and hashing of the weights, which for a large model take longer.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        library = pool.submit(exe.module.export, str(root / LIBRARY))
        for kind in ("args", "outputs", "variables"):
            for slot, name in zip(manifest[kind], _file_names([s["id"] for s in manifest[kind]])):
                slot["name"] = name
        (root / "params").mkdir()
        for slot, value in zip(manifest["variables"], exe.variables):
            slot["file"] = f"params/{slot['name']}.npy"
            np.save(root / slot["file"], value.data)
        # The weights main takes after the variables, memory-mapped where the bundle loads.
        (root / "weights").mkdir()
        for slot, array, path in zip(manifest["weights"], exe.module.weights,
                                     exe.module.weight_paths):
            _write_weight(root / slot["file"], array, path)
            digests[slot["file"]] = file_sha256(root / slot["file"])
        library.result()
    manifest["runtime_libraries"] = sorted(targets.runtime_library_names(spec))
    manifest["python_functions"] = _python_functions(root / LIBRARY)
    if with_runner:
        (root / "lib").mkdir()
        for name, source in targets.runtime_libraries(spec).items():
            shutil.copyfile(source, root / "lib" / name)
        (root / "bin").mkdir()
        targets.build_runner(spec, root / "bin" / "odla_runner", root / "lib")
    (root / "README.txt").write_text(_readme(manifest, spec, with_runner))
    manifest["format"] = BUNDLE_FORMAT
    manifest["files"] = {
        name: digests.get(name) or file_sha256(p)
        for name, p in ((str(p.relative_to(root)), p) for p in sorted(root.rglob("*")))
        if p.is_file()
    }
    text = (json.dumps(manifest, indent=2) + "\n").encode()
    (root / MANIFEST).write_bytes(text)
    # the manifest's own digest, beside it: a damaged manifest is found as a damaged file is
    (root / MANIFEST_DIGEST).write_text(hashlib.sha256(text).hexdigest() + "\n")


def _python_functions(library: Path) -> list[str]:
    """The functions registered from Python (relay_bridge.checks) that the code in ``library``
    calls, as its VM code names them: a loader without them (ODLA's C library) knows so
    before it loads the library."""
    with open(library, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return sorted(name for name in CHECKS if data.find(name.encode()) >= 0)


def _write_weight(destination: Path, array: np.ndarray, path: Path | None) -> None:
    """``array`` as a .npy file: a link to ``path``, the file the compile wrote it to, where
    there is one (on this file system, not yet removed), else written out."""
    if path is not None:
        try:
            os.link(path, destination)
            return
        except OSError:
            pass
    np.save(destination, array)


def _readme(manifest: dict, spec: targets.TargetSpec, with_runner: bool) -> str:
    inputs = " ".join(f"{s['name']}.npy" for s in manifest["args"])
    text = [
        f"odla-tvm bundle for {spec.name}: {spec.description} ({spec.arch})",
        f"built by odla-tvm {manifest['odla_tvm_version']} with TVM {manifest['tvm_version']}",
        "",
        "Run it on the device, with no Python and no compiler:",
        f"  bin/odla_runner . OUTPUT_DIR [--repeat N] {inputs}",
        "",
        "inputs (.npy files, in this order):",
        *[f"  {s['name']}: {_dtype(s)} {tuple(s['type']['dims'])}"
          f"{ValueShape(s['type']['dims']).any_size_note}"
          for s in manifest["args"]],
        "outputs (written as OUTPUT_DIR/<name>.npy):",
        *[f"  {s['name']}: {_dtype(s)} {tuple(s['type']['dims'])}" for s in manifest["outputs"]],
        "",
        f"bin/odla_runner finds {', '.join(f'lib/{n}' for n in manifest['runtime_libraries'])} "
        "beside it."
        if with_runner else
        "This bundle has no runner: export again with --with-runner to add bin/odla_runner "
        "and the TVM runtime for this architecture.",
        "From Python on a matching machine: odla_tvm.load_executable(\"<this directory>\").",
        "manifest.json lists every file with its sha256.",
    ]
    return "\n".join(text) + "\n"
