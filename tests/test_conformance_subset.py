"""A representative subset of onnx's node test cases (every op family the ONNX frontend
converts) and two light models, run through the code scripts/conformance.py runs: import,
compile and run through the ONNX backend, outputs checked against the references."""

from __future__ import annotations

import functools

import pytest

from tools import onnx_conformance as conformance

NODE_CASES = [
    # math: element-wise, broadcasting, reductions, matrix products
    "test_add_bcast", "test_where_example", "test_argmax_negative_axis_keepdims_example",
    "test_cumsum_1d_exclusive", "test_einsum_batch_matmul", "test_gemm_all_attributes",
    # nn: windows, normalizations, activations, selection, recurrent layers, losses, attention
    "test_conv_with_strides_and_asymmetric_padding", "test_convtranspose_pads",
    "test_maxpool_2d_ceil", "test_lrn", "test_layer_normalization_3d_axis1_epsilon",
    "test_group_normalization_example", "test_hardmax_axis_1", "test_top_k_smallest",
    "test_nonmaxsuppression_center_point_box_format", "test_roialign_aligned_true",
    "test_gru_seq_length", "test_tfidfvectorizer_tf_uniandbigrams_skip5", "test_sce_mean_weight",
    "test_attention_4d_gqa_with_past_and_present", "test_rotary_embedding_interleaved",
    # process: shapes, slicing, gathering, padding, resizing, casts
    "test_reshape_negative_extended_dims", "test_split_variable_parts_2d_opset18",
    "test_slice_neg_steps", "test_gathernd_example_int32_batch_dim1",
    "test_center_crop_pad_crop_and_pad", "test_resize_upsample_sizes_cubic", "test_hannwindow",
    "test_bitcast_float32_to_int32", "test_resize_downsample_scales_linear_antialias",
    # quantization, control flow and optimizers
    "test_dynamicquantizelinear", "test_matmulinteger", "test_if", "test_scan9_sum",
    "test_adam",
    # on the DEFAULT device, where oneDNN's regions were merged out of order (GridSample's)
    # or held a 7-D shape (a 5-D cross-entropy loss): compiling failed
    "test_gridsample", "test_gridsample_volumetric_bilinear_align_corners_0",
    "test_sce_NCd1d2d3d4d5_mean_weight_log_prob",
    # a row with every key masked attends nothing (booleans loaded as vectors broke it)
    "test_attention_causal_boolmask_nan_robustness",
]
LIGHT_MODELS = ["test_squeezenet", "test_shufflenet"]


@functools.cache
def cases() -> dict:
    return {c.name: c for c in conformance.node_cases() + conformance.light_cases()}


@pytest.mark.parametrize("name", NODE_CASES + LIGHT_MODELS)
def test_case_matches_reference(name):
    result = conformance.run_case(cases()[name])
    assert result.passed, f"{result.cause}: {result.detail}"


def test_failures_name_their_cause():
    """A case with a type ODLA has no element type for fails at import, saying why, and a
    wrong result is reported with where it differs."""
    result = conformance.run_case(cases()["test_cast_FLOAT_to_FLOAT8E4M3FN"])
    assert not result.passed and result.cause.startswith("import: [UNSUPPORTED_DATATYPE]")
    assert "FLOAT8E4M3FN has no ODLA element type" in result.detail
    case = cases()["test_abs"]
    cause, detail = conformance.compare([case.outputs[0] + 1], case.outputs, case.rtol, case.atol)
    assert cause == "values differ" and "elements differ, first at" in detail
    assert conformance.compare([], case.outputs, 1e-3, 1e-5)[0] == "output count differs"


def test_report_counts_match_the_results():
    results = [conformance.Result("a", "node", "Abs", True),
               conformance.Result("b", "node", "Abs", False, "values differ", "output 0: ..."),
               conformance.Result("c", "light", "model", True)]
    report = conformance.report(results, "header")
    assert "| node | 1 | 2 |" in report and "| light | 1 | 1 |" in report
    assert "### 1: values differ" in report and "| Abs | 1 | 2 | b |" in report
