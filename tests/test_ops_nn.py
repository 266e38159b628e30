"""The ODLA nn ops beyond the foundation set (activations, normalizations, selection,
detection, recurrent layers, text and attention), compiled for the host CPU, against NumPy
references in tests/reference.py. Each case also checks that the value types ODLA reports
when the op is created are those of the results."""

from __future__ import annotations

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import OdlaError, Status
from odla_tvm import ValueType as VT

try:
    from . import reference as ref
    from .test_ops import F32, check, data, positive, run_op, run_values
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    import reference as ref
    from test_ops import F32, check, data, positive, run_op, run_values

CF, CL = L.CHANNELS_FIRST, L.CHANNELS_LAST


# -- element-wise activations ------------------------------------------------------------------
ACTIVATIONS = [
    ("celu", lambda x: odla.celu(x, 0.7), lambda x: ref.celu(x, 0.7)),
    ("elu", lambda x: odla.elu(x, 1.5), lambda x: ref.elu(x, 1.5)),
    ("hard_sigmoid", lambda x: odla.hard_sigmoid(x, 0.3, 0.4),
     lambda x: ref.hard_sigmoid(x, 0.3, 0.4)),
    ("hard_swish", odla.hard_swish, ref.hard_swish),
    ("swish", lambda x: odla.swish(x, 1.3), lambda x: ref.swish(x, 1.3)),
    ("selu", lambda x: odla.selu(x, 1.6, 1.05), lambda x: ref.selu(x, 1.6, 1.05)),
    ("shrink", lambda x: odla.shrink(x, 0.2, 0.5), lambda x: ref.shrink(x, 0.2, 0.5)),
    ("softplus", odla.softplus, ref.softplus),
    ("softsign", odla.softsign, ref.softsign),
    ("thresholded_relu", lambda x: odla.thresholded_relu(x, 0.3),
     lambda x: ref.thresholded_relu(x, 0.3)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_activations(dtype):
    """Every activation of one input, as the outputs of one computation."""
    x = data((2, 3, 5), dtype, seed=4) * 3
    results = run_values(lambda v: [build(v) for _, build, _ in ACTIVATIONS], {"x": x})
    for (_, _, reference), result in zip(ACTIVATIONS, results):
        check(result, reference(x), rtol=1e-5, atol=1e-6)


def test_prelu_broadcasts_its_slope():
    x = data((2, 3, 4, 5), seed=1)
    slopes = {f"s{i}": data(shape, seed=2 + i) for i, shape in enumerate([(1,), (3, 1, 1),
                                                                         (2, 3, 4, 5)])}
    results = run_values(lambda v, *ss: [odla.prelu(v, s) for s in ss], {"x": x, **slopes},
                         constants=tuple(slopes))
    for result, slope in zip(results, slopes.values()):
        check(result, ref.prelu(x, slope))


def test_hardmax():
    x = data((3, 4, 5), seed=3)
    x[0, 0, :2] = 9.0  # a tie: the first wins
    results = run_values(lambda v: [odla.hardmax(v, axis) for axis in (0, -1)], {"x": x})
    for result, axis in zip(results, (0, -1)):
        check(result, ref.hardmax(x, axis))


# -- normalizations ----------------------------------------------------------------------------
@pytest.mark.parametrize("layout, size", [(CF, 3), (CL, 4)])
def test_lrn(layout, size):
    x = data((2, 6, 5, 4), seed=5)
    expected = ref.lrn(x, size, 0.002, 0.75, 1.5)
    if layout == CL:
        x, expected = ref.to_channels_last(x).copy(), ref.to_channels_last(expected)
    check(run_op(lambda v: odla.lrn(v, layout, size, 0.002, 0.75, 1.5), {"x": x}), expected,
          rtol=1e-5)


@pytest.mark.parametrize("layout", [CF, CL])
def test_instance_normalization(layout):
    x, scale, offset = data((2, 3, 4, 5), seed=1), data((3,), seed=2), data((3,), seed=3)
    expected = ref.instance_normalization(x, 1e-5, scale, offset)
    if layout == CL:
        x, expected = ref.to_channels_last(x).copy(), ref.to_channels_last(expected)
    result = run_op(lambda v, s, o: odla.instance_normalization(v, layout, 1e-5, s, o),
                     {"x": x, "scale": scale, "offset": offset})
    check(result, expected, rtol=1e-4, atol=1e-5)


def test_instance_normalization_scalars():
    x = data((1, 2, 7), seed=1)
    result = run_op(lambda v: odla.instance_normalization(v, CF, 1e-3, scalar_scale=2.0,
                                                           scalar_offset=0.5), {"x": x})
    check(result, ref.instance_normalization(x, 1e-3, 2.0, 0.5), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("groups", [2, 6])
def test_group_normalization(groups):
    x, scale, offset = data((2, 6, 3, 3), seed=1), data((6,), seed=2), data((6,), seed=3)
    result = run_op(lambda v, s, o: odla.group_normalization(v, CF, groups, 1e-5, s, o),
                     {"x": x, "scale": scale, "offset": offset})
    check(result, ref.group_normalization(x, groups, 1e-5, scale, offset), rtol=1e-4, atol=1e-5)


def test_group_normalization_channels_last():
    x = data((2, 4, 4, 6), seed=1)
    expected = ref.to_channels_last(ref.group_normalization(ref.to_channels_first(x), 3, 1e-5))
    check(run_op(lambda v: odla.group_normalization(v, CL, 3, 1e-5), {"x": x}), expected,
          rtol=1e-4, atol=1e-5)


def test_layer_norm():
    x, scale, offset = data((2, 3, 8), seed=1), data((3, 8), seed=2), data((8,), seed=3)
    results = run_values(lambda v, s, o: [odla.layer_norm(v, 1, (-1,), 1e-5, None, o),
                                          odla.layer_norm(v, 2, (1, 2), 1e-3, s, None)],
                         {"x": x, "scale": scale, "offset": offset})
    check(results[0], ref.layer_norm(x, (-1,), 1e-5, 1.0, offset), rtol=1e-4, atol=1e-5)
    check(results[1], ref.layer_norm(x, (1, 2), 1e-3, scale), rtol=1e-4, atol=1e-5)


def test_lp_normalize():
    x = data((2, 3, 4), seed=1)
    x[0, :, :] = 0  # a zero norm gives 0, not NaN
    norms = [(1, (1,)), (2, (1, 2)), (3, (-1,))]
    results = run_values(lambda v: [odla.lp_normalize(v, p, CF, len(axes), axes, 0.0)
                                    for p, axes in norms], {"x": x})
    for result, (p, axes) in zip(results, norms):
        check(result, ref.lp_normalize(x, p, axes, 0.0), rtol=1e-5)


# -- selection and detection -------------------------------------------------------------------
@pytest.mark.parametrize("k, axis, largest", [(2, -1, True), (3, 0, False)])
def test_topk(k, axis, largest):
    x = np.round(data((4, 5, 6), seed=1), 0)  # rounding makes ties
    values, indices = ref.topk(x, k, axis, largest)
    results = run_values(
        lambda v: odla.topk(v, k, largest, True, axis, VT(E.FLOAT32, ()), VT(E.INT64, ()),
                            ("values", "indices")), {"x": x})
    check(results[0], values)
    check(results[1], indices)


def test_nms_selects_per_class_and_drops_overlaps():
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11],
                       [1, 1, 0, 0.1], [0, 100, 1, 101]]], F32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3], [0.1, 0.2, 0.9, 0.05, 0.6, 0.7]]], F32)
    out, vtype = run_op(lambda b, s: odla.nms(b, s, 3, 0.5, 0.25, VT(E.INT64, (-1, 3))),
                         {"boxes": boxes, "scores": scores})
    expected = ref.nms(boxes, scores, 3, 0.5, 0.25)
    assert vtype.shape.matches(out.shape) and vtype.dtype == out.dtype  # rows: known at run time
    np.testing.assert_array_equal(out, expected)


def test_roi_max_pool():
    x = data((2, 3, 8, 8), seed=1)
    rois = np.array([[0, 0, 0, 3, 3], [1, 2, 1, 7, 6], [0, 1, 2, 2, 7]], F32)
    result = run_op(lambda v, r: odla.roi_max_pool(v, CF, r, 2, 3, 1.0, (3, 3, 2, 3)),
                     {"x": x, "rois": rois})
    check(result, ref.roi_max_pool(x, rois, (2, 3), 1.0))


@pytest.mark.parametrize("half_pixel", [False, True])
def test_roi_align_matches_onnx_reference(half_pixel):
    from onnx.reference.ops.op_roi_align import RoiAlign

    x = data((2, 3, 6, 6), seed=1)
    boxes = np.array([[0, 0, 3, 3], [1.5, 0.5, 5.2, 4.1], [0.2, 2, 4, 5.5]], F32)
    batch = np.array([0, 1, 1], np.int64)
    expected = RoiAlign.eval(x, boxes, batch, output_height=2, output_width=3, sampling_ratio=2,
                             spatial_scale=0.9, mode="avg",
                             coordinate_transformation_mode="half_pixel" if half_pixel
                             else "output_half_pixel")
    rois = np.concatenate([batch[:, None].astype(F32), boxes], axis=1)
    result = run_op(lambda v, r: odla.roi_align(v, CF, r, 2, 0.9, (3, 3, 2, 3),
                                                 half_pixel=half_pixel), {"x": x, "rois": rois})
    check(result, expected, rtol=1e-4, atol=1e-5)


# -- recurrent layers --------------------------------------------------------------------------
def _rnn_weights(kind, directions, input_size, hidden, seed):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    w = data((directions, gates * hidden, input_size), seed=seed) * 0.5
    r = data((directions, gates * hidden, hidden), seed=seed + 1) * 0.5
    b = data((directions, 2 * gates * hidden), seed=seed + 2) * 0.5
    return w, r, b


def _expected(kind, x, w, r, b, direction, seq_lens=None, initial=None, peephole=None,
              linear_before_reset=False):
    """Output sequence and last states of every direction, stacked as ODLA returns them."""
    sequences, finals = [], []
    for d in range(w.shape[0]):
        reverse = direction == odla.RnnDirection.REVERSE or d == 1
        init = None if initial is None else [s[d] for s in initial]
        y, states = ref.recurrent(kind, x, w[d], r[d], b[d], seq_lens, init,
                                  None if peephole is None else peephole[d], reverse,
                                  linear_before_reset)
        sequences.append(y)
        finals.append(states)
    return [np.stack(sequences, 1)] + [np.stack([f[i] for f in finals]) for i in range(len(finals[0]))]


RNN_CASES = [
    ("forward", odla.RnnDirection.FORWARD, False),
    ("reverse_seq_lens", odla.RnnDirection.REVERSE, True),
    ("bidirectional_seq_lens", odla.RnnDirection.BIDIRECTIONAL, True),
]


@pytest.mark.parametrize("name, direction, with_lens", RNN_CASES, ids=[c[0] for c in RNN_CASES])
def test_lstm(name, direction, with_lens):
    dirs = 2 if direction == odla.RnnDirection.BIDIRECTIONAL else 1
    x = data((4, 3, 5), seed=1)
    w, r, b = _rnn_weights("LSTM", dirs, 5, 6, seed=2)
    h0, c0, p = data((dirs, 3, 6), seed=7), data((dirs, 3, 6), seed=8), data((dirs, 18), seed=9)
    lens = np.array([4, 2, 3], np.int32) if with_lens else None
    expected = _expected("LSTM", x, w, r, b, direction, lens, [h0, c0], p)
    inputs = {"x": x, "w": w, "r": r, "b": b, "h0": h0, "c0": c0, "p": p}
    if with_lens:
        inputs["lens"] = lens

    def build(x, w, r, b, h0, c0, p, lens=None):
        return odla.lstm(x, odla.RnnWeightFormat.LDGOI, odla.RnnGateOrder.IOFC, w.shape, w, r, b,
                         lens, h0, c0, p, 6, direction, odla.RnnOutputs.HIDDEN_CELL_STATE)

    for result, want in zip(run_values(build, inputs, constants=("w", "r", "b")), expected):
        check(result, want, rtol=1e-4, atol=1e-5)


def test_lstm_gate_order_and_weight_format():
    """IFCO weights in LDIGO layout give what the same weights in ONNX's layout give."""
    x = data((3, 2, 4), seed=1)
    w, r, b = _rnn_weights("LSTM", 1, 4, 5, seed=2)
    expected = _expected("LSTM", x, w, r, b, odla.RnnDirection.FORWARD)

    def to_ifco_ldigo(m):
        i, o, f, c = np.split(m, 4, axis=1)
        return np.ascontiguousarray(np.concatenate([i, f, c, o], axis=1).transpose(0, 2, 1))

    b_ifco = b.reshape(1, 2, 4, 5)[:, :, [0, 2, 3, 1]].reshape(1, 40)
    inputs = {"x": x, "w": to_ifco_ldigo(w), "r": to_ifco_ldigo(r), "b": b_ifco}
    results = run_values(
        lambda x, w, r, b: odla.lstm(x, odla.RnnWeightFormat.LDIGO, odla.RnnGateOrder.IFCO, None,
                                     w, r, b, None, None, None, None, 5,
                                     odla.RnnDirection.FORWARD, odla.RnnOutputs.HIDDEN_STATE),
        inputs)
    for result, want in zip(results, expected):
        check(result, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, direction, with_lens", RNN_CASES, ids=[c[0] for c in RNN_CASES])
def test_gru(name, direction, with_lens):
    linear_before_reset = direction == odla.RnnDirection.REVERSE  # both variants, fewer compiles
    dirs = 2 if direction == odla.RnnDirection.BIDIRECTIONAL else 1
    x = data((5, 2, 3), seed=1)
    w, r, b = _rnn_weights("GRU", dirs, 3, 4, seed=3)
    lens = np.array([3, 5], np.int32) if with_lens else None
    expected = _expected("GRU", x, w, r, b, direction, lens,
                         linear_before_reset=linear_before_reset)
    inputs = {"x": x, "w": w, "r": r, "b": b, **({"lens": lens} if with_lens else {})}

    def build(x, w, r, b, lens=None):
        return odla.gru(x, odla.RnnWeightFormat.LDGOI, odla.RnnGateOrder.URO, w.shape, w, r, b,
                        lens, None, 4, direction, linear_before_reset,
                        odla.RnnOutputs.HIDDEN_STATE)

    for result, want in zip(run_values(build, inputs), expected):
        check(result, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, direction, with_lens", RNN_CASES, ids=[c[0] for c in RNN_CASES])
def test_rnn(name, direction, with_lens):
    dirs = 2 if direction == odla.RnnDirection.BIDIRECTIONAL else 1
    x = data((3, 2, 4), seed=1)
    w, r, b = _rnn_weights("RNN", dirs, 4, 3, seed=5)
    h0 = data((dirs, 2, 3), seed=6)
    lens = np.array([1, 3], np.int32) if with_lens else None
    expected = _expected("RNN", x, w, r, b, direction, lens, [h0])
    inputs = {"x": x, "w": w, "r": r, "b": b, "h0": h0, **({"lens": lens} if with_lens else {})}

    def build(x, w, r, b, h0, lens=None):
        return odla.rnn(x, odla.RnnWeightFormat.LDGOI, w.shape, w, r, b, lens, h0, 3, direction,
                        odla.RnnOutputs.HIDDEN_STATE)

    for result, want in zip(run_values(build, inputs), expected):
        check(result, want, rtol=1e-4, atol=1e-5)


def test_rnn_output_ids_and_states():
    x = data((2, 1, 2), seed=1)
    w, r, b = _rnn_weights("RNN", 1, 2, 2, seed=2)
    comp = odla.create_computation()
    try:
        xv = odla.create_argument(VT(E.FLOAT32, x.shape), "x")
        consts = [odla.create_constant(VT(E.FLOAT32, a.shape), a) for a in (w, r, b)]
        only_y = odla.rnn(xv, odla.RnnWeightFormat.LDGOI, None, *consts, None, None, 2,
                          odla.RnnDirection.FORWARD, odla.RnnOutputs.NO_STATE)
        y, y_h = odla.rnn(xv, odla.RnnWeightFormat.LDGOI, None, *consts, None, None, 2,
                          odla.RnnDirection.FORWARD, odla.RnnOutputs.HIDDEN_STATE, ["y", "y_h"])
        assert len(only_y) == 1 and (y.id, y_h.id) == ("y", "y_h")
        assert odla.get_value_type(y_h) == VT(E.FLOAT32, (1, 1, 2))
        with pytest.raises(OdlaError, match="has no cell state"):
            odla.rnn(xv, odla.RnnWeightFormat.LDGOI, None, *consts, None, None, 2,
                     odla.RnnDirection.FORWARD, odla.RnnOutputs.CELL_STATE)
    finally:
        odla.destroy_computation(comp)


# -- text and attention ------------------------------------------------------------------------
@pytest.mark.parametrize("mode, lengths, skip", [(odla.TfIdfMode.TF, (1, 1), 0),
                                                 (odla.TfIdfMode.IDF, (2, 2), 2),
                                                 (odla.TfIdfMode.TFIDF, (1, 2), 3)])
def test_tfidf_vectorize_matches_onnx_reference(mode, lengths, skip):
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    x = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int32)
    pool = np.array([2, 3, 5, 4, 5, 6, 7, 8, 6, 7], np.int64)  # 4 unigrams, then 3 bigrams
    gram_counts, indices = np.array([0, 4], np.int64), np.array([0, 1, 2, 3, 4, 5, 6], np.int64)
    weights = positive((7,), seed=3)
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], mode=mode.name,
                            min_gram_length=lengths[0], max_gram_length=lengths[1],
                            max_skip_count=skip, ngram_counts=list(gram_counts),
                            ngram_indexes=list(indices), pool_int64s=list(pool),
                            weights=list(weights))
    (expected,) = ReferenceEvaluator(node).run(None, {"X": x})
    result = run_op(
        lambda v, p, g, i, w: odla.tfidf_vectorize(v, lengths[0], lengths[1], skip, mode, p, g, i,
                                                   w, expected.shape),
        {"x": x, "pool": pool, "grams": gram_counts, "indices": indices, "weights": weights},
        constants=("pool", "grams", "indices", "weights"))
    check(result, expected)


def test_multi_head_attention():
    x = data((2, 3, 8), seed=1)
    weights = {f"{n}_{p}": data((8, 8) if p == "w" else (8,), seed=i + 2) * 0.3
               for i, (n, p) in enumerate((n, p) for n in "qkv" for p in "wb")}
    mask = np.array([[1, 1, 0], [1, 1, 1]], np.int32)

    def heads(m):
        return m.reshape(2, 3, 2, 4).transpose(0, 2, 1, 3)

    q, k, v = (heads(x @ weights[f"{n}_w"] + weights[f"{n}_b"]) for n in "qkv")
    scores = q @ k.transpose(0, 1, 3, 2) / 2.0 + ((1 - mask) * -10000.0)[:, None, None, :]
    expected = (ref.softmax(scores, -1) @ v).transpose(0, 2, 1, 3).reshape(2, 3, 8).astype(F32)
    result = run_op(
        lambda x, mask, qw, qb, kw, kb, vw, vb: odla.multi_head_attention(
            x, mask, qw, qb, kw, kb, vw, vb, 2), {"x": x, "mask": mask, **weights},
        constants=tuple(weights))
    check(result, expected, rtol=1e-4, atol=1e-5)


# -- argument checks ---------------------------------------------------------------------------
def test_argument_errors_name_value_expected_and_given():
    comp = odla.create_computation()
    try:
        x = odla.create_argument(VT(E.FLOAT32, (1, 4, 3, 3)), "x")
        with pytest.raises(OdlaError, match=r"Celu: alpha is 0; expected a non-zero number"):
            odla.celu(x, 0.0)
        with pytest.raises(OdlaError, match=r"GroupNormalization.*6 channels|4 channels do not split"):
            odla.group_normalization(x, CF, 3, 1e-5)
        with pytest.raises(OdlaError, match=r"LRN: window_size is \(0,\); expected every entry >= 1"):
            odla.lrn(x, CF, 0, 1.0, 1.0, 1.0)
        with pytest.raises(OdlaError, match=r"TopK: output_value_index_type has element type "
                                            r"FLOAT32; expected one of int32, int64"):
            odla.topk(x, 1, True, True, 1, VT(E.FLOAT32, ()), VT(E.FLOAT32, ()))
        with pytest.raises(OdlaError, match=r"K is 5, more than the 4 elements along axis 1"):
            odla.topk(x, 5, True, True, 1, VT(E.FLOAT32, ()), VT(E.INT64, ()))
        with pytest.raises(OdlaError, match=r"LSTM: gate_order is URO; expected one of IOFC"):
            odla.lstm(x, 0, odla.RnnGateOrder.URO, None, x, x, None, None, None, None, None, 2, 0, 0)
        with pytest.raises(OdlaError) as err:
            odla.layer_norm(x, 1, (7,), 1e-5)
        assert err.value.status == Status.INVALID_PARAM and "axes [7] out of range" in str(err.value)
    finally:
        odla.destroy_computation(comp)
