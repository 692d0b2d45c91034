"""tools resize: full rank reproduces the LoRA, dynamic rules pick the ranks their definitions give, the metadata
and hashes follow, bad input is named and the input is never touched."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from lora_samples import CONV, LINEAR, deltas, digest, module, outputs, run, sample_modules, tiny_lora, write

from trainers.core.errors import ToolError
from trainers.loras.lora_state import LowRankModule
from trainers.methods.lora.file_format import read_lora_file, with_hashes


def test_resize_to_full_rank_reproduces_every_modules_change(tmp_path: Path) -> None:
    source = write(tmp_path / "in.safetensors", sample_modules(rank=4))
    before = digest(source)
    out = run("resize", tmp_path / "job", lora=str(source), new_rank=4, device="cpu")
    assert out.parent == tmp_path / "job" and out.name == "in-r4.safetensors"
    original, resized = deltas(source), deltas(out)
    assert resized.keys() == original.keys()
    for name in original:
        torch.testing.assert_close(resized[name], original[name], atol=1e-5, rtol=0)
    tensors, metadata = read_lora_file(out)
    assert tensors[f"{CONV}.lora_down.weight"].shape == (4, 32, 3, 3)  # a LoCon stays one
    assert metadata["ss_network_dim"] == "4" and metadata["ss_base_model_version"] == "sd_v1"
    assert metadata["ss_training_comment"].startswith("rank resized to 4")
    assert metadata["sshs_model_hash"] == with_hashes(tensors, metadata)["sshs_model_hash"]  # recomputed
    assert digest(source) == before  # the input is never changed
    report = json.loads((tmp_path / "job" / "report.json").read_text())
    assert {m["module"]: m["fro"] for m in report["modules"]}[LINEAR] == pytest.approx(1.0)


def _with_singular_values(values: list[float], seed: int = 0) -> LowRankModule:
    """A module whose change (alpha = rank: scale 1) has exactly these singular values."""
    generator = torch.Generator().manual_seed(seed)
    rank = len(values)
    u, _ = torch.linalg.qr(torch.randn(32, rank, generator=generator))
    v, _ = torch.linalg.qr(torch.randn(32, rank, generator=generator))
    return LowRankModule(v.T.contiguous(), (u * torch.tensor(values)).contiguous(), float(rank))


# S = 8, 4, 2, 1, 0.5, 0.25: squares 64, 16, 4, 1, .25, .0625 (85.3125), sum 15.75
@pytest.mark.parametrize("method, param, rank", [
    ("sv_ratio", 5.0, 3),  # above 8 / 5 = 1.6: 8, 4, 2
    ("sv_fro", 0.9, 2),  # (64 + 16) / 85.3125 = 0.938 >= 0.81 = 0.9^2, while 64 / 85.3125 = 0.75 is not
    ("sv_cumulative", 0.9, 4),  # (8 + 4 + 2 + 1) / 15.75 = 0.952 >= 0.9; (8 + 4 + 2) / 15.75 = 0.889 is not
    ("sv_threshold", 0.9, 4),  # above 0.9: 8, 4, 2, 1
    ("sv_fro", 0.75, 1),  # 64 / 85.3125 = 0.750 >= 0.5625 = 0.75^2: the largest alone
])
def test_dynamic_resize_keeps_the_ranks_the_definitions_give(method: str, param: float, rank: int,
                                                              tmp_path: Path) -> None:
    source = write(tmp_path / "in.safetensors", {LINEAR: _with_singular_values([8, 4, 2, 1, 0.5, 0.25])})
    out = run("resize", tmp_path / "job", lora=str(source), new_rank=64, dynamic_method=method, dynamic_param=param,
              device="cpu")
    tensors, metadata = read_lora_file(out)
    assert tensors[f"{LINEAR}.lora_down.weight"].shape[0] == rank
    assert float(tensors[f"{LINEAR}.alpha"]) == rank  # alpha / rank kept (1)
    assert metadata["ss_network_dim"] == str(rank)
    kept = json.loads((tmp_path / "job" / "report.json").read_text())["modules"][0]["fro"]
    squares = [64, 16, 4, 1, 0.25, 0.0625]
    assert kept == pytest.approx((sum(squares[:rank]) / sum(squares)) ** 0.5)


@pytest.mark.slow
def test_a_dynamic_resize_renders_in_diffusers_as_every_loader_computes_it(tiny_sd1_dir: Path,
                                                                          tmp_path: Path) -> None:
    """Its modules' ranks differ; diffusers gives attention and text-encoder layers a kohya file's most common alpha,
    so the result holds one alpha (each module's own alpha / rank folded into its up weights)."""
    source = tiny_lora(tiny_sd1_dir, tmp_path / "lora.safetensors")
    out = run("resize", tmp_path / "job", lora=str(source), new_rank=4, dynamic_method="sv_fro", dynamic_param=0.8,
              device="cpu")
    tensors, metadata = read_lora_file(out)
    assert len({t.shape[0] for k, t in tensors.items() if k.endswith("lora_down.weight")}) > 1
    assert len({float(t) for k, t in tensors.items() if k.endswith(".alpha")}) == 1
    assert metadata["ss_network_dim"] == "Dynamic" and metadata["ss_network_alpha"] != "Dynamic"
    for loaded, exact in zip(outputs(tiny_sd1_dir, out, "diffusers"), outputs(tiny_sd1_dir, out, "exact")):
        torch.testing.assert_close(loaded, exact, atol=1e-5, rtol=1e-5)


def test_dynamic_rank_is_capped_by_new_rank(tmp_path: Path) -> None:
    source = write(tmp_path / "in.safetensors", {LINEAR: _with_singular_values([8, 4, 2, 1, 0.5, 0.25])})
    out = run("resize", tmp_path / "job", lora=str(source), new_rank=2, dynamic_method="sv_threshold",
              dynamic_param=0.1, device="cpu")
    assert read_lora_file(out)[0][f"{LINEAR}.lora_down.weight"].shape[0] == 2


def test_a_rank_above_a_modules_size_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    source = write(tmp_path / "in.safetensors", sample_modules(rank=4))
    before = digest(source)
    with pytest.raises(ToolError, match=r"new_rank: 40 is above what module lora_\w+ can hold .*at most 32"):
        run("resize", tmp_path / "job", lora=str(source), new_rank=40, device="cpu")
    assert digest(source) == before and not list((tmp_path / "job").glob("*.safetensors"))


def test_a_truncated_file_is_named_and_left_as_it_is(tmp_path: Path) -> None:
    whole = write(tmp_path / "whole.safetensors", sample_modules()).read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(ToolError, match=r"lora: .*cut\.safetensors is not a complete \.safetensors file"):
        run("resize", tmp_path / "job", lora=str(cut), new_rank=2, device="cpu")
    assert cut.read_bytes() == whole[:len(whole) // 2]


def test_lycoris_kinds_are_refused_by_name(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    loha = {f"{LINEAR}.hada_w1_a": torch.randn(32, 4, generator=generator),
            f"{LINEAR}.hada_w1_b": torch.randn(4, 32, generator=generator),
            f"{LINEAR}.hada_w2_a": torch.randn(32, 4, generator=generator),
            f"{LINEAR}.hada_w2_b": torch.randn(4, 32, generator=generator), f"{LINEAR}.alpha": torch.tensor(4.0)}
    from trainers.methods.lora.file_format import save_lora_file

    save_lora_file(tmp_path / "loha.safetensors", loha, {})
    with pytest.raises(ToolError, match=r"is LoHa .*only LoRA and LoCon files"):
        run("resize", tmp_path / "job", lora=str(tmp_path / "loha.safetensors"), new_rank=2, device="cpu")


def test_an_existing_output_is_never_overwritten(tmp_path: Path) -> None:
    source = write(tmp_path / "in.safetensors", {LINEAR: module(32, (32,), 4, 4.0, 0)})
    taken = tmp_path / "taken.safetensors"
    taken.write_bytes(b"keep me")
    with pytest.raises(ToolError, match="taken.safetensors exists; the tools never overwrite a file"):
        run("resize", tmp_path / "job", lora=str(source), new_rank=2, device="cpu", save_to=str(taken))
    assert taken.read_bytes() == b"keep me"
