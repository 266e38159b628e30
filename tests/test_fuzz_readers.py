"""A bounded run of the readers' fuzz target (tools/fuzz_readers.py: mutated stored files and
bundles parsed by libodla's reader built with AddressSanitizer and UndefinedBehaviorSanitizer,
each in a child process): no crash, hang or sanitizer report; some cases accepted, most
refused. A longer run: python -m tools.fuzz_readers --count 100000."""

import shutil

import pytest

from tools import fuzz_readers

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the target builds with g++")


def test_mutated_stored_files_and_bundles_never_crash_the_reader(tmp_path):
    outcome = fuzz_readers.run(count=600, seed=7, out=tmp_path / "findings")
    assert outcome.findings == []
    assert outcome.cases == 600 == outcome.accepted + outcome.refused
    assert outcome.accepted > 0 and outcome.refused > outcome.accepted


def test_the_seeds_are_accepted_as_they_are(tmp_path):
    program = fuzz_readers.build_harness()
    child = fuzz_readers.Child(program, timeout=30)
    try:
        assert child.ask(fuzz_readers.CORPUS / "seed.odla") == "ok", child.report()
        assert child.ask(fuzz_readers.CORPUS / "bundle") == "ok", child.report()
        assert child.ask(tmp_path / "missing.odla") == "refused 2"
    finally:
        child.close()
