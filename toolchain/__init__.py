"""The lowest layer, below relay_bridge and targets, knowing neither: TVM's loading
(tvm_loader), the host's C and C++ compiler (compiler), the cache folder (cache).

Importing it loads TVM, with torch hidden, before anything above imports TVM."""

from .tvm_loader import (TVMSCRIPT_ENTRIES, calling_frames, load_tvm,
                         tvmscript_reads_frames_cheaply)

load_tvm()
tvmscript_reads_frames_cheaply()

# After load_tvm: tvm_ffi imports torch when it is installed and not hidden.
from .cache import cache_dir  # noqa: E402
from .compiler import ToolchainMissing, compile_object  # noqa: E402
