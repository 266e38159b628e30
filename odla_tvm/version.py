from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("odla-tvm")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.1.0+source"
