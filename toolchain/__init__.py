"""The lowest layer, below relay_bridge and targets, knowing neither: TVM's loading
(tvm_loader), the host's C and C++ compiler (compiler), the cache folder (cache), installed
packages' versions (versions).

Importing it loads nothing of TVM: the run side calls load_tvm_ffi (toolchain.tensors does)
at its first use, the compile side load_compiler."""

from .tvm_loader import (TVMSCRIPT_ENTRIES, calling_frames, compiling_attributes, load_compiler,
                         load_tvm, load_tvm_ffi, tvmscript_reads_frames_cheaply,
                         when_tvm_ffi_loads)
from .cache import cache_dir
from .compiler import ToolchainMissing, compile_object, shared_library
from .versions import distribution_version
