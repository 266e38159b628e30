"""The lowest layer: the host's compiler, TVM's loading, the cache folder."""

from .tvm_loader import (TVMSCRIPT_ENTRIES, ToolchainMissing, cache_dir, calling_frames,
                         compile_object, load_tvm)
