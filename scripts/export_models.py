#!/usr/bin/env python3
"""Write real model architectures to ONNX, with seeded random weights, for benchmarks.

    pip install -e '.[models]' && .venv/bin/python scripts/export_models.py
    .venv/bin/python scripts/export_models.py --models bert-base resnet50 --out DIR --force

Each model is built from its transformers config class (no download), seeded with
`torch.manual_seed(0)`, put in eval mode and exported with the TorchScript exporter at opset 17,
batch 1, fixed shapes. Only the main outputs are kept (last_hidden_state, and pooler_output where
the model has one). Token models take int64 `input_ids` (ids in [0, vocab)) and `attention_mask`;
image models take float32 `pixel_values` [1, 3, 224, 224]. A benchmark reads the inputs it needs
from the graph. Existing files are kept unless --force.

Two steps beyond a plain export: BatchNorm layers get scale 1 (a ResNet's residual branches
1/sqrt(branches), so that its float32 result is well defined), shift 0 and running statistics
measured on random images (transformers' initialisation leaves MobileNetV2 and EfficientNet
outputs at 1e-21 and 0, and their denormals make timings meaningless), and the constant
subgraphs the exporter leaves (pads, attention masks) are folded with onnxscript, so that every
tensor in the graph has a static shape.
"""
import argparse
import logging
import os
import sys
import time
import warnings

from tqdm import tqdm

# This directory's profile.py would shadow the standard library's (torch imports cProfile).
if os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

try:
    import onnx
    import onnxscript.optimizer
    from onnxscript import ir
    import torch
    import transformers as tf
except ImportError as e:
    sys.exit(f"{e}: install the models extra: pip install -e '.[models]'")

MAIN_OUTPUTS = ("last_hidden_state", "pooler_output")

# name: (model class, config, input kind, sequence length or image side)
MODELS = {
    "bert-base": (tf.BertModel, tf.BertConfig(), "tokens", 128),
    "distilbert": (tf.DistilBertModel, tf.DistilBertConfig(), "tokens", 128),
    "gpt2": (tf.GPT2Model, tf.GPT2Config(use_cache=False), "tokens", 64),
    "vit-b16": (tf.ViTModel, tf.ViTConfig(image_size=224, patch_size=16), "image", 224),
    "convnext-t": (tf.ConvNextModel, tf.ConvNextConfig(), "image", 224),  # default is tiny
    "resnet50": (tf.ResNetModel, tf.ResNetConfig(), "image", 224),  # default is ResNet-50
    # Basic blocks (two 3x3 convolutions): most of their work is what Winograd takes.
    "resnet18": (tf.ResNetModel, tf.ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2],
                                                 hidden_sizes=[64, 128, 256, 512]), "image", 224),
    "resnet34": (tf.ResNetModel, tf.ResNetConfig(layer_type="basic", depths=[3, 4, 6, 3],
                                                 hidden_sizes=[64, 128, 256, 512]), "image", 224),
    "mobilenetv2": (tf.MobileNetV2Model, tf.MobileNetV2Config(), "image", 224),  # 1.0, 224
    # EfficientNetConfig() is B7 (600 px, width 2.0, depth 3.1); these are B0's values.
    "efficientnet-b0": (tf.EfficientNetModel, tf.EfficientNetConfig(
        image_size=224, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280,
        dropout_rate=0.2), "image", 224),
}


class MainOutputs(torch.nn.Module):
    """Positional inputs in, the model's main output tensors out (a fixed, named tuple)."""

    def __init__(self, model, input_names, output_names):
        super().__init__()
        self.model, self.input_names, self.output_names = model, input_names, output_names

    def forward(self, *args):
        out = self.model(**dict(zip(self.input_names, args)), return_dict=True)
        return tuple(out[name] for name in self.output_names)


def example_inputs(kind, size, config, batch=1):
    if kind == "image":
        return {"pixel_values": torch.randn(batch, 3, size, size)}
    ids = torch.randint(0, config.vocab_size, (batch, size), dtype=torch.int64)
    # One padded position, so that tracing keeps the masking path rather than folding it away.
    mask = torch.ones(batch, size, dtype=torch.int64)
    mask[:, -1] = 0
    return {"input_ids": ids, "attention_mask": mask}


def residual_branch_norms(model):
    """The last BatchNorm of each residual branch (transformers' ResNet layers: a `shortcut`
    beside a `layer` of convolutions, each with its `normalization`)."""
    return [block.layer[-1].normalization for block in model.modules()
            if hasattr(block, "shortcut") and isinstance(getattr(block, "layer", None),
                                                         torch.nn.Sequential)]


def calibrate_batchnorm(model, size, batch=8):
    """Give every BatchNorm PyTorch's initial scale and shift (1, 0) and running statistics
    measured on one batch of random images, so that activations keep their size.

    The last norm of each residual branch gets scale 1/sqrt(branches) instead (SkipInit's
    down-scaling of residual branches, De & Smith 2020): with scale 1 the random ResNet-50 is
    chaotic, float32 rounding grows 3-7x a stage, and torch's own float32 output lies 4.4x the
    bench's match tolerance from its float64 one, so no float32 engine could be checked on it.
    With 1/4 the branches still carry about a third of each block's output."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_parameters()  # weight 1, bias 0, running statistics cleared
        m.momentum = None  # a plain average over what it sees
        m.train()
    branch_ends = residual_branch_norms(model)
    with torch.no_grad():
        for m in branch_ends:
            m.weight.fill_(len(branch_ends) ** -0.5)
    with torch.no_grad():
        model(pixel_values=torch.randn(batch, 3, size, size))
    model.eval()


def fold_constants(path, output_shapes):
    """Fold constant subgraphs in place; give graph outputs the shapes torch computed."""
    # onnx.reference fails on BERT's token-type GatherElements; that node is simply kept.
    logging.getLogger("onnxscript.optimizer").setLevel(logging.ERROR)
    model = ir.from_proto(onnx.shape_inference.infer_shapes(onnx.load(path)))
    onnxscript.optimizer.fold_constants(  # it keeps ConstantOfShape unless told
        model, should_fold=lambda node: True if node.op_type == "ConstantOfShape" else None)
    onnxscript.optimizer.remove_unused_nodes(model)
    model = ir.to_proto(model)
    del model.graph.value_info[:]  # shapes of before folding, some unknown: infer them again
    model = onnx.shape_inference.infer_shapes(model)
    for output, shape in zip(model.graph.output, output_shapes):
        dims = output.type.tensor_type.shape.dim
        del dims[:]
        for size in shape:
            dims.add().dim_value = size
    onnx.save(model, path)


def seeded_model(name, models=MODELS, batch=1):
    """(MainOutputs of the model, its example inputs, its outputs' shapes), seeded as above;
    ``models`` maps names to (class, config, input kind, size) as MODELS does."""
    cls, config, kind, size = models[name]
    torch.manual_seed(0)
    model = cls(config).eval()
    if kind == "image":
        calibrate_batchnorm(model, size)
    inputs = example_inputs(kind, size, config, batch)
    with torch.no_grad():
        out = model(**inputs, return_dict=True)
    output_names = [k for k in MAIN_OUTPUTS if out.get(k) is not None]
    return (MainOutputs(model, list(inputs), output_names), inputs,
            [tuple(out[k].shape) for k in output_names])


def export(name, path, models=MODELS, batch=1):
    wrapper, inputs, output_shapes = seeded_model(name, models, batch)
    output_names = wrapper.output_names
    tmp = f"{path}.{os.getpid()}.tmp"  # same directory, so os.replace is atomic
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", "You are using the legacy TorchScript")
            # Folded below; the mask code's indices are aranges, never negative.
            warnings.filterwarnings("ignore", "Constant folding - Only steps=1")
            warnings.filterwarnings("ignore", "Exporting aten::index operator")
            torch.onnx.export(wrapper, tuple(inputs.values()), tmp, input_names=list(inputs),
                              output_names=output_names, opset_version=17, dynamo=False)
        fold_constants(tmp, output_shapes)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/models", help="output directory")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                        metavar="NAME", help=f"default all: {' '.join(MODELS)}")
    parser.add_argument("--force", action="store_true", help="overwrite existing files")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name in tqdm(args.models, desc="export", unit="model"):
        path = os.path.join(args.out, f"{name}.onnx")
        if os.path.exists(path) and not args.force:
            tqdm.write(f"{name:16} {path} exists, kept (--force to overwrite)")
            continue
        start = time.perf_counter()
        export(name, path)
        seconds = time.perf_counter() - start
        size = os.path.getsize(path) / 2**20
        tqdm.write(f"{name:16} {size:6.1f} MiB  exported in {seconds:5.1f} s  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
