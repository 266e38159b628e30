"""Builds one Relax function op by op, inferring each result's type as it is added."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from toolchain.relax_ir import computed_constant

from . import composites, emitters  # noqa: F401  (emitters: registers every emitter)
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


def constant(array: np.ndarray) -> relax.Constant:
    """``array`` as a Relax constant of exactly its dtype, copied once (a strided array too).
    relax.const given an array copies it twice (astype, then its own copy) and narrows int64
    and float64 to int32 and float32."""
    array = np.asarray(array)
    return computed_constant(array.shape, str(array.dtype), lambda out: np.copyto(out, array))


def dtype_of(expr: relax.Expr) -> str:
    return str(expr.ty.dtype)


class Emitter:
    """What an emitter binds Relax through: ``emit(expr)`` binds one expression and returns
    its variable; the methods bind what one Relax expression cannot say by itself."""

    def __init__(self, graph: GraphBuilder, hint: str):
        self._graph = graph
        self._hint = hint

    def __call__(self, expr: relax.Expr) -> relax.Var:
        return self._graph._emit(expr, self._hint)

    @property
    def value_id(self) -> str:
        """The ODLA value id of the op being lowered, for messages."""
        return self._hint

    def te(self, te_func, *args, **kwargs) -> relax.Var:
        """Binds ``te_func(*args, **kwargs)``, Relax tensors among ``args`` turned into TE
        tensors, as a call_tir of a new PrimFunc: for computations Relax has no op for."""
        return self(self._graph._normalizer.call_te(te_func, *args, **kwargs))

    def tir(self, name: str, prim_func: tirx.PrimFunc, args: list, out_ty) -> relax.Var:
        """Binds a call_tir of a hand-written ``prim_func`` writing tensors of type ``out_ty``
        (a TensorType, or a list of them for a tuple)."""
        gv = self._graph._normalizer.add_func(prim_func, name)
        return self(relax.call_tir(gv, args, out_ty))

    def extern(self, name: str, modules: list, args: list, out_ty) -> relax.Var:
        """Binds a call of function ``name`` exported by ``modules`` (runtime modules that
        export_library links into the model), writing tensors of type ``out_ty``."""
        self._graph._external_modules.extend(m for m in modules
                                             if m not in self._graph._external_modules)
        return self(relax.call_dps_packed(relax.ExternFunc(name), args, out_ty))

    def with_shape(self, expr: relax.Expr, dims=None) -> relax.Var:
        """``expr`` bound with a shape TVM can lower: a match_cast to ``dims`` (those known;
        None for one known at run time only), unknown dims becoming fresh symbolic dims, so
        ops that need a shape can follow."""
        return self._graph._with_shape(self(expr), dims)

    def body(self, build) -> relax.SeqExpr:
        """A nested body (a branch, a function's): what ``build()`` emits, yielding the tuple
        of the expressions it returns."""
        self._graph.open_scope()
        try:
            results = build()
        except BaseException:
            self._graph.close_scope([])
            raise
        return self._graph.close_scope(results)

    def inline(self, body: relax.SeqExpr) -> list[relax.Expr]:
        """Emits the bindings of a body made by ``body`` or ``close_scope`` here, and returns
        the expressions it yields."""
        self._graph._bindings += [b for block in body.blocks for b in block.bindings]
        return list(body.body.fields)

    def declare_function(self, name: str, ty: relax.FuncType) -> relax.GlobalVar:
        """A module-level Relax function of type ``ty``, callable (even by itself, for
        recursion) before ``define_function`` gives its body."""
        gv = relax.GlobalVar(self._graph._fresh_name(name))
        relax.expr._update_type(gv, ty)
        return gv

    def define_function(self, gv: relax.GlobalVar, func: relax.Function) -> None:
        self._graph._functions[gv] = func


class GraphBuilder:
    """Accumulates the bindings of one computation; ``build`` turns them into an IRModule.

    Bindings are kept in a plain list rather than an open BlockBuilder scope, so a
    computation can be built, extended with more ops and built again. Branch and loop
    bodies are nested scopes (``open_scope``/``close_scope``): their bindings become a
    body expression, and their variables are invisible once the scope is closed.
    """

    def __init__(self):
        self._normalizer = relax.BlockBuilder()  # also holds the PrimFuncs emitters add
        self._bindings: list[relax.Binding] = []
        self._enclosing: list[list[relax.Binding]] = []  # bindings of the scopes around this one
        self._closed: set[relax.Var] = set()  # variables of closed scopes
        self._functions: dict[relax.GlobalVar, relax.Function] = {}
        self._external_modules: list = []  # compiled code that extern calls need
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

    def variable_like(self, name: str, expr: relax.Expr) -> relax.Var:
        """A new variable of ``expr``'s type, symbolic dims included: a loop's state, bound
        to ``expr`` in the first iteration."""
        return relax.Var(self._fresh_name(name), expr.ty)

    @staticmethod
    def constant(array: np.ndarray) -> relax.Constant:
        return constant(array)

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
        closed = [x for x in inputs if x in self._closed]
        if closed:
            raise LoweringError(
                f"{op_name} ({name}): operand {closed[0].name} belongs to a branch or loop "
                "body that has ended; expected a value visible here"
            )
        start = len(self._bindings)
        try:
            result = emitter(Emitter(self, name), *inputs, **attrs)
            results = result if isinstance(result, (list, tuple)) else [result]
            outputs = [self._with_shape(self._emit(r, name)) for r in results]
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

    def _with_shape(self, var: relax.Var, dims=None) -> relax.Var:
        """``var``, or when it is a tensor or shape of known rank but unknown dims (a
        data-dependent result) a match_cast of it to ``dims`` (None: all unknown), each
        unknown one a fresh symbolic dim: what shape inference and lowering need."""
        ty = var.ty
        if isinstance(ty, relax.TensorType) and ty.shape is None and ty.ndim >= 0:
            def make_ty(dims):
                return relax.TensorType(dims, ty.dtype)
        elif isinstance(ty, relax.ShapeType) and ty.values is None and ty.ndim >= 0:
            make_ty = relax.ShapeType
        else:
            return var
        cast_name = self._fresh_name(var.name)
        dims = [None] * ty.ndim if dims is None else dims
        cast = relax.Var(cast_name, make_ty(
            [tirx.Var(f"{cast_name}_dim{i}", "int64") if d is None else d
             for i, d in enumerate(dims)]))
        self._bindings.append(relax.MatchCast(cast, var, cast.ty))
        return cast

    # -- nested scopes: branch and loop bodies --------------------------------------------
    def open_scope(self) -> None:
        """Starts a body: bindings go to it until ``close_scope``."""
        self._enclosing.append(self._bindings)
        self._bindings = []

    def close_scope(self, results: list[relax.Expr], params=()) -> relax.SeqExpr:
        """Ends the innermost body and returns it as an expression yielding the tuple of
        ``results``; its variables and ``params`` are invisible from now on."""
        if not self._enclosing:
            raise LoweringError("no branch or loop body is open")
        bindings, self._bindings = self._bindings, self._enclosing.pop()
        self._closed.update(b.var for b in bindings)
        self._closed.update(params)
        return relax.SeqExpr([relax.BindingBlock(bindings)], relax.Tuple(list(results)))

    def is_visible(self, expr: relax.Expr) -> bool:
        return expr not in self._closed

    def build(self, params: list[relax.Var], outputs: list[relax.Expr],
              bound: dict | None = None) -> tvm.IRModule:
        """An IRModule whose ``main`` takes ``params`` and returns a tuple of ``outputs``;
        ``bound`` maps further inputs to the arrays they are fixed to."""
        if self._enclosing:
            raise LoweringError("a branch or loop body is still open; close it before building")
        bound = bound or {}
        used = _reachable(self._bindings, outputs)
        bindings = [b for b in self._bindings if b.var in used]
        result = self._normalizer.normalize(relax.Tuple(list(outputs)))
        body = relax.SeqExpr([relax.BindingBlock(bindings)], result)
        func = relax.Function(list(params) + list(bound), body, result.ty)
        if bound:
            func = func.bind_params({var: self.constant(data) for var, data in bound.items()})
        func = func.with_attr("global_symbol", "main")
        functions = {**self._normalizer.get().functions, **self._functions}
        mod = tvm.IRModule({"main": func, **functions})
        # Drops the kernels and functions of ops that the outputs do not need.
        mod = relax.transform.DeadCodeElimination(["main"])(mod)
        mod = composites.recognize(relax.transform.Normalize()(mod))
        if self._external_modules:
            mod = mod.with_attr("external_mods", list(self._external_modules))
        return relax.transform.ConvertToDataflow()(mod)


def _reachable(bindings: list[relax.Binding], outputs: list[relax.Expr]) -> set:
    """Variables the outputs depend on, directly or through the symbolic dims that a
    match_cast defines, so ops the outputs do not need are not compiled."""
    producers = {b.var: b.value for b in bindings}
    dim_sources: dict = {}  # symbolic dim -> the match_cast variable that defines it
    for b in bindings:
        if isinstance(b, relax.MatchCast):
            for dim in relax.analysis.tir_vars_in_type(b.var.ty):
                dim_sources.setdefault(dim, b.var)
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
        dims = list(relax.analysis.free_symbolic_vars(producers[var]))
        dims += relax.analysis.tir_vars_in_type(var.ty)
        stack.extend(dim_sources[d] for d in dims if d in dim_sources)
    return needed
