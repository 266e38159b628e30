"""Where tuning builds its candidates, and how: MetaSchedule's LocalBuilder with its worker
processes kept from one batch to the next, and the build and export functions they run.

LocalBuilder starts a new pool of processes for every batch it builds (for a leak in the
workers, TVM's comment says), and each new worker imports TVM and targets before its first
candidate, seconds a batch where the round-robin phase asks a batch of each kernel in turn.
Here the workers stay, each started afresh after BUILDS_PER_WORKER candidates, so a leak
stays bounded."""

from __future__ import annotations

import os
import tempfile

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderInput, BuilderResult, PyBuilder
from tvm.s_tir.meta_schedule.builder import local_builder
from tvm.support.popen_pool import MapResult, PopenPoolExecutor, StatusKind

from ..compiler import codegen

BUILDS_PER_WORKER = 256


@derived_object
class KeptPoolBuilder(PyBuilder):
    """Builds candidates as LocalBuilder does (``f_build`` then ``f_export`` in a worker
    process, None: MetaSchedule's defaults; ``timeout_sec`` a candidate), in ``workers``
    processes kept until ``shutdown``."""

    def __init__(self, f_build=None, f_export=None, timeout_sec: float = 60.0,
                 workers: int = 1) -> None:
        super().__init__()
        self.f_build, self.f_export, self.timeout_sec = f_build, f_export, timeout_sec
        self.pool = PopenPoolExecutor(max_workers=workers, timeout=timeout_sec,
                                      maximum_process_uses=BUILDS_PER_WORKER)

    def build(self, build_inputs: list[BuilderInput]) -> list[BuilderResult]:
        jobs = [(self.f_build, self.f_export, job.mod, job.target,
                 local_builder._serialize_params(job.params)) for job in build_inputs]
        return [self._result(outcome) for outcome in self.pool.map_with_error_catching(
            lambda job: local_builder._worker_func(*job), jobs)]

    def _result(self, outcome: MapResult) -> BuilderResult:
        """LocalBuilder's result and messages for a worker's outcome."""
        if outcome.status == StatusKind.COMPLETE:
            return BuilderResult(outcome.value, None)
        if outcome.status == StatusKind.TIMEOUT:
            return BuilderResult(None, f"LocalBuilder: Timeout, killed after "
                                       f"{self.timeout_sec} seconds")
        return BuilderResult(None, f"LocalBuilder: An exception occurred\n{outcome.value}")

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False)


def export_shared(mod, compiler: str | None) -> str:
    """A built candidate as a shared library for an RPC server, linked here (with ``compiler``,
    a cross compiler, for another architecture): MetaSchedule's default export, an archive of
    objects, needs a compiler on the server, and a board has none."""
    from tvm.support import cc

    path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
    mod.export_library(path, fcompile=cc.cross_compiler(compiler) if compiler else cc.create_shared)
    return path


def build_candidate(mod, target, _params):
    """MetaSchedule's default_build without its import of every tensor intrinsic (slow in each
    builder process); a candidate reaches the builder with any tensorization already applied.
    Compiled as builds compile it (targets.compiler.codegen: register tiles on the stack), so
    that it is timed as it will run."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return codegen.build_kernels(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod),
                                 target)
