"""What ``odla-tvm run`` does around the model's run: the user's inputs read and checked
(seeded random ones for those not given), the outputs summarised and saved to an .npz, the
latency of a few runs."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import zipfile

import numpy as np

from .cli_checks import UsageError, check_input_file

SHOWN_VALUES = 6  # of each output, in its summary


def read_input_files(options: list[str]) -> dict[str, np.ndarray]:
    """{name: array} from ``--input NAME=FILE.npy`` options (checked against the model later,
    in ``feeds``)."""
    arrays = {}
    for option in options:
        name, equals, path = option.partition("=")
        if not equals or not name or not path:
            raise UsageError(f"--input {option!r}: expected NAME=FILE.npy")
        if name in arrays:
            raise UsageError(f"--input names {name!r} twice")
        check_input_file(path, f"--input {name}:")
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise UsageError(f"--input {name}: {path!r} is not a .npy file ({err})") from None
        if not isinstance(arrays[name], np.ndarray):  # an .npz archive
            raise UsageError(f"--input {name}: {path!r} is an .npz archive; expected one "
                             "array in a .npy file (np.save)")
    return arrays


def _dims(dims) -> str:
    return "(" + ", ".join("any" if d == -1 else str(d) for d in dims) + ")"


def feeds(executable, given: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """An array per argument of ``executable``: the one given, checked against the argument's
    type, else seeded random data (dynamic dims 1), each named in a note."""
    from .profiler import random_inputs

    names = [arg.id for arg in executable.args]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise UsageError(f"--input names {unknown}, not inputs of the model; its inputs: "
                         f"{', '.join(names)}")
    made = random_inputs(executable, seed)
    data = {}
    for arg in executable.args:
        dtype, dims = arg.type.dtype, arg.shape.dims
        array = given.get(arg.id)
        if array is None:
            data[arg.id] = made[arg.id]
            dynamic = " (its dynamic dims set to 1)" if -1 in dims else ""
            print(f"input {arg.id}: seeded random {dtype} {made[arg.id].shape}{dynamic}")
            continue
        if array.dtype != dtype or len(array.shape) != len(dims) or any(
                d not in (-1, n) for d, n in zip(dims, array.shape)):
            raise UsageError(f"--input {arg.id}: the file holds {array.dtype} {array.shape}; "
                             f"expected {dtype} {_dims(dims)}")
        data[arg.id] = array
    return data


def summary(name: str, array: np.ndarray) -> str:
    flat = array.reshape(-1)
    shown = np.array2string(flat[:SHOWN_VALUES], precision=5, separator=" ",
                            max_line_width=10**6)
    more = f" ... ({flat.size} values)" if flat.size > SHOWN_VALUES else ""
    return f"output {name}: {array.dtype} {array.shape}: {shown}{more}"


def save_outputs(path: str, outputs: dict[str, np.ndarray]) -> None:
    """An .npz of ``outputs`` (keys: their names), as np.savez writes one; written beside
    ``path`` and renamed into place, so that a failure leaves no half-written file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, staging = tempfile.mkstemp(prefix=".odla-outputs-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(handle, "wb") as f, zipfile.ZipFile(f, "w") as archive:
            for name, array in outputs.items():
                with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o666 & ~umask)  # mkstemp makes it private; np.save's would not be
        os.replace(staging, path)
    except BaseException:
        os.unlink(staging)
        raise


def time_runs(session, data: dict, runs: int) -> str:
    """The latency of ``runs`` runs of ``session`` on ``data``: median and min."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        session.run(data)
        times.append(time.perf_counter() - started)
    return (f"latency over {runs} runs after the first: median "
            f"{statistics.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms")
