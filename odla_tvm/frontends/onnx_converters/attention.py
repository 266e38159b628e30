"""Converters of ONNX's attention ops, composed from ODLA's math, nn and process ops as ONNX's
own function definitions compose them."""

from __future__ import annotations

import math

import numpy as np

import odla_tvm as odla

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
        lengths = odla.reshape(odla.cast(nonpad, odla.ElementType.INT64), (batch, 1, 1, 1))
        bias.add_allowed(odla.less(positions, lengths))

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
        attended = odla.cast(odla.not_(odla.is_inf(bias.value, False, True)),
                             odla.ElementType.FLOAT32)
        last = rank(bias.value) - 1
        masked = odla.equal(odla.reduce_max(attended, 1, [last], True),
                            constant(np.float32(0)))
        probabilities = odla.select(masked, constant(np.zeros((), probabilities.type.dtype)),
                                    probabilities)
    if precision is not None:
        probabilities = odla.cast(probabilities, q.element_type)
    y = odla.batch_mat_mul(probabilities, False, values, False)
    if three_d:
        y = odla.reshape(odla.transpose(y, (0, 2, 1, 3)), (batch, q_len, -1))
    mode = node.attr("qk_matmul_output_mode", 0)
    qk_output = {2: with_bias, 3: probabilities}.get(mode, scores)
    return [_named(y, node, 0, output_type), _named(present_key, node, 1, output_type),
            _named(present_value, node, 2, output_type), _named(qk_output, node, 3, output_type)]


def _named(value, node: Node, index: int, element_type):
    """``value`` as ``element_type`` under the node's output name ``index``, when the model
    uses that output."""
    if not node.wants(index):
        return None
    return odla.cast(value, element_type, value_id=node.ids[index])


def _last_axis(x, start: int, end: int, step: int = 1):
    """``x[..., start:end:step]``."""
    rest = rank(x) - 1
    return odla.slice(x, [0] * rest + [start], [INT_MAX] * rest + [end], [1] * rest + [step])


@converter("RotaryEmbedding", since=23)
def rotary_embedding(node: Node):
    x, cos, sin, positions = node.input(0), node.input(1), node.input(2), node.input(3)
    shape = static_dims(node, x)
    if rank(x) == 4:  # (batch, heads, seq, size) -> (batch, seq, heads, size)
        x = odla.transpose(x, (0, 2, 1, 3))
    else:
        heads = node.attr("num_heads")
        x = odla.reshape(x, (shape[0], shape[1], heads, shape[2] // heads))
    head_size = dims(x)[3]
    rotated = node.attr("rotary_embedding_dim") or head_size
    if positions is not None:  # the caches are per position
        cos, sin = odla.gather(cos, positions, 0), odla.gather(sin, positions, 0)
    cos, sin = (odla.reshape(c, dims(c)[:-1] + (1, dims(c)[-1])) for c in (cos, sin))
    part = _last_axis(x, 0, rotated)
    if node.attr("interleaved", 0):
        first, second = _last_axis(part, 0, rotated, 2), _last_axis(part, 1, rotated, 2)
    else:
        first, second = _last_axis(part, 0, rotated // 2), _last_axis(part, rotated // 2, rotated)
    real = odla.sub(odla.mul(cos, first), odla.mul(sin, second))
    imaginary = odla.add(odla.mul(sin, first), odla.mul(cos, second))
    if node.attr("interleaved", 0):
        pairs = [odla.reshape(v, dims(v) + (1,)) for v in (real, imaginary)]
        part = odla.reshape(odla.concat(pairs, 4), dims(part))
    else:
        part = odla.concat([real, imaginary], 3)
    if rotated < head_size:
        part = odla.concat([part, _last_axis(x, rotated, head_size)], 3)
    if len(shape) == 4:
        return odla.transpose(part, (0, 2, 1, 3), value_id=node.id)
    return odla.reshape(part, shape, value_id=node.id)


def _step(x, index: int):
    """``x[:, :, index]`` of a (batch, heads, time, size) value: (batch, heads, size)."""
    batch, heads, _, size = dims(x)
    part = odla.slice(x, [0, 0, index, 0], [batch, heads, index + 1, size], [1, 1, 1, 1])
    return odla.reshape(part, (batch, heads, size))


def _float32(x):
    return x if x is None or x.element_type == odla.ElementType.FLOAT32 \
        else odla.cast(x, odla.ElementType.FLOAT32)


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
        decay = odla.transpose(odla.reshape(decay, (batch, steps, kv_heads, 1)), (0, 2, 1, 3)) \
            if per_head else _split_heads(node, decay, kv_heads)
    if rule in ("delta", "gated_delta"):
        width = dims(beta)[2]
        beta = odla.transpose(odla.reshape(_float32(beta), (batch, steps, width, 1)),
                              (0, 2, 1, 3))
    state = _float32(past) if past is not None else \
        constant(np.zeros((batch, kv_heads, key_size, value_size), np.float32))
    scale = constant(np.float32(node.attr("scale") or 1 / math.sqrt(key_size)))
    outputs = []
    for t in range(steps):
        k_t, v_t = _step(k, t), _step(v, t)
        if rule in ("gated", "gated_delta"):
            g_t = _step(decay, t)
            state = odla.mul(state, odla.exp(odla.reshape(g_t, dims(g_t) + (1,))))
        if rule in ("delta", "gated_delta"):
            keys = odla.reshape(k_t, (batch, kv_heads, 1, key_size))
            retrieved = odla.reshape(odla.batch_mat_mul(keys, False, state, False),
                                     (batch, kv_heads, value_size))
            v_t = odla.mul(_step(beta, t), odla.sub(v_t, retrieved))
        outer = odla.mul(odla.reshape(k_t, (batch, kv_heads, key_size, 1)),
                         odla.reshape(v_t, (batch, kv_heads, 1, value_size)))
        state = odla.add(state, outer)
        read = state if q_heads == kv_heads else _repeat_heads(state, q_heads // kv_heads)
        q_t = odla.reshape(_step(q, t), (batch, q_heads, 1, key_size))
        outputs.append(odla.mul(odla.batch_mat_mul(q_t, False, read, False), scale))
    y = odla.reshape(odla.transpose(odla.concat(outputs, 2), (0, 2, 1, 3)),
                     (batch, steps, q_heads * value_size))
    state_type = past.element_type if past is not None else query.element_type
    return [odla.cast(y, query.element_type, value_id=node.id),
            _named(state, node, 1, state_type)]


_PRECISE_TYPES = (odla.ElementType.FLOAT32, odla.ElementType.FLOAT64)


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
    scores = odla.batch_mat_mul(odla.mul(q, root), False, odla.mul(k, root), True)
    precision = node.attr("softmax_precision")
    compute = element_type(precision) if precision is not None else \
        q.element_type if q.element_type in _PRECISE_TYPES else odla.ElementType.FLOAT32
    scores = odla.cast(scores, compute)
    if "score_mod" in node.attrs:
        (scores,) = node.body("score_mod", [scores])
    probabilities = odla.softmax(scores, 3)
    if "prob_mod" in node.attrs:
        (probabilities,) = node.body("prob_mod", [probabilities])
    y = odla.batch_mat_mul(probabilities, False, odla.cast(v, compute), False)
    return odla.cast(y, v.element_type, value_id=node.id)
