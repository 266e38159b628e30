"""Trains an MLP and a small CNN built through the ODLA API on synthetic data.

Both have variables and a NegativeLogLikeliHoodLoss and train in ComputeMode.TRAINING on
learnable data generated here; loss and accuracy are reported per epoch.

    python examples/train.py [--model mlp|cnn|both] [--epochs 5] [--optimizer adam] ...
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

import odla_tvm as odla
from odla_tvm import ElementType, MemoryLayout, ReductionMode, ValueType

log = logging.getLogger(__name__)

CLASSES = 4
_F32 = ElementType.FLOAT32
_CF = MemoryLayout.CHANNELS_FIRST


# -- data ----------------------------------------------------------------------------------------

def blob_features(count: int, features: int = 16, seed: int = 0):
    """Feature vectors from 8 Gaussian blobs at fixed random centres (the same for every
    ``seed``, so train and test sets agree); each class is two of the blobs."""
    centres = np.random.default_rng(1234).standard_normal((2 * CLASSES, features)) * 0.7
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, 2 * CLASSES, count)
    x = centres[blob] + rng.standard_normal((count, features)) * 0.5
    return x.astype(np.float32), (blob % CLASSES).astype(np.int64)


def stroke_images(count: int, size: int = 12, seed: int = 0):
    """Noisy single-channel images of one stroke, 5 pixels long, at a random place; the class
    is its direction: horizontal, vertical, diagonal or anti-diagonal."""
    rng = np.random.default_rng(seed)
    steps = [(0, 1), (1, 0), (1, 1), (1, -1)]
    images = rng.normal(0.0, 0.3, (count, 1, size, size)).astype(np.float32)
    labels = rng.integers(0, CLASSES, count)
    for image, label in zip(images, labels):
        dy, dx = steps[label]
        y = rng.integers(0, size - 4)
        x = rng.integers(4 if dx < 0 else 0, size - 4 if dx > 0 else size)
        for k in range(5):
            image[0, y + k * dy, x + k * dx] += 1.0
    return images, labels.astype(np.int64)


# -- models --------------------------------------------------------------------------------------

@dataclass
class Model:
    """A classifier computation: ``loss`` (its first output) and ``log_probabilities``."""

    computation: odla.Computation
    inputs: odla.Value
    labels: odla.Value
    loss: odla.Value
    log_probabilities: odla.Value
    batch: int


class _Weights:
    """Creates variables with He-initialized weights and zero biases."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def weight(self, shape, fan_in: int, value_id: str) -> odla.Value:
        value = odla.create_variable(ValueType(_F32, shape), value_id)
        scale = np.sqrt(2.0 / fan_in)
        odla.set_value_data(value, (self.rng.standard_normal(shape) * scale).astype(np.float32))
        return value

    @staticmethod
    def bias(size: int, value_id: str) -> odla.Value:
        return odla.create_variable(ValueType(_F32, (size,)), value_id)  # variables start at 0


def _classifier(comp, inputs, logits, batch) -> Model:
    labels = odla.create_argument(ValueType(ElementType.INT64, (batch,)), "labels")
    log_probabilities = odla.log_softmax(logits, -1, "log_probabilities")
    loss = odla.negative_log_likeli_hood_loss(log_probabilities, labels, -100, ReductionMode.MEAN,
                                              value_id="loss")
    odla.set_value_as_output(loss)
    odla.set_value_as_output(log_probabilities)
    return Model(comp, inputs, labels, loss, log_probabilities, batch)


def build_mlp(batch: int = 32, features: int = 16, hidden: int = 32, seed: int = 0) -> Model:
    """features -> gemm + relu -> gemm -> log-softmax over 4 classes."""
    w = _Weights(seed)
    comp = odla.create_computation()
    x = odla.create_argument(ValueType(_F32, (batch, features)), "features")
    h = odla.relu(odla.gemm(x, False, w.weight((features, hidden), features, "fc1.weight"),
                            False, 1.0, 1.0, w.bias(hidden, "fc1.bias")))
    logits = odla.gemm(h, False, w.weight((hidden, CLASSES), hidden, "fc2.weight"), False, 1.0,
                       1.0, w.bias(CLASSES, "fc2.bias"))
    return _classifier(comp, x, logits, batch)


def build_cnn(batch: int = 32, size: int = 12, seed: int = 0) -> Model:
    """Two conv(3x3) + relu + maxpool(2x2) stages (8 and 16 channels), then gemm to 4
    classes, on 1-channel size x size images."""
    w = _Weights(seed)
    comp = odla.create_computation()
    x = odla.create_argument(ValueType(_F32, (batch, 1, size, size)), "images")
    h, channels = x, 1
    for stage, width in enumerate((8, 16), 1):
        kernel = w.weight((width, channels, 3, 3), channels * 9, f"conv{stage}.weight")
        h = odla.conv(h, _CF, 1, kernel, MemoryLayout.OIS, (1, 1), (1, 1), (1, 1), (1, 1),
                      w.bias(width, f"conv{stage}.bias"))
        h = odla.max_pool(odla.relu(h), _CF, (2, 2), (2, 2), (0, 0), (0, 0))
        channels = width
    flat = channels * (size // 4) ** 2
    h = odla.reshape(h, (batch, flat))
    logits = odla.gemm(h, False, w.weight((flat, CLASSES), flat, "fc.weight"), False, 1.0, 1.0,
                       w.bias(CLASSES, "fc.bias"))
    return _classifier(comp, x, logits, batch)


# -- training ------------------------------------------------------------------------------------

@dataclass
class EpochResult:
    epoch: int
    train_loss: float
    train_accuracy: float
    test_loss: float
    test_accuracy: float
    seconds: float


def _batches(count: int, batch: int, rng=None):
    order = rng.permutation(count) if rng is not None else np.arange(count)
    for start in range(0, count - batch + 1, batch):  # static shapes: a short last batch is left out
        yield order[start:start + batch]


def run_batch(model: Model, inputs, labels, mode, device=None) -> tuple[float, int]:
    """One batch in ``mode`` (a training step or inference): its loss and correct count."""
    ctx = odla.create_context()
    odla.bind_to_argument(model.inputs, inputs, ctx)
    odla.bind_to_argument(model.labels, labels, ctx)
    odla.execute_computation(model.computation, ctx, mode, device)
    loss = float(odla.get_value_data(model.loss, None, ctx))
    predicted = odla.get_value_data(model.log_probabilities, None, ctx).argmax(axis=1)
    odla.destroy_context(ctx)
    return loss, int((predicted == labels).sum())


def evaluate(model: Model, data, device=None) -> tuple[float, float]:
    """Mean loss and accuracy over the whole batches of ``data``."""
    inputs, labels = data
    losses, correct, seen = [], 0, 0
    for index in _batches(len(labels), model.batch):
        loss, hits = run_batch(model, inputs[index], labels[index], odla.ComputeMode.INFERENCE,
                               device)
        losses.append(loss)
        correct, seen = correct + hits, seen + len(index)
    return float(np.mean(losses)), correct / seen


def train(model: Model, train_data, test_data, epochs: int, seed: int = 0, device=None,
          progress: bool = True) -> list[EpochResult]:
    """Trains with the computation's optimizer (set_optimizer), one shuffled pass over
    ``train_data`` per epoch, and evaluates on ``test_data`` after each."""
    rng = np.random.default_rng(seed)
    inputs, labels = train_data
    results = []
    for epoch in range(1, epochs + 1):
        started = time.perf_counter()
        losses, correct, seen = [], 0, 0
        bar = tqdm(list(_batches(len(labels), model.batch, rng)), desc=f"epoch {epoch}/{epochs}",
                   unit="step", disable=not progress, leave=False)
        for index in bar:
            loss, hits = run_batch(model, inputs[index], labels[index],
                                   odla.ComputeMode.TRAINING, device)
            losses.append(loss)
            correct, seen = correct + hits, seen + len(index)
            bar.set_postfix(loss=f"{np.mean(losses[-20:]):.4f}", refresh=False)
        test_loss, test_accuracy = evaluate(model, test_data, device)
        results.append(EpochResult(epoch, float(np.mean(losses)), correct / seen, test_loss,
                                   test_accuracy, time.perf_counter() - started))
        log.info("epoch %d: %s", epoch, results[-1])
    return results


DATASETS = {"mlp": (build_mlp, blob_features), "cnn": (build_cnn, stroke_images)}


def train_models(models=("mlp", "cnn"), epochs: int = 5, train_size: int = 2048,
                 test_size: int = 512, optimizer: str = "adam", learning_rate: float = 0.005,
                 checkpoint: str | None = None,
                 export: str | None = None) -> dict[str, list[EpochResult]]:
    device = odla.allocate_device()
    results = {}
    for name in models:
        build, generate = DATASETS[name]
        model = build()
        odla.differentiate_computation(model.computation, model.loss)
        odla.set_optimizer(model.computation, optimizer, learning_rate=learning_rate)
        train_data, test_data = generate(train_size, seed=1), generate(test_size, seed=2)
        print(f"{name}: {len(model.computation.variables)} variables, {train_size} training and "
              f"{test_size} test samples, {optimizer} (learning rate {learning_rate}), "
              f"batch {model.batch}")
        started = time.perf_counter()
        results[name] = train(model, train_data, test_data, epochs, device=device)
        for r in results[name]:
            print(f"  epoch {r.epoch}: train loss {r.train_loss:.4f} accuracy "
                  f"{r.train_accuracy:.3f} | test loss {r.test_loss:.4f} accuracy "
                  f"{r.test_accuracy:.3f} | {r.seconds:.1f} s")
        print(f"  {name} trained in {time.perf_counter() - started:.1f} s (the first epoch "
              "includes compiling the training step)")
        if checkpoint:
            path = f"{checkpoint}.{name}.npz"
            odla.store_checkpoint(path, model.computation)
            print(f"  checkpoint: {path}")
        if export:
            path = f"{export}.{name}.odla"
            odla.store_executable(path, odla.compile_inference(model.computation, device))
            print(f"  inference executable (inputs to log-probabilities, trained weights): {path}")
        odla.destroy_computation(model.computation)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mlp", "cnn", "both"], default="both")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--train-size", type=int, default=2048)
    parser.add_argument("--test-size", type=int, default=512)
    parser.add_argument("--optimizer", choices=["sgd", "adam", "adamw"], default="adam")
    parser.add_argument("--learning-rate", type=float, default=0.005)
    parser.add_argument("--checkpoint", help="store a checkpoint per model at PREFIX.<model>.npz")
    parser.add_argument("--export", help="store an inference executable per model at "
                                         "PREFIX.<model>.odla")
    parser.add_argument("--verbose", action="store_true", help="log compile times")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING)
    started = time.perf_counter()
    train_models(("mlp", "cnn") if args.model == "both" else (args.model,), args.epochs,
                 args.train_size, args.test_size, args.optimizer, args.learning_rate,
                 args.checkpoint, args.export)
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
