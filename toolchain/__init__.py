"""The lowest layer, below relay_bridge and targets, knowing neither: TVM's loading
(tvm_loader), the host's C and C++ compiler (compiler), the cache folder (cache).

Importing it loads apache-tvm-ffi with torch hidden, and nothing of TVM's compiler: the
compile side calls load_compiler first (relay_bridge and targets' compile modules do)."""

from .tvm_loader import (TVMSCRIPT_ENTRIES, calling_frames, compiling_attributes, load_compiler,
                         load_tvm, load_tvm_ffi, tvmscript_reads_frames_cheaply)

load_tvm_ffi()

# After load_tvm_ffi: tvm_ffi imports torch when it is installed and not hidden.
from .cache import cache_dir  # noqa: E402
from .compiler import ToolchainMissing, compile_object  # noqa: E402
