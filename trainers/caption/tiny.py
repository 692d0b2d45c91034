"""Tiny random-init (or hand-set) models of the captioners' and maskers' real classes, built offline in code: the
tests, the benchmark (benchmarks/caption_benchmark.py) and a try-out without downloads use them.

The tagger is a real WD14-shaped ONNX file (NHWC BGR 0-255 input, one probability per tag) whose tags follow the
image's colour, with a selected_tags.csv in the format the WD14 taggers ship.
"""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

TAGGER_SIZE = 32
# (name, category, channel of the BGR mean it follows or -1 for never, sign): a red image is "red_background"
TINY_TAGS = (("general", 9, 1, 1.0), ("sensitive", 9, 1, -1.0), ("red_background", 0, 2, 1.0),
             ("blue_sky", 0, 0, 1.0), ("green_theme", 0, 1, 1.0), ("^_^", 0, 2, 1.0), ("no_humans", 0, -1, 1.0),
             ("hatsune_miku", 4, 1, 1.0))


def build_tiny_tagger(folder: Path) -> Path:
    """model.onnx + selected_tags.csv: probability = sigmoid(10 * (channel mean / 255 - 0.5)) per tag."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    weights = np.zeros((3, len(TINY_TAGS)), dtype=np.float32)
    bias = np.full(len(TINY_TAGS), -5.0, dtype=np.float32)
    for i, (_, _, channel, sign) in enumerate(TINY_TAGS):
        if channel < 0:
            bias[i] = -20.0
        else:
            weights[channel, i] = sign * 10.0 / 255.0
            bias[i] = -5.0 * sign
    nodes = [helper.make_node("ReduceMean", ["input_1", "axes"], ["mean"], keepdims=0),
             helper.make_node("MatMul", ["mean", "w"], ["logits"]),
             helper.make_node("Add", ["logits", "b"], ["scores"]),
             helper.make_node("Sigmoid", ["scores"], ["predictions_sigmoid"])]
    graph = helper.make_graph(
        nodes, "tiny_wd14_tagger",
        [helper.make_tensor_value_info("input_1", TensorProto.FLOAT, ["batch", TAGGER_SIZE, TAGGER_SIZE, 3])],
        [helper.make_tensor_value_info("predictions_sigmoid", TensorProto.FLOAT, ["batch", len(TINY_TAGS)])],
        [numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes"), numpy_helper.from_array(weights, "w"),
         numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, folder / "model.onnx")
    with open(folder / "selected_tags.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["tag_id", "name", "category", "count"])
        for i, (name, category, _, _) in enumerate(TINY_TAGS):
            out.writerow([1000 + i, name, category, 100 - i])
    return folder
