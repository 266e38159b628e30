"""``odla-tvm bench``: ODLA-TVM's latency, load time and memory against onnxruntime and
OpenVINO on ONNX models, each path timed in a process of its own, and ODLA's cost per call."""
