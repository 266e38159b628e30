"""Faults under concurrency: threads sharing one Session, some feeding bad inputs. The good
runs stay bit-exact, the bad ones get OdlaError, and nothing deadlocks."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import odla_tvm as odla
from odla_tvm import Status

TABLE = np.random.default_rng(5).standard_normal((50, 16)).astype(np.float32)
RUNS = 40


def _session():
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
         helper.make_node("Mul", ["rows", "scale"], ["y"])], "lookup",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [8]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])],
        [numpy_helper.from_array(TABLE, "table")])
    return odla.Session.from_onnx(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]))


def _good_feed(worker, run):
    rng = np.random.default_rng(worker * 1000 + run)
    return {"ids": rng.integers(-50, 50, 8), "scale": rng.standard_normal((8, 16)).astype(np.float32)}


def _bad_feed(worker, run):
    feed = _good_feed(worker, run)
    if run % 2:
        feed["ids"][run % 8] = 50 + run  # past the table
    else:
        feed["scale"] = feed["scale"].astype(np.float64)
    return feed


def test_eight_threads_sharing_a_session_with_bad_feeds_among_them():
    session = _session()
    feeds = {(w, r): (_bad_feed if w % 3 == 2 else _good_feed)(w, r)
             for w in range(8) for r in range(RUNS)}
    # Serial results: what every concurrent good run must reproduce bit for bit.
    expected = {key: session.run(feed)[0] for key, feed in feeds.items() if key[0] % 3 != 2}

    def worker(w):
        outcomes = []
        for r in range(RUNS):
            try:
                outcomes.append(session.run(feeds[w, r])[0])
            except odla.OdlaError as err:
                outcomes.append(err)
        return outcomes

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(worker, w) for w in range(8)]
        results = [f.result(timeout=300) for f in futures]  # a deadlock fails here
    for w, outcomes in enumerate(results):
        for r, outcome in enumerate(outcomes):
            if w % 3 == 2:
                assert isinstance(outcome, odla.OdlaError), (w, r)
                assert outcome.status is Status.INVALID_PARAM
                assert ("Gather" in str(outcome) and f"index {50 + r}" in str(outcome)) if r % 2 \
                    else "float64" in str(outcome)
            else:
                assert isinstance(outcome, np.ndarray), (w, r, outcome)
                assert outcome.dtype == np.float32 and outcome.shape == (8, 16)
                np.testing.assert_array_equal(outcome, expected[w, r])
    ids, scale = feeds[0, 0]["ids"], feeds[0, 0]["scale"]
    np.testing.assert_allclose(expected[0, 0], TABLE[ids] * scale, rtol=1e-6)
