"""Lowerings of ODLA's recurrent layers (LSTM, GRU, RNN in odla_ops_nn.h), unrolled over a
static sequence length. Weights are brought to ONNX's layout and gate order first, so one
step function per layer type reads like the ONNX equations."""

from __future__ import annotations

import numpy as np
from tvm import relax, tirx
from tvm.relax import op as R

from ..errors import LoweringError
from ..registry import register

# The gate order each step function expects (ONNX's): LSTM input, output, forget, cell;
# GRU update, reset, hidden.
_CANONICAL_ORDER = {"LSTM": "IOFC", "GRU": "URO", "RNN": "H"}


def _split(emit, x, sections, axis):
    """``x`` cut into ``sections`` equal parts, or at the indices ``sections`` lists."""
    pieces = emit(R.split(x, sections, axis))
    count = sections if isinstance(sections, int) else len(sections) + 1
    return [emit(relax.TupleGetItem(pieces, i)) for i in range(count)]


def _to_canonical_gates(emit, w, order, canonical, axis):
    """``w`` with its gate blocks along ``axis`` moved from ``order`` to ``canonical``."""
    if order == canonical:
        return w
    gates = _split(emit, w, len(order), axis)
    return emit(R.concat([gates[order.index(g)] for g in canonical], axis))


def _matmul_transposed(emit, x, w):
    """x @ w^T for a 2-d ``w``."""
    return emit(R.matmul(x, emit(R.permute_dims(w, [1, 0]))))


def _sigmoid(emit, x):
    return emit(R.sigmoid(x))


def _tanh(emit, x):
    return emit(R.tanh(x))


def _rnn_step(emit, x_proj, states, r, r_bias, peephole, linear_before_reset):
    (h,) = states
    return [_tanh(emit, emit(R.add(x_proj, emit(R.add(_matmul_transposed(emit, h, r), r_bias)))))]


def _gru_step(emit, x_proj, states, r, r_bias, peephole, linear_before_reset):
    (h,) = states
    x_z, x_r, x_h = _split(emit, x_proj, 3, -1)
    r_zr, r_h = _split(emit, r, [2 * int(h.ty.shape.values[-1])], 0)
    b_zr, b_h = _split(emit, r_bias, [2 * int(h.ty.shape.values[-1])], 0)
    h_z, h_r = _split(emit, emit(R.add(_matmul_transposed(emit, h, r_zr), b_zr)), 2, -1)
    z = _sigmoid(emit, emit(R.add(x_z, h_z)))
    reset = _sigmoid(emit, emit(R.add(x_r, h_r)))
    if linear_before_reset:
        recurrent = emit(R.multiply(reset, emit(R.add(_matmul_transposed(emit, h, r_h), b_h))))
    else:
        recurrent = emit(R.add(_matmul_transposed(emit, emit(R.multiply(reset, h)), r_h), b_h))
    candidate = _tanh(emit, emit(R.add(x_h, recurrent)))
    # (1 - z) * candidate + z * h
    return [emit(R.add(candidate, emit(R.multiply(z, emit(R.subtract(h, candidate))))))]


def _lstm_step(emit, x_proj, states, r, r_bias, peephole, linear_before_reset):
    h, c = states
    gates = emit(R.add(x_proj, emit(R.add(_matmul_transposed(emit, h, r), r_bias))))
    g_i, g_o, g_f, g_c = _split(emit, gates, 4, -1)
    if peephole is not None:
        p_i, p_o, p_f = _split(emit, peephole, 3, 0)
        g_i = emit(R.add(g_i, emit(R.multiply(p_i, c))))
        g_f = emit(R.add(g_f, emit(R.multiply(p_f, c))))
    i, f = _sigmoid(emit, g_i), _sigmoid(emit, g_f)
    c_next = emit(R.add(emit(R.multiply(f, c)), emit(R.multiply(i, _tanh(emit, g_c)))))
    if peephole is not None:
        g_o = emit(R.add(g_o, emit(R.multiply(p_o, c_next))))
    h_next = emit(R.multiply(_sigmoid(emit, g_o), _tanh(emit, c_next)))
    return [h_next, c_next]


_STEPS = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}


def _direction_slice(emit, value, d):
    return None if value is None else emit(R.take(value, relax.const(d, "int64"), axis=0))


def _run_direction(emit, kind, x_proj, initial, r, r_bias, peephole, seq_lens, reverse,
                   linear_before_reset):
    """Unrolls one direction; returns the output sequence and the last states."""
    seq_len = int(x_proj.ty.shape.values[0])
    states, outputs = initial, [None] * seq_len
    for t in reversed(range(seq_len)) if reverse else range(seq_len):
        x_t = emit(R.take(x_proj, relax.const(t, "int64"), axis=0))
        new = _STEPS[kind](emit, x_t, states, r, r_bias, peephole, linear_before_reset)
        if seq_lens is None:
            states, outputs[t] = new, new[0]
            continue
        # Past a sequence's end its states stay and its output is 0; run backwards, this
        # also starts each sequence at its own last element.
        valid = emit(R.less(relax.const(t, str(seq_lens.ty.dtype)), seq_lens))
        valid = emit(R.reshape(valid, [-1, 1]))
        states = [emit(R.where(valid, n, s)) for n, s in zip(new, states)]
        outputs[t] = emit(R.where(valid, new[0], relax.const(0, str(new[0].ty.dtype))))
    return emit(R.stack(outputs, 0)), states


def _recurrent(emit, kind, x, w, r, b, seq_lens, initial, peephole, *, weight_format,
               weight_dims, hidden_size, direction, hidden_state, cell_state, gate_order,
               linear_before_reset=False):
    num_gates = len(_CANONICAL_ORDER[kind])
    if x.ty.ndim != 3 or not isinstance(x.ty.shape.values[0], tirx.IntImm):
        raise LoweringError(f"input {x.ty}; expected (seq, batch, input) with a static seq")
    if weight_dims is not None and tuple(int(d) for d in w.ty.shape.values) != tuple(weight_dims):
        raise LoweringError(f"W is {w.ty}; weight_dims says {tuple(weight_dims)}")
    if weight_format == "LDIGO":
        w, r = (emit(R.permute_dims(m, [0, 2, 1])) for m in (w, r))
    num_directions = 2 if direction == "BIDIRECTIONAL" else 1
    gates_width = num_gates * hidden_size
    for name, m, cols in (("W", w, x.ty.shape.values[2]), ("R", r, hidden_size)):
        expected = (num_directions, gates_width, cols)
        if m.ty.ndim != 3 or any(
            isinstance(d, tirx.IntImm) and int(d) != int(e)
            for d, e in zip(m.ty.shape.values, expected)
        ):
            raise LoweringError(f"{name} is {m.ty}; expected {tuple(int(e) for e in expected)} "
                                "in LDGOI layout")
    canonical = _CANONICAL_ORDER[kind]
    order = gate_order or canonical
    w, r = (_to_canonical_gates(emit, m, order, canonical, 1) for m in (w, r))
    dtype = str(x.ty.dtype)
    no_bias = relax.const(np.zeros((num_directions, gates_width), dtype))
    if b is None:
        b = emit(R.concat([no_bias, no_bias], 1))
    elif int(b.ty.shape.values[-1]) == gates_width:  # one bias per gate, already summed
        b = emit(R.concat([b, no_bias], 1))
    w_bias, r_bias = (_to_canonical_gates(emit, half, order, canonical, 1)
                      for half in _split(emit, b, 2, 1))
    batch = x.ty.shape.values[1]
    zeros = emit(R.zeros(relax.ShapeExpr([num_directions, batch, hidden_size]), dtype))
    initial = [zeros if s is None else s for s in initial]
    sequences, finals = [], []
    for d in range(num_directions):
        w_d = _direction_slice(emit, w, d)
        # The input projections of all steps in one matmul.
        x_proj = emit(R.add(emit(R.matmul(x, emit(R.permute_dims(w_d, [1, 0])))),
                            _direction_slice(emit, w_bias, d)))
        reverse = direction == "REVERSE" or d == 1
        sequence, states = _run_direction(
            emit, kind, x_proj, [_direction_slice(emit, s, d) for s in initial],
            _direction_slice(emit, r, d), _direction_slice(emit, r_bias, d),
            _direction_slice(emit, peephole, d),
            seq_lens, reverse, linear_before_reset)
        sequences.append(sequence)
        finals.append(states)
    results = [R.stack(sequences, 1)]
    if hidden_state:
        results.append(R.stack([states[0] for states in finals], 0))
    if cell_state:
        if kind != "LSTM":
            raise LoweringError(f"{kind} has no cell state; expected outputs without it")
        results.append(R.stack([states[1] for states in finals], 0))
    return results


@register("LSTM")
def lstm(emit, x, w, r, b, seq_lens, initial_h, initial_c, peephole, **attrs):
    return _recurrent(emit, "LSTM", x, w, r, b, seq_lens, [initial_h, initial_c], peephole,
                      **attrs)


@register("GRU")
def gru(emit, x, w, r, b, seq_lens, initial_h, **attrs):
    return _recurrent(emit, "GRU", x, w, r, b, seq_lens, [initial_h], None, **attrs)


@register("RNN")
def rnn(emit, x, w, r, b, seq_lens, initial_h, **attrs):
    return _recurrent(emit, "RNN", x, w, r, b, seq_lens, [initial_h], None, gate_order=None,
                      **attrs)
