"""Generate on the Wan 2.2 A14B pair (the tiny model of its real diffusers classes: two WanTransformer3DModel experts
and boundary_ratio in a WanPipeline folder): a LoRA pair as a Wan 2.2 run saves it (`<name>_high_noise.safetensors`,
`<name>_low_noise.safetensors`, and the run's own file of both) puts the high-noise LoRA on `transformer` and the
low-noise one on `transformer_2`, whichever of its files is picked; a one-expert run's LoRA goes on its expert only;
another family's model (Wan 2.1) refuses the pair's LoRAs by name. CPU, 32 px, 5 frames, 4 steps (the last one
below the boundary, on the low-noise expert), in this process (one worker)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from trainers.generate.options import GenerateConfig, LoraRef
from trainers.generate.plan import Variant, build_plan
from trainers.models import ModelLoadError
from trainers.models.wan.tiny import build_tiny_wan
from trainers.models.wan.wan22.tiny import build_tiny_wan22

from test_generate import run_main
from test_generate_video import args_of, clip, wan_lora

FAST = {"steps": 4, "frames": 5, "cfg_scale": 1.0, "cpu_threads": 1, "devices": "cpu"}
PROMPT = "a red fox runs through snow --w 32 --h 32 --d 3"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_wan22(tmp_path_factory.mktemp("wan22") / "model")


@pytest.fixture(scope="module")
def loras(pair: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The files a Wan 2.2 run with train_expert = "both" saves (the run's file and one per expert, the family's
    lora_file_parts), and a high_noise-only run's file (Wan 2.1's names, ss_train_expert in its metadata)."""
    from safetensors.torch import load_file

    from trainers.methods.lora.file_format import save_lora_file
    from trainers.models.wan.wan22.family import WAN22

    folder = tmp_path_factory.mktemp("loras")
    run_file = wan_lora(pair, folder / "fox.safetensors", seed=1)
    state = load_file(run_file)
    assert state and all(k.startswith(("lora_unet_high_noise_", "lora_unet_low_noise_")) for k in state)
    files = {"run": run_file}
    for path, part in WAN22.lora_file_parts(run_file, state).items():
        save_lora_file(path, part, {"ss_train_expert": "both", "ss_network_dim": "4"})
        files[path.stem.removeprefix("fox_")] = path
    high_only = folder / "fox-high.safetensors"
    save_lora_file(high_only, load_file(files["high_noise"]), {"ss_train_expert": "high_noise"})
    return {**files, "high_only": high_only}


def _renderer(model: Path, variants: list[tuple[LoraRef, ...]], out: Path) -> tuple[object, list[Path]]:
    """Render the prompt once per LoRA set with one Renderer (its adapters changed between them, as a compare
    grid's rows change them)."""
    from trainers.generate.renderer import Renderer

    cfg = GenerateConfig({"model": str(model), "prompts": [PROMPT], **FAST})
    plan = build_plan(cfg, out, 0, [Variant(f"v{i}", loras) for i, loras in enumerate(variants)])
    renderer = Renderer(cfg, "cpu", plan.variants)
    written = [path for item in plan.items for path in renderer.render(item)]
    return renderer, written


def _adapters(transformer: torch.nn.Module) -> set[str]:
    return {name for module in transformer.modules() if hasattr(module, "lora_A") for name in module.lora_A}


def _frames(path: Path) -> np.ndarray:
    return clip(path)[0].astype(int)


def test_a_pair_goes_on_both_experts_whichever_file_is_picked(pair: Path, loras: dict[str, Path],
                                                               tmp_path: Path) -> None:
    one = LoraRef
    renderer, written = _renderer(pair, [
        (),
        (one(str(loras["high_noise"])),),  # its low-noise file comes with it
        (one(str(loras["low_noise"])),),  # and the other way round
        (one(str(loras["run"])),),  # the run's own file of both
        (one(str(loras["high_noise"])), one(str(loras["low_noise"]))),  # both listed: each once
        (one(str(loras["high_only"])),),  # a high_noise run's LoRA: that expert only
        (one(str(loras["high_noise"]), 0.5),),
    ], tmp_path)
    base, high_pick, low_pick, run_pick, both_listed, high_only, half = map(_frames, written)
    assert base.shape == (5, 32, 32, 3)
    assert np.abs(high_pick - base).mean() > 1
    assert np.array_equal(high_pick, low_pick) and np.array_equal(high_pick, run_pick)
    assert np.array_equal(high_pick, both_listed)
    # the last step is the low-noise expert's: a pair renders otherwise than its high-noise LoRA alone
    assert np.abs(high_only - base).mean() > 1 and np.abs(high_only - high_pick).mean() > 1
    assert np.abs(half - base).mean() > 0.2 and np.abs(half - high_pick).mean() > 0.2  # the line's weight
    pipe = renderer.pipe  # the last variant's setup: one adapter of the pair on each expert
    (high,), (low,) = _adapters(pipe.transformer), _adapters(pipe.transformer_2)
    assert high == low == renderer.adapters[str(loras["high_noise"])]
    meta = clip(written[1])[1]["comment"]  # the line as written, the hashes of both files it loaded
    assert "<lora:fox_high_noise:1>" in meta and "fox_low_noise:1" not in meta
    assert re.search(r'Lora hashes: "fox_high_noise: \w+, fox_low_noise: \w+"', meta), meta


def test_a_one_expert_lora_goes_on_its_expert_only(pair: Path, loras: dict[str, Path], tmp_path: Path) -> None:
    renderer, _ = _renderer(pair, [(LoraRef(str(loras["high_only"])),)], tmp_path)
    assert len(_adapters(renderer.pipe.transformer)) == 1 and _adapters(renderer.pipe.transformer_2) == set()
    renderer, _ = _renderer(pair, [(LoraRef(str(loras["low_noise"])), LoraRef(str(loras["high_noise"]), 0))],
                            tmp_path / "low")  # weight 0 leaves its file off: the low-noise file alone
    assert _adapters(renderer.pipe.transformer) == set() and len(_adapters(renderer.pipe.transformer_2)) == 1


def test_the_cli_renders_a_pair_picked_by_one_file(pair: Path, loras: dict[str, Path], tmp_path: Path) -> None:
    base, with_pair = tmp_path / "base", tmp_path / "pair"
    assert run_main(args_of(pair, base, [PROMPT], **FAST)) == 0
    assert run_main(args_of(pair, with_pair, [PROMPT], **FAST, lora=f"{loras['low_noise']}:1")) == 0
    base_frames, pair_frames = (_frames(job / "images" / "000-0000.mp4") for job in (base, with_pair))
    assert np.abs(pair_frames - base_frames).mean() > 1
    from gui.generate_tab import JobWatcher, status_text

    shown = status_text(JobWatcher(with_pair).refresh())  # the Generate tab's status line says what it made
    assert "**1 / 1** clips · in" in shown and "** images" not in shown
    assert "1 clips" in json.loads((with_pair / "status.json").read_text())["message"]


@pytest.mark.parametrize("name", ["high_noise", "run", "high_only"])
def test_a_model_of_one_transformer_refuses_the_pairs_loras_by_name(loras: dict[str, Path], tmp_path: Path,
                                                                     name: str) -> None:
    wan21 = build_tiny_wan(tmp_path / "wan21")
    path = loras[name]
    with pytest.raises(ModelLoadError, match=rf"loras: {path.name} is a LoRA of Wan 2.2 A14B's high-noise") as err:
        _renderer(wan21, [(LoraRef(str(path)),)], tmp_path / "out")
    assert "this Wan 2.1 model does not take" in str(err.value) and "Wan 2.2" in str(err.value)
