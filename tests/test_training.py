"""Training (ComputeMode.TRAINING): the gradient of every differentiable foundation op against
central finite differences in float64, NegativeLogLikeliHoodLoss against NumPy, optimizer
steps against a NumPy MLP, the example MLP and CNN learning, checkpoints, variables on the
host, inference after training, and bad input to every training entry point."""

from __future__ import annotations

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import MemoryLayout as L
from odla_tvm import ReductionMode as RM
from odla_tvm import ValueType as VT

from examples import train as train_example

try:
    from . import reference as ref
    from .test_errors import expect_error
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    import reference as ref
    from test_errors import expect_error


# -- gradients against finite differences --------------------------------------------------------

class Inputs:
    """Makes the float64 variables (random data) and constants of one gradient case."""

    def __init__(self, name: str, rng):
        self.name, self.rng, self.variables = name, rng, []

    def var(self, *shape, positive=False, scale=1.0):
        data = self.rng.standard_normal(shape) * scale
        if positive:
            data = np.abs(data) + 0.5
        value = odla.create_variable(VT(E.FLOAT64, shape), f"{self.name}.v{len(self.variables)}")
        odla.set_value_data(value, data)
        self.variables.append(value)
        return value

    def const(self, array):
        array = np.asarray(array)
        etype = E.INT64 if array.dtype.kind == "i" else E.FLOAT64
        return odla.create_constant(VT(etype, array.shape), array)


CF, CL = L.CHANNELS_FIRST, L.CHANNELS_LAST

# Each case builds one op on variables; names are "Op" or "Op/variant".
GRADIENT_CASES = {
    "Conv": lambda f: odla.conv(f.var(1, 2, 5, 5), CF, 1, f.var(4, 2, 3, 3), L.OIS, (1, 1),
                                (1, 1), (1, 1), (1, 1), f.var(4)),
    "Conv/strided-dilated-grouped": lambda f: odla.conv(
        f.var(1, 4, 7, 7), CF, 2, f.var(4, 2, 2, 2), L.OIS, (2, 2), (2, 1), (1, 0), (0, 1)),
    "Conv/channels-last-SIO": lambda f: odla.conv(
        f.var(1, 5, 5, 2), CL, 1, f.var(3, 3, 2, 4), L.SIO, (2, 2), (1, 1), (1, 1), (1, 1)),
    "Conv/1d": lambda f: odla.conv(f.var(2, 2, 7), CF, 1, f.var(3, 2, 3), L.OIS, (2,), (1,),
                                   (1,), (0,)),
    "Conv/3d": lambda f: odla.conv(f.var(1, 2, 3, 4, 4), CF, 1, f.var(2, 2, 2, 2, 2), L.OIS,
                                   (1, 2, 1), (1, 1, 1), (0, 1, 0), (0, 0, 1)),
    "DeConv": lambda f: odla.de_conv(f.var(1, 3, 3, 3), CF, 1, f.var(3, 2, 3, 3), L.IOS, (2, 2),
                                     (1, 1), (1, 1), (1, 1), f.var(2)),
    "DeConv/grouped-output-dims": lambda f: odla.de_conv(
        f.var(1, 4, 3, 3), CF, 2, f.var(4, 1, 2, 2), L.IOS, (2, 2), (1, 1), (0, 0), (0, 0),
        output_dims=(1, 2, 7, 7)),
    "DeConv/channels-last-SIO": lambda f: odla.de_conv(
        f.var(1, 3, 3, 2), CL, 1, f.var(2, 2, 2, 3), L.SIO, (1, 1), (2, 2), (0, 0), (1, 0)),
    "DeConv/1d": lambda f: odla.de_conv(f.var(1, 2, 4), CF, 1, f.var(2, 3, 3), L.IOS, (2,),
                                        (1,), (1,), (0,)),
    "BatchNormalization": lambda f: odla.batch_normalization(
        f.var(2, 3, 2, 2), CF, f.var(3), f.var(3, positive=True), 1e-3, f.var(3), f.var(3)),
    "BatchNormalization/channels-last-scalars": lambda f: odla.batch_normalization(
        f.var(2, 2, 3), CL, f.var(3), f.var(3, positive=True), 1e-3, None, None, 1.5, -0.5),
    "MaxPool": lambda f: odla.max_pool(f.var(1, 2, 4, 4), CF, (2, 2), (2, 2), (0, 0), (0, 0)),
    "MaxPool/channels-last-padded": lambda f: odla.max_pool(
        f.var(1, 5, 5, 2), CL, (3, 3), (2, 2), (1, 1), (1, 1)),
    "MaxPool/uneven-strides-padded": lambda f: odla.max_pool(
        f.var(1, 1, 3, 7), CF, (1, 3), (1, 2), (0, 1), (0, 0)),
    "MaxPool/1d": lambda f: odla.max_pool(f.var(2, 2, 7), CF, (3,), (2,), (1,), (0,)),
    "MaxPool/3d": lambda f: odla.max_pool(f.var(1, 2, 3, 4, 4), CF, (2, 2, 3), (1, 2, 1),
                                          (0, 0, 1), (1, 0, 1)),
    "AveragePool": lambda f: odla.average_pool(f.var(1, 2, 4, 4), CF, (2, 2), (2, 2), (0, 0),
                                               (0, 0), False),
    "AveragePool/padded-excluded": lambda f: odla.average_pool(
        f.var(1, 2, 5, 5), CF, (3, 3), (2, 2), (1, 1), (1, 1), False),
    "AveragePool/channels-last-padded-included": lambda f: odla.average_pool(
        f.var(1, 5, 5, 2), CL, (3, 3), (2, 2), (1, 1), (1, 1), True),
    "AveragePool/1d": lambda f: odla.average_pool(f.var(2, 2, 7), CF, (3,), (2,), (1,), (1,),
                                                  True),
    "AveragePool/3d": lambda f: odla.average_pool(f.var(1, 2, 3, 4, 4), CF, (2, 2, 3),
                                                  (1, 2, 1), (0, 0, 1), (1, 0, 1), False),
    "Gemm": lambda f: odla.gemm(f.var(3, 4), False, f.var(5, 4), True, 0.5, 2.0, f.var(5)),
    "Gemm/transposed-A": lambda f: odla.gemm(f.var(4, 3), True, f.var(4, 2), False, 1.0, 1.0,
                                             f.var(3, 2)),
    "BatchMatMul": lambda f: odla.batch_mat_mul(f.var(2, 3, 4), False, f.var(2, 5, 4), True),
    "BatchMatMul/broadcast": lambda f: odla.batch_mat_mul(f.var(2, 3, 4), False, f.var(4, 2),
                                                          False),
    "Relu": lambda f: odla.relu(f.var(3, 4)),
    "LeakyRelu": lambda f: odla.leaky_relu(f.var(3, 4), 0.1),
    "Sigmoid": lambda f: odla.sigmoid(f.var(3, 4)),
    "Tanh": lambda f: odla.tanh(f.var(3, 4)),
    "Gelu": lambda f: odla.gelu(f.var(3, 4)),
    "Gelu/approx": lambda f: odla.gelu(f.var(3, 4), True),
    "Softmax": lambda f: odla.softmax(f.var(3, 4), 1),
    "LogSoftmax": lambda f: odla.log_softmax(f.var(2, 3, 4), -1),
    "Add": lambda f: odla.add(f.var(3, 4), f.var(4)),
    "Sub": lambda f: odla.sub(f.var(3, 1), f.var(3, 4)),
    "Mul": lambda f: odla.mul(f.var(2, 3, 4), f.var(3, 1)),
    "Div": lambda f: odla.div(f.var(3, 4), f.var(4, positive=True)),
    "Pow": lambda f: odla.pow(f.var(3, 4, positive=True), f.var(3, 4, scale=0.5)),
    "Sqrt": lambda f: odla.sqrt(f.var(3, 4, positive=True)),
    "Exp": lambda f: odla.exp(f.var(3, 4)),
    "Log": lambda f: odla.log(f.var(3, 4, positive=True)),
    "Max": lambda f: odla.max(f.var(3, 4), f.var(4)),
    "Min": lambda f: odla.min(f.var(3, 4), f.var(3, 1)),
    "Abs": lambda f: odla.abs(f.var(3, 4)),
    "Neg": lambda f: odla.neg(f.var(3, 4)),
    "Clamp": lambda f: odla.clamp(f.var(3, 4), -0.5, 0.5),
    "Reshape": lambda f: odla.reshape(f.var(2, 6), (3, 4)),
    "Transpose": lambda f: odla.transpose(f.var(2, 3, 4), (2, 0, 1)),
    "Concat": lambda f: odla.concat([f.var(2, 3), f.var(2, 2), f.var(2, 1)], 1),
    "Slice": lambda f: odla.slice(f.var(4, 6), (1, -1), (4, 0), (2, -2)),
    "Gather": lambda f: odla.gather(f.var(5, 3), f.const([[0, -1], [2, 0]]), 0),
    "Gather/axis-1": lambda f: odla.gather(f.var(2, 4, 3), f.const([3, 1, 3]), 1),
    "Pad": lambda f: odla.pad(f.var(2, 3), (1, 0), (0, 2)),
    "ReduceMean": lambda f: odla.reduce_mean(f.var(2, 3, 4), 1, (1,), True),
    "ReduceSum": lambda f: odla.reduce_sum(f.var(2, 3, 4), 2, (0, 2), False),
    "ReduceMax": lambda f: odla.reduce_max(f.var(2, 3, 4), 1, (1,), False),
    "ReduceMax/all": lambda f: odla.reduce_max(f.var(3, 4), 0, (), False),
    "Squeeze": lambda f: odla.squeeze(f.var(2, 1, 3, 1), 2, (1, 3)),
    "ExpandDims": lambda f: odla.expand_dims(f.var(3, 1), (2, 3, 4)),
    "NegativeLogLikeliHoodLoss/mean-weighted-ignored": lambda f: odla.negative_log_likeli_hood_loss(
        f.var(4, 3), f.const([0, 2, 1, 2]), 1, RM.MEAN, f.const([0.5, 1.0, 2.0])),
    "NegativeLogLikeliHoodLoss/sum-spatial": lambda f: odla.negative_log_likeli_hood_loss(
        f.var(2, 3, 2), f.const([[0, 2], [1, 1]]), -100, RM.SUM),
    "NegativeLogLikeliHoodLoss/none": lambda f: odla.negative_log_likeli_hood_loss(
        f.var(3, 4), f.const([3, 0, 1]), -100, RM.NONE),
}

FD_STEP = 1e-6


@pytest.fixture(scope="module")
def gradient_check():
    """One float64 computation holding every case: each case's output, dotted with a fixed
    random tensor, is a term; the loss sums the terms. Returns, per case, the gradients one
    SGD step (learning rate 1) takes and the central differences of its term."""
    rng = np.random.default_rng(7)
    comp = odla.create_computation()
    inputs, terms = {}, []
    for name, build in GRADIENT_CASES.items():
        f = inputs[name] = Inputs(name, rng)
        out = build(f)
        weights = f.const(rng.standard_normal(out.shape.dims))
        terms.append(odla.reduce_sum(odla.mul(out, weights), 0, (), False, value_id=f"{name}.term"))
    loss = terms[0]
    for term in terms[1:]:
        loss = odla.add(loss, term)
    odla.set_value_as_output(loss)
    odla.set_values_as_output(terms)
    numeric = _finite_differences(comp, inputs, terms)

    odla.differentiate_computation(comp, loss)
    odla.set_optimizer(comp, "sgd", learning_rate=1.0)
    before = {v.id: odla.get_value_data(v) for v in comp.variables}
    odla.execute_computation(comp, odla.create_context(), odla.ComputeMode.TRAINING)
    analytic = {name: [before[v.id] - odla.get_value_data(v) for v in f.variables]
                for name, f in inputs.items()}
    yield analytic, numeric
    odla.destroy_computation(comp)


def _finite_differences(comp, inputs: dict, terms: list) -> dict:
    """Central differences of each case's term over each element of its variables. A term
    depends only on its own case's variables, so one run perturbs one element of every case."""
    exe = odla.compile_computation(comp)
    ctx = odla.create_context()
    elements = {name: [(v, i) for v in f.variables for i in range(v.shape.element_count())]
                for name, f in inputs.items()}
    numeric = {name: [np.zeros(v.shape.dims) for v in f.variables] for name, f in inputs.items()}
    for k in range(max(len(e) for e in elements.values())):
        perturbed = {name: e[k] for name, e in elements.items() if k < len(e)}
        sides = []
        for step in (FD_STEP, -FD_STEP):
            originals = {}
            for v, i in perturbed.values():
                originals[v.id] = data = odla.get_value_data(v)
                moved = data.copy()
                moved.flat[i] += step
                odla.set_value_data(v, moved)
            odla.launch_executable(exe, ctx)
            sides.append({term.id: odla.get_value_data(term, None, ctx) for term in terms})
            for v, _ in perturbed.values():
                odla.set_value_data(v, originals[v.id])
        for name, (v, i) in perturbed.items():
            term = f"{name}.term"
            slot = inputs[name].variables.index(v)
            numeric[name][slot].flat[i] = (sides[0][term] - sides[1][term]) / (2 * FD_STEP)
    return numeric


@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_gradient_matches_finite_differences(gradient_check, case):
    analytic, numeric = gradient_check
    for grad, expected in zip(analytic[case], numeric[case]):
        assert np.any(expected != 0)  # every variable of a case moves its term
        np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


# -- NegativeLogLikeliHoodLoss -------------------------------------------------------------------

def test_negative_log_likelihood_loss_matches_numpy():
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((3, 4, 2)).astype(np.float32)
    labels = np.array([[0, 3], [2, 2], [1, 0]], np.int64)
    weight = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, scores.shape), "scores")
    gt = odla.create_argument(VT(E.INT64, labels.shape), "labels")
    w = odla.create_constant(VT(E.FLOAT32, weight.shape), weight)
    cases = {"mean": (RM.MEAN, 2, w), "sum": (RM.SUM, -100, None), "none": (RM.NONE, 0, w)}
    for name, (mode, ignored, weights) in cases.items():
        loss = odla.negative_log_likeli_hood_loss(x, gt, ignored, mode, weights, value_id=name)
        odla.set_value_as_output(loss)
    assert odla.get_value_type(comp.outputs[2]) == VT(E.FLOAT32, (3, 2))
    assert odla.get_value_type(comp.outputs[0]) == VT(E.FLOAT32, ())
    results = odla.Session(comp).run({"scores": scores, "labels": labels})
    for (name, (mode, ignored, weights)), result in zip(cases.items(), results):
        expected = ref.negative_log_likelihood_loss(
            scores, labels, ignored, name, weight if weights is not None else None)
        np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6, err_msg=name)
    odla.destroy_computation(comp)


# -- optimizer steps against a NumPy MLP ---------------------------------------------------------

def _numpy_mlp_step(params, x, targets, loss):
    """Loss gradients of relu(x W1 + b1) W2 + b2 for ``loss`` "nll" / "cross_entropy"
    (targets one-hot, log-softmax outputs, mean over the batch) or "mse" (on the logits)."""
    w1, b1, w2, b2 = (p.astype(np.float64) for p in params)
    z = x @ w1 + b1
    h = np.maximum(z, 0)
    logits = h @ w2 + b2
    if loss == "mse":
        d_logits = 2 * (logits - targets) / targets.size
    else:
        e = np.exp(logits - logits.max(1, keepdims=True))
        d_logits = (e / e.sum(1, keepdims=True) - targets) / len(x)
    d_z = (d_logits @ w2.T) * (z > 0)
    return [x.T @ d_z, d_z.sum(0), h.T @ d_logits, d_logits.sum(0)]


def _numpy_update(optimizer, params, grads, state, step, h):
    new = []
    for k, (p, g) in enumerate(zip(params, grads)):
        p = p.astype(np.float64)
        if optimizer == "sgd":
            g = g + h["weight_decay"] * p
            state[k] = h["momentum"] * state.get(k, 0) + g
            new.append(p - h["learning_rate"] * state[k])
            continue
        if optimizer == "adam":
            g = g + h["weight_decay"] * p
        m, v = state.get(k, (0, 0))
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        state[k] = m, v
        direction = (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.999 ** step)) + 1e-8)
        if optimizer == "adamw":
            direction = direction + h["weight_decay"] * p
        new.append(p - h["learning_rate"] * direction)
    return new


def _loss_mlp(loss: str, batch=8, features=6, hidden=10, classes=4, seed=5):
    """An MLP whose loss is NegativeLogLikeliHoodLoss, or cross-entropy or mean-squared error
    built from ODLA ops; targets are labels (nll) or one-hot floats."""
    rng = np.random.default_rng(seed)
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (batch, features)), "x")
    params = []
    for value_id, shape in (("w1", (features, hidden)), ("b1", (hidden,)),
                            ("w2", (hidden, classes)), ("b2", (classes,))):
        params.append(odla.create_variable(VT(E.FLOAT32, shape), value_id))
        odla.set_value_data(params[-1], (rng.standard_normal(shape) * 0.5).astype(np.float32))
    w1, b1, w2, b2 = params
    h = odla.relu(odla.gemm(x, False, w1, False, 1.0, 1.0, b1))
    logits = odla.gemm(h, False, w2, False, 1.0, 1.0, b2)
    if loss == "nll":
        targets = odla.create_argument(VT(E.INT64, (batch,)), "targets")
        value = odla.negative_log_likeli_hood_loss(odla.log_softmax(logits, 1), targets, -100,
                                                   RM.MEAN, value_id="loss")
    else:
        targets = odla.create_argument(VT(E.FLOAT32, (batch, classes)), "targets")
        if loss == "cross_entropy":
            picked = odla.reduce_sum(odla.mul(targets, odla.log_softmax(logits, 1)), 1, (1,), False)
            value = odla.neg(odla.reduce_mean(picked, 0, (), False), "loss")
        else:
            error = odla.sub(logits, targets)
            value = odla.reduce_mean(odla.mul(error, error), 0, (), True, value_id="loss")
    odla.set_value_as_output(value)
    odla.differentiate_computation(comp)
    return comp, x, targets, params


@pytest.mark.parametrize("optimizer, loss, hyperparameters", [
    ("sgd", "nll", {"learning_rate": 0.2, "momentum": 0.9, "weight_decay": 0.01}),
    ("adam", "cross_entropy", {"learning_rate": 0.05, "weight_decay": 0.001}),
    ("adamw", "mse", {"learning_rate": 0.05, "weight_decay": 0.05}),
])
def test_three_steps_match_numpy(optimizer, loss, hyperparameters):
    comp, x, targets, params = _loss_mlp(loss)
    odla.set_optimizer(comp, optimizer, **hyperparameters)
    expected_h = dict(odla.get_optimizer(comp)[1])
    expected = [odla.get_value_data(p).astype(np.float64) for p in params]
    rng, state = np.random.default_rng(11), {}
    for step in range(1, 4):
        batch = rng.standard_normal((8, 6)).astype(np.float32)
        labels = rng.integers(0, 4, 8)
        one_hot = np.eye(4, dtype=np.float32)[labels]
        ctx = odla.create_context()
        odla.bind_to_argument(x, batch, ctx)
        odla.bind_to_argument(targets, labels if loss == "nll" else one_hot, ctx)
        odla.execute_computation(comp, ctx, odla.ComputeMode.TRAINING)
        grads = _numpy_mlp_step(expected, batch.astype(np.float64), one_hot, loss)
        expected = _numpy_update(optimizer, expected, grads, state, step, expected_h)
    for value, want in zip(params, expected):
        np.testing.assert_allclose(odla.get_value_data(value), want, rtol=2e-4, atol=2e-6,
                                   err_msg=value.id)
    odla.destroy_computation(comp)


# -- the example models learn --------------------------------------------------------------------

@pytest.mark.parametrize("name, epochs, accuracy", [("mlp", 3, 0.93), ("cnn", 4, 0.9)])
@pytest.mark.slow
def test_example_model_learns(name, epochs, accuracy):
    build, generate = train_example.DATASETS[name]
    model = build()
    odla.differentiate_computation(model.computation, model.loss)
    odla.set_optimizer(model.computation, "adam", learning_rate=0.005)
    train_data, test_data = generate(2048, seed=1), generate(512, seed=2)
    initial_loss, initial_accuracy = train_example.evaluate(model, test_data)
    results = train_example.train(model, train_data, test_data, epochs, progress=False)
    assert results[-1].train_loss < results[0].train_loss
    assert results[-1].test_loss < 0.5 * initial_loss
    assert results[-1].test_accuracy >= accuracy > initial_accuracy, results
    odla.destroy_computation(model.computation)


# -- checkpoints, variables on the host, inference after training --------------------------------

def _steps(model, data, start, count):
    """Runs training steps on consecutive batches; returns their losses."""
    inputs, labels = data
    return [train_example.run_batch(model, inputs[i * model.batch:(i + 1) * model.batch],
                                 labels[i * model.batch:(i + 1) * model.batch],
                                 odla.ComputeMode.TRAINING)[0]
            for i in range(start, start + count)]


def _small_mlp():
    model = train_example.build_mlp(batch=8, hidden=8)
    odla.differentiate_computation(model.computation, model.loss)
    odla.set_optimizer(model.computation, "adam", learning_rate=0.01, weight_decay=0.001)
    return model


@pytest.mark.slow
def test_checkpoint_resumes_training_identically(tmp_path):
    data = train_example.blob_features(64, seed=4)
    model = _small_mlp()
    _steps(model, data, 0, 2)
    odla.store_checkpoint(tmp_path / "mlp.npz", model.computation)
    losses = _steps(model, data, 2, 2)
    weights = [odla.get_value_data(v) for v in model.computation.variables]
    odla.destroy_computation(model.computation)

    resumed = train_example.build_mlp(batch=8, hidden=8, seed=99)  # other weights, overwritten
    odla.set_optimizer(resumed.computation, "sgd", learning_rate=0.5)  # restored to adam
    odla.load_checkpoint(tmp_path / "mlp.npz", resumed.computation)
    assert odla.get_optimizer(resumed.computation) == (
        "adam", {"learning_rate": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8,
                 "weight_decay": 0.001})
    assert _steps(resumed, data, 2, 2) == losses
    for value, expected in zip(resumed.computation.variables, weights):
        np.testing.assert_array_equal(odla.get_value_data(value), expected, err_msg=value.id)
    odla.destroy_computation(resumed.computation)


@pytest.fixture(scope="module")
def trained_mlp():
    model = _small_mlp()
    initial = {v.id: odla.get_value_data(v) for v in model.computation.variables}
    _steps(model, train_example.blob_features(64, seed=4), 0, 4)
    yield model, initial
    odla.destroy_computation(model.computation)


def _numpy_log_probabilities(model, features):
    w1, b1, w2, b2 = (odla.get_value_data(v).astype(np.float64) for v in model.computation.variables)
    logits = np.maximum(features @ w1 + b1, 0) @ w2 + b2
    return ref.log_softmax(logits, 1)


def test_trained_weights_reach_inference(trained_mlp, tmp_path):
    model, initial = trained_mlp
    comp = model.computation
    assert all(not np.array_equal(odla.get_value_data(v), initial[v.id]) for v in comp.variables)
    features, labels = train_example.blob_features(8, seed=9)
    expected = _numpy_log_probabilities(model, features)

    forward = odla.compile_inference(comp)  # the forward part: no labels, no loss
    assert [v.id for v in forward.args] == ["features"]
    assert [v.id for v in forward.outputs] == ["log_probabilities"]
    (result,) = odla.Session(forward).run({"features": features})
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    odla.store_executable(tmp_path / "mlp.odla", forward)
    (result,) = odla.Session(tmp_path / "mlp.odla").run({"features": features})
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)

    whole = odla.Session(comp)  # compile_computation: loss and log-probabilities
    loss, result = whole.run({"features": features, "labels": labels})
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(loss, -expected[np.arange(8), labels].mean(), rtol=1e-5)


def test_variables_written_on_the_host_reach_the_device(trained_mlp):
    model, _ = trained_mlp
    comp = model.computation
    program = comp.training.program
    weight = comp.variables[0]
    new = np.full(weight.shape.dims, 0.25, np.float32)
    odla.set_value_data(weight, new)
    np.testing.assert_array_equal(odla.get_value_data(weight), new)
    # a tiny learning rate leaves the weights as written: the step started from them
    odla.set_optimizer(comp, "adam", learning_rate=1e-12)
    _steps(model, train_example.blob_features(8, seed=5), 0, 1)
    np.testing.assert_allclose(odla.get_value_data(weight), new, atol=1e-9)
    assert comp.training.program is program  # new hyperparameters need no recompilation


# -- bad input -----------------------------------------------------------------------------------

def _graph(variables=("w",), loss_shape=(), dtype=E.FLOAT32, output=True):
    """x (2, 3) times each variable, reduced to ``loss_shape`` and summed."""
    comp = odla.create_computation()
    x = odla.create_argument(VT(dtype, (2, 3)), "x")
    total = x
    for value_id in variables:
        total = odla.mul(total, odla.create_variable(VT(dtype, (3,)), value_id))
    loss = odla.reduce_sum(total, 2 - len(loss_shape), (0, 1)[:2 - len(loss_shape)], False,
                           value_id="loss")
    if output:
        odla.set_value_as_output(loss)
    return comp, x, loss


def test_differentiate_computation_errors():
    S = odla.Status
    with expect_error(S.INVALID_PARAM, "computation is a str"):
        odla.differentiate_computation("comp")
    comp, _, _ = _graph(variables=())
    with expect_error(S.INVALID_PARAM, "no variables", "given none"):
        odla.differentiate_computation(comp)
    comp, _, loss = _graph(output=False)
    with expect_error(S.INVALID_PARAM, "no outputs", "given none"):
        odla.differentiate_computation(comp)
    with expect_error(S.INVALID_PARAM, "expected an output of this computation"):
        odla.differentiate_computation(comp, loss)
    comp, _, _ = _graph(loss_shape=(3,))
    with expect_error(S.INVALID_PARAM, "'loss'", "shape (3,)", "single element"):
        odla.differentiate_computation(comp)
    comp, _, _ = _graph(dtype=E.INT32)
    with expect_error(S.INVALID_PARAM, "'loss'", "int32", "floating-point"):
        odla.differentiate_computation(comp)


def test_training_step_errors():
    S, TRAIN = odla.Status, odla.ComputeMode.TRAINING
    comp, x, _ = _graph(variables=())
    ctx = odla.create_context()
    odla.bind_to_argument(x, np.ones((2, 3), np.float32), ctx)
    with expect_error(S.INVALID_PARAM, "no variables"):
        odla.execute_computation(comp, ctx, TRAIN)
    comp, x, _ = _graph(output=False)
    with expect_error(S.INVALID_PARAM, "no outputs"):
        odla.execute_computation(comp, odla.create_context(), TRAIN)

    comp, x, loss = _graph()
    unused = odla.create_variable(VT(E.FLOAT32, (3,)), "unused")
    other = odla.reduce_sum(odla.mul(x, x), 0, (), False, value_id="other")
    odla.set_value_as_output(other)
    odla.differentiate_computation(comp, other)
    ctx = odla.create_context()
    odla.bind_to_argument(x, np.ones((2, 3), np.float32), ctx)
    with expect_error(S.INVALID_PARAM, "'other' depends on none", "'w', 'unused'"):
        odla.execute_computation(comp, ctx, TRAIN)
    odla.differentiate_computation(comp, loss)
    with expect_error(S.INVALID_PARAM, "'x'", "not bound"):
        odla.execute_computation(comp, odla.create_context(), TRAIN)
    with expect_error(S.INVALID_PARAM, "device is a float"):
        odla.execute_computation(comp, ctx, TRAIN, 3.5)
    with expect_error(S.INVALID_PARAM, "context is a NoneType"):
        odla.execute_computation(comp, None, TRAIN)
    odla.execute_computation(comp, ctx, TRAIN)  # "unused" is left alone, not trained
    np.testing.assert_array_equal(odla.get_value_data(unused), np.zeros(3, np.float32))

    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (3,)), "x")
    a = odla.create_variable(VT(E.FLOAT32, (3,)), "a")
    b = odla.create_variable(VT(E.FLOAT64, (3,)), "b")
    mixed = odla.add(odla.reduce_sum(odla.mul(x, a), 0, (), False),
                     odla.cast(odla.reduce_sum(b, 0, (), False), E.FLOAT32))
    odla.set_value_as_output(mixed)
    ctx = odla.create_context()
    odla.bind_to_argument(x, np.ones(3, np.float32), ctx)
    with expect_error(S.UNSUPPORTED_DATATYPE, "'a': FLOAT32", "'b': FLOAT64"):
        odla.execute_computation(comp, ctx, TRAIN)

    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (-1, 3)), "x")
    w = odla.create_variable(VT(E.FLOAT32, (3,)), "w")
    odla.set_value_as_output(odla.reduce_sum(odla.mul(x, w), 0, (), False))
    ctx = odla.create_context()
    odla.bind_to_argument(x, np.ones((2, 3), np.float32), ctx)
    with expect_error(S.INVALID_PARAM, "'x' (-1, 3)", "dynamic dims", "static"):
        odla.execute_computation(comp, ctx, TRAIN)


def test_set_optimizer_errors():
    S = odla.Status
    comp, _, _ = _graph()
    with expect_error(S.INVALID_PARAM, "optimizer is 'rmsprop'", "sgd, adam, adamw"):
        odla.set_optimizer(comp, "rmsprop", learning_rate=0.1)
    with expect_error(S.INVALID_PARAM, "adam has no hyperparameter momentum", "beta1"):
        odla.set_optimizer(comp, "adam", momentum=0.9)
    with expect_error(S.INVALID_PARAM, "sgd needs learning_rate"):
        odla.set_optimizer(comp, "sgd")
    with expect_error(S.INVALID_PARAM, "learning_rate is -0.1", "> 0"):
        odla.set_optimizer(comp, "sgd", learning_rate=-0.1)
    with expect_error(S.INVALID_PARAM, "momentum is 1.0", "in [0, 1)"):
        odla.set_optimizer(comp, "sgd", learning_rate=0.1, momentum=1.0)
    with expect_error(S.INVALID_PARAM, "epsilon is nan"):
        odla.set_optimizer(comp, "adam", epsilon=float("nan"))
    with expect_error(S.INVALID_PARAM, "weight_decay is 'lots'", "expected a number"):
        odla.set_optimizer(comp, "adamw", weight_decay="lots")
    with expect_error(S.INVALID_PARAM, "computation is a int"):
        odla.get_optimizer(3)
    assert odla.get_optimizer(comp) == ("sgd", {"learning_rate": 0.01, "momentum": 0.0,
                                                "weight_decay": 0.0})


def test_checkpoint_errors(tmp_path):
    S = odla.Status
    comp, _, _ = _graph()
    with expect_error(S.FILE_NOT_EXIST, "does not exist"):
        odla.store_checkpoint(tmp_path / "missing" / "c.npz", comp)
    with expect_error(S.FILE_NOT_EXIST, "c.npz", "does not exist"):
        odla.load_checkpoint(tmp_path / "c.npz", comp)
    with expect_error(S.INVALID_PARAM, "location is a int", "file path"):
        odla.load_checkpoint(5, comp)
    (tmp_path / "junk.npz").write_bytes(b"not a checkpoint")
    with expect_error(S.INVALID_PARAM, "junk.npz", "not a valid odla-tvm checkpoint"):
        odla.load_checkpoint(tmp_path / "junk.npz", comp)
    with expect_error(S.INVALID_PARAM, "computation is a str"):
        odla.store_checkpoint(tmp_path / "c.npz", "comp")
    odla.store_checkpoint(tmp_path / "c.npz", comp)
    with np.load(tmp_path / "c.npz") as archive:
        altered = {name: archive[name] for name in archive.files}
    altered["v0"] = altered["v0"].astype(np.float64)
    np.savez(tmp_path / "altered.npz", **altered)
    with expect_error(S.INVALID_PARAM, "variable 'w' has dtype float64; expected float32"):
        odla.load_checkpoint(tmp_path / "altered.npz", comp)
    other, _, _ = _graph(variables=("w", "v"))
    with expect_error(S.INVALID_PARAM, "holds variables ['w': ValueType(FLOAT32, (3,))]",
                      "'v': ValueType(FLOAT32, (3,))"):
        odla.load_checkpoint(tmp_path / "c.npz", other)


def test_compile_inference_errors():
    S = odla.Status
    comp, x, _ = _graph()
    odla.differentiate_computation(comp)
    with expect_error(S.INVALID_PARAM, "outputs are none", "'loss'"):
        odla.compile_inference(comp)
    with expect_error(S.INVALID_PARAM, "outputs are [Value('x'"):
        odla.compile_inference(comp, None, [x])
    with expect_error(S.INVALID_PARAM, "computation is a NoneType"):
        odla.compile_inference(None)
    with expect_error(S.INVALID_PARAM, "device is a int"):
        odla.compile_inference(comp, 0)


def test_negative_log_likelihood_loss_errors():
    S = odla.Status
    odla.create_computation()
    scores = odla.create_argument(VT(E.FLOAT32, (4, 3)), "scores")
    labels = odla.create_argument(VT(E.INT64, (4,)), "labels")
    with expect_error(S.INVALID_PARAM, "input", "expected log-probabilities (N, C, d...)"):
        odla.negative_log_likeli_hood_loss(odla.create_argument(VT(E.FLOAT32, (4,))), labels,
                                           -1, RM.MEAN)
    with expect_error(S.INVALID_PARAM, "gt", "expected integer labels of shape (4,)"):
        odla.negative_log_likeli_hood_loss(scores, scores, -1, RM.MEAN)
    with expect_error(S.INVALID_PARAM, "weight", "expected (3,) float32"):
        odla.negative_log_likeli_hood_loss(
            scores, labels, -1, RM.MEAN, odla.create_argument(VT(E.FLOAT32, (4,))))
    with expect_error(S.INVALID_PARAM, "reduction is 5", "ReductionMode"):
        odla.negative_log_likeli_hood_loss(scores, labels, -1, 5)
    with expect_error(S.INVALID_PARAM, "ignored is ['x']"):
        odla.negative_log_likeli_hood_loss(scores, labels, "x", RM.SUM)
    with expect_error(S.INVALID_PARAM, "output_dims (4,) given", "produce ()"):
        odla.negative_log_likeli_hood_loss(scores, labels, -1, RM.SUM, None, (4,))
