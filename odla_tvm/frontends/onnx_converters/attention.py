"""Converters of ONNX's attention ops, composed from ODLA's math, nn and process ops as ONNX's
own function definitions compose them."""

from __future__ import annotations

import math

import numpy as np

import odla_tvm as odla

from .registry import Node, constant, converter, dims, element_type, rank, static_dims


def _split_heads(node: Node, x, heads: int):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, seq, hidden = static_dims(node, x)
    return odla.transpose(odla.reshape(x, (batch, seq, heads, hidden // heads)), (0, 2, 1, 3))


def _repeat_heads(x, times: int):
    """(batch, heads, seq, size) -> (batch, heads * times, seq, size), each head repeated
    ``times`` times in a row (grouped-query attention)."""
    batch, heads, seq, size = dims(x)
    spread = odla.expand_dims(odla.reshape(x, (batch, heads, 1, seq, size)),
                              (batch, heads, times, seq, size))
    return odla.reshape(spread, (batch, heads * times, seq, size))


class _Bias:
    """The additive attention bias: 0 where a query may attend a key, -inf where not."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.value = None  # None: no bias at all

    def scalar(self, number):
        return constant(np.asarray(number, self.dtype))

    def add(self, term):
        self.value = term if self.value is None else odla.add(self.value, term)

    def add_allowed(self, allowed):
        """Adds 0 where the boolean ``allowed`` is true and -inf elsewhere."""
        self.add(odla.select(allowed, self.scalar(0), self.scalar(-np.inf)))


def _mask_bias(node: Node, bias: _Bias, mask, kv_len: int):
    """attn_mask as a bias, its last axis padded to the keys it does not cover."""
    short = kv_len - dims(mask)[-1]
    if mask.element_type == odla.ElementType.BOOL:
        if short > 0:
            mask = odla.pad(mask, [0] * rank(mask), [0] * (rank(mask) - 1) + [short])
        bias.add_allowed(mask)
        return
    if short > 0:
        fill = np.full(static_dims(node, mask)[:-1] + (short,), -np.inf, bias.dtype)
        mask = odla.concat([mask, constant(fill)], rank(mask) - 1)
    bias.add(mask)


def _window_bias(node: Node, bias: _Bias, q_len, kv_len, offset, nonpad, batch):
    """Causal and sliding-window masks: query i (at position i + offset) attends key j iff
    j <= i + offset (causal) and within the window around it."""
    causal = node.attr("is_causal", 0)
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    if not causal and left < 0 and right < 0:
        return
    rows = np.arange(q_len, dtype=np.int64).reshape(q_len, 1)
    keys = np.arange(kv_len, dtype=np.int64).reshape(1, kv_len)
    if nonpad is None:
        distance = constant(rows + offset - keys)  # (q, kv): how far each key lies behind
    else:  # the offset differs per batch: each batch's length minus the queries
        shift = odla.reshape(odla.sub(odla.cast(nonpad, odla.ElementType.INT64),
                                      constant(np.int64(q_len))), (batch, 1, 1, 1))
        distance = odla.add(constant(rows - keys), shift)

    def allow(compare, limit):
        bias.add_allowed(compare(distance, constant(np.int64(limit))))

    if causal:
        allow(odla.greater_or_equal, 0)
    if left >= 0:
        allow(odla.less_or_equal, left)
    if right >= 0:
        allow(odla.greater_or_equal, -right)


@converter("Attention", since=23)
def attention(node: Node):
    q, k, v = node.input(0), node.input(1), node.input(2)
    mask, past_key, past_value, nonpad = node.input(3), node.input(4), node.input(5), node.input(6)
    three_d = rank(q) == 3
    if three_d:
        q = _split_heads(node, q, node.attr("q_num_heads"))
        k = _split_heads(node, k, node.attr("kv_num_heads"))
        v = _split_heads(node, v, node.attr("kv_num_heads"))
    present_key = k if past_key is None else odla.concat([past_key, k], 2)
    present_value = v if past_value is None else odla.concat([past_value, v], 2)
    batch, q_heads, q_len, head_size = static_dims(node, q)
    kv_heads, kv_len = static_dims(node, present_key)[1:3]
    dtype = q.type.dtype

    bias = _Bias(dtype)
    if mask is not None:
        _mask_bias(node, bias, mask, kv_len)
    offset = 0 if past_key is None else dims(past_key)[2]
    _window_bias(node, bias, q_len, kv_len, offset, nonpad, batch)
    if nonpad is not None:  # keys past each batch's length are padding
        keys = constant(np.arange(kv_len, dtype=np.int64).reshape(1, 1, 1, kv_len))
        lengths = odla.reshape(odla.cast(nonpad, odla.ElementType.INT64), (batch, 1, 1, 1))
        bias.add_allowed(odla.less(keys, lengths))

    keys, values = present_key, present_value
    if q_heads != kv_heads:
        keys, values = _repeat_heads(keys, q_heads // kv_heads), \
            _repeat_heads(values, q_heads // kv_heads)
    scale = node.attr("scale") or 1 / math.sqrt(head_size)
    root = bias.scalar(math.sqrt(scale))  # both operands scaled, as ONNX does, for range
    scores = odla.batch_mat_mul(odla.mul(q, root), False, odla.mul(keys, root), True)
    softcap = node.attr("softcap", 0.0)
    if softcap > 0:
        scores = odla.mul(odla.tanh(odla.div(scores, bias.scalar(softcap))),
                          bias.scalar(softcap))
    with_bias = scores if bias.value is None else odla.add(scores, bias.value)
    precision = node.attr("softmax_precision")
    logits = with_bias if precision is None else odla.cast(with_bias, element_type(precision))
    probabilities = odla.softmax(logits, 3)
    if bias.value is not None:  # rows with every key masked attend nothing: 0, not NaN
        row_max = odla.reduce_max(bias.value, 1, [rank(bias.value) - 1], True)
        masked = odla.is_inf(row_max, False, True)
        probabilities = odla.select(masked, constant(np.zeros((), probabilities.type.dtype)),
                                    probabilities)
    if precision is not None:
        probabilities = odla.cast(probabilities, q.element_type)
    y = odla.batch_mat_mul(probabilities, False, values, False)
    if three_d:
        y = odla.reshape(odla.transpose(y, (0, 2, 1, 3)), (batch, q_len, -1))
    mode = node.attr("qk_matmul_output_mode", 0)
    qk_output = {2: with_bias, 3: probabilities}.get(mode, scores)
    return [_named(y, node, 0), _named(present_key, node, 1), _named(present_value, node, 2),
            _named(qk_output, node, 3)]


def _named(value, node: Node, index: int):
    """``value`` under the node's output name ``index`` when the model uses that output."""
    if not node.wants(index):
        return None
    return odla.cast(value, value.element_type, value_id=node.ids[index])
