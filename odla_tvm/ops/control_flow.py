"""ODLA control flow (odla_ops_control_flow.h): branches and loops, built as in the C API by
calls that open and end bodies of the current computation. Inside a body,
``set_value_as_output`` names the body's results instead of the computation's outputs
(begin_if and begin_loop show how). Both compile to Relax control flow; they are not run in
interpret mode.
"""

from __future__ import annotations

from ..computation import Computation, Value, current_computation
from ..types import LoopOutputMode, OdlaError, Status, checked, odla_enum
from ._args import invalid


class _IfScope:
    """An open begin_if: the results each branch body names, and the bodies ended so far."""

    def __init__(self, condition: Value, value_id):
        self.condition = condition
        self.value_id = value_id
        self.branch: bool | None = None  # the branch whose body is open
        self.outputs: dict[bool, list[Value]] = {True: [], False: []}
        self.bodies: dict = {}

    def add_output(self, value: Value) -> None:
        if self.branch is None:
            raise invalid("SetValueAsOutput", f"{self} has no branch body entered; call "
                          "enter_branch_body(true_branch) first")
        self.outputs[self.branch].append(value)

    def __str__(self):
        return f"the branch begun by begin_if({self.condition.id!r})"


class _LoopScope:
    """An open begin_loop: its loop variables, their initial and next values."""

    def __init__(self, trip_count: Value | None, value_id):
        self.trip_count = trip_count
        self.value_id = value_id
        self.loop_variables: list[Value] = []
        self.initial_values: list[Value] = []
        self.next_values: list[Value] = []

    def add_output(self, value: Value) -> None:
        self.next_values.append(value)

    def __str__(self):
        count = "no trip count" if self.trip_count is None else f"trip count {self.trip_count.id!r}"
        return f"the loop begun by begin_loop with {count}"


def _innermost(comp: Computation, scope_type, op_name: str):
    if not comp.scopes or not isinstance(comp.scopes[-1], scope_type):
        expected = "begin_if" if scope_type is _IfScope else "begin_loop"
        found = f"; the innermost open construct is {comp.scopes[-1]}" if comp.scopes else ""
        raise invalid(op_name, f"no {expected} is open here{found}")
    return comp.scopes[-1]


def _compiled_value(op_name: str, name: str, value) -> Value:
    checked(value, Value, f"{op_name}: {name}", "an odla Value")
    if value.interpreted:
        raise OdlaError(Status.UNSUPPORTED_OP, f"{op_name}: {name} {value.id!r} holds interpret-mode "
                        "data; control flow is compiled, expected a value of the computation")
    return value


def _ids(op_name: str, value_ids, default):
    if isinstance(value_ids, str):
        raise invalid(op_name, f"value_ids is {value_ids!r}; expected a sequence of ids or None")
    return default if value_ids is None else tuple(value_ids)


def begin_if(condition: Value, value_id: str | None = None) -> None:
    """Opens a branch on the one-element ``condition`` (non-zero is true); ``value_id`` names
    its results when end_if is given no ids.

        begin_if(condition)
        enter_branch_body(True)
        set_value_as_output(odla.add(x, one))      # the true branch's result
        enter_branch_body(False)
        set_value_as_output(odla.sub(x, one))      # the false branch's result
        (y,) = end_if()
    """
    comp = current_computation()
    comp.scopes.append(_IfScope(_compiled_value("BeginIf", "condition", condition), value_id))


def enter_branch_body(true_branch: bool) -> None:
    """Starts the body of the true or the false branch of the innermost begin_if (ending the
    other branch's body if it is open)."""
    comp = current_computation()
    scope = _innermost(comp, _IfScope, "EnterBranchBody")
    branch = bool(true_branch)
    if branch in scope.bodies or branch == scope.branch:
        raise invalid("EnterBranchBody", f"the {str(branch).lower()} branch of {scope} was "
                      "entered before; expected each branch once")
    if scope.branch is not None:
        scope.bodies[scope.branch] = comp.close_body(scope.outputs[scope.branch])
    comp.open_body()
    scope.branch = branch


def end_if(value_ids=None) -> list[Value]:
    """Ends the innermost begin_if: one value per result its branches named, the true
    branch's when the condition holds, else the false branch's. A branch never entered has
    no results."""
    comp = current_computation()
    scope = _innermost(comp, _IfScope, "EndIf")
    if scope.branch is not None:
        scope.bodies[scope.branch] = comp.close_body(scope.outputs[scope.branch])
    for branch in (True, False):
        if branch not in scope.bodies:
            comp.open_body()
            scope.bodies[branch] = comp.close_body([])
    comp.scopes.pop()
    counts = {branch: len(outputs) for branch, outputs in scope.outputs.items()}
    if counts[True] != counts[False]:
        raise invalid("EndIf", f"the true branch of {scope} names {counts[True]} results and the "
                      f"false branch {counts[False]}; expected the same number")
    attrs = {"branches": (scope.bodies[True], scope.bodies[False])}
    return comp.apply("If", {"condition": scope.condition}, attrs,
                      _ids("EndIf", value_ids, scope.value_id))


def begin_loop(trip_count: Value | None, value_id: str | None = None) -> None:
    """Opens a loop body run at most ``trip_count`` (a one-element integer value; None: no
    limit) times; ``value_id`` names its results when end_loop is given no ids.

        begin_loop(trip_count)
        total = create_loop_variable(zeros)        # the loop's state inside its body
        set_value_as_output(odla.add(total, x))    # the state's value in the next iteration
        last, history = end_loop(None, [total], [LoopOutputMode.FWD_AFTER])

    The body gives one next value per loop variable, in the order the variables were created.
    The loop stops after ``trip_count`` iterations, or after the first iteration whose
    ``condition`` (a value of the body, given to end_loop) is false.
    """
    comp = current_computation()
    if trip_count is not None:
        _compiled_value("BeginLoop", "trip_count", trip_count)
    comp.scopes.append(_LoopScope(trip_count, value_id))
    comp.open_body()


def create_loop_variable(init_value: Value, value_id: str | None = None) -> Value:
    """A state of the innermost loop, ``init_value`` (a value from outside the loop) in the
    first iteration; the body names its next value with set_value_as_output."""
    comp = current_computation()
    scope = _innermost(comp, _LoopScope, "CreateLoopVariable")
    init_value = _compiled_value("CreateLoopVariable", "init_value", init_value)
    variable = comp.add_loop_variable(init_value, value_id)
    scope.loop_variables.append(variable)
    scope.initial_values.append(init_value)
    return variable


def end_loop(condition: Value | None, output_values, flags=None, value_ids=None) -> list[Value]:
    """Ends the innermost loop. For each of ``output_values`` (its loop variables) returns the
    value after the last iteration, and, where its flag (a LoopOutputMode; None: all
    LAST_VALUE) is another mode, then the values of every iteration stacked along a new
    first axis. ``condition``: a one-element value of the body, false to stop; None: run
    ``trip_count`` times."""
    comp = current_computation()
    scope = _innermost(comp, _LoopScope, "EndLoop")
    outputs = list(output_values)
    flags = [LoopOutputMode.LAST_VALUE] * len(outputs) if flags is None else [
        odla_enum(LoopOutputMode, f, "EndLoop: flag") for f in flags]
    if len(flags) != len(outputs):
        raise invalid("EndLoop", f"{len(flags)} flags for {len(outputs)} output values; "
                      "expected one flag per output value")
    indices = []
    for value in outputs:
        matches = [i for i, v in enumerate(scope.loop_variables) if v is value]
        if not matches:
            raise invalid("EndLoop", f"output value {getattr(value, 'id', value)!r} is not a loop "
                          f"variable of {scope}; expected values made by create_loop_variable")
        indices.append(matches[0])
    if len(scope.next_values) != len(scope.loop_variables):
        raise invalid("EndLoop", f"{scope} has {len(scope.loop_variables)} loop variables and its "
                      f"body names {len(scope.next_values)} next values; expected one per loop "
                      "variable, in the order the variables were created")
    if condition is not None:
        checked(condition, Value, "EndLoop: condition", "an odla Value or None")
        if not comp.is_visible(condition):
            raise invalid("EndLoop", f"condition {condition.id!r} belongs to a body that has ended; "
                          "expected a value of the loop's body or from outside it")
    results = scope.next_values + ([condition] if condition is not None else [])
    body = comp.close_body(results, scope.loop_variables)
    comp.scopes.pop()
    attrs = {"loop_variables": [v.handle for v in scope.loop_variables], "body": body,
             "has_condition": condition is not None,
             "outputs": [(i, flag.name) for i, flag in zip(indices, flags)]}
    return comp.apply("Loop", {"trip_count": scope.trip_count}, attrs,
                      _ids("EndLoop", value_ids, scope.value_id),
                      variadic=tuple(scope.initial_values))
