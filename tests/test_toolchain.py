"""How toolchain loads TVM: TVMScript's parser reads the calling frames through
toolchain.calling_frames, which must give it what inspect.stack() gives."""

import importlib
import inspect
import sys

import numpy as np
import tvm

import toolchain

_PARSED = '''
from __future__ import annotations

from tvm.script import ir as I
from tvm.script import tirx as T


def filled(n, value):
    dtype = "float32"  # named only in an annotation: PEP 563 hides it from the closure

    @T.prim_func
    def fill(a: T.Buffer((n,), dtype)):
        for i in range(n):
            a[i] = T.float32(value)

    return fill


@I.ir_module
class Module:
    @T.prim_func
    def ones(a: T.Buffer((4,), "float32")):
        for i in range(4):
            a[i] = T.float32(1)
'''


def _frames_seen(frames):
    # What TVMScript reads of them (filename it does not: inspect's may be normalized)
    return [(info.frame, info.lineno, info.function, info.code_context, info.index)
            for info in frames]


def test_calling_frames_are_inspects_stack_as_tvmscript_reads_it():
    def nested():
        return toolchain.calling_frames(), inspect.stack()  # one line: the same caller's line

    ours, theirs = nested()
    assert len(ours) == len(theirs) > 3
    assert _frames_seen(ours) == _frames_seen(theirs)
    assert ours[0].function == "nested" and "calling_frames" in ours[0].code_context[0]


def test_tvmscripts_decorators_read_the_frames_through_calling_frames():
    toolchain.load_compiler()  # what the compile side does first (tvm imported directly here)
    for name in toolchain.TVMSCRIPT_ENTRIES:
        module = importlib.import_module(name)
        assert module.inspect.stack is toolchain.calling_frames, name
        assert module.inspect.isfunction is inspect.isfunction, name  # the rest is inspect's


def test_tvmscript_still_finds_closure_names_and_an_enclosing_module(tmp_path, monkeypatch):
    (tmp_path / "parsed_here.py").write_text(_PARSED)
    monkeypatch.syspath_prepend(str(tmp_path))
    parsed = importlib.import_module("parsed_here")
    try:
        fill = parsed.filled(6, 2.5)  # parsing fails where dtype is not found
        assert isinstance(parsed.Module, tvm.IRModule)
        assert [gv.name_hint for gv in parsed.Module.get_global_vars()] == ["ones"]
        for func, size, expected in ((fill, 6, 2.5), (parsed.Module["ones"], 4, 1.0)):
            built = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}),
                                target="llvm")
            out = tvm.runtime.tensor(np.zeros(size, "float32"))
            built["main"](out)
            np.testing.assert_array_equal(out.numpy(), np.full(size, expected, "float32"))
    finally:
        sys.modules.pop("parsed_here", None)
