"""tools merge and extract: LoRAs into one LoRA (side by side, exact; or by SVD), per-block ratios, LoRAs into a model
and back out of it, a merged model rendering what base + LoRA renders, and LoRAs of another family refused."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from lora_samples import CONV, LINEAR, OUT, TEXT, deltas, digest, run, sample_modules, tiny_lora, write

from trainers.core.errors import ToolError
from trainers.loras.lora_state import read_lora
from trainers.methods.lora.file_format import read_lora_file
from trainers.tools.blocks import BLOCKS, block_of


def test_loras_side_by_side_add_their_changes_exactly(tmp_path: Path) -> None:
    a = write(tmp_path / "a.safetensors", sample_modules(rank=4, alpha=2.0, seed=0))
    b = write(tmp_path / "b.safetensors", sample_modules(rank=2, alpha=1.0, seed=7))
    out = run("merge", tmp_path / "job", loras=[f"{a}:0.7", f"{b}:-0.4"], device="cpu")
    merged, da, db = deltas(out), deltas(a), deltas(b)
    for name in da:
        torch.testing.assert_close(merged[name], 0.7 * da[name] - 0.4 * db[name], atol=1e-5, rtol=0)
    tensors, metadata = read_lora_file(out)
    assert tensors[f"{LINEAR}.lora_down.weight"].shape[0] == 6  # the ranks' sum
    assert metadata["modelspec.merged_from"] == "a.safetensors x 0.7 + b.safetensors x -0.4"
    assert metadata["ss_base_model_version"] == "sd_v1" and metadata["ss_network_dim"] == "6"


def test_svd_merge_keeps_the_sum_at_full_rank_and_approximates_below(tmp_path: Path) -> None:
    a = write(tmp_path / "a.safetensors", sample_modules(rank=4, seed=0))
    b = write(tmp_path / "b.safetensors", sample_modules(rank=4, seed=3))
    full = run("merge", tmp_path / "full", loras=[str(a), str(b)], lora_merge="svd", new_rank=8, device="cpu")
    low = run("merge", tmp_path / "low", loras=[str(a), str(b)], lora_merge="svd", new_rank=2, device="cpu")
    da, db = deltas(a), deltas(b)
    for name, change in deltas(full).items():
        torch.testing.assert_close(change, da[name] + db[name], atol=1e-5, rtol=0)
    assert read_lora_file(low)[0][f"{LINEAR}.lora_down.weight"].shape[0] == 2
    kept = {m["module"]: m["fro"] for m in json.loads((tmp_path / "low" / "report.json").read_text())["modules"]}
    assert 0.5 < kept[LINEAR] < 1


def test_per_block_ratios_follow_sd_scripts_numbering(tmp_path: Path) -> None:
    assert [BLOCKS[block_of(n, "diffusers")] for n in (LINEAR, CONV, TEXT, OUT)] == ["IN01", "IN02", "BASE", "OUT03"]
    assert BLOCKS[block_of("lora_unet_output_blocks_2_1_proj_in", "sgm")] == "OUT02"
    a = write(tmp_path / "a.safetensors", sample_modules())
    weights = ["1"] * 26
    weights[BLOCKS.index("IN01")], weights[BLOCKS.index("OUT03")] = "0", "0.5"
    out = run("merge", tmp_path / "job", loras=[str(a), str(a)], lbws=[",".join(weights)], device="cpu")
    merged, original = deltas(out), deltas(a)
    torch.testing.assert_close(merged[LINEAR], original[LINEAR], atol=1e-5, rtol=0)  # the second file's only
    torch.testing.assert_close(merged[OUT], 1.5 * original[OUT], atol=1e-5, rtol=0)
    torch.testing.assert_close(merged[CONV], 2 * original[CONV], atol=1e-5, rtol=0)
    with pytest.raises(ToolError, match=r"lbws: line 1 .*20 block weights are a layout of the SGM way \(SDXL\)"):
        run("merge", tmp_path / "bad", loras=[str(a), str(a)], lbws=[",".join(["1"] * 20)], device="cpu")


def test_a_lora_of_another_family_is_refused_and_the_inputs_kept(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    sdxl_names = {"lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q": sample_modules()[LINEAR]}
    other = write(tmp_path / "sdxl.safetensors", sdxl_names, {"ss_base_model_version": "sdxl_base_v1-0"})
    before = digest(other)
    with pytest.raises(ToolError, match=r"loras: sdxl.safetensors: 1 of its 1 modules name no layer of this SD1.x "
                                        r"model .*it is a LoRA for SDXL"):
        run("merge", tmp_path / "job", model=str(tiny_sd1_dir), loras=[str(other)], device="cpu")
    assert digest(other) == before and not (tmp_path / "job" / f"{tiny_sd1_dir.name}-merged").exists()
    a = write(tmp_path / "a.safetensors", sample_modules())
    with pytest.raises(ToolError, match="a.safetensors is a SD1.x LoRA and sdxl.safetensors a SDXL one"):
        run("merge", tmp_path / "job2", loras=[str(a), str(other)], device="cpu")


@pytest.mark.slow
def test_merge_into_the_model_then_extract_at_full_rank_gives_the_change_back(tiny_sd1_dir: Path,
                                                                               tmp_path: Path) -> None:
    lora = tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors")
    model_files = {p: digest(p) for p in tiny_sd1_dir.rglob("*.safetensors")}
    merged = run("merge", tmp_path / "merge", model=str(tiny_sd1_dir), loras=[f"{lora}:0.6"], device="cpu")
    assert merged == tmp_path / "merge" / f"{tiny_sd1_dir.name}-merged" and (merged / "model_index.json").exists()
    extracted = run("extract", tmp_path / "extract", model_org=str(tiny_sd1_dir), model_tuned=str(merged), dim=4,
                    conv_dim=2, clamp_quantile=1.0, device="cpu")
    changes, original = deltas(extracted), deltas(lora)
    assert changes.keys() == original.keys()
    worst = max(float((changes[n] - 0.6 * original[n]).abs().max()) for n in original)
    assert worst < 1e-4, worst
    tensors, metadata = read_lora_file(extracted)
    assert metadata["ss_network_dim"] == "4" and metadata["ss_network_alpha"] == "4"
    assert json.loads(metadata["ss_network_args"]) == {"conv_dim": "2", "conv_alpha": "4"}  # one alpha: see one_alpha
    assert metadata["ss_base_model_version"] == "sd_v1" and "sshs_model_hash" in metadata
    assert {p: digest(p) for p in tiny_sd1_dir.rglob("*.safetensors")} == model_files  # the base is untouched


@pytest.mark.slow
def test_a_merged_checkpoint_renders_what_base_plus_lora_renders(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from PIL import Image

    from trainers.generate.job import run_job
    from trainers.generate.options import GenerateConfig

    lora = tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors")
    merged = run("merge", tmp_path / "merge", model=str(tiny_sd1_dir), loras=[f"{lora}:0.8"], save_precision="float",
                 device="cpu")  # a folder, as the base (a tiny model's single file would need its configs)
    render = {"prompts": ["a red fox --d 5"], "width": 64, "height": 64, "steps": 3, "devices": "cpu",
              "cpu_threads": 1}
    with_lora = run_job(GenerateConfig({**render, "model": str(tiny_sd1_dir), "loras": [f"{lora}:0.8"]}),
                        tmp_path / "gen_lora")
    baked = run_job(GenerateConfig({**render, "model": str(merged)}), tmp_path / "gen_merged")
    base = run_job(GenerateConfig({**render, "model": str(tiny_sd1_dir)}), tmp_path / "gen_base")
    a, b, c = (np.asarray(Image.open(r.images[0]).convert("RGB")).astype(int) for r in (with_lora, baked, base))
    assert np.abs(a - b).max() <= 2, np.abs(a - b).max()  # within rounding: the same image
    assert np.abs(a - c).mean() > 1  # and the LoRA does change it


@pytest.mark.parametrize("family", ["flux", "sd3"])
def test_fused_modules_merge_into_their_layers_and_extract_back(family: str, request: pytest.FixtureRequest,
                                                                tmp_path: Path) -> None:
    """SD3's and FLUX's kohya modules cover q, k and v (and FLUX's MLP input) of diffusers' layers at once."""
    model = request.getfixturevalue(f"tiny_{family}_dir")
    lora = tiny_lora(model, tmp_path / "lora.safetensors", conv=False)
    merged = run("merge", tmp_path / "merge", model=str(model), loras=[f"{lora}:0.5"], save_precision="float",
                 device="cpu")
    extracted = run("extract", tmp_path / "extract", model_org=str(model), model_tuned=str(merged), dim=4,
                    clamp_quantile=1.0, min_diff=0.0, device="cpu")
    original, changes = deltas(lora), deltas(extracted)
    assert any("qkv" in name or "linear1" in name for name in changes)
    assert set(changes) <= set(original)  # training's choice of layers (FLUX: no input layers without in_dims)
    worst = max(float((changes[n] - 0.5 * original[n]).abs().max()) for n in changes)
    assert worst < 1e-5, worst


def test_merging_into_an_fp16_model_rounds_each_weight_once(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    """Every merged weight is the float64 sum weight + ratio x up @ down x alpha / rank rounded once to fp16 (numpy's
    float64 -> float16 is a single correct rounding); casting the change to fp16 before adding, or adding in float32
    and letting torch round through float32, misses some."""
    from safetensors.torch import load_file

    from trainers.models import load_model
    from trainers.loras.layers import layer_map

    lora = tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors")
    merged = run("merge", tmp_path / "merge", model=str(tiny_sd1_dir), loras=[f"{lora}:0.6"], save_precision="fp16",
                 device="cpu")
    base = layer_map(load_model(str(tiny_sd1_dir), "auto", torch.float32))
    saved = {part: load_file(next((merged / part).glob("*.safetensors"))) for part in ("unet", "text_encoder")}
    files = read_lora(lora, "lora").plain("lora")
    checked = 0
    for name, module in files.items():
        target = base[name]
        change = module.delta(dtype=torch.float64) * 0.6
        for layer, path, part in zip(target.layers, target.paths, target.split(change)):
            expected = (layer.weight.detach().half().double() + part).numpy().astype(np.float16)
            got = saved[target.component][f"{path}.weight"]
            assert got.dtype == torch.float16
            np.testing.assert_array_equal(got.numpy(), expected, err_msg=name)
            checked += got.numel()
    assert checked > 10_000
