#!/usr/bin/env python3
"""Small configurations of scripts/export_models.py's architectures for the GPU check: each
written, at batch 1 and 16, as ONNX (what odla-tvm compiles), its example inputs (.npy) and
its PyTorch graph (torch.export's ATen graph as Python source, with the shapes and spreads of
its parameters), which scripts/gpu/check.py runs on the GPU machine with PyTorch alone.

    python scripts/gpu/models.py OUT_DIR [--models NAME ...]   (needs the models extra)

The GPU machine makes the parameters from a seed (same shapes and spread, other values): the
ONNX weights travel once, in the odla-tvm bundles, and latency does not hang on the values.
"""
import argparse
import json
import sys
from pathlib import Path

# export_models.py's directory goes last: its profile.py would shadow the standard library's.
sys.path.append(str(Path(__file__).resolve().parent.parent))
import export_models  # noqa: E402
from export_models import tf, torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check import load_graph  # noqa: E402

BATCHES = (1, 16)
# name: (model class, config, input kind, sequence length or image side); sizes chosen so that
# the bundles of all of them fit the 64 MiB carried to the GPU machine.
SMALL_MODELS = {
    "resnet18": (tf.ResNetModel, tf.ResNetConfig(
        layer_type="basic", depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256],
        embedding_size=32), "image", 96),
    "mobilenetv2": (tf.MobileNetV2Model, tf.MobileNetV2Config(
        depth_multiplier=0.5, image_size=96), "image", 96),
    "convnext-t": (tf.ConvNextModel, tf.ConvNextConfig(
        hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 3, 1]), "image", 96),
    "vit-b16": (tf.ViTModel, tf.ViTConfig(
        image_size=96, patch_size=16, hidden_size=256, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=1024), "image", 96),
    "bert-base": (tf.BertModel, tf.BertConfig(
        hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024,
        vocab_size=2048), "tokens", 128),
    "gpt2": (tf.GPT2Model, tf.GPT2Config(
        n_embd=256, n_layer=2, n_head=4, vocab_size=2048, n_positions=128, use_cache=False,
        bos_token_id=0, eos_token_id=0), "tokens", 64),
}


def torch_graph(wrapper, inputs: dict, directory: Path, batch: int) -> None:
    """graph-b{batch}.py: the model's ATen graph as a function of its parameters, buffers and
    inputs; params.json: each one's name, shape, dtype and mean and spread; buffers.pt: the
    buffers and constants, which are kept as they are (positions, running statistics)."""
    program = torch.export.export(wrapper, tuple(inputs.values()))
    code = program.graph_module.code
    (directory / f"graph-b{batch}.py").write_text(
        "# torch.export's ATen graph of the model (written by scripts/gpu/models.py)\n"
        "import torch\nfrom math import inf, nan  # noqa: F401\n"
        "from torch import device  # noqa: F401  check.py puts the run's device in its place\n\n"
        + code.replace(
            "def forward(self, ", "def forward(", 1))
    tensors = {**program.state_dict, **program.constants}
    slots, kept = [], {}
    for spec in program.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            continue
        value = tensors[spec.target]
        slot = {"name": spec.target, "shape": list(value.shape), "dtype": str(value.dtype)}
        if spec.kind.name == "PARAMETER":
            data = value.detach().double()
            slot.update(mean=data.mean().item(), std=data.std().item() if data.numel() > 1 else 0)
        else:
            kept[spec.target] = value.detach().clone()
        slots.append(slot)
    (directory / "params.json").write_text(json.dumps(slots) + "\n")
    torch.save(kept, directory / "buffers.pt")
    # The file, run as the GPU machine runs it (with the exported weights), is the model.
    forward = load_graph(directory / f"graph-b{batch}.py", "cpu")
    ours = forward(*[tensors[s["name"]] for s in slots], *inputs.values())
    for mine, theirs in zip(ours, wrapper(*inputs.values()), strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


def write_model(name: str, out: Path) -> None:
    import numpy as np

    directory = out / name
    (directory / "torch").mkdir(parents=True, exist_ok=True)
    for batch in BATCHES:
        path = directory / f"model-b{batch}.onnx"
        export_models.export(name, str(path), SMALL_MODELS, batch)
        wrapper, inputs, _ = export_models.seeded_model(name, SMALL_MODELS, batch)
        (directory / f"inputs-b{batch}").mkdir(exist_ok=True)
        for input_name, value in inputs.items():
            np.save(directory / f"inputs-b{batch}" / f"{input_name}.npy", value.numpy())
        with torch.no_grad():
            torch_graph(wrapper, inputs, directory / "torch", batch)
    kind, size = SMALL_MODELS[name][2:]
    (directory / "model.json").write_text(json.dumps({
        "name": name, "inputs": kind, "size": size, "config": SMALL_MODELS[name][1].to_dict(),
        "inputs_order": list(inputs), "outputs": wrapper.output_names}, default=str) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", nargs="+", choices=list(SMALL_MODELS),
                        default=list(SMALL_MODELS))
    args = parser.parse_args(argv)
    for name in args.models:
        write_model(name, args.out)
        print(f"{name}: {sum(f.stat().st_size for f in (args.out / name).rglob('*')) >> 10} KiB",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
