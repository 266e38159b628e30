"""Test and development tooling, not installed with odla-tvm: the fuzzing campaign, the ONNX
conformance harness, and the process isolation both run their cases in. It imports the
library; the library never imports it (scripts/import_graph.py checks)."""
