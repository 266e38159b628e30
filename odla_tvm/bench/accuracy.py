"""How far a path's outputs lie from the float32 model's (onnxruntime's), for the bench's
reduced-precision runs: the largest absolute difference, the cosine similarity of all the
outputs as one vector, and for a classifier's output (batch rows of class scores) the share
of rows whose arg-max class agrees."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class Accuracy:
    max_abs_diff: float
    cosine: float
    top1: float | None = None  # None: the first output is no classifier's


def accuracy(outputs, expected) -> Accuracy:
    got = np.concatenate([np.asarray(o, np.float64).ravel() for o in outputs])
    want = np.concatenate([np.asarray(e, np.float64).ravel() for e in expected])
    norms = np.linalg.norm(got) * np.linalg.norm(want)
    cosine = float(got @ want / norms) if norms else float(np.array_equal(got, want))
    first, reference = np.asarray(outputs[0]), np.asarray(expected[0])
    top1 = None
    if reference.ndim == 2 and reference.shape[1] > 1 and first.shape == reference.shape:
        top1 = float(np.mean(first.argmax(1) == reference.argmax(1)))
    return Accuracy(float(np.max(np.abs(got - want), initial=0.0)), cosine, top1)
