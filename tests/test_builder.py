"""Tuning's builder (targets.tuning.builder.KeptPoolBuilder): its worker processes serve batch after
batch, up to BUILDS_PER_WORKER candidates each, and it reports what LocalBuilder reports."""

import os
import sys

import cloudpickle
import pytest
import tvm
from tvm.s_tir.meta_schedule.builder import BuilderInput
from tvm.script import tirx as T

from targets.tuning import builder as builder_module
from targets.tuning.builder import KeptPoolBuilder


@T.prim_func
def _copy(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
    for i in range(4):
        b[i] = a[i]


def _built(mod, target, _params):
    if any(gv.name_hint == "refused" for gv in mod.get_global_vars()):
        raise ValueError("this candidate does not build")
    return tvm.compile(mod, target=target)


def _worker_pid(_module) -> str:  # as the export: which process built the candidate
    return str(os.getpid())


@pytest.fixture
def candidates():
    # The workers cannot import this file: its functions travel by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield [BuilderInput(tvm.IRModule({"main": _copy}), tvm.target.Target("llvm"))] * 3
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_the_same_workers_build_every_batch(candidates):
    builder = KeptPoolBuilder(f_build=_built, f_export=_worker_pid, workers=2)
    try:
        batches = [builder.build(candidates) for _ in range(3)]
    finally:
        builder.shutdown()
    assert all(r.error_msg is None for batch in batches for r in batch)
    pids = [{int(r.artifact_path) for r in batch} for batch in batches]
    assert os.getpid() not in pids[0] and 1 <= len(pids[0]) <= 2
    assert pids[1] <= pids[0] and pids[2] <= pids[0]


def test_a_worker_is_started_afresh_after_its_share_of_builds(candidates, monkeypatch):
    monkeypatch.setattr(builder_module, "BUILDS_PER_WORKER", 3)
    builder = KeptPoolBuilder(f_build=_built, f_export=_worker_pid, workers=1)
    try:
        first, second = builder.build(candidates), builder.build(candidates)
    finally:
        builder.shutdown()
    (one,), (other,) = {r.artifact_path for r in first}, {r.artifact_path for r in second}
    assert one != other


def test_a_candidate_that_fails_to_build_is_reported_and_the_workers_go_on(candidates):
    refused = BuilderInput(tvm.IRModule({"refused": _copy}), tvm.target.Target("llvm"))
    builder = KeptPoolBuilder(f_build=_built, f_export=_worker_pid, workers=2)
    try:
        mixed = builder.build([refused, candidates[0], refused])
        after = builder.build(candidates)
    finally:
        builder.shutdown()
    for result in (mixed[0], mixed[2]):
        assert result.artifact_path is None
        assert "LocalBuilder: An exception occurred" in result.error_msg
        assert "this candidate does not build" in result.error_msg
    assert mixed[1].error_msg is None and int(mixed[1].artifact_path) != os.getpid()
    assert [r.error_msg for r in after] == [None] * 3
