"""Suite-wide settings: the engine cache is off unless a test turns it on (tests/
test_engine_cache.py does, with its own directory), so each test compiles what it tests and
nothing is written to the user's cache. And the two tiers: the tests that compile real models,
build oneDNN regions or C programs, tune or cross-compile are marked `slow`, by file
(SLOW_FILES) or by the fixture they use (SLOW_FIXTURES), so that the tests added there are too;
`scripts/test.sh --quick` leaves them out."""

import os

import pytest

os.environ.setdefault("ODLA_TVM_ENGINE_CACHE", "0")

# Files whose every test is slow.
SLOW_FILES = {
    "test_tuning.py", "test_rpc_tuning.py", "test_tune_defaults.py",  # tuning
    "test_export.py",  # bundles, odla_runner built and cross-built, run under qemu
    "test_onednn.py", "test_quantized_int8.py",  # oneDNN regions built, real models
    "test_conformance_subset.py",  # onnx's light models
    "test_builder.py",  # tuning's candidate builders
    "test_cuda_target.py",  # CUDA builds of models, a cuda bundle with its runner
    "test_runner_checks.py",  # odla_runner built
    "test_c_api_halo.py", "test_c_api_ops.py", "test_c_api_executables.py",  # C programs
    "test_c_sanitized.py", "test_fuzz_readers.py",  # C built under ASan/UBSan
    "test_rpc_server_safety.py",  # odla_rpc_server built
    "test_onednn_int8.py", "test_onednn_int8_fused.py",  # oneDNN regions built
    "test_onednn_bf16.py", "test_thread_pool.py",  # oneDNN regions and C programs built
    "test_bench_int8.py", "test_bench_precision.py", "test_scenarios.py",  # benches of models
}
# Fixtures that make what is slow to make: every test using one is slow.
SLOW_FIXTURES = {
    "generated_cnn",  # test_c_api: a CNN built and run by a C++ program
    "gradient_check", "trained_mlp",  # test_training: every op's gradient, a trained MLP
    "seeds",  # test_fuzz: the seed files of every format, models compiled and bundled
}


def _further_case(item) -> bool:
    """Whether item is a parametrized test's case other than its first: the quick tier runs
    each test function once, on its first case."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(callspec.indices.values())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if (item.path.name in SLOW_FILES or SLOW_FIXTURES.intersection(item.fixturenames)
                or _further_case(item)):
            item.add_marker(pytest.mark.slow)
