"""Converters of ONNX's attention ops, composed from ODLA's math, nn and process ops as ONNX's
own function definitions compose them."""

from __future__ import annotations

import math

import numpy as np

from ... import ops
from ...types import ElementType
from .registry import (
    INT_MAX,
    Node,
    constant,
    converter,
    dims,
    element_type,
    rank,
    static_dims,
    widened,
)


def _split_heads(node: Node, x, heads: int):
    """(batch, seq, heads * size) -> (batch, heads, seq, size)."""
    batch, seq, hidden = static_dims(node, x)
    split = ops.process.reshape(x, (batch, seq, heads, hidden // heads))
    return ops.process.transpose(split, (0, 2, 1, 3))


def _repeat_heads(x, times: int):
    """(batch, heads, seq, size) -> (batch, heads * times, seq, size), each head repeated
    ``times`` times in a row (grouped-query attention)."""
    batch, heads, seq, size = dims(x)
    spread = ops.process.expand_dims(ops.process.reshape(x, (batch, heads, 1, seq, size)),
                                     (batch, heads, times, seq, size))
    return ops.process.reshape(spread, (batch, heads * times, seq, size))


class _Bias:
    """The additive attention bias: 0 where a query may attend a key, -inf where not."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.value = None  # None: no bias at all

    def scalar(self, number):
        return constant(np.asarray(number, self.dtype))

    def add(self, term):
        self.value = term if self.value is None else ops.math.add(self.value, term)

    def add_allowed(self, allowed):
        """Adds 0 where the boolean ``allowed`` is true and -inf elsewhere."""
        self.add(ops.math.select(allowed, self.scalar(0), self.scalar(-np.inf)))


def _mask_bias(node: Node, bias: _Bias, mask, kv_len: int):
    """attn_mask as a bias, its last axis padded to the keys it does not cover."""
    short = kv_len - dims(mask)[-1]
    if mask.element_type == ElementType.BOOL:
        if short > 0:
            mask = ops.process.pad(mask, [0] * rank(mask), [0] * (rank(mask) - 1) + [short])
        bias.add_allowed(mask)
        return
    if short > 0:
        fill = np.full(static_dims(node, mask)[:-1] + (short,), -np.inf, bias.dtype)
        mask = ops.process.concat([mask, constant(fill)], rank(mask) - 1)
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
        shift = ops.process.reshape(ops.math.sub(ops.process.cast(nonpad, ElementType.INT64),
                                                 constant(np.int64(q_len))), (batch, 1, 1, 1))
        distance = ops.math.add(constant(rows - keys), shift)

    def allow(compare, limit):
        bias.add_allowed(compare(distance, constant(np.int64(limit))))

    if causal:
        allow(ops.math.greater_or_equal, 0)
    if left >= 0:
        allow(ops.math.less_or_equal, left)
    if right >= 0:
        allow(ops.math.greater_or_equal, -right)


@converter("Attention", since=23)
def attention(node: Node):
    q, k, v = node.input(0), node.input(1), node.input(2)
    mask, past_key, past_value, nonpad = node.input(3), node.input(4), node.input(5), node.input(6)
    three_d = rank(q) == 3
    if three_d:
        q = _split_heads(node, q, node.attr("q_num_heads"))
        k = _split_heads(node, k, node.attr("kv_num_heads"))
        v = _split_heads(node, v, node.attr("kv_num_heads"))
    present_key = k if past_key is None else ops.process.concat([past_key, k], 2)
    present_value = v if past_value is None else ops.process.concat([past_value, v], 2)
    batch, q_heads, q_len, head_size = static_dims(node, q)
    kv_heads, kv_len = static_dims(node, present_key)[1:3]
    output_type = q.element_type
    # 16-bit floats are computed in float32 and rounded once at the end, as onnxruntime does.
    q, keys, values, mask = (widened(x) for x in (q, present_key, present_value, mask))
    dtype = q.type.dtype

    bias = _Bias(dtype)
    if mask is not None:
        _mask_bias(node, bias, mask, kv_len)
    offset = 0 if past_key is None else dims(past_key)[2]
    _window_bias(node, bias, q_len, kv_len, offset, nonpad, batch)
    if nonpad is not None:  # keys past each batch's length are padding
        positions = constant(np.arange(kv_len, dtype=np.int64).reshape(1, 1, 1, kv_len))
        lengths = ops.process.reshape(ops.process.cast(nonpad, ElementType.INT64), (batch, 1, 1, 1))
        bias.add_allowed(ops.math.less(positions, lengths))

    if q_heads != kv_heads:
        keys, values = _repeat_heads(keys, q_heads // kv_heads), \
            _repeat_heads(values, q_heads // kv_heads)
    scale = node.attr("scale") or 1 / math.sqrt(head_size)
    root = bias.scalar(math.sqrt(scale))  # both operands scaled, as ONNX does, for range
    scores = ops.math.batch_mat_mul(ops.math.mul(q, root), False, ops.math.mul(keys, root), True)
    softcap = node.attr("softcap", 0.0)
    if softcap > 0:
        scores = ops.math.mul(ops.math.tanh(ops.math.div(scores, bias.scalar(softcap))),
                              bias.scalar(softcap))
    with_bias = scores if bias.value is None else ops.math.add(scores, bias.value)
    precision = node.attr("softmax_precision")
    logits = with_bias if precision is None else \
        ops.process.cast(with_bias, element_type(precision))
    probabilities = ops.nn.softmax(logits, 3)
    if bias.value is not None:  # rows with every key masked attend nothing: 0, not NaN
        attended = ops.process.cast(ops.math.not_(ops.math.is_inf(bias.value, False, True)),
                                    ElementType.FLOAT32)
        last = rank(bias.value) - 1
        masked = ops.math.equal(ops.math.reduce_max(attended, 1, [last], True),
                                constant(np.float32(0)))
        probabilities = ops.math.select(masked, constant(np.zeros((), probabilities.type.dtype)),
                                        probabilities)
    if precision is not None:
        probabilities = ops.process.cast(probabilities, q.element_type)
    y = ops.math.batch_mat_mul(probabilities, False, values, False)
    if three_d:
        y = ops.process.reshape(ops.process.transpose(y, (0, 2, 1, 3)), (batch, q_len, -1))
    mode = node.attr("qk_matmul_output_mode", 0)
    qk_output = {2: with_bias, 3: probabilities}.get(mode, scores)
    return [_named(y, node, 0, output_type), _named(present_key, node, 1, output_type),
            _named(present_value, node, 2, output_type), _named(qk_output, node, 3, output_type)]


def _named(value, node: Node, index: int, element_type):
    """``value`` as ``element_type`` under the node's output name ``index``, when the model
    uses that output."""
    if not node.wants(index):
        return None
    return ops.process.cast(value, element_type, value_id=node.ids[index])


def _last_axis(x, start: int, end: int, step: int = 1):
    """``x[..., start:end:step]``."""
    rest = rank(x) - 1
    return ops.process.slice(x, [0] * rest + [start], [INT_MAX] * rest + [end], [1] * rest + [step])


@converter("RotaryEmbedding", since=23)
def rotary_embedding(node: Node):
    x, cos, sin, positions = node.input(0), node.input(1), node.input(2), node.input(3)
    shape = static_dims(node, x)
    if rank(x) == 4:  # (batch, heads, seq, size) -> (batch, seq, heads, size)
        x = ops.process.transpose(x, (0, 2, 1, 3))
    else:
        heads = node.attr("num_heads")
        x = ops.process.reshape(x, (shape[0], shape[1], heads, shape[2] // heads))
    head_size = dims(x)[3]
    rotated = node.attr("rotary_embedding_dim") or head_size
    if positions is not None:  # the caches are per position
        cos, sin = ops.process.gather(cos, positions, 0), ops.process.gather(sin, positions, 0)
    cos, sin = (ops.process.reshape(c, dims(c)[:-1] + (1, dims(c)[-1])) for c in (cos, sin))
    part = _last_axis(x, 0, rotated)
    if node.attr("interleaved", 0):
        first, second = _last_axis(part, 0, rotated, 2), _last_axis(part, 1, rotated, 2)
    else:
        first, second = _last_axis(part, 0, rotated // 2), _last_axis(part, rotated // 2, rotated)
    real = ops.math.sub(ops.math.mul(cos, first), ops.math.mul(sin, second))
    imaginary = ops.math.add(ops.math.mul(sin, first), ops.math.mul(cos, second))
    if node.attr("interleaved", 0):
        pairs = [ops.process.reshape(v, dims(v) + (1,)) for v in (real, imaginary)]
        part = ops.process.reshape(ops.process.concat(pairs, 4), dims(part))
    else:
        part = ops.process.concat([real, imaginary], 3)
    if rotated < head_size:
        part = ops.process.concat([part, _last_axis(x, rotated, head_size)], 3)
    if len(shape) == 4:
        return ops.process.transpose(part, (0, 2, 1, 3), value_id=node.id)
    return ops.process.reshape(part, shape, value_id=node.id)


def _step(x, index: int):
    """``x[:, :, index]`` of a (batch, heads, time, size) value: (batch, heads, size)."""
    batch, heads, _, size = dims(x)
    part = ops.process.slice(x, [0, 0, index, 0], [batch, heads, index + 1, size], [1, 1, 1, 1])
    return ops.process.reshape(part, (batch, heads, size))


def _float32(x):
    return x if x is None or x.element_type == ElementType.FLOAT32 \
        else ops.process.cast(x, ElementType.FLOAT32)


@converter("LinearAttention")
def linear_attention(node: Node):
    """The recurrence of linear attention run step by step over the (known) time axis, in
    float32: the state (batch, kv heads, key size, value size) decays (gated rules), is
    corrected by what it retrieves for the key (delta rules) and gains the key-value outer
    product; each step's output reads it with the query."""
    query, key, value, past, decay, beta = (node.input(i) for i in range(6))
    rule = node.attr("update_rule", "gated_delta")
    q_heads, kv_heads = node.attr("q_num_heads"), node.attr("kv_num_heads")
    batch, steps, q_hidden = static_dims(node, query)
    key_size, value_size = q_hidden // q_heads, static_dims(node, value)[2] // kv_heads
    q = _split_heads(node, _float32(query), q_heads)
    k = _split_heads(node, _float32(key), kv_heads)
    v = _split_heads(node, _float32(value), kv_heads)
    if rule in ("gated", "gated_delta"):
        decay = _float32(decay)
        per_head = dims(decay)[2] == kv_heads
        if per_head:
            decay = ops.process.transpose(ops.process.reshape(decay, (batch, steps, kv_heads, 1)),
                                          (0, 2, 1, 3))
        else:
            decay = _split_heads(node, decay, kv_heads)
    if rule in ("delta", "gated_delta"):
        width = dims(beta)[2]
        beta = ops.process.transpose(ops.process.reshape(_float32(beta), (batch, steps, width, 1)),
                                     (0, 2, 1, 3))
    state = _float32(past) if past is not None else \
        constant(np.zeros((batch, kv_heads, key_size, value_size), np.float32))
    scale = constant(np.float32(node.attr("scale") or 1 / math.sqrt(key_size)))
    outputs = []
    for t in range(steps):
        k_t, v_t = _step(k, t), _step(v, t)
        if rule in ("gated", "gated_delta"):
            g_t = _step(decay, t)
            state = ops.math.mul(state, ops.math.exp(ops.process.reshape(g_t, dims(g_t) + (1,))))
        if rule in ("delta", "gated_delta"):
            keys = ops.process.reshape(k_t, (batch, kv_heads, 1, key_size))
            retrieved = ops.process.reshape(ops.math.batch_mat_mul(keys, False, state, False),
                                            (batch, kv_heads, value_size))
            v_t = ops.math.mul(_step(beta, t), ops.math.sub(v_t, retrieved))
        outer = ops.math.mul(ops.process.reshape(k_t, (batch, kv_heads, key_size, 1)),
                             ops.process.reshape(v_t, (batch, kv_heads, 1, value_size)))
        state = ops.math.add(state, outer)
        read = state if q_heads == kv_heads else _repeat_heads(state, q_heads // kv_heads)
        q_t = ops.process.reshape(_step(q, t), (batch, q_heads, 1, key_size))
        outputs.append(ops.math.mul(ops.math.batch_mat_mul(q_t, False, read, False), scale))
    y = ops.process.reshape(ops.process.transpose(ops.process.concat(outputs, 2), (0, 2, 1, 3)),
                            (batch, steps, q_heads * value_size))
    state_type = past.element_type if past is not None else query.element_type
    return [ops.process.cast(y, query.element_type, value_id=node.id),
            _named(state, node, 1, state_type)]


_PRECISE_TYPES = (ElementType.FLOAT32, ElementType.FLOAT64)


@converter("FlexAttention", domain="ai.onnx.preview")
def flex_attention(node: Node):
    """Scaled dot-product attention whose scores and probabilities pass through the node's
    score_mod and prob_mod graphs, converted inline."""
    q, k, v = node.input(0), node.input(1), node.input(2)
    q_heads, head_size = static_dims(node, q)[1], static_dims(node, q)[3]
    kv_heads = static_dims(node, k)[1]
    if q_heads != kv_heads:
        k, v = _repeat_heads(k, q_heads // kv_heads), _repeat_heads(v, q_heads // kv_heads)
    root = constant(np.asarray(math.sqrt(node.attr("scale") or 1 / math.sqrt(head_size)),
                               q.type.dtype))
    scores = ops.math.batch_mat_mul(ops.math.mul(q, root), False, ops.math.mul(k, root), True)
    precision = node.attr("softmax_precision")
    compute = element_type(precision) if precision is not None else \
        q.element_type if q.element_type in _PRECISE_TYPES else ElementType.FLOAT32
    scores = ops.process.cast(scores, compute)
    if "score_mod" in node.attrs:
        (scores,) = node.body("score_mod", [scores])
    probabilities = ops.nn.softmax(scores, 3)
    if "prob_mod" in node.attrs:
        (probabilities,) = node.body("prob_mod", [probabilities])
    y = ops.math.batch_mat_mul(probabilities, False, ops.process.cast(v, compute), False)
    return ops.process.cast(y, v.element_type, value_id=node.id)
