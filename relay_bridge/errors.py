import re


class LoweringError(ValueError):
    """An op cannot be lowered: its operands or attributes are impossible. The message
    names the op, the offending value, what was expected and what was given."""


class _RefusedData:
    """A check in compiled code refused run-time data; ``_FORM`` finds its message."""

    _FORM: re.Pattern

    @classmethod
    def message_in(cls, err: BaseException) -> str | None:
        """The message of such an error that ``err`` is or carries: TVM's thread pool
        re-raises a parallel kernel's error as a RuntimeError("Task N error: ...") that keeps
        only its text."""
        if isinstance(err, cls):
            return str(err)
        found = cls._FORM.search(str(err).split("error: ", 1)[-1])
        return found.group(0) if found else None


class DivisionByZero(_RefusedData, ArithmeticError):
    """An integer division found a zero divisor in run-time data; it stopped before the
    division (which kills the process with SIGFPE)."""

    _FORM = re.compile(r"\S.* divides by zero \(element \d+ of the divisor\)")

    @classmethod
    def of(cls, what: str, position: int) -> "DivisionByZero":
        return cls(f"{what} divides by zero (element {position} of the divisor)")


class ShapeMismatch(_RefusedData, ValueError):
    """A shape read from run-time data does not hold its input's elements; the reshape would
    read past them."""

    _FORM = re.compile(r"\S.* shape \[[-\d, ]*\] does not fit the \d+ elements of \S+")

    @classmethod
    def of(cls, what: str, requested: list, count: int, dims: list) -> "ShapeMismatch":
        return cls(f"{what}: shape {requested} does not fit the {count} elements of "
                   f"{'x'.join(str(d) for d in dims) or 'a scalar'}")


class DivisionOverflow(_RefusedData, ArithmeticError):
    """A signed integer division found the type's least value divided by -1 in run-time data:
    the quotient does not fit the type, and x86 traps on it (SIGFPE) as on a zero divisor."""

    _FORM = re.compile(r"\S.* overflows \w+: -?\d+ / -1 \(element \d+ of the result\)")

    @classmethod
    def of(cls, what: str, dtype: str, dividend: int, position: int) -> "DivisionOverflow":
        return cls(f"{what} overflows {dtype}: {dividend} / -1 (element {position} of the "
                   "result)")


class IndexOutOfRange(_RefusedData, IndexError):
    """A kernel found an index, read from run-time data, outside the tensor it addresses; it
    stopped before reading or writing there. Registered with TVM's FFI (relay_bridge.checks)
    so that the error keeps its type through the compiled code that raises it."""

    _FORM = re.compile(r"\S.* index -?\d+ \(element \d+ of the indices\) is out of range; "
                       r"expected -?\d+ to -?\d+")

    @classmethod
    def of(cls, what: str, position: int, index: int, size: int,
           negative: bool = True) -> "IndexOutOfRange":
        """The error for ``index`` at flat ``position`` of the indices of ``what`` (the op and
        its value), for a dim of ``size`` (counted from its end too where ``negative``). (The
        FFI rebuilds the error from its message.)"""
        return cls(f"{what}: index {index} (element {position} of the indices) is out of "
                   f"range; expected {-size if negative else 0} to {size - 1}")


class ValueOutOfRange(_RefusedData, ValueError):
    """A parameter read from run-time data (a slice's sizes or steps, a tile's repeats, a
    resize's sizes or scales) or a dim known at run time only (TopK's axis against its K, a
    Compress axis against its condition, NMS boxes against their scores) is outside what the
    op can compute without addressing memory outside its tensors. (Matched after
    IndexOutOfRange, whose messages read alike.)"""

    _FORM = re.compile(r"\S.* is out of range; expected .+")

    @classmethod
    def of(cls, what: str, name: str, found, allowed: str,
           position: int | None = None) -> "ValueOutOfRange":
        """The error for ``found``, the ``name`` of ``what`` (the op and its value; at flat
        ``position`` of a vector where given), ``allowed`` saying what would do."""
        where = "" if position is None else f" (element {position})"
        return cls(f"{what}: {name} {found}{where} is out of range; expected {allowed}")


# Every refusal of run-time data, in the order their messages are matched (see message_in).
REFUSED_DATA = (IndexOutOfRange, DivisionByZero, DivisionOverflow, ShapeMismatch,
                ValueOutOfRange)
