"""Fuzzing libodla's stored-executable and bundle readers (libodla/src/stored_executable.cc and
npy.cc) with a seeded mutation loop: no libFuzzer here (no clang), so each case is a mutated
copy of a seed (tools/fuzz_corpus/: a stored .odla file and a bundle, their compiled library
a stub) that a child process (tools/fuzz_readers.cc, built with AddressSanitizer and
UndefinedBehaviorSanitizer) parses, answering "ok" or "refused <status>". Mutations reach past
the digests: a mutated manifest, archive or .npy file gets the sha256 values its container
checks, so the parser behind them sees it. A child that dies (a signal, a sanitizer report, an
exception that is not an ODLA status) or does not answer within the timeout is a finding; its
case is kept under the output folder and the child restarted.

    python -m tools.fuzz_readers [--count N | --seconds S] [--seed K] [--out DIR]
    python -m tools.fuzz_readers --write-seeds     (regenerates tools/fuzz_corpus/)
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tools.fuzz_mutations import mutate_bytes, mutate_json

CORPUS = Path(__file__).with_name("fuzz_corpus")
HARNESS_SOURCE = Path(__file__).with_name("fuzz_readers.cc")
_HEADER = struct.Struct("<8sIQ")
STUB_LIBRARY = b"\x7fELF not a library: the fuzz target never loads one\n"
SANITIZERS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
              "-fno-omit-frame-pointer"]


@dataclasses.dataclass
class Outcome:
    cases: int = 0
    accepted: int = 0
    refused: int = 0
    seconds: float = 0.0
    findings: list[str] = dataclasses.field(default_factory=list)  # kept cases' paths


# -- the child ---------------------------------------------------------------------------
def build_harness() -> Path:
    """The fuzz target, built with the sanitizers from libodla's reader sources, once per
    version of its sources (in odla-tvm's cache)."""
    from libodla import paths
    from toolchain import cache_dir

    ffi = paths._package_dir("tvm_ffi")
    sources = [HARNESS_SOURCE, *[paths.SOURCE_DIR / s for s in
                                 ("sha256.cc", "mapped_file.cc", "dtypes.cc", "npy.cc",
                                  "stored_executable.cc")]]
    headers = sorted(paths.SOURCE_DIR.glob("*.h"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in [*sources, *headers])
                            + str(ffi).encode()).hexdigest()[:16]
    program = cache_dir() / "fuzz-readers" / digest / "fuzz_readers"
    if program.is_file():
        return program
    program.parent.mkdir(parents=True, exist_ok=True)
    partial = program.with_suffix(f".{os.getpid()}")
    command = ["g++", "-std=c++17", "-O1", "-g", *SANITIZERS, "-o", str(partial),
               *map(str, sources), f"-I{paths.SOURCE_DIR}", f"-I{paths.INCLUDE_DIR}",
               "-isystem", str(ffi / "include"), f"-L{ffi / 'lib'}", "-ltvm_ffi",
               f"-Wl,-rpath,{ffi / 'lib'}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"building the fuzz target failed:\n{done.stderr[-3000:]}")
    partial.replace(program)
    return program


class Child:
    """The fuzz target, running; asked one path at a time."""

    def __init__(self, program: Path, timeout: float):
        self.program, self.timeout = program, timeout
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (the child's, closed by close)
        self.process = subprocess.Popen(
            [str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
            env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
                 "UBSAN_OPTIONS": "print_stacktrace=1"})

    def ask(self, path: Path) -> str | None:
        """The child's answer for ``path``; None where it died or hung (then it is gone)."""
        try:
            self.process.stdin.write(f"{path}\n".encode())
            self.process.stdin.flush()
        except BrokenPipeError:
            return None
        ready, _, _ = select.select([self.process.stdout], [], [], self.timeout)
        line = self.process.stdout.readline().decode().strip() if ready else ""
        if not line:
            self.process.kill()
            self.process.wait()
            return None
        return line

    def report(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=10)
        self.stderr.close()


# -- stored files: split, mutate, join with their digests ----------------------------------
def split(blob: bytes) -> tuple[dict, dict[str, bytes]]:
    _, _, length = _HEADER.unpack_from(blob)
    manifest = json.loads(blob[_HEADER.size:_HEADER.size + length])
    body = blob[_HEADER.size + length:]
    return manifest, {name: body[e["offset"]:e["offset"] + e["size"]]
                      for name, e in manifest["sections"].items()}


def join(manifest: dict, sections: dict[str, bytes], text: bytes | None = None,
         after=None) -> bytes:
    """The stored file of ``manifest`` and ``sections``, laid out and hashed as the writer
    does (odla_tvm.executable) and then changed by ``after``, or with the manifest ``text``."""
    offset = 0
    for name, data in sections.items():
        manifest["sections"][name] = {"offset": offset, "size": len(data),
                                      "sha256": hashlib.sha256(data).hexdigest()}
        offset += len(data)
    if after is not None:
        manifest = after(manifest)
    text = json.dumps(manifest).encode() if text is None else text
    return _HEADER.pack(b"ODLATVM\0", 1, len(text)) + text + b"".join(sections.values())


_ZIP_FIELDS = {  # offset, width of the fields of a zip's records the reader follows
    b"PK\x01\x02": [(10, 2), (20, 4), (24, 4), (28, 2), (30, 2), (32, 2), (42, 4)],
    b"PK\x03\x04": [(18, 4), (22, 4), (26, 2), (28, 2)],
    b"PK\x05\x06": [(8, 2), (10, 2), (12, 4), (16, 4), (20, 2)],
}
_INTERESTING = (0, 1, 2, 0xFF, 0xFFFF, 0xFFFFFFFF, 0x7FFFFFFF, 30, 46, 64, 128)


def mutate_zip(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One field of one of an archive's records set to an interesting value, a ZIP64 extra
    field added to a directory record, or an .npy header inside it changed."""
    data = bytearray(data)
    action = rng.random()
    records = [(i, sig) for sig in _ZIP_FIELDS for i in _find_all(data, sig)]
    if action < 0.25:
        return "npy header", bytes(_mutate_npy_at(data, rng.choice(_find_all(data, b"\x93NUMPY")
                                                                    or [0]), rng))
    if action < 0.4 and any(sig == b"PK\x01\x02" for _, sig in records):
        at = rng.choice([i for i, sig in records if sig == b"PK\x01\x02"])
        return "zip64 extra", bytes(_add_zip64(data, at, rng))
    if not records:
        return "zip bytes", mutate_bytes(bytes(data), rng)[1]
    at, sig = rng.choice(records)
    offset, width = rng.choice(_ZIP_FIELDS[sig])
    if at + offset + width <= len(data):
        value = rng.choice(_INTERESTING) & ((1 << (8 * width)) - 1)
        data[at + offset:at + offset + width] = value.to_bytes(width, "little")
    return f"zip field {sig[2]}{sig[3]}+{offset}", bytes(data)


def _find_all(data, needle) -> list[int]:
    found, at = [], data.find(needle)
    while at >= 0:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def _add_zip64(data: bytearray, at: int, rng: random.Random) -> bytearray:
    if at + 46 > len(data):
        return data
    name_len, extra_len = struct.unpack_from("<HH", data, at + 28)
    for field in rng.sample([24, 20, 42], rng.randint(1, 3)):
        struct.pack_into("<I", data, at + field, 0xFFFFFFFF)
    length = rng.choice([0, 4, 8, 16, 24, 0xFFFF])
    payload = struct.pack("<HH", 1, length) + bytes(rng.randrange(256) for _ in range(
        min(length, 24) if rng.random() < 0.7 else rng.randrange(24)))
    start = at + 46 + name_len + extra_len
    struct.pack_into("<H", data, at + 30, (extra_len + len(payload)) & 0xFFFF)
    data[start:start] = payload
    end = data.rfind(b"PK\x05\x06")
    if end >= 0 and end + 16 <= len(data):
        size = struct.unpack_from("<I", data, end + 12)[0]
        struct.pack_into("<I", data, end + 12, (size + len(payload)) & 0xFFFFFFFF)
    return data


_NPY_EDITS = [b"(-1, 4)", b"(4611686018427387904, 4611686018427387904)", b"(" + b"1, " * 40 + b")",
              b"()", b"(0,)", b"(1,)", b"'<f8'", b"'>f4'", b"'|V2'", b"'<U4'", b"'O'", b"True",
              b"{", b"}", b"'", b"", b"\x00", b" " * 70000, b"'descr': '<f4', 'descr': '<f4'"]


def _mutate_npy_at(data: bytearray, at: int, rng: random.Random) -> bytearray:
    """The .npy header at ``at`` with its version, its length or a part of its text changed."""
    if at + 10 > len(data):
        return data
    choice = rng.random()
    if choice < 0.2:
        data[at + 6] = rng.choice([0, 1, 2, 3, 4, 255])
    elif choice < 0.4:
        data[at + 8:at + 10] = rng.choice([0, 1, 9, 0xFFFF, rng.randrange(1 << 16)]).to_bytes(2, "little")
    else:
        length = struct.unpack_from("<H", data, at + 8)[0]
        header = bytes(data[at + 10:at + 10 + length])
        for token in (b"(", b"'<", b"'|", b"False"):
            if token in header and rng.random() < 0.5:
                start = header.index(token)
                end = header.find(b")" if token == b"(" else b"'" if token != b"False" else b"e",
                                  start + 1) + 1
                header = header[:start] + rng.choice(_NPY_EDITS) + header[max(end, start):]
                break
        else:
            header = mutate_bytes(header, rng)[1]
        new_length = len(header) if rng.random() < 0.8 else rng.randrange(1 << 16)
        data[at + 8:at + 10 + length] = struct.pack("<H", new_length & 0xFFFF) + header
    return data


def mutated_odla(blob: bytes, rng: random.Random) -> tuple[str, bytes]:
    manifest, sections = split(blob)
    choice = rng.random()
    if choice < 0.2:
        kind, data = mutate_bytes(blob, rng)
        return f"odla bytes {kind}", data
    if choice < 0.45:
        return "odla manifest", join(manifest, sections,
                                     after=lambda m: _mutated_manifest(m, rng))
    if choice < 0.55:
        text = json.dumps(manifest).encode()
        return "odla manifest text", join(manifest, sections, _mutated_text(text, rng))
    name = rng.choice([n for n in ("variables", "weights") if n in sections] or ["library"])
    kind, sections[name] = mutate_zip(sections[name], rng)
    return f"odla {name} {kind}", join(manifest, sections)


def _mutated_manifest(manifest: dict, rng: random.Random) -> dict:
    for _ in range(rng.randint(1, 3)):
        manifest = mutate_json(manifest, rng)
    return manifest


def _mutated_text(text: bytes, rng: random.Random) -> bytes:
    choice = rng.random()
    if choice < 0.3:
        depth = rng.choice([31, 32, 33, 1000, 100000])
        return b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"a":' * depth
    return mutate_bytes(text, rng)[1]


# -- bundles -----------------------------------------------------------------------------
def refresh(root: Path, manifest: dict | None = None, text: bytes | None = None) -> None:
    """Gives the bundle's files and manifest the digests a forger would."""
    if text is None:
        if manifest is None:
            manifest = json.loads((root / "manifest.json").read_bytes())
        files = manifest.get("files") if isinstance(manifest, dict) else None
        for name in list(files) if isinstance(files, dict) else []:
            try:  # (a name may be anything: too long, a link, a FIFO)
                data = (root / name).read_bytes() if ".." not in name and \
                    (root / name).is_file() else None
            except OSError:
                data = None
            if data is not None:
                files[name] = hashlib.sha256(data).hexdigest()
        text = json.dumps(manifest).encode()
    (root / "manifest.json").write_bytes(text)
    (root / "manifest.sha256").write_text(hashlib.sha256(text).hexdigest() + "\n")


_PATHS = ["../x.npy", "/etc/passwd", "weights/../weights/weight0.npy", "./model.so", "",
          "weights//weight0.npy", "weights/", "a" * 5000, "weights/weight0.npy\x00x",
          "link/weight0.npy", "fifo", "model.so"]


def mutate_bundle(root: Path, rng: random.Random) -> str:
    """Mutates the bundle copy at ``root`` in place; what was done."""
    manifest = json.loads((root / "manifest.json").read_bytes())
    choice = rng.random()
    if choice < 0.3:
        refresh(root, _mutated_manifest(manifest, rng))
        return "bundle manifest"
    if choice < 0.4:
        refresh(root, text=_mutated_text((root / "manifest.json").read_bytes(), rng))
        return "bundle manifest text"
    if choice < 0.5:
        entries = [e for key in ("weights", "variables") for e in manifest[key]]
        name = rng.choice(_PATHS)
        if name == "link/weight0.npy":
            (root / "link").symlink_to(root / "weights")
        elif name == "fifo":
            os.mkfifo(root / "fifo")
        rng.choice(entries)["file"] = name
        if rng.random() < 0.7:
            manifest["files"][name] = "0" * 64
        refresh(root, manifest)
        return f"bundle path {name[:20]!r}"
    if choice < 0.55:
        (root / "manifest.sha256").write_bytes(mutate_bytes(
            (root / "manifest.sha256").read_bytes(), rng)[1])
        return "bundle manifest digest"
    npy = rng.choice(sorted(root.glob("*/*.npy")))
    data = npy.read_bytes()
    if rng.random() < 0.3:
        kind, data = mutate_bytes(data, rng)
    else:
        kind, data = "npy header", bytes(_mutate_npy_at(bytearray(data), 0, rng))
    npy.write_bytes(data)
    refresh(root, manifest)
    return f"bundle {kind}"


# -- the loop ----------------------------------------------------------------------------
def run(count: int | None = None, seconds: float | None = None, seed: int = 0,
        out: Path | None = None, timeout: float = 10.0, log=None) -> Outcome:
    """Runs cases until ``count`` or ``seconds`` is reached; findings are copied to ``out``."""
    rng = random.Random(seed)
    outcome = Outcome()
    odla_seed = (CORPUS / "seed.odla").read_bytes()
    memory = "/dev/shm" if os.path.isdir("/dev/shm") else None  # cases come and go fast
    with tempfile.TemporaryDirectory(prefix="fuzz-readers-", dir=memory) as tmp:
        work = Path(tmp)
        program = build_harness()
        child = Child(program, timeout)
        start = time.monotonic()
        try:
            while (count is None or outcome.cases < count) and \
                    (seconds is None or time.monotonic() - start < seconds):
                case = work / f"case{outcome.cases % 2}"
                shutil.rmtree(case, ignore_errors=True)
                if case.exists() or case.is_symlink():
                    case.unlink()
                if rng.random() < 0.5:
                    kind, blob = mutated_odla(odla_seed, rng)
                    case.write_bytes(blob)
                else:
                    shutil.copytree(CORPUS / "bundle", case)
                    kind = mutate_bundle(case, rng)
                outcome.cases += 1
                answer = child.ask(case)
                if answer is None:
                    outcome.findings.append(_keep(case, kind, child, out, outcome.cases))
                    child.close()
                    child = Child(program, timeout)
                elif answer == "ok":
                    outcome.accepted += 1
                else:
                    outcome.refused += 1
                if log and outcome.cases % 10000 == 0:
                    log(f"{outcome.cases} cases, {len(outcome.findings)} findings, "
                        f"{time.monotonic() - start:.0f} s")
        finally:
            child.close()
        outcome.seconds = time.monotonic() - start
    return outcome


def _keep(case: Path, kind: str, child: Child, out: Path | None, number: int) -> str:
    report = f"case {number} ({kind}): {child.report()}"
    if out is None:
        return report
    out.mkdir(parents=True, exist_ok=True)
    kept = out / f"finding-{number}"
    if case.is_dir():
        shutil.copytree(case, kept, symlinks=True)
    else:
        shutil.copyfile(case, kept)
    kept.with_suffix(".txt").write_text(report)
    return str(kept)


# -- the seed corpus ---------------------------------------------------------------------
def write_seeds(directory: Path = CORPUS) -> None:
    """A small model with a variable and a weight, stored and exported, its library replaced
    by a stub (the fuzz target never loads it): tools/fuzz_corpus/."""
    import numpy as np

    import odla_tvm as odla

    E, VT = odla.ElementType, odla.ValueType
    rng = np.random.default_rng(3)
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (2, 32)), "x")
    v = odla.create_variable(VT(E.FLOAT32, (32,)), "v")
    odla.set_value_data(v, rng.standard_normal(32).astype(np.float32))
    w = odla.create_constant(VT(E.FLOAT32, (32, 32)), rng.standard_normal((32, 32)).astype(np.float32))
    odla.set_value_as_output(odla.gemm(x, False, w, False, 1.0, 1.0, v, None, "y"))
    exe = odla.compile_computation(comp)
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    manifest, sections = split(odla.store_executable(None, exe))
    sections["library"] = STUB_LIBRARY
    (directory / "seed.odla").write_bytes(join(manifest, sections))
    odla.export(exe, None, directory / "bundle")
    odla.destroy_computation(comp)
    (directory / "bundle" / "model.so").write_bytes(STUB_LIBRARY)
    (directory / "bundle" / "README.txt").unlink()
    manifest = json.loads((directory / "bundle" / "manifest.json").read_bytes())
    del manifest["files"]["README.txt"]
    refresh(directory / "bundle", manifest)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"))
    parser.add_argument("--write-seeds", action="store_true")
    args = parser.parse_args(argv)
    if args.write_seeds:
        write_seeds()
        return 0
    if args.count is None and args.seconds is None:
        args.count = 1000
    outcome = run(args.count, args.seconds, args.seed, args.out,
                  log=lambda text: print(text, flush=True))
    print(f"{outcome.cases} cases in {outcome.seconds:.0f} s: {outcome.accepted} accepted, "
          f"{outcome.refused} refused, {len(outcome.findings)} findings")
    for finding in outcome.findings:
        print(finding)
    return 1 if outcome.findings else 0


if __name__ == "__main__":
    sys.exit(main())
