"""What codegens share: a region's composite calls in order (composite_steps), and C++
source compiled into a module export_library links (static_library)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tvm
from tvm import relax

import toolchain


@dataclass(frozen=True)
class Step:
    """One composite call in a region, in the order the region computes them."""

    composite: str  # the pattern's name
    calls: tuple[relax.Call, ...]  # the composite's op calls in order (their .op.name, .attrs)
    inputs: tuple[tuple[str, int], ...]  # ("param", i) of the region or ("step", j) before it
    output: relax.TensorType
    # Per call, where each argument comes from: ("input", k) the step's k-th input, ("call", j)
    # the j-th call's result, ("other", -1) anything else (a constant, a shape); a Tuple
    # argument (concat's) as the tuple of its fields' sources. Patterns match commutative ops
    # either way round, and a composite takes a repeated operand once, so a codegen needs this
    # to tell its operands apart.
    arguments: tuple[tuple[tuple[str, int], ...], ...] = ()


def composite_steps(region: relax.Function) -> tuple[list[Step], list[tuple[str, int]]]:
    """The steps of a region made by MergeCompositeFunctions, and what it returns (operands
    as in Step.inputs). Raises ValueError for a binding that is not a composite call."""
    operands: dict[relax.Var, tuple[str, int]] = {p: ("param", i) for i, p in enumerate(region.params)}
    composites: dict[relax.Var, relax.Function] = {}
    steps: list[Step] = []
    for block in region.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Function):
                composites[binding.var] = value
            elif isinstance(value, relax.Call) and value.op in composites:
                inner = composites[value.op]
                calls, arguments = _op_calls(inner)
                steps.append(Step(str(inner.attrs["Composite"]), tuple(calls),
                                  tuple(operands[a] for a in value.args), binding.var.ty,
                                  tuple(arguments)))
                operands[binding.var] = ("step", len(steps) - 1)
            elif isinstance(value, relax.Var):
                operands[binding.var] = operands[value]
            else:
                raise ValueError(f"region {region.attrs['global_symbol']}: unexpected binding "
                                 f"{binding.var.name} = {value}")
    body = region.body.body
    results = body.fields if isinstance(body, relax.Tuple) else [body]
    return steps, [operands[r] for r in results]


def _op_calls(composite: relax.Function) -> tuple[list[relax.Call], list[tuple]]:
    """The composite's op calls in order, and per call where its arguments come from."""
    sources: dict[relax.Var, tuple[str, int]] = {p: ("input", i)
                                                 for i, p in enumerate(composite.params)}
    calls, arguments = [], []

    def source(argument):
        if isinstance(argument, relax.Tuple):
            return tuple(source(f) for f in argument.fields)
        return sources.get(argument, ("other", -1))

    for block in composite.body.blocks:
        for binding in block.bindings:
            if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op):
                calls.append(binding.value)
                arguments.append(tuple(source(a) for a in binding.value.args))
                sources[binding.var] = ("call", len(calls) - 1)
    return calls, arguments


def static_library(source: str, function_names: Sequence[str],
                   flags: Sequence[str] = (), headers: Sequence[str] = ()) -> tvm.runtime.Module:
    """A runtime module of the functions ``source`` exports (TVM_FFI_DLL_EXPORT_TYPED_FUNC),
    which export_library links into the model's shared library; ``headers`` as for
    toolchain.compile_object."""
    return tvm.runtime.load_static_library(toolchain.compile_object(source, flags, headers=headers),
                                           list(function_names))
