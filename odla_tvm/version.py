"""odla-tvm's version, read from its installed package's metadata at the first call (a plain
`import odla_tvm` needs no version)."""

from toolchain import distribution_version


def odla_tvm_version() -> str:
    # None: running from a source tree that was not installed
    return distribution_version("odla-tvm") or "0.1.0+source"
