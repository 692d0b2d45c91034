"""LyCORIS files Atelier trains (LoHa, LoKr, IA3, DoRA, full, OFT, GLoRA, DyLoRA, LoCon) are used by our own Generate
path and the compare grid: at weight 1 they change the image, at weight 0 it is the base image."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import train
from trainers.demo import build_dataset
from trainers.loras.lycoris_files import LycorisFile
from trainers.methods.lora.file_format import save_lora_file
from trainers.methods.lora.lycoris_net import LycorisNetwork
from trainers.models import load_model

TRAINED = {  # file stem -> network_args of lycoris.kohya, as a user sets them; trained for real
    "loha": ["algo=loha"],
    "lokr": ["algo=lokr", "factor=4"],
    "ia3": ["algo=ia3"],
    "dora": ["algo=locon", "dora_wd=True"],
    "locon": ["algo=locon"],
}
BUILT = {"full": "full", "diag_oft": "diag-oft", "boft": "boft", "glora": "glora", "dylora": "dylora"}  # as saved


def lycoris_network(model, algo: str, seed: int) -> LycorisNetwork:
    """A LyCORIS network as the trainer attaches it, its weights moved off their start (as if trained)."""
    style = model.family.unet_key_style
    network = LycorisNetwork(model.unet, model.text_encoders, model.vae, unet_key_style=style, network_dim=4,
                             network_alpha=4, kwargs={"algo": algo}, train_unet=True, train_text_encoder=True)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in network.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.05)
    return network.eval()


@pytest.fixture(scope="module")
def lycoris_files(tiny_sd1_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny file of each LyCORIS kind: LoHa, LoKr, IA3, DoRA and LoCon trained for a step at a rate that changes
    the image; the other algorithms written as the trainer writes them, from networks with moved weights."""
    root = tmp_path_factory.mktemp("lycoris")
    data = build_dataset(root / "data", folder="2_sks shape")
    files = {}
    for name, args in TRAINED.items():
        values = {"pretrained_model_name_or_path": str(tiny_sd1_dir), "train_data_dir": str(data),
                  "output_dir": str(root / "out"), "output_name": name, "resolution": "64", "train_batch_size": 2,
                  "max_data_loader_n_workers": 0, "learning_rate": 0.05, "network_dim": 4, "network_alpha": 4,
                  "max_train_steps": 1, "network_module": "lycoris.kohya", "network_args": args}
        assert train("lora", root / f"run-{name}", **values) == 0, name
        files[name] = root / "out" / f"{name}.safetensors"
    for seed, (name, algo) in enumerate(BUILT.items()):
        model = load_model(str(tiny_sd1_dir), "auto", torch.float32)  # a network attaches to the model's layers
        files[name] = root / "out" / f"{name}.safetensors"
        save_lora_file(files[name], lycoris_network(model, algo, seed).kohya_state_dict(torch.float16),
                       {"ss_network_module": "lycoris.kohya"})
    return files


def pixels(path: Path | str) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB")).astype(int)


@pytest.mark.slow
def test_every_lycoris_kind_we_train_renders_in_the_compare_grid(lycoris_files: dict[str, Path], tiny_sd1_dir: Path,
                                                                 tmp_path: Path) -> None:
    from trainers.__main__ import main

    job = tmp_path / "job"
    args = ["--model", str(tiny_sd1_dir), "--run-dir", str(job), "--prompt", "sks shape, red circle --d 3",
            "--weight", "0", "--weight", "1", "--steps", "2", "--cpu-threads", "1", "--devices", "cpu"]
    for path in lycoris_files.values():
        args += ["--compare-lora", str(path)]
    code = main(["compare", *args])
    events = [json.loads(line) for line in (job / "events.jsonl").read_text(encoding="utf-8").splitlines()]
    assert code == 0 and not [e for e in events if e["type"] in ("error", "warning")], events[-3:]
    images = {e["label"]: pixels(e["path"]) for e in events if e["type"] == "image"}
    base = images["loha weight 0"]  # weight 0 loads nothing: the base model's image
    for name in lycoris_files:
        np.testing.assert_array_equal(images[f"{name} weight 0"], base, err_msg=name)
        assert np.abs(images[f"{name} weight 1"] - base).mean() > 1, f"{name} at weight 1 draws the base image"
    assert [e for e in events if e["type"] == "grid"]


def sdxl_outputs(model) -> tuple[torch.Tensor, ...]:
    """The tiny SDXL UNet's and text encoders' outputs for fixed inputs."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (1, 8), generator=g)
    added = {"text_embeds": torch.randn(1, 32, generator=g), "time_ids": torch.tensor([[64, 64, 0, 0, 64, 64]])}
    with torch.no_grad():
        encoded = [te(ids)[0] for te in model.text_encoders]
        unet = model.unet(torch.randn(1, 4, 8, 8, generator=g), torch.tensor([500]),
                          torch.randn(1, 77, 64, generator=g), added_cond_kwargs=added).sample
    return (unet, *encoded)


def test_a_sdxl_loha_file_computes_what_its_network_did(tiny_sdxl_dir: Path) -> None:
    """SDXL files name UNet layers the SGM way: each must reach the layer the network was trained on."""
    trained_on = load_model(str(tiny_sdxl_dir), "auto", torch.float32)
    base = sdxl_outputs(trained_on)
    network = lycoris_network(trained_on, "loha", seed=1)
    with_network = sdxl_outputs(trained_on)
    assert any("lora_unet_input_blocks" in k for k in network.kohya_state_dict(torch.float32))
    model = load_model(str(tiny_sdxl_dir), "auto", torch.float32)
    loaded = LycorisFile(network.kohya_state_dict(torch.float32), model, torch.device("cpu"), torch.float32)
    for ours, theirs, before in zip(sdxl_outputs(model), with_network, base):
        torch.testing.assert_close(ours, theirs)
        assert not torch.equal(ours, before)
    loaded.set_weight(0.0)
    for ours, before in zip(sdxl_outputs(model), base):
        torch.testing.assert_close(ours, before)
    loaded.remove()
    for ours, before in zip(sdxl_outputs(model), base):
        assert torch.equal(ours, before)
