"""Vector math: LLVM expands exp, erf, tanh and sigmoid of a vector into one libm call per
lane, so the scheduled kernels compute them (and sinh, cosh) by float32 polynomials that
vectorize, accurate to a few units in the last place (checked in the tests); float16 ones
compute in float32. TVM cannot vectorize its own isnan, so float32 isnan becomes a test of
its bits. Other functions (log, sin, ...) keep LLVM's lowering: correct, one call per lane."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .primitives import RULE_ATTR


def _f32(value: float):
    return tirx.const(value, "float32")


def _horner(x, coefficients):
    result = _f32(coefficients[0])
    for c in coefficients[1:]:
        result = result * x + _f32(c)
    return result


def _is_nan(x):
    """Whether float32 ``x`` is a NaN (its exponent all ones, its mantissa not 0), as bits:
    TVM's vectorizer cannot vectorize its own isnan, and scalarized every loop with one
    inside a parallel loop (every exp, erf, tanh and sigmoid of a kernel then ran a lane at
    a time)."""
    bits = tirx.reinterpret("int32", x)
    return (tirx.bitwise_and(bits, tirx.const(0x7FFFFFFF, "int32"))
            > tirx.const(0x7F800000, "int32"))


def _nan_kept(x, value):
    return tirx.Select(_is_nan(x), x, value)


_EXP_LOW, _EXP_HIGH = -87.33654475055310, 88.72283905206835  # ln(FLT_MIN), ln(FLT_MAX)


def _exp_within(c, past_127: bool):
    """Cephes' expf of ``c`` in [_EXP_LOW, _EXP_HIGH]: c = n ln2 + r (ln2 in two parts), exp(r)
    by a degree-7 polynomial, 2^n from the exponent bits. ``past_127``: c may exceed 88.03,
    so n may be 128, past what one exponent holds: 2^n as 2^(n // 2) 2^(n - n // 2)."""
    n = tirx.floor(c * _f32(1.44269504088896341) + _f32(0.5))
    r = c - n * _f32(0.693359375) + n * _f32(2.12194440e-4)
    p = _horner(r, (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                    1.6666665459e-1, 5.0000001201e-1))
    y = p * r * r + r + _f32(1.0)
    n = tirx.Cast("int32", n)
    if not past_127:
        return y * _power_of_two(n)
    low = tirx.shift_right(n, tirx.const(1, "int32"))
    return y * _power_of_two(low) * _power_of_two(n - low)


def _exp(x):
    """expf: 0 below ln(FLT_MIN) (no denormals), inf above ln(FLT_MAX)."""
    value = _exp_within(tirx.max(tirx.min(x, _f32(_EXP_HIGH)), _f32(_EXP_LOW)), past_127=True)
    value = tirx.Select(x < _f32(_EXP_LOW), _f32(0.0), value)
    return _nan_kept(x, tirx.Select(x > _f32(_EXP_HIGH), _f32(float("inf")), value))


def _power_of_two(n):
    """2^n for an int32 n in [-126, 127], from the exponent bits."""
    return tirx.reinterpret("float32", tirx.shift_left(n + tirx.const(127, "int32"),
                                                       tirx.const(23, "int32")))


def _unit(value):
    return tirx.max(tirx.min(value, _f32(1.0)), _f32(-1.0))


def _erf(x):
    """Eigen's float erf: a rational function of x on [-4, 4] (erf is +-1 in float32 beyond)."""
    c = tirx.max(tirx.min(x, _f32(4.0)), _f32(-4.0))
    c2 = c * c
    p = c * _horner(c2, (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
                         -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
                         -1.60960333262415e-02))
    q = _horner(c2, (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                     -7.37332916720468e-03, -1.42647390514189e-02))
    return _nan_kept(x, _unit(p / q))


def _tanh(x):
    """Eigen's float tanh: a rational function of x on [-9, 9] (+-1 in float32 beyond)."""
    c = tirx.max(tirx.min(x, _f32(9.0)), _f32(-9.0))
    c2 = c * c
    p = c * _horner(c2, (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                         5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                         4.89352455891786e-03))
    q = _horner(c2, (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                     4.89352518554385e-03))
    return _nan_kept(x, _unit(p / q))


def _sigmoid(x):
    """1 / (1 + e^-x), e^-x with -x held in [ln(FLT_MIN), 88]: beyond, the sigmoid is 1, or
    under FLT_MIN, either way (so no test of the bounds, and one power of two: a third fewer
    instructions than exp's, for EfficientNet's every SiLU)."""
    e = _exp_within(tirx.max(tirx.min(-x, _f32(88.0)), _f32(_EXP_LOW)), past_127=False)
    return _nan_kept(x, _f32(1.0) / (_f32(1.0) + e))


def _cosh_sinh_large(a):
    """e^a / 2 for a > 10 (e^-a no longer counts), as (e^(a/2) / 2) e^(a/2): finite wherever
    the result is."""
    half = _exp(a * _f32(0.5))
    return half * _f32(0.5) * half


def _cosh(x):
    a = tirx.abs(x)
    e = _exp(a)
    return tirx.Select(a > _f32(10.0), _cosh_sinh_large(a), _f32(0.5) * (e + _f32(1.0) / e))


def _sinh(x):
    """Taylor's series to x^11 below 1 in magnitude (the exponentials cancel there)."""
    a = tirx.abs(x)
    e = _exp(a)
    large = tirx.Select(a > _f32(10.0), _cosh_sinh_large(a), _f32(0.5) * (e - _f32(1.0) / e))
    x2 = x * x
    small = x + x * x2 * _horner(x2, (1 / 39916800, 1 / 362880, 1 / 5040, 1 / 120, 1 / 6))
    signed = tirx.Select(x < _f32(0.0), -large, large)
    return _nan_kept(x, tirx.Select(a < _f32(1.0), small, signed))


# LLVM has no vector form of sinh and cosh at all: vectorized, they would not compile.
_VECTOR_MATH = {"tirx.exp": _exp, "tirx.erf": _erf, "tirx.tanh": _tanh, "tirx.sigmoid": _sigmoid,
                "tirx.sinh": _sinh, "tirx.cosh": _cosh, "tirx.isnan": _is_nan}


def vector_math(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with float32 exp, erf, tanh, sigmoid, sinh, cosh and isnan written as
    vectorizable arithmetic; float16 ones too, computed in float32 (LLVM's own float16 exp,
    GELU and tanh are slower). Not bfloat16's: TVM's legalizing of bfloat16
    arithmetic rebinds the polynomial's variable, and the build fails."""

    def rewrite(call):
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else None
        dtype = str(call.args[0].ty)
        if name not in _VECTOR_MATH or dtype not in ("float32", "float16"):
            return call
        x = tirx.Var("x", "float32")
        argument = call.args[0] if dtype == "float32" else tirx.Cast("float32", call.args[0])
        value = tirx.Let(x, argument, _VECTOR_MATH[name](x))
        return value if str(value.ty) == str(call.ty) else tirx.Cast(str(call.ty), value)

    body = tvm_ffi.structural_map(func.body, (tvm.ir.expr.Call, rewrite), order="post")
    return func if body.same_as(func.body) else func.with_body(body)


@tvm.transform.module_pass(opt_level=0, name="CPUVectorMath")
def _vector_math_pass(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
    """vector_math on the kernels these rules scheduled (tuned kernels stay as measured)."""
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc) and func.attrs and RULE_ATTR in func.attrs:
            mod[gvar] = vector_math(func)
    return mod
