"""Builds one Relax function op by op, inferring each result's type as it is added."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from . import emitters  # noqa: F401  (registers every emitter)
from .errors import LoweringError
from .registry import EMITTERS

DYNAMIC_DIM = -1


def shape_of(expr: relax.Expr) -> tuple[int, ...]:
    """Static shape of a tensor expression, -1 for a dim known only at run time."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        raise LoweringError(f"{expr} is not a tensor of known rank")
    return tuple(
        int(d) if isinstance(d, tirx.IntImm) else DYNAMIC_DIM for d in ty.shape.values
    )


def dtype_of(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)


class GraphBuilder:
    """Accumulates the bindings of one computation; ``build`` turns them into an IRModule.

    Bindings are kept in a plain list rather than an open BlockBuilder scope, so a
    computation can be built, extended with more ops and built again.
    """

    def __init__(self):
        self._normalizer = relax.BlockBuilder()
        self._bindings: list[relax.VarBinding] = []
        self._next_id = 0
        self.origins: dict[str, str] = {}  # binding name -> the op's name (its ODLA value id)

    def _fresh_name(self, hint: str) -> str:
        self._next_id += 1
        cleaned = "".join(c if c.isalnum() else "_" for c in hint) or "v"
        name = f"{cleaned}_{self._next_id}" if not cleaned[0].isdigit() else f"v{cleaned}_{self._next_id}"
        self.origins[name] = hint
        return name

    def input(self, name: str, shape: tuple[int, ...], dtype: str) -> relax.Var:
        """A function parameter; each -1 dim becomes its own symbolic dim."""
        var_name = self._fresh_name(name)
        dims = [
            tirx.Var(f"{var_name}_dim{i}", "int64") if d == DYNAMIC_DIM else d
            for i, d in enumerate(shape)
        ]
        return relax.Var(var_name, relax.TensorType(dims, dtype))

    @staticmethod
    def constant(array: np.ndarray) -> relax.Constant:
        # np.ascontiguousarray would make a scalar 1-d; an explicit dtype keeps int64 and
        # float64 from being narrowed.
        return relax.const(np.require(array, requirements="C"), str(array.dtype))

    def _emit(self, expr: relax.Expr, hint: str = "t") -> relax.Var:
        if isinstance(expr, relax.Var):
            return expr
        normalized = self._normalizer.normalize(expr)
        var = relax.Var(self._fresh_name(hint), normalized.ty)
        self._bindings.append(relax.VarBinding(var, normalized))
        return var

    def apply(self, op_name: str, inputs: list, attrs: dict, name: str) -> list[relax.Var]:
        """Lower ODLA op ``op_name`` and return its result variables (one per output)."""
        emitter = EMITTERS.get(op_name)
        if emitter is None:
            raise LoweringError(f"ODLA op {op_name!r} has no lowering to Relax")
        start = len(self._bindings)
        try:
            result = emitter(lambda e: self._emit(e, name), *inputs, **attrs)
            results = result if isinstance(result, (list, tuple)) else [result]
            outputs = [self._emit(r, name) for r in results]
            for out in outputs:
                if any(isinstance(d, tirx.IntImm) and int(d) < 0 for d in out.ty.shape.values):
                    raise LoweringError(f"result shape {out.ty.shape} has a negative dim")
        except LoweringError as err:
            del self._bindings[start:]
            raise LoweringError(f"{op_name} ({name}): {err}") from None
        except (RuntimeError, ValueError, TypeError, IndexError) as err:  # how TVM reports bad IR
            del self._bindings[start:]
            detail = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            raise LoweringError(f"{op_name} ({name}): {detail}") from None
        return outputs

    def build(self, params: list[relax.Var], outputs: list[relax.Expr],
              bound: dict | None = None) -> tvm.IRModule:
        """An IRModule whose ``main`` takes ``params`` and returns a tuple of ``outputs``;
        ``bound`` maps further inputs to the arrays they are fixed to."""
        bound = bound or {}
        used = _reachable(self._bindings, outputs)
        bindings = [b for b in self._bindings if b.var in used]
        result = self._normalizer.normalize(relax.Tuple(list(outputs)))
        body = relax.SeqExpr([relax.BindingBlock(bindings)], result)
        func = relax.Function(list(params) + list(bound), body, result.ty)
        if bound:
            func = func.bind_params({var: self.constant(data) for var, data in bound.items()})
        func = func.with_attr("global_symbol", "main")
        mod = tvm.IRModule({"main": func})
        mod = relax.transform.Normalize()(mod)
        return relax.transform.ConvertToDataflow()(mod)


def _reachable(bindings: list[relax.VarBinding], outputs: list[relax.Expr]) -> set:
    """Variables the outputs depend on, so ops the outputs do not need are not compiled."""
    producers = {b.var: b.value for b in bindings}
    needed: set = set()
    stack = [o for o in outputs if isinstance(o, relax.Var)]
    while stack:
        var = stack.pop()
        if var in needed or var not in producers:
            continue
        needed.add(var)
        relax.analysis.post_order_visit(
            producers[var], lambda e: stack.append(e) if isinstance(e, relax.Var) else None
        )
    return needed
