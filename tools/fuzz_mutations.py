"""How the fuzzing campaign changes a seed: its bytes, a JSON manifest, an ONNX graph's
structure or values, or a training checkpoint's arrays."""

from __future__ import annotations

import copy
import io
import json
import random

import numpy as np


_INTERESTING_INTS = (0, 1, -1, 2, 3, 7, 255, 1 << 16, 1 << 31, (1 << 31) - 1, 1 << 40, 1 << 62)


def mutate_bytes(blob: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One of: flip bits, insert, delete or truncate bytes."""
    kind = rng.choice(("flip", "insert", "delete", "truncate"))
    data = bytearray(blob)
    # Half of the positions fall in the first and last 256 bytes, where headers, manifests and
    # protobuf framing live; the rest anywhere.
    def position():
        if len(data) > 512 and rng.random() < 0.5:
            at = rng.randrange(256)
            return at if rng.random() < 0.5 else len(data) - 1 - at
        return rng.randrange(max(1, len(data)))

    if kind == "flip" and data:
        for _ in range(rng.randint(1, 8)):
            data[position()] ^= 1 << rng.randrange(8)
    elif kind == "insert":
        at = position()
        data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == "delete":
        at = position()
        del data[at:at + rng.randint(1, 64)]
    else:
        del data[rng.randrange(max(1, len(data))):]
    return kind, bytes(data)


def _json_nodes(obj, path=()):
    """(path, value) of every node under ``obj`` (dicts and lists)."""
    yield path, obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield from _json_nodes(value, path + (key,))


def mutate_json(obj, rng: random.Random):
    """A copy of ``obj`` with one node replaced by a value of another kind, or removed."""
    obj = copy.deepcopy(obj)
    nodes = [p for p, _ in _json_nodes(obj) if p]
    if not nodes:
        return rng.choice([None, [], {}, 0, "x"])
    path = rng.choice(nodes)
    parent = obj
    for key in path[:-1]:
        parent = parent[key]
    if rng.random() < 0.2:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(
            [None, True, -1, 0, 1 << 40, 1.5, float("nan"), "", "x" * 40, [], {}, [1 << 40],
             {"element_type": "FLOAT32", "dims": [1 << 40]}])
    return obj


def _tensor_types(graph):
    return [(v.name, v.type.tensor_type) for v in list(graph.input) + list(graph.output)
            + list(graph.value_info) if v.type.HasField("tensor_type")]


def _mutate_dims(model, rng):
    holders = [t for _, t in _tensor_types(model.graph)]
    inits = list(model.graph.initializer)
    if inits and (not holders or rng.random() < 0.3):
        tensor = rng.choice(inits)
        if tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = rng.choice(_INTERESTING_INTS)
        else:
            tensor.dims.append(rng.choice(_INTERESTING_INTS))
        return
    tensor = rng.choice(holders).shape
    action = rng.random()
    if action < 0.15 or not tensor.dim:
        tensor.dim.add().dim_value = rng.choice(_INTERESTING_INTS)
    elif action < 0.3:
        del tensor.dim[rng.randrange(len(tensor.dim))]
    elif action < 0.4:
        tensor.dim[rng.randrange(len(tensor.dim))].dim_param = "n"
    else:
        tensor.dim[rng.randrange(len(tensor.dim))].dim_value = rng.choice(_INTERESTING_INTS)


def _mutate_dtype(model, rng):
    new = rng.randint(0, 26)
    holders = [t for _, t in _tensor_types(model.graph)]
    if model.graph.initializer and (not holders or rng.random() < 0.4):
        rng.choice(list(model.graph.initializer)).data_type = new
    else:
        rng.choice(holders).elem_type = new


def _mutate_attribute(model, rng):
    from onnx import helper

    node = rng.choice(list(model.graph.node))
    if not node.attribute or rng.random() < 0.25:
        name = rng.choice(("axis", "axes", "perm", "pads", "strides", "kernel_shape", "group",
                           "epsilon", "keepdims", "mode", "to", "k", "dilations"))
        for same in [a for a in node.attribute if a.name == name]:
            node.attribute.remove(same)
        value = rng.choice([rng.choice(_INTERESTING_INTS), [rng.choice(_INTERESTING_INTS)] * 3,
                            1e30, "nearest"])
        node.attribute.append(helper.make_attribute(name, value))
        return
    attribute = rng.choice(list(node.attribute))
    if rng.random() < 0.15:
        node.attribute.remove(attribute)
    elif attribute.ints or attribute.type == attribute.INTS:
        ints = list(attribute.ints)
        choice = rng.random()
        if choice < 0.3 and ints:
            ints.pop(rng.randrange(len(ints)))
        elif choice < 0.6:
            ints.insert(rng.randrange(len(ints) + 1), rng.choice(_INTERESTING_INTS))
        elif ints:
            ints[rng.randrange(len(ints))] = rng.choice(_INTERESTING_INTS + (-(1 << 40),))
        del attribute.ints[:]
        attribute.ints.extend(ints)
    elif attribute.type == attribute.INT:
        attribute.i = rng.choice(_INTERESTING_INTS + (-2, -(1 << 40)))
    elif attribute.type == attribute.FLOAT:
        attribute.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e30, -1e-30])
    elif attribute.type == attribute.STRING:
        attribute.s = rng.choice([b"", b"\xff\xfe", b"bogus", b"x" * 300])
    elif attribute.type == attribute.FLOATS:
        if attribute.floats:
            del attribute.floats[rng.randrange(len(attribute.floats)):]
        attribute.floats.append(rng.choice([float("nan"), -1.0, 1e30]))
    else:
        attribute.type = rng.choice([attribute.INT, attribute.FLOAT, attribute.INTS,
                                     attribute.STRING])


def _mutate_edge(model, rng):
    graph = model.graph
    names = ([i.name for i in graph.input] + [t.name for t in graph.initializer]
             + [o for n in graph.node for o in n.output] + ["nowhere", ""])
    choice = rng.random()
    node = rng.choice(list(graph.node))
    if choice < 0.45 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(names)
    elif choice < 0.6:
        node.input.append(rng.choice(names))
    elif choice < 0.7 and node.input:
        del node.input[rng.randrange(len(node.input))]
    elif choice < 0.8:
        node.output[rng.randrange(len(node.output))] = rng.choice(names)
    elif choice < 0.9 and graph.output:
        graph.output[rng.randrange(len(graph.output))].name = rng.choice(names)
    else:
        copied = graph.node.add()
        copied.CopyFrom(node)  # a second producer of the same values


def _mutate_initializer(model, rng):
    from onnx import TensorProto, numpy_helper

    graph = model.graph
    if not graph.initializer:
        # Turn a graph input into an initializer of the wrong size.
        info = rng.choice(list(graph.input))
        dims = [d.dim_value or 1 for d in info.type.tensor_type.shape.dim]
        tensor = numpy_helper.from_array(np.zeros(rng.randint(0, 5), np.float32), info.name)
        del tensor.dims[:]
        tensor.dims.extend(dims)
        tensor.data_type = info.type.tensor_type.elem_type or TensorProto.FLOAT
        graph.initializer.append(tensor)
        return
    tensor = rng.choice(list(graph.initializer))
    choice = rng.random()
    if tensor.raw_data and choice < 0.4:
        cut = rng.randrange(len(tensor.raw_data) + 1)
        tensor.raw_data = tensor.raw_data[:cut] if rng.random() < 0.5 else \
            tensor.raw_data + bytes(rng.randint(1, 9))
    elif choice < 0.7:
        dims = list(tensor.dims) or [1]
        dims[rng.randrange(len(dims))] = rng.choice(_INTERESTING_INTS)
        del tensor.dims[:]
        tensor.dims.extend(dims)
    elif choice < 0.85:
        tensor.raw_data = b""
        tensor.float_data.extend([1.0] * rng.randint(0, 5))
    else:
        tensor.data_location = TensorProto.EXTERNAL
        tensor.external_data.add(key="location", value=rng.choice(["../../etc/passwd", "x.bin"]))


def _mutate_opset(model, rng):
    choice = rng.random()
    if choice < 0.6 and model.opset_import:
        model.opset_import[0].version = rng.choice([0, 1, 5, 6, 7, 9, 11, 13, 18, 22, 25, 30,
                                                    1000, -1])
    elif choice < 0.8:
        model.ir_version = rng.choice([0, 1, 2, 3, 11, 100, -1])
    else:
        model.opset_import.add(domain=rng.choice(["ai.onnx.ml", "com.microsoft", "bogus"]),
                               version=rng.choice([1, 3, 1000]))


def interesting_value(array: np.ndarray, rng) -> np.ndarray:
    """``array`` with one element set to an edge value of its dtype (a huge or negative
    index, a huge shape, nan)."""
    array = np.array(array)  # a writable copy
    flat = array.reshape(-1)
    if flat.size == 0 or array.dtype.kind in "OSU":
        return array
    if array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        choices = [v for v in _INTERESTING_INTS + (-2, -(1 << 40), -(1 << 62))
                   if info.min <= v <= info.max]
    elif array.dtype.kind == "b":
        choices = [True, False]
    else:  # floats, bfloat16 and the other ml_dtypes
        choices = [float("nan"), float("inf"), -float("inf"), 1e30, -1.0]
    flat[rng.randrange(flat.size)] = np.array(rng.choice(choices)).astype(array.dtype)
    return array


def _mutate_values(model, rng):
    from onnx import numpy_helper

    tensors = list(model.graph.initializer) + [
        a.t for n in model.graph.node for a in n.attribute if a.HasField("t")]
    if not tensors:
        return
    tensor = rng.choice(tensors)
    tensor.CopyFrom(numpy_helper.from_array(
        interesting_value(numpy_helper.to_array(tensor), rng), tensor.name))


ONNX_MUTATIONS = {"dims": _mutate_dims, "dtype": _mutate_dtype, "attribute": _mutate_attribute,
                  "edge": _mutate_edge, "initializer": _mutate_initializer,
                  "opset": _mutate_opset, "values": _mutate_values}


def mutated_checkpoint(blob: bytes, rng: random.Random) -> tuple[str, bytes]:
    """A checkpoint with one change to its manifest or to one of its arrays."""
    with np.load(io.BytesIO(blob)) as archive:
        arrays = {name: archive[name] for name in archive.files}
    if rng.random() < 0.5:
        kind = "manifest"
        arrays["manifest"] = np.array(json.dumps(mutate_json(json.loads(str(arrays["manifest"])),
                                                             rng)))
    else:
        name = rng.choice(sorted(n for n in arrays if n != "manifest"))
        kind = rng.choice(("array shape", "array dtype", "array removed", "array nan"))
        if kind == "array shape":
            arrays[name] = np.zeros(rng.choice([(0,), (1,), (3, 3), (1 << 10,)]), np.float32)
        elif kind == "array dtype":
            arrays[name] = arrays[name].astype(rng.choice([np.float64, np.int32, np.bool_,
                                                           np.float16]))
        elif kind == "array removed":
            del arrays[name]
        else:
            arrays[name] = np.full_like(arrays[name], np.nan)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return kind, buffer.getvalue()
