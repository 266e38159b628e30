"""Compiled engines kept between processes: ODLA's ENABLE_ENGINE_CACHE and CACHE_DIR items.

A second load of a model on the same machine reads its engine instead of importing and
compiling again. An engine is an exported bundle (odla_tvm.bundle's directory, its files
checked against the sizes and times they were stored with) under
``<cache dir>/engines/<key>.odla``, its library loaded and its weights memory-mapped from
there. The key digests all the compiled code depends on: the model's bytes
and fixed inputs, the target's key, odla-tvm's, TVM's and TVM-FFI's versions and installed
files, the options and the target's tuning database (an engine built before its records
changed is rebuilt, the log says so, and replaced). An entry that fails to load is removed
and rebuilt, never run. The cache keeps at most ``limit_bytes`` (ODLA_TVM_ENGINE_CACHE_BYTES,
default 4 GiB), evicting the least recently used.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import libodla
import targets
from toolchain import cache_dir as default_cache_dir

from .device import Device, checked_device
from .executable import (Executable, file_sha256, load_bundle, run_from_bundle,
                         write_atomically)
from .types import OdlaError
from .version import odla_tvm_version

log = logging.getLogger(__name__)

DEFAULT_LIMIT_BYTES = 4 << 30
_SUFFIX = ".odla"
_INFO_SUFFIX = ".json"  # beside each engine: what it was built from, for `odla-tvm cache`


def cache_root(cache_dir=None) -> Path:
    """``<cache_dir>/engines``; the cache dir defaults as the tuning databases' does
    ($ODLA_TVM_CACHE_DIR, else ~/.cache/odla-tvm)."""
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return base / "engines"


def enabled() -> bool:
    """Whether Session.from_onnx and the onnx Backend keep engines by default: yes, unless
    ODLA_TVM_ENGINE_CACHE is 0."""
    return os.environ.get("ODLA_TVM_ENGINE_CACHE", "1") != "0"


def model_digest(model, input_data=None, cache_dir=None) -> str | None:
    """A digest of an ONNX model (a file path, bytes or ModelProto) and the inputs fixed to
    data, or None for a model the cache cannot key: a path to something that is not a file
    (the importer says what is wrong). A file's own digest is remembered in the cache (see
    file_digest)."""
    import numpy as np

    # The content's sha256 however the model is given, so a path and its bytes share a key.
    if isinstance(model, (bytes, bytearray, memoryview)):
        content = hashlib.sha256(model).hexdigest()
    elif hasattr(model, "SerializeToString"):
        content = hashlib.sha256(model.SerializeToString()).hexdigest()
    else:
        try:
            content = file_digest(os.fspath(model), cache_dir)
        except (OSError, TypeError):
            return None
    digest = hashlib.sha256(content.encode())
    for name in sorted(input_data or {}):
        array = np.ascontiguousarray(input_data[name])
        digest.update(f"{name}:{array.dtype}:{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def file_digest(path: str, cache_dir=None) -> str:
    """The sha256 of the file at ``path``, remembered in the cache under the file's identity
    (device, inode, size, modification and change times; the change time moves on every
    write and cannot be set back), so that a second load does not read the model again to
    find its engine. OSError where the file cannot be read."""
    memo = _memo(path, cache_dir)
    try:
        remembered = memo.read_text()
        if len(remembered) == 64 and all(c in "0123456789abcdef" for c in remembered):
            return remembered
    except (OSError, UnicodeDecodeError):
        pass
    # Through a small buffer: it is read beside the import (see Session.from_onnx), whose peak
    # memory large chunks would add to.
    digest = file_sha256(Path(path))
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(memo, digest.encode())
    except (OSError, OdlaError):
        pass  # a cache that cannot be written: the file is read again next time
    return digest


def _memo(path: str, cache_dir=None) -> Path:
    """Where the digest of the file now at ``path`` is remembered (OSError where it is not
    a file that can be read)."""
    stat = os.stat(path)
    identity = (f"{os.path.realpath(path)}:{stat.st_dev}:{stat.st_ino}:{stat.st_size}:"
                f"{stat.st_mtime_ns}:{stat.st_ctime_ns}")
    return _digests_dir(cache_dir) / hashlib.sha256(identity.encode()).hexdigest()[:32]


def digest_remembered(model, cache_dir=None) -> bool:
    """Whether ``model`` is a file whose digest the cache remembers (a load of it seen
    before), so that model_digest will not read it."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return False  # the model itself, not a path
    try:
        return _memo(os.fspath(model), cache_dir).is_file()
    except (OSError, TypeError, ValueError):
        return False


def _digests_dir(cache_dir) -> Path:
    return cache_root(cache_dir) / "digests"


def limit_bytes() -> int:
    value = os.environ.get("ODLA_TVM_ENGINE_CACHE_BYTES")
    try:
        return int(value) if value else DEFAULT_LIMIT_BYTES
    except ValueError:
        log.warning("ODLA_TVM_ENGINE_CACHE_BYTES=%r is not a byte count; using %d", value,
                    DEFAULT_LIMIT_BYTES)
        return DEFAULT_LIMIT_BYTES


def database_state(spec: targets.TargetSpec, cache_dir) -> str:
    """The tuning records that would apply to a build for ``spec`` (RecordsDirectory.state:
    tuning more changes the key, so the engine is rebuilt with them)."""
    records = targets.find_records(spec, cache_dir)
    return "none" if records is None else records.state()


@functools.cache
def _code_state() -> str:
    """odla-tvm's own code as installed here (its files' sizes and modification times): an
    engine built by other code of the same version number is not this code's."""
    digest = hashlib.sha256()

    def add(folder: str, prefix: str) -> None:  # (os.scandir: a cached load pays this walk)
        with os.scandir(folder) as found:
            for entry in sorted(found, key=lambda e: e.name):
                if entry.is_dir():
                    if entry.name != "__pycache__":
                        add(entry.path, f"{prefix}{entry.name}/")
                elif entry.name.endswith((".py", ".cc", ".h")):
                    stat = entry.stat()
                    digest.update(f"{prefix}{entry.name}:{stat.st_size}:"
                                  f"{stat.st_mtime_ns};".encode())

    for package in ("odla_tvm", "relay_bridge", "targets"):
        add(os.path.dirname(importlib.util.find_spec(package).origin), "")
    return digest.hexdigest()


def engine_key(model_digest: str, device: Device, cache_dir=None, options=None) -> str:
    """The key of an engine built from the model of ``model_digest`` for ``device``."""
    device = checked_device(device)
    identity = {
        "model": model_digest,
        "target": device.target.key(),
        "device_index": device.index,
        "odla-tvm": odla_tvm_version(),
        "code": _code_state(),
        "tvm": targets.tvm_version(),
        "tvm-ffi": targets.tvm_ffi_version(),
        "options": options or {},
        "plugins": {name: targets.get_plugin(name).code_key() for name in device.target.plugins},
    }
    key = _digest({**identity, "tuning": database_state(device.target, cache_dir)})
    _untuned_keys[key] = _digest(identity)
    return key


# engine key -> the key of the same engine but for its tuning records: an entry stored with
# the same one was built before the records changed (see load and store).
_untuned_keys: dict[str, str] = {}


def _digest(identity: dict) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def _outdated(key: str, cache_dir) -> list[Path]:
    """The entries of the engine of ``key`` built with other tuning records than now."""
    untuned = _untuned_keys.get(key)
    if untuned is None:
        return []
    found = []
    for info_path in cache_root(cache_dir).glob(f"*{_INFO_SUFFIX}"):
        try:
            info = json.loads(info_path.read_text())
        except (OSError, ValueError):
            continue
        if info.get("untuned") == untuned and info.get("key") != key:
            found.append(info_path.with_suffix(_SUFFIX))
    return found


def onnx_engine_key(model, device: Device, cache_dir=None) -> str | None:
    """The key Session.from_onnx gives the engine of ONNX ``model`` (no inputs fixed) for
    ``device`` now; None where it keeps none."""
    digest = model_digest(model, None, cache_dir) if enabled() else None
    return None if digest is None else engine_key(digest, device, cache_dir)


def build_seconds(key: str, cache_dir=None) -> float | None:
    """How long compiling the engine of ``key`` took, where note_build_seconds said so."""
    try:
        info = json.loads((cache_root(cache_dir) / f"{key}{_INFO_SUFFIX}").read_text())
    except (OSError, ValueError):
        return None
    seconds = info.get("build_s")
    return float(seconds) if isinstance(seconds, (int, float)) else None


def note_build_seconds(key: str, seconds: float, cache_dir=None) -> None:
    """Keeps beside the engine of ``key`` (if cached) how long compiling it took: tune's
    estimate of a build's time when the model loads from the cache."""
    path = cache_root(cache_dir) / f"{key}{_INFO_SUFFIX}"
    try:
        info = json.loads(path.read_text())
        write_atomically(path, json.dumps({**info, "build_s": seconds}).encode())
    except (OSError, ValueError, OdlaError):
        pass  # an estimate only


def load(key: str, device: Device, cache_dir=None) -> Executable | None:
    """The engine stored under ``key``, or None (missing, or unusable and so removed)."""
    path = cache_root(cache_dir) / f"{key}{_SUFFIX}"
    if not path.is_dir():
        if _outdated(key, cache_dir):
            log.info("the tuning records for %s changed since this model's engine was cached; "
                     "recompiling with them", device.target.name)
        return None
    try:
        info = json.loads(path.with_suffix(_INFO_SUFFIX).read_text())
    except (OSError, ValueError):
        info = {}
    # A file put there by hand, or by another version, is not trusted to be this model's.
    if info.get("key") != key or info.get("odla-tvm") != odla_tvm_version():
        log.warning("engine cache entry %s was not stored for this model by odla-tvm %s; "
                    "rebuilding it", path, odla_tvm_version())
        _remove(path)
        return None
    if info.get("files") != _file_stats(path):
        log.warning("engine cache entry %s changed after it was stored; rebuilding it", path)
        _remove(path)
        return None
    try:
        # Unchanged since stored (sizes and times): not hashed again, read as it is mapped;
        # run by the C library where it can, so that a served process's first result waits
        # for no tvm_ffi import.
        executable = load_bundle(path, device, checked=True)
    except OdlaError as err:
        log.warning("engine cache entry %s cannot be used (%s); rebuilding it", path, err.message)
        _remove(path)
        return None
    os.utime(path)  # most recently used
    return executable


# The folder of an entry where its runs keep oneDNN's packed weights (packed_store.h in
# targets/plugins/onednn), added after the entry is stored: each checked by its size there.
PACKED_WEIGHTS_FOLDER = "packed"


def _file_stats(path: Path) -> dict[str, list[int]]:
    """Each file of the entry at ``path`` (relative; not its packed weights): [its size, its
    modification time]."""
    stats = {}
    for folder, folders, names in os.walk(path):
        if folder == os.fspath(path) and PACKED_WEIGHTS_FOLDER in folders:
            folders.remove(PACKED_WEIGHTS_FOLDER)
        for name in names:
            file = os.path.join(folder, name)
            info = os.stat(file)
            stats[os.path.relpath(file, path)] = [info.st_size, info.st_mtime_ns]
    return stats


def store(key: str, executable: Executable, description: str, cache_dir=None) -> None:
    """Keeps ``executable`` (not yet run) under ``key``, then evicts the least recently used
    entries past the size limit; from then on ``executable`` runs from the entry's library
    and weights, memory-mapped (see run_from_bundle). A cache that cannot be written (a read-only
    directory, a full disk), or an entry that does not load back, is skipped with a warning:
    the executable in hand still runs."""
    root = cache_root(cache_dir)
    path = root / f"{key}{_SUFFIX}"
    info = {"key": key, "model": description, "target": executable.device.target.name,
            "stored": time.strftime("%Y-%m-%d %H:%M:%S"), "odla-tvm": odla_tvm_version(),
            "untuned": _untuned_keys.get(key)}
    try:
        from . import bundle  # (a store's alone: a cached load does not import it)

        root.mkdir(parents=True, exist_ok=True)
        bundle.export(executable, None, path)  # written beside and renamed into place
        info["files"] = _file_stats(path)
        write_atomically(root / f"{key}{_INFO_SUFFIX}", json.dumps(info).encode())
    except (OSError, OdlaError) as err:
        log.warning("engine cache %s not written (%s); the model compiles again next time",
                    root, getattr(err, "message", err))
        return
    try:
        run_from_bundle(executable, path)
    except (OSError, OdlaError, RuntimeError) as err:  # (TVM could not read an empty tensor)
        log.warning("engine cache entry %s does not load (%s); removed: the model runs from "
                    "the build in hand and compiles again next time", path,
                    getattr(err, "message", err))
        _remove(path)
        return
    for outdated in _outdated(key, cache_dir):  # built with the records before they changed
        _remove(outdated)
    evict(limit_bytes(), cache_dir, keep=path)
    _build_c_library()


def _build_c_library() -> None:
    """Builds ODLA's C library, which runs cached engines (c_library_module), unless built
    from these sources already: once per install, at its first store. Where it does not
    build, cached engines run through tvm_ffi."""
    global _c_library_failed
    if _c_library_failed:
        return
    try:
        libodla.build()
    except (OSError, RuntimeError) as err:
        _c_library_failed = True
        log.warning("ODLA's C library does not build here (%s); cached engines load through "
                    "tvm_ffi, slower to start", str(err).splitlines()[0])


_c_library_failed = False


@contextlib.contextmanager
def weight_files(cache_dir=None):
    """A targets.WeightFiles in a directory beside the engines (so that ``store`` links its
    files into the entry it writes), removed after; None where the cache cannot be written.
    Its files live on, unlinked, as long as the compiled module maps them."""
    root = cache_root(cache_dir)
    try:
        root.mkdir(parents=True, exist_ok=True)
        directory = tempfile.mkdtemp(prefix=".odla-weights-", dir=root)
    except OSError:
        yield None
        return
    try:
        yield targets.WeightFiles(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    size: int
    last_used: float  # seconds since the epoch
    model: str
    target: str


def entries(cache_dir=None) -> list[Entry]:
    """The cache's engines, most recently used first."""
    root = cache_root(cache_dir)
    found = []
    for path in root.glob(f"*{_SUFFIX}"):
        try:
            stat = path.stat()
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) \
                if path.is_dir() else stat.st_size  # a file: an entry of an earlier odla-tvm
        except OSError:  # removed meanwhile
            continue
        try:
            info = json.loads((root / f"{path.stem}{_INFO_SUFFIX}").read_text())
        except (OSError, ValueError):
            info = {}
        found.append(Entry(path.stem, path, size, stat.st_mtime,
                           str(info.get("model", "?")), str(info.get("target", "?"))))
    return sorted(found, key=lambda e: e.last_used, reverse=True)


def evict(limit: int, cache_dir=None, keep: Path | None = None) -> list[Entry]:
    """Removes least recently used engines until the cache holds at most ``limit`` bytes
    (never ``keep``, the entry just written); returns those removed."""
    kept = entries(cache_dir)
    total = sum(e.size for e in kept)
    removed = []
    for entry in reversed(kept):
        if total <= limit:
            break
        if keep is not None and entry.path == keep:
            continue
        _remove(entry.path)
        total -= entry.size
        removed.append(entry)
    return removed


def clear(cache_dir=None) -> list[Entry]:
    """Removes every engine, and the model files' digests; returns the engines removed."""
    shutil.rmtree(_digests_dir(cache_dir), ignore_errors=True)
    return evict(-1, cache_dir)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    for victim in (path, path.with_suffix(_INFO_SUFFIX)):
        try:
            victim.unlink()
        except (FileNotFoundError, IsADirectoryError):
            pass
