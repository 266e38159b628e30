"""ODLA control flow (begin_if/enter_branch_body/end_if, begin_loop/create_loop_variable/
end_loop), compiled for the host CPU, against the same computations written as Python
branches and loops over NumPy arrays."""

from __future__ import annotations

import numpy as np
import pytest

import odla_tvm as odla
from odla_tvm import ElementType as E
from odla_tvm import LoopOutputMode as Mode
from odla_tvm import OdlaError, Status
from odla_tvm import ValueType as VT
from odla_tvm.computation import current_computation
from odla_tvm.types import element_type_of

try:
    from .test_ops import F32, I32, I64, case, check, data
    from .test_ops_nn import run_values
except ImportError:  # tests/ is not a package: pytest puts it on sys.path
    from test_ops import F32, I32, I64, case, check, data
    from test_ops_nn import run_values


def const(value, dtype=F32):
    array = np.asarray(value, dtype)
    return odla.create_constant(VT(element_type_of(array.dtype), array.shape), array)


def check_all(results, expected, dynamic=()):
    """``check`` of each result; for the indices in ``dynamic``, the value type's first dim
    (the iteration count of a stacked loop output) is -1."""
    assert len(results) == len(expected)
    for i, ((out, vtype), want) in enumerate(zip(results, expected)):
        if i in dynamic:
            assert vtype.shape.dims == (-1,) + np.shape(want)[1:], f"ODLA value type {vtype}"
            vtype = VT(vtype.element_type, np.shape(want))
        check((out, vtype), want)


def fails(build, words, status=Status.INVALID_PARAM):
    """``build()`` in a fresh computation raises an OdlaError with ``status`` naming ``words``."""
    comp = odla.create_computation()
    try:
        with pytest.raises(OdlaError) as err:
            build()
        assert err.value.status == status and words in err.value.message, err.value.message
    finally:
        odla.destroy_computation(comp)


# -- branches ----------------------------------------------------------------------------------

def plus_or_minus(x, condition):
    """x + 1 and x * 2 when condition holds, else x - 1 and x * 3."""
    odla.begin_if(condition)
    odla.enter_branch_body(True)
    odla.set_value_as_output(odla.add(x, const(1)))
    odla.set_value_as_output(odla.mul(x, const(2)))
    odla.enter_branch_body(False)
    odla.set_value_as_output(odla.sub(x, const(1)))
    odla.set_value_as_output(odla.mul(x, const(3)))
    return odla.end_if()


@pytest.mark.parametrize("condition", [
    case("true_bool", np.array(True)), case("false_bool", np.array(False)),
    case("nonzero_int", np.array(7, I32)), case("zero_int_in_1_element", np.array([0], I64)),
])
def test_if(condition):
    x = data((2, 3), seed=1)
    taken = bool(condition.reshape(()))
    expected = [x + 1, x * 2] if taken else [x - 1, x * 3]
    check_all(run_values(plus_or_minus, {"x": x, "c": condition}), expected)


def test_if_false_branch_first_and_outer_values():
    def build(x, y, condition):
        odla.begin_if(condition, "chosen")
        odla.enter_branch_body(False)
        odla.set_value_as_output(y)  # a value from outside the branch
        odla.enter_branch_body(True)
        odla.set_value_as_output(odla.add(x, y))
        (result,) = odla.end_if()
        assert result.id == "chosen"
        return result

    x, y = data((3,), seed=1), data((3,), seed=2)
    for taken in (True, False):
        (result,) = run_values(build, {"x": x, "y": y, "c": np.array(taken)})
        check(result, x + y if taken else y)


def test_if_branches_of_different_shapes():
    def build(x, condition):
        odla.begin_if(condition)
        odla.enter_branch_body(True)
        odla.set_value_as_output(x)
        odla.enter_branch_body(False)
        odla.set_value_as_output(odla.slice(x, (0,), (2,), (1,)))
        return odla.end_if()

    x = data((5,), seed=1)
    for taken in (True, False):
        results = run_values(build, {"x": x, "c": np.array(taken)})
        check_all(results, [x if taken else x[:2]], dynamic=(0,))


def test_nested_if():
    def build(x, a, b):
        odla.begin_if(a)
        odla.enter_branch_body(True)
        odla.begin_if(b)
        odla.enter_branch_body(True)
        odla.set_value_as_output(odla.add(x, const(1)))
        odla.enter_branch_body(False)
        odla.set_value_as_output(odla.add(x, const(2)))
        (inner,) = odla.end_if()
        odla.set_value_as_output(odla.mul(inner, const(10)))
        odla.enter_branch_body(False)
        odla.set_value_as_output(x)
        return odla.end_if()

    x = data((2,), seed=1)
    for a in (True, False):
        for b in (True, False):
            expected = ((x + (1 if b else 2)) * 10) if a else x
            (result,) = run_values(build, {"x": x, "a": np.array(a), "b": np.array(b)})
            check(result, expected.astype(F32))


def test_if_with_a_branch_never_entered_has_no_results():
    def build():
        x = odla.create_argument(VT(E.FLOAT32, (2,)))
        odla.begin_if(odla.create_argument(VT(E.BOOL, ())))
        odla.enter_branch_body(True)
        odla.add(x, x)
        return odla.end_if()

    comp = odla.create_computation()
    try:
        assert build() == []
    finally:
        odla.destroy_computation(comp)


def test_if_errors():
    def result_counts_differ():
        x = odla.create_argument(VT(E.FLOAT32, (2,)))
        odla.begin_if(odla.create_argument(VT(E.BOOL, ())))
        odla.enter_branch_body(True)
        odla.set_value_as_output(x)
        odla.enter_branch_body(False)
        odla.end_if()

    def element_types_differ():
        x = odla.create_argument(VT(E.FLOAT32, (2,)))
        odla.begin_if(odla.create_argument(VT(E.BOOL, ())))
        odla.enter_branch_body(True)
        odla.set_value_as_output(x)
        odla.enter_branch_body(False)
        odla.set_value_as_output(odla.create_argument(VT(E.INT32, (2,))))
        odla.end_if()

    def branch_value_used_after_end_if():
        x = odla.create_argument(VT(E.FLOAT32, (2,)))
        odla.begin_if(odla.create_argument(VT(E.BOOL, ())))
        odla.enter_branch_body(True)
        inside = odla.add(x, x)
        odla.set_value_as_output(inside)
        odla.enter_branch_body(False)
        odla.set_value_as_output(x)
        odla.end_if()
        odla.add(inside, x)

    def entered_twice():
        odla.begin_if(odla.create_argument(VT(E.BOOL, ())))
        odla.enter_branch_body(True)
        odla.enter_branch_body(True)

    def condition_of_two_elements():
        x = odla.create_argument(VT(E.FLOAT32, (2,)))
        odla.begin_if(odla.create_argument(VT(E.BOOL, (2,))))
        odla.end_if()
        odla.set_value_as_output(x)

    def compiled_while_open():
        x = odla.create_argument(VT(E.FLOAT32, (2,)))
        odla.set_value_as_output(x)
        odla.begin_if(odla.create_argument(VT(E.BOOL, ())))
        current_computation().compile()

    fails(result_counts_differ, "names 1 results and the false branch 0")
    fails(element_types_differ, "expected one element type and rank")
    fails(branch_value_used_after_end_if, "body that has ended")
    fails(entered_twice, "entered before")
    fails(condition_of_two_elements, "expected a value of one element")
    fails(lambda: odla.end_if(), "no begin_if is open")
    fails(lambda: odla.enter_branch_body(True), "no begin_if is open")
    fails(compiled_while_open, "has not ended")


# -- loops -------------------------------------------------------------------------------------

def accumulate(x, trip_count, flags):
    """Sums x into a state started at x, and doubles a counter, ``trip_count`` times."""
    odla.begin_loop(trip_count)
    total = odla.create_loop_variable(x)
    counter = odla.create_loop_variable(const(1, I64))
    odla.set_value_as_output(odla.add(total, x))
    odla.set_value_as_output(odla.mul(counter, const(2, I64)))
    return odla.end_loop(None, [total, counter], flags)


def loop_reference(x, count, flags):
    before, after, state = [], [], [x.astype(F32), np.array(1, I64)]
    for _ in range(count):
        before.append(state)
        state = [state[0] + x, state[1] * 2]
        after.append(state)
    results = []
    for k, flag in enumerate(flags):
        results.append(state[k])
        history = {Mode.FWD_BEFORE: before, Mode.FWD_AFTER: after,
                   Mode.REV_BEFORE: before[::-1], Mode.REV_AFTER: after[::-1]}.get(flag)
        if history is not None:
            results.append(np.array([s[k] for s in history], state[k].dtype)
                           .reshape((len(history),) + np.shape(state[k])))
    return results


def stacked_positions(flags) -> set[int]:
    """Where among end_loop's results the stacked values of ``flags`` are."""
    positions, position = set(), 0
    for flag in flags:
        position += 1  # the last value comes first
        if flag != Mode.LAST_VALUE:
            positions.add(position)
            position += 1
    return positions


@pytest.mark.parametrize("count, count_dtype", [
    case("3_int32", 3, I32), case("1_int64", 1, I64), case("0_iterations", 0, I64),
    case("5_in_1_element", [5], I32),
])
@pytest.mark.parametrize("flags", [
    case("last_values", [Mode.LAST_VALUE, Mode.LAST_VALUE]),
    case("forward", [Mode.FWD_BEFORE, Mode.FWD_AFTER]),
    case("reverse", [Mode.REV_BEFORE, Mode.REV_AFTER]),
])
def test_loop(flags, count, count_dtype):
    x = data((2, 3), seed=1)
    trip_count = np.array(count, count_dtype)
    results = run_values(lambda x, n: accumulate(x, n, flags), {"x": x, "n": trip_count})
    check_all(results, loop_reference(x, int(trip_count.reshape(())), flags),
              dynamic=stacked_positions(flags))


def test_loop_stops_when_its_condition_fails():
    def build(x, limit):
        odla.begin_loop(None)  # no trip count: the condition alone ends the loop
        value = odla.create_loop_variable(x)
        steps = odla.create_loop_variable(const(0, I32))
        doubled = odla.mul(value, const(2))
        odla.set_value_as_output(doubled)
        odla.set_value_as_output(odla.add(steps, const(1, I32)))
        keep_going = odla.less(odla.reduce_sum(doubled, 0, (), False), limit)
        return odla.end_loop(keep_going, [steps, value], [Mode.LAST_VALUE, Mode.FWD_AFTER])

    x, limit = np.array([0.5, 1.0], F32), np.array(100, F32)
    value, history = x, []
    while True:  # the condition is checked after each iteration
        value = value * 2
        history.append(value)
        if not value.sum() < limit:
            break
    results = run_values(build, {"x": x, "limit": limit})
    check_all(results, [np.array(len(history), I32), value, np.array(history)], dynamic=(2,))


def test_loop_with_trip_count_and_condition():
    def build(x, n):
        odla.begin_loop(n)
        value = odla.create_loop_variable(x)
        odla.set_value_as_output(odla.add(value, const(1)))
        return odla.end_loop(odla.less(value, const(2)), [value])

    # The condition of the iteration that saw value 2 stops the loop after it.
    for count, expected in [(10, 3.0), (2, 2.0)]:
        (result,) = run_values(build, {"x": np.array(0, F32), "n": np.array(count, I64)})
        check(result, np.array(expected, F32))


def test_many_iterations_do_not_exhaust_the_stack():
    def build(x, n):
        odla.begin_loop(n)
        value = odla.create_loop_variable(x)
        odla.set_value_as_output(odla.add(value, const(1)))
        return odla.end_loop(None, [value])

    (result,) = run_values(build, {"x": np.array(0, I64).astype(F32), "n": np.array(20000, I64)})
    check(result, np.array(20000, F32))


def test_nested_loops_and_a_branch_in_a_loop():
    """For each of n outer iterations: when the state's sum is at most 10, add x twice (an
    inner loop), else keep it."""
    def build(x, n):
        odla.begin_loop(n)
        state = odla.create_loop_variable(x)
        odla.begin_if(odla.greater(odla.reduce_sum(state, 0, (), False), const(10)))
        odla.enter_branch_body(True)
        odla.set_value_as_output(state)
        odla.enter_branch_body(False)
        odla.begin_loop(const(2, I32))
        inner = odla.create_loop_variable(state)
        odla.set_value_as_output(odla.add(inner, x))
        (twice,) = odla.end_loop(None, [inner])
        odla.set_value_as_output(twice)
        (chosen,) = odla.end_if()
        odla.set_value_as_output(chosen)
        return odla.end_loop(None, [state], [Mode.FWD_AFTER])

    comp = odla.create_computation()
    try:
        # Dims known at run time only: the loop keeps them symbolic.
        x = odla.create_argument(VT(E.FLOAT32, (-1,)), "x")
        n = odla.create_argument(VT(E.INT32, ()), "n")
        results = build(x, n)
        assert [odla.get_value_type(r) for r in results] == [VT(E.FLOAT32, (-1,)),
                                                             VT(E.FLOAT32, (-1, -1))]
        odla.set_values_as_output(results)
        session = odla.Session(comp)
        for x_data in (np.ones(2, F32), np.full(3, 0.5, F32)):
            state, history = x_data, []
            for _ in range(5):
                state = state if state.sum() > 10 else state + 2 * x_data
                history.append(state)
            last, stacked = session.run({"x": x_data, "n": np.array(5, I32)})
            np.testing.assert_allclose(last, state)
            np.testing.assert_allclose(stacked, np.array(history))
    finally:
        odla.destroy_computation(comp)


def test_loop_in_a_branch():
    def build(x, condition):
        odla.begin_if(condition)
        odla.enter_branch_body(True)
        odla.begin_loop(const(3, I32))
        value = odla.create_loop_variable(x)
        odla.set_value_as_output(odla.mul(value, x))
        (power,) = odla.end_loop(None, [value])
        odla.set_value_as_output(power)
        odla.enter_branch_body(False)
        odla.set_value_as_output(x)
        return odla.end_if()

    x = data((4,), seed=1)
    for taken in (True, False):
        (result,) = run_values(build, {"x": x, "c": np.array(taken)})
        check(result, (x.astype(np.float64) ** 4).astype(F32) if taken else x, rtol=1e-5)


def one_state_loop(next_value=lambda state: state, initial=lambda x: x,
                   outputs=lambda state, x: [state], flags=None):
    """A loop of one state, ``initial(x)`` at first and ``next_value(state)`` (None: no next
    value named) after each iteration, ending with ``outputs(state, x)`` and ``flags``."""
    x = odla.create_argument(VT(E.FLOAT32, (2,)))
    odla.begin_loop(odla.create_argument(VT(E.INT32, ())))
    state = odla.create_loop_variable(initial(x))
    value = next_value(state)
    if value is not None:
        odla.set_value_as_output(value)
    return odla.end_loop(None, outputs(state, x), flags)


@pytest.mark.parametrize("loop, words", [
    case("next_value_missing", {"next_value": lambda state: None}, "body names 0 next values"),
    case("output_not_a_loop_variable", {"outputs": lambda state, x: [x]},
         "is not a loop variable"),
    case("next_value_of_another_type", {"next_value": lambda state: odla.cast(state, E.INT32)},
         "expected one element type and rank"),
    case("initial_value_from_the_body", {"initial": lambda x: odla.add(x, x)},
         "body that has ended"),
    case("flags_mismatch", {"flags": [Mode.LAST_VALUE, Mode.FWD_AFTER]},
         "2 flags for 1 output values"),
])
def test_loop_errors(loop, words):
    fails(lambda: one_state_loop(**loop), words)


def test_loop_scope_errors():
    def end_if_closes_no_loop():
        odla.begin_loop(odla.create_argument(VT(E.INT32, ())))
        odla.end_if()

    fails(end_if_closes_no_loop, "the innermost open construct is the loop")
    fails(lambda: odla.create_loop_variable(odla.create_argument(VT(E.FLOAT32, ()))),
          "no begin_loop is open")
