"""Asynchronous runs: events, ODLA's async callback items, many threads on one executable,
asyncio, and the task API."""

import asyncio
import threading

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import ItemType, Status
from odla_tvm import ValueType as VT

THREADS, LAUNCHES = 8, 200


@pytest.fixture(scope="module")
def mlp():
    """A small MLP with a dynamic batch, compiled once."""
    rng = np.random.default_rng(5)
    comp = odla.create_computation()
    x = odla.create_argument(VT(E.FLOAT32, (-1, 16)), "x")
    w = odla.create_constant(VT(E.FLOAT32, (16, 8)), rng.standard_normal((16, 8)).astype(np.float32))
    odla.set_value_as_output(odla.softmax(odla.tanh(odla.gemm(x, False, w, False, 1.0, 0.0)), -1, "y"))
    return comp, odla.compile_computation(comp, None)


def _serial(exe, data):
    ctx = odla.create_context()
    odla.bind_to_argument(exe.args[0], data, ctx)
    odla.launch_executable(exe, ctx)
    return odla.get_value_data(exe.outputs[0], None, ctx)


def test_threads_of_async_launches_match_serial_runs(mlp):
    comp, exe = mlp
    rng = np.random.default_rng(0)
    inputs = [[rng.standard_normal((1 + (t + i) % 3, 16)).astype(np.float32) for i in range(LAUNCHES)]
              for t in range(THREADS)]
    expected = [[_serial(exe, data) for data in per_thread] for per_thread in inputs]
    calls = []
    calls_lock = threading.Lock()

    def callback(arg, status):
        with calls_lock:
            calls.append((arg, status))

    results = [[None] * LAUNCHES for _ in range(THREADS)]
    errors = []

    def worker(t):
        try:
            for i, data in enumerate(inputs[t]):
                ctx = odla.create_context()
                odla.set_context_item(ctx, ItemType.ASYNC_CALLBACK_FUNC, callback)
                odla.set_context_item(ctx, ItemType.ASYNC_CALLBACK_ARG, (t, i))
                odla.bind_to_argument(exe.args[0], data, ctx)
                event = odla.async_launch_executable(exe, None, ctx, odla.ComputeMode.INFERENCE, None)
                event.wait(60)
                assert event.done() and event.status == Status.SUCCESS
                results[t][i] = odla.get_value_data(exe.outputs[0], None, ctx)
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    for t in range(THREADS):
        for i in range(LAUNCHES):
            np.testing.assert_array_equal(results[t][i], expected[t][i])
    # Each callback fired exactly once, with its own argument and success.
    assert sorted(arg for arg, _ in calls) == [(t, i) for t in range(THREADS) for i in range(LAUNCHES)]
    assert {status for _, status in calls} == {Status.SUCCESS}


def test_a_failing_run_reaches_its_event_and_callback(mlp):
    comp, exe = mlp
    seen = []
    ctx = odla.create_context()
    odla.set_context_item(ctx, ItemType.ASYNC_CALLBACK_FUNC, lambda arg, status: seen.append((arg, status)))
    odla.set_context_item(ctx, ItemType.ASYNC_CALLBACK_ARG, "job-7")
    # Nothing bound: the launch fails inside the worker, not in the caller.
    event = odla.async_launch_executable(exe, None, ctx)
    with pytest.raises(odla.OdlaError) as err:
        event.wait(60)
    assert err.value.status == Status.INVALID_PARAM and "'x'" in str(err.value)
    assert isinstance(event.exception(), odla.OdlaError) and event.status == Status.INVALID_PARAM
    assert seen == [("job-7", Status.INVALID_PARAM)]


def test_async_execute_computation_and_asyncio(mlp):
    comp, exe = mlp
    data = np.ones((2, 16), np.float32)

    async def main():
        contexts = [odla.create_context() for _ in range(4)]
        for ctx in contexts:
            odla.bind_to_argument(comp.args[0], data, ctx)
        await asyncio.gather(*(odla.async_execute_computation(comp, ctx, odla.ComputeMode.DEFAULT, None)
                               for ctx in contexts))
        return [odla.get_value_data(comp.outputs[0], None, ctx) for ctx in contexts]

    for result in asyncio.run(main()):
        np.testing.assert_array_equal(result, _serial(exe, data))


def test_one_context_runs_one_thing_at_a_time(mlp):
    comp, exe = mlp
    ctx = odla.create_context()
    odla.bind_to_argument(exe.args[0], np.ones((1, 16), np.float32), ctx)
    gate = threading.Event()
    ctx.in_flight = True  # as while a run is writing its results
    with pytest.raises(odla.OdlaError) as err:
        odla.async_launch_executable(exe, None, ctx)
    assert "in flight" in str(err.value)
    ctx.in_flight = False
    gate.set()
    odla.async_launch_executable(exe, None, ctx).wait(60)
    with pytest.raises(odla.OdlaError) as err:
        odla.async_launch_executable(exe, {"w": 1}, ctx)
    assert "constants_array" in str(err.value)
    odla.set_context_item(ctx, ItemType.ASYNC_CALLBACK_FUNC, "not callable")
    with pytest.raises(odla.OdlaError) as err:
        odla.async_launch_executable(exe, None, ctx)
    assert "ASYNC_CALLBACK_FUNC" in str(err.value)
    assert not ctx.in_flight


def test_task_api_runs_a_sub_computation_on_a_device(mlp):
    comp, exe = mlp
    device = odla.allocate_device()

    def sub_computation(dev, inputs, outputs):
        assert dev is device
        outputs.append(_serial(exe, inputs[0]))

    data = np.full((3, 16), 0.5, np.float32)
    task = odla.Task(sub_computation, [data], [])
    assert odla.run_task(device, task) == Status.SUCCESS
    np.testing.assert_array_equal(task.outputs[0], _serial(exe, data))
    later = odla.Task(sub_computation, [data], [])
    event = odla.run_task_async(device, later)
    event.wait(60)
    np.testing.assert_array_equal(later.outputs[0], task.outputs[0])
    failing = odla.Task(lambda dev, i, o: 1 / 0)
    with pytest.raises(odla.OdlaError) as err:
        odla.run_task(device, failing)
    assert err.value.status == Status.FAILURE and "division by zero" in str(err.value)
    assert odla.run_task_async(device, failing).status in (None, Status.FAILURE)
    with pytest.raises(odla.OdlaError):
        odla.run_task(device, "task")
    # A custom executor (odla_SetAsyncExecutor) decides how async tasks run.
    ran = []
    odla.set_async_executor(lambda run, dev, t: ran.append(run(dev, t)))
    try:
        odla.run_task_async(device, odla.Task(sub_computation, [data], [])).wait()
        assert ran == [Status.SUCCESS]
    finally:
        odla.set_async_executor(None)
