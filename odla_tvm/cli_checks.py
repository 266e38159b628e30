"""Checks of the ``odla-tvm`` command's arguments, made before a command starts its work: each
mistake raises a UsageError, a line the command prints before it exits with status 2."""

from __future__ import annotations

import os


class UsageError(Exception):
    """A mistake in the command's arguments (exit status 2, as argparse's own)."""


def check_count(value: int | None, minimum: int, option: str) -> None:
    """``option``'s integer (None: not given) is at least ``minimum``."""
    if value is not None and value < minimum:
        raise UsageError(f"{option} is {value}; expected an integer >= {minimum}")


def check_input_file(path: str, what: str) -> None:
    """``path`` is a file that can be read."""
    if not os.path.exists(path):
        raise UsageError(f"{what} {path!r} does not exist")
    if os.path.isdir(path):
        raise UsageError(f"{what} {path!r} is a directory; expected a file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{what} {path!r} cannot be read (permission denied)")


def check_model(model: str) -> None:
    """MODEL as the commands take it: a readable file, an exported bundle's directory, or
    ``package.module:function`` / ``FILE.py:function`` (checked on import)."""
    if ":" in model and not os.path.exists(model):
        return
    if os.path.isdir(model):
        if not os.path.isfile(os.path.join(model, "manifest.json")):
            raise UsageError(f"MODEL {model!r} is a directory but not an exported bundle (it "
                             "has no manifest.json); expected an ONNX file (.onnx), a stored "
                             "executable (.odla) or a bundle directory")
        return
    check_input_file(model, "MODEL")


def check_directory(path: str | None, option: str) -> None:
    """``path`` (None: not given) is a directory or can be made one."""
    if path is not None and os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is not a directory")


def check_output_file(path: str, option: str, force: bool = False, ours=None) -> None:
    """``path`` may be written: no directory, no existing file unless ``force`` or ``ours(path)``
    (a file this command wrote before), in a directory that exists or can be made."""
    if os.path.isdir(path):
        raise UsageError(f"{option} {path!r} is a directory; expected a file name")
    if os.path.lexists(path) and not force and not (ours is not None and ours(path)):
        raise UsageError(f"{option} {path!r} exists; refusing to overwrite it (give a new "
                         "path, or add --force to replace it)")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"{option} {path!r} cannot be written (permission denied)")
    check_writable_folder(path, option)


def check_writable_folder(path: str, option: str) -> None:
    """The directory ``path`` goes in exists or can be made, and can be written."""
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):  # made when written
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise UsageError(f"{option} {path!r} cannot be written: {folder!r} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path!r} cannot be written: {folder!r} is not writable")
