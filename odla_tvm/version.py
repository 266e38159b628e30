"""odla-tvm's version, read from its installed package's metadata at the first call:
importlib.metadata is slow to import, and a plain `import odla_tvm` needs no version."""

from functools import cache


@cache
def odla_tvm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("odla-tvm")
    except PackageNotFoundError:  # running from a source tree that was not installed
        return "0.1.0+source"
