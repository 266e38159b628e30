"""The scenario bench (odla_tvm/bench/scenarios.py): each scenario calls what it says before
each timed call, and on a tiny model every engine gets a row with every scenario of it."""

import importlib.util

import pytest
from test_bench import mlp_onnx

from odla_tvm.bench import scenarios
from odla_tvm.cli import main as cli


def test_each_timed_call_follows_what_its_scenario_names():
    log = []

    def call(name):
        return lambda: log.append(name)

    engines = {"odla-tvm": call("odla"), "onnxruntime": call("ort")}
    medians = scenarios.measure(engines, call("partner"), call("numpy"), calls=20)
    assert set(medians["odla-tvm"]) == set(scenarios.SCENARIOS)
    assert set(medians["onnxruntime"]) == set(scenarios.SCENARIOS) - {"two-models"}
    assert all(m > 0 for by in medians.values() for m in by.values())
    # 20 calls over 3 rounds: 7 a round; each round runs the plan in order
    per_round = 7
    round_log = log[:len(log) // scenarios.ROUNDS]
    assert log == round_log * scenarios.ROUNDS
    blocks = [("odla", "odla", None), ("ort", "ort", None), ("numpy", "odla", "numpy"),
              ("numpy", "ort", "numpy"), ("ort", "odla", "ort"), ("odla", "ort", "odla"),
              ("partner", "odla", "partner")]
    position = 0
    for first, timed, before in blocks:
        if before is None:  # quiet: a warm-up call, then the timed calls back to back
            assert round_log[position:position + per_round + 1] == [timed] * (per_round + 1)
            position += per_round + 1
        else:
            assert round_log[position:position + 2 * per_round] == [first, timed] * per_round
            position += 2 * per_round
    assert position == len(round_log)


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                    reason="onnxruntime is not installed (the bench extra)")
def test_a_tiny_model_gets_a_row_per_engine_with_every_scenario(tmp_path, capsys):
    model = mlp_onnx(tmp_path / "mlp.onnx", batch=1)
    output = tmp_path / "scenarios.md"
    assert cli(["bench", "--scenarios", model, "--calls", "20", "-o", str(output)]) == 0
    text = output.read_text()
    assert text.startswith(scenarios.TITLE)
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| mlp |")]
    assert [row[1] for row in rows] == ["odla-tvm", "onnxruntime"]
    odla_row, ort_row = rows
    assert float(odla_row[2]) > 0 and float(ort_row[2]) > 0
    assert all(cell.endswith("x)") for cell in odla_row[3:5] + ort_row[3:5])
    assert odla_row[5].endswith("x) |") and ort_row[5] == "- |"
    assert "mlp: odla-tvm after-numpy" in capsys.readouterr().out
    # too few calls for a median are refused
    assert cli(["bench", "--scenarios", model, "--calls", "5", "-o", str(output)]) != 0
