"""A fuzzing campaign over every format odla-tvm loads: ONNX models, stored executables
(.odla), export bundles, training checkpoints and tuning databases.

Each case mutates one seed, byte by byte or in its structure, loads the mutant through the
product's public entry point and runs what loaded. The contract: every outcome is success or
OdlaError. A case is named ``<format>-<family>-<n>`` (``onnx-struct-42``); the name seeds its
random choices, so ``scripts/fuzz.py --case onnx-struct-42`` repeats it exactly. Cases run in
long-lived workers (tools.isolation): a case that kills its worker is a crash, one that
runs past its limit a hang.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import resource
import shutil
import struct
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from odla_tvm.data_checks import MEMORY_BYTES

from .fuzz_mutations import (
    ONNX_MUTATIONS,
    interesting_value,
    mutate_bytes,
    mutate_json,
    mutated_checkpoint,
)

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

FORMATS = ("onnx", "light", "odla", "bundle", "checkpoint", "tuning")
FAMILIES = ("bytes", "struct")
# Share of a campaign's cases per (format, family). The light CNNs take byte mutations only:
# a mutant that still parses compiles a whole CNN (seconds), so they get few cases.
MIX = {("onnx", "struct"): 0.40, ("onnx", "bytes"): 0.18, ("light", "bytes"): 0.02,
       ("odla", "bytes"): 0.06, ("odla", "struct"): 0.06, ("bundle", "bytes"): 0.04,
       ("bundle", "struct"): 0.04, ("checkpoint", "bytes"): 0.06,
       ("checkpoint", "struct"): 0.06, ("tuning", "bytes"): 0.04, ("tuning", "struct"): 0.04}
# One node test case per op type of these (the first by name whose inputs are tensors).
NODE_OPS = (
    "Abs", "Add", "And", "ArgMax", "AveragePool", "BatchNormalization", "Cast", "Ceil", "Clip",
    "Concat", "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "CumSum", "DepthToSpace", "Div",
    "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "Flatten", "Gather", "GatherElements",
    "GatherND", "Gemm", "GlobalAveragePool", "Greater", "HardSigmoid", "Identity",
    "InstanceNormalization", "LRN", "LayerNormalization", "LeakyRelu", "Less", "Log",
    "LogSoftmax", "MatMul", "Max", "MaxPool", "Mean", "Min", "Mul", "Neg", "Not", "OneHot",
    "Pad", "Pow", "Range", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceSum", "Relu",
    "Reshape", "Resize", "ScatterElements", "ScatterND", "Shape", "Sigmoid", "Sign", "Sin",
    "Size", "Slice", "Softmax", "Split", "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Tile",
    "TopK", "Transpose", "Unsqueeze", "Where")
FEED_LIMIT = 64 << 20  # bytes: a mutant declaring bigger inputs is loaded but not run
WORKER_MEMORY = 8 << 30  # bytes of address space a process running cases may take
_SEEDS_VERSION = 1


@dataclasses.dataclass
class Outcome:
    case: str
    format: str
    mutation: str  # the family and the mutation made: "bytes/flip", "struct/dims"
    kind: str  # success, odla_error, crash, hang or exception
    detail: str = ""  # OdlaError: "STATUS: message"; exception: "Type: message"
    seconds: float = 0.0

    @property
    def conforming(self) -> bool:
        return self.kind in ("success", "odla_error")


def parse_case(case: str) -> tuple[str, str, int]:
    fmt, family, number = case.rsplit("-", 2)
    if fmt not in FORMATS or family not in FAMILIES or not number.isdigit():
        raise ValueError(f"case {case!r}; expected <format>-<bytes|struct>-<n> with format one "
                         f"of {', '.join(FORMATS)}")
    return fmt, family, int(number)


def campaign(count: int) -> list[str]:
    """``count`` case names spread over formats and families by MIX, interleaved."""
    names = []
    for (fmt, family), share in MIX.items():
        names += [(i / max(1, round(count * share)), f"{fmt}-{family}-{i}")
                  for i in range(max(1, round(count * share)))]
    return [name for _, name in sorted(names)][:count]


# -- seeds -------------------------------------------------------------------------------------

def transformer_block(seq: int = 8, dim: int = 16) -> onnx.ModelProto:
    """One pre-norm transformer layer (single-head attention, an Erf GELU MLP) in ONNX."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    inits = [weight(n, dim, dim) for n in ("wq", "wk", "wv", "wo")]
    inits += [weight("w1", dim, 4 * dim), weight("w2", 4 * dim, dim), weight("b1", 4 * dim),
              numpy_helper.from_array(np.ones(dim, np.float32), "gamma"),
              numpy_helper.from_array(np.zeros(dim, np.float32), "beta"),
              numpy_helper.from_array(np.array(dim ** -0.5, np.float32), "scale"),
              numpy_helper.from_array(np.array(2 ** -0.5, np.float32), "rsqrt2"),
              numpy_helper.from_array(np.array(0.5, np.float32), "half"),
              numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    n = helper.make_node
    nodes = [
        n("LayerNormalization", ["x", "gamma", "beta"], ["ln1"], axis=-1, epsilon=1e-5),
        n("MatMul", ["ln1", "wq"], ["q"]), n("MatMul", ["ln1", "wk"], ["k"]),
        n("MatMul", ["ln1", "wv"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["scores"]), n("Mul", ["scores", "scale"], ["scaled"]),
        n("Softmax", ["scaled"], ["attn"], axis=-1), n("MatMul", ["attn", "v"], ["ctx"]),
        n("MatMul", ["ctx", "wo"], ["proj"]), n("Add", ["x", "proj"], ["h"]),
        n("LayerNormalization", ["h", "gamma", "beta"], ["ln2"], axis=-1, epsilon=1e-5),
        n("MatMul", ["ln2", "w1"], ["up"]), n("Add", ["up", "b1"], ["upb"]),
        n("Mul", ["upb", "rsqrt2"], ["us"]), n("Erf", ["us"], ["erf"]),
        n("Add", ["erf", "one"], ["erf1"]), n("Mul", ["upb", "erf1"], ["g0"]),
        n("Mul", ["g0", "half"], ["gelu"]), n("MatMul", ["gelu", "w2"], ["down"]),
        n("Add", ["h", "down"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "transformer_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, seq, dim))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, seq, dim))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def _conv_relu():
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(1).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["out"])],
        "conv_relu", [helper.make_tensor_value_info("image", TensorProto.FLOAT, (1, 3, 8, 8))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 4, 8, 8))],
        [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _save_onnx_seed(directory: Path, name: str, model, inputs: dict) -> None:
    (directory / f"{name}.onnx").write_bytes(model.SerializeToString())
    np.savez(directory / f"{name}.npz", **inputs)


def _graph_inputs(model, arrays) -> dict:
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    return dict(zip(names, arrays))


def build_seeds(directory) -> Path:
    """Writes every seed to ``directory`` once (kept while the seed version, the TVM and the
    CPU target stay the same)."""
    import targets

    from examples import train as train_example
    from odla_tvm import bundle, executable, training, tuning
    from odla_tvm.frontends.onnx import import_model
    from odla_tvm.session import Session
    from odla_tvm.types import ComputeMode

    from . import onnx_conformance

    root = Path(directory)
    # Executables and tuning records hold code for this CPU (its LLVM mcpu): other seeds
    # elsewhere would only test the refusal of foreign code.
    stamp = {"version": _SEEDS_VERSION, "tvm": targets.tvm_version(),
             "target": targets.host_cpu().key()}
    manifest_path = root / "seeds.json"
    if manifest_path.is_file():
        if json.loads(manifest_path.read_text()) == stamp:
            return root
        shutil.rmtree(root)  # seeds of another machine or version
    elif root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} holds other files; give an empty or new directory")
    onnx_dir, light_dir = root / "onnx", root / "light"
    for d in (onnx_dir, light_dir, root / "odla", root / "checkpoint"):
        d.mkdir(parents=True)
    log.info("writing seeds to %s", root)
    chosen = {}
    for case in sorted(onnx_conformance.node_cases(), key=lambda c: c.name):
        if (case.op in NODE_OPS and case.op not in chosen and len(case.model.graph.node) == 1
                and all(isinstance(a, np.ndarray) for a in case.inputs)):
            chosen[case.op] = case
    for _op, case in sorted(chosen.items()):
        _save_onnx_seed(onnx_dir, case.name, case.model, _graph_inputs(case.model, case.inputs))
    block = transformer_block()
    x = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)
    _save_onnx_seed(onnx_dir, "transformer_block", block, {"x": x})
    for case in onnx_conformance.light_cases():
        _save_onnx_seed(light_dir, case.name, case.model, _graph_inputs(case.model, case.inputs))
    image = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    conv = _conv_relu()
    _save_onnx_seed(root, "conv_relu", conv, {"image": image})
    # Executables and bundles of two small models: one with weights, one attention block.
    for name, model, inputs in (("conv_relu", conv, {"image": image}),
                                ("transformer_block", block, {"x": x})):
        session = Session.from_onnx(model, engine_cache=False)
        stored = executable.store_executable(None, session.executable)
        (root / "odla" / f"{name}.odla").write_bytes(stored)
        bundle.export(session.executable, None, root / "bundle" / name)
        for folder in ("odla", "bundle"):
            np.savez(root / folder / f"{name}.npz", **inputs)
    mlp = train_example.build_mlp(batch=4, features=8, hidden=8)
    training.differentiate_computation(mlp.computation, mlp.loss)
    training.set_optimizer(mlp.computation, "adam", learning_rate=0.01)
    features, labels = train_example.blob_features(4, features=8)
    train_example.run_batch(mlp, features, labels, ComputeMode.TRAINING)
    training.store_checkpoint(root / "checkpoint" / "mlp.npz", mlp.computation)
    comp = import_model(conv)
    tuning.tune(comp, "host-cpu", trials=2, cache_dir=root / "tuning", progress=False)
    manifest_path.write_text(json.dumps(stamp))
    return root


# -- running one case --------------------------------------------------------------------------

def _feeds(args, given: dict, rng: np.random.Generator) -> dict | None:
    """Data for ``args``: the seed's where its type still fits, else random data of the
    declared type (dynamic dims 2); None when that would exceed FEED_LIMIT."""
    feeds = {}
    for value in args:
        dtype = value.type.dtype
        data = given.get(value.id)
        if data is not None and data.dtype == dtype and value.shape.matches(data.shape):
            feeds[value.id] = data
            continue
        dims = tuple(2 if d < 0 else d for d in value.shape.dims)
        # Each dim too: numpy refuses (0, 1 << 62) though it holds nothing.
        if max(dims + (int(np.prod(dims, dtype=object)),)) * dtype.itemsize > FEED_LIMIT:
            return None
        if dtype.kind in "iub":
            feeds[value.id] = rng.integers(0, 3, dims).astype(dtype)
        else:
            feeds[value.id] = rng.standard_normal(dims).astype(dtype)
    return feeds


class Runner:
    """Runs cases by name in one process, over the seeds in ``seed_dir``."""

    def __init__(self, seed_dir):
        self.seeds = Path(seed_dir)
        self.work = Path(tempfile.mkdtemp(prefix="odla-fuzz-"))
        self._blobs: dict[Path, bytes] = {}

    def _blob(self, path: Path) -> bytes:
        if path not in self._blobs:
            self._blobs[path] = path.read_bytes()
        return self._blobs[path]

    def _prepare(self, case: str, directory: Path):
        """The case's mutation (a label) and the function that loads and runs its mutant."""
        fmt, family, _ = parse_case(case)
        return getattr(self, f"_{fmt}")(family, random.Random(case), directory)

    def mutation(self, case: str) -> str:
        """What the case mutates, without loading it (for a case that killed its worker)."""
        directory = self.work / case
        directory.mkdir()
        try:
            return self._prepare(case, directory)[0]
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def __call__(self, case: str) -> Outcome:
        from odla_tvm.types import OdlaError

        fmt, family, _ = parse_case(case)
        start = time.perf_counter()
        mutation = family
        # A directory per case: loaders cache by path (the tuning database does).
        directory = self.work / case
        directory.mkdir()
        try:
            mutation, load = self._prepare(case, directory)
            kind, detail = "success", load()
        except OdlaError as err:
            kind, detail = "odla_error", f"{err.status.name}: {err.message}"
        except Exception as err:  # noqa: BLE001 (any other exception breaks the contract)
            kind, detail = "exception", f"{type(err).__name__}: {err}"
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return Outcome(case, fmt, mutation, kind, detail[:500], time.perf_counter() - start)

    def _run(self, executable, given: dict, rng) -> str:
        """Runs a loaded executable on the seed's inputs where they still fit."""
        from odla_tvm.session import Session

        session = Session(executable)
        feeds = _feeds(executable.args, given, np.random.default_rng(rng.randrange(1 << 30)))
        if feeds is None:
            return "loaded; not run: its inputs exceed the fuzzer's feed limit"
        session.run(feeds)
        return "ran"

    def _onnx(self, family, rng, directory, folder="onnx"):
        import onnx

        from odla_tvm.session import Session

        seed = rng.choice(sorted((self.seeds / folder).glob("*.onnx")))
        given = dict(np.load(seed.with_suffix(".npz")))
        blob = self._blob(seed)
        if family == "bytes":
            kind, blob = mutate_bytes(blob, rng)
        else:
            kind = rng.choice(sorted(ONNX_MUTATIONS) + ["feed"])
            if kind == "feed":  # the model as it is, one element of its data at an edge
                name = rng.choice(sorted(given))
                given[name] = interesting_value(given[name], rng)
            else:
                model = onnx.ModelProto.FromString(blob)
                ONNX_MUTATIONS[kind](model, rng)
                blob = model.SerializeToString()

        def load():
            session = Session.from_onnx(blob, engine_cache=False)
            return self._run(session.executable, given, rng)
        return f"{family}/{kind}", load

    def _light(self, family, rng, directory):
        return self._onnx(family, rng, directory, "light")

    def _odla(self, family, rng, directory):
        from odla_tvm.executable import load_executable

        seed = rng.choice(sorted((self.seeds / "odla").glob("*.odla")))
        given = dict(np.load(seed.with_suffix(".npz")))
        blob = self._blob(seed)
        if family == "bytes":
            kind, blob = mutate_bytes(blob, rng)
        else:
            kind, blob = "manifest", edit_manifest(blob, lambda m: mutate_json(m, rng))
        return f"{family}/{kind}", lambda: self._run(load_executable(blob), given, rng)

    def _bundle(self, family, rng, directory):
        from odla_tvm.executable import load_executable

        seed = rng.choice(sorted(p for p in (self.seeds / "bundle").iterdir() if p.is_dir()))
        given = dict(np.load(seed.with_suffix(".npz")))
        root = directory / "bundle"
        shutil.copytree(seed, root)
        if family == "bytes":
            target = rng.choice(sorted(p for p in root.rglob("*") if p.is_file()))
            kind, blob = mutate_bytes(target.read_bytes(), rng)
            target.write_bytes(blob)
            kind = f"{kind} {target.suffix or target.name}"
        else:
            # its digest beside it made to match, so that the mutation reaches the reader
            text = json.dumps(mutate_json(json.loads((root / "manifest.json").read_text()), rng))
            (root / "manifest.json").write_text(text)
            (root / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest())
            kind = "manifest"
        return f"{family}/{kind}", lambda: self._run(load_executable(str(root)), given, rng)

    def _checkpoint(self, family, rng, directory):
        from examples import train as train_example
        from odla_tvm import training
        from odla_tvm.types import ComputeMode

        blob = self._blob(self.seeds / "checkpoint" / "mlp.npz")
        if family == "bytes":
            kind, blob = mutate_bytes(blob, rng)
        else:
            kind, blob = mutated_checkpoint(blob, rng)
        path = directory / "mlp.npz"
        path.write_bytes(blob)

        def load():
            # A fresh model per case, so a case repeats alone exactly as in a campaign.
            mlp = train_example.build_mlp(batch=4, features=8, hidden=8, seed=1)
            try:
                training.load_checkpoint(path, mlp.computation)
                features, labels = train_example.blob_features(4, features=8, seed=1)
                train_example.run_batch(mlp, features, labels, ComputeMode.TRAINING)
            finally:
                from odla_tvm.computation import destroy_computation

                destroy_computation(mlp.computation)
            return "loaded and trained a step"
        return f"{family}/{kind}", load

    def _tuning(self, family, rng, directory):
        from odla_tvm.computation import destroy_computation, set_computation_item
        from odla_tvm.device import allocate_device
        from odla_tvm.executable import compile_computation
        from odla_tvm.frontends.onnx import import_model
        from odla_tvm.types import DeviceName, ItemType

        cache = directory / "cache"
        shutil.copytree(self.seeds / "tuning", cache)
        target = rng.choice(sorted(cache.rglob("*.json")))
        if family == "bytes":
            kind, blob = mutate_bytes(target.read_bytes(), rng)
            target.write_bytes(blob)
        else:
            kind = "json"
            lines = target.read_text().splitlines()
            if target.name == "target.json":
                target.write_text(json.dumps(mutate_json(json.loads(target.read_text()), rng)))
            elif lines:
                at = rng.randrange(len(lines))
                lines[at] = json.dumps(mutate_json(json.loads(lines[at]), rng))
                target.write_text("\n".join(lines) + "\n")
        kind = f"{kind} {target.name}"
        model = self._blob(self.seeds / "conv_relu.onnx")
        given = dict(np.load(self.seeds / "conv_relu.npz"))

        def load():
            comp = import_model(model)
            try:
                set_computation_item(comp, ItemType.CACHE_DIR, str(cache))
                exe = compile_computation(comp, allocate_device(device_name=DeviceName.INTEL_X86))
            finally:
                destroy_computation(comp)
            return self._run(exe, given, rng)
        return f"{family}/{kind}", load


def edit_manifest(blob: bytes, edit) -> bytes:
    """A stored executable with its manifest replaced by ``edit(manifest)`` (its sections
    untouched)."""
    header = struct.Struct("<8sIQ")
    magic, version, length = header.unpack_from(blob)
    body = header.size + length
    text = json.dumps(edit(json.loads(blob[header.size:body]))).encode()
    return header.pack(magic, version, len(text)) + text + blob[body:]


def worker(seed_dir) -> Runner:
    """A Runner for a process that runs cases and nothing else: its address space is capped,
    since a mutant may ask for gigabytes it is entitled to (a shape within the machine's
    memory), and it should fail in this process rather than squeeze the machine."""
    limit = min(WORKER_MEMORY, MEMORY_BYTES // 2)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return Runner(seed_dir)


def run_campaign(names: list[str], seed_dir, jobs: int = 2, timeout: float = 120.0,
                 progress=None) -> list[Outcome]:
    """Runs the cases ``names`` in ``jobs`` workers; a lost case is a crash or a hang."""
    from . import isolation

    describer = None

    def outcome_of(name, result):
        nonlocal describer
        if isinstance(result, isolation.Lost):
            describer = describer or Runner(seed_dir)
            return Outcome(name, parse_case(name)[0], describer.mutation(name), result.kind,
                           result.detail, result.seconds)
        return result

    done: dict[str, Outcome] = {}

    def finished(name, result):
        done[name] = outcome_of(name, result)
        if progress:
            progress(done[name])

    isolation.run_isolated(names, worker, (str(seed_dir),), jobs, timeout, recycle_after=400,
                           progress=finished)
    return [done[n] for n in names]


# -- the report --------------------------------------------------------------------------------

KINDS = ("success", "odla_error", "crash", "hang", "exception")


def _table(title: str, outcomes: list[Outcome], key) -> list[str]:
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(key(o), []).append(o)
    lines = [f"| {title} | cases | " + " | ".join(KINDS) + " |",
             "| --- " * (len(KINDS) + 2) + "|"]
    for name in sorted(groups):
        counts = [sum(o.kind == k for o in groups[name]) for k in KINDS]
        lines.append(f"| {name} | {len(groups[name])} | " + " | ".join(map(str, counts)) + " |")
    return lines


def report(outcomes: list[Outcome], header: str, command: str = "scripts/fuzz.py") -> str:
    """docs/bench/fuzz.md: totals per format and per mutation, and every non-conforming case with
    the command that repeats it (``command --case ID``)."""
    bad = [o for o in outcomes if not o.conforming]
    lines = ["# Fuzzing campaign", "", header, "",
             f"**{len(outcomes)} cases: {len(outcomes) - len(bad)} conforming (success or "
             f"OdlaError), {len(bad)} not** "
             + "(" + ", ".join(f"{k}: {sum(o.kind == k for o in outcomes)}" for k in KINDS) + ").",
             "", "## Per format", ""]
    lines += _table("format", outcomes, lambda o: o.format)
    lines += ["", "## Per mutation", ""]
    lines += _table("format / mutation", outcomes, lambda o: f"{o.format} {o.mutation}")
    lines += ["", "## OdlaError statuses", ""]
    statuses: dict[str, int] = {}
    for o in outcomes:
        if o.kind == "odla_error":
            status = o.detail.split(":", 1)[0]
            statuses[status] = statuses.get(status, 0) + 1
    lines += [f"- {s}: {n}" for s, n in sorted(statuses.items(), key=lambda i: -i[1])]
    lines += ["", "## Non-conforming cases", ""]
    if not bad:
        lines.append("None.")
    for o in bad:
        detail = o.detail.strip().splitlines()[0][:300] if o.detail.strip() else ""
        lines.append(f"- `{o.case}` ({o.mutation}), {o.kind}: {detail} — repeat with "
                     f"`{command} --case {o.case}`")
    return "\n".join(lines) + "\n"
