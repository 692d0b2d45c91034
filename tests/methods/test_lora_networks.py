"""Network types and options of LoRA training as sd-scripts users set them: LyCORIS, DyLoRA, dropouts, block-wise
ranks and learning rates, LoRA+, max-norm, dim_from_weights, base_weights, and what the file records."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from helpers import train
from trainers.core.errors import ConfigError
from trainers.core.options import config_from_dict
from trainers.demo import build_dataset
from trainers.methods.lora.blocks import block_index, block_lr_weights
from trainers.methods.lora.dylora import DyLoRANetwork, DyLoRAUnits
from trainers.methods.lora.file_format import read_lora_file, save_lora_file, with_hashes
from trainers.methods.lora.lycoris_net import LycorisNetwork
from trainers.methods.lora.network import Dropouts, LoRANetwork
from trainers.methods.lora.params import LearningRates, param_groups
from trainers.methods.lora.settings import network_settings
from trainers.models import load_model
from trainers.preflight.validate import validate

FAST = {"resolution": "64", "train_batch_size": 2, "max_data_loader_n_workers": 0, "learning_rate": 1e-3,
        "network_dim": 4, "network_alpha": 2, "max_train_steps": 2}


@pytest.fixture(autouse=True, scope="module")
def flush_denormals():
    torch.set_flush_denormal(True)
    yield
    torch.set_flush_denormal(False)


@pytest.fixture
def sd1(tiny_sd1_dir: Path):
    return load_model(str(tiny_sd1_dir), "auto", torch.float32)


@pytest.fixture
def sdxl(tiny_sdxl_dir: Path):
    return load_model(str(tiny_sdxl_dir), "auto", torch.float32)


def lora_cfg(**values: object):
    return config_from_dict("lora", {"max_train_steps": 1, **values})


def unet_out(model, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    sample = torch.randn(1, 4, 8, 8, generator=g)
    hidden = torch.randn(1, 77, model.unet.config.cross_attention_dim, generator=g)
    with torch.no_grad():
        return model.unet(sample, torch.tensor([500]), hidden).sample


# ---- settings and their checks (torch-free) --------------------------------------------------------------

def test_network_args_are_checked_against_the_module_and_may_not_repeat_an_option() -> None:
    assert network_settings(lora_cfg(network_args=["conv_dim=4", "conv_alpha=2"])).conv_dim == 4
    with pytest.raises(ConfigError, match="'unit' is not an argument of networks.lora"):
        network_settings(lora_cfg(network_args=["unit=2"]))
    issues = {i.field: i.message for i in validate(lora_cfg(network_args=["algo=loha"]), check_paths=False)}
    assert "'algo' is not an argument of networks.lora" in issues["network_args"]
    with pytest.raises(ConfigError, match="conv_dim is given both as an option and in network_args"):
        lora_cfg(conv_dim=4, network_args=["conv_dim=8"])
    lifted = lora_cfg(network_args=["conv_dim=8", "rank_dropout=0.1", "unit=2"])  # options a config sets this way
    assert (lifted.conv_dim, lifted.rank_dropout, lifted.network_args) == (8, 0.1, ["unit=2"])
    bad = lora_cfg(network_module="lycoris.kohya", network_args=["algo=lohaa", "factr=4"])
    messages = " | ".join(i.message for i in validate(bad, check_paths=False) if i.field == "network_args")
    assert "did you mean 'factor'?" in messages and "algo='lohaa' is not a LyCORIS algorithm" in messages
    dylora = lora_cfg(network_module="networks.dylora", network_dim=6, network_args=["unit=4"])
    assert any("unit='4'" in i.message for i in validate(dylora, check_paths=False))
    with pytest.raises(ConfigError, match="block_dims: is not used by network_module = 'lycoris.kohya'"):
        network_settings(lora_cfg(network_module="lycoris.kohya", block_dims="1,2"))
    assert network_settings(lora_cfg(loraplus_lr_ratio=16.0)).kwargs() == {"loraplus_lr_ratio": "16"}
    assert any("nothing would change" in i.message for i in validate(lora_cfg(learning_rate=0.0), check_paths=False))


def test_block_indices_and_learning_rate_weights_follow_sd_scripts() -> None:
    assert block_index("lora_unet_down_blocks_0_attentions_0_proj_in", "diffusers") == 1
    assert block_index("lora_unet_down_blocks_1_downsamplers_0_conv", "diffusers") == 6
    assert block_index("lora_unet_mid_block_attentions_0_proj_in", "diffusers") == 12
    assert block_index("lora_unet_up_blocks_3_attentions_2_proj_out", "diffusers") == 13 + 11
    assert block_index("lora_unet_input_blocks_4_1_proj_in", "sgm") == 5
    assert block_index("lora_unet_middle_block_1_proj_in", "sgm") == 11
    assert block_index("lora_unet_output_blocks_8_0_skip_connection", "sgm") == 21
    weights = block_lr_weights("diffusers", "zeros+0.5", "2", "1,0", 0.0)
    assert len(weights) == 25 and weights[:12] == [0.5] * 12 and weights[12] == 2 and weights[13:15] == [1, 0]
    sdxl = block_lr_weights("sgm", "sine", "", "", 0.0)
    assert len(sdxl) == 23 and sdxl[0] == 1.0 and sdxl[1] == 0.0 and sdxl[9] == pytest.approx(1.0)
    assert block_lr_weights("diffusers", "", "", "", 0.0) is None


# ---- our networks.lora -------------------------------------------------------------------------------------

def test_block_dims_leave_blocks_out_and_lr_weights_group_the_rest(sd1) -> None:
    dims = ",".join(["0"] * 13 + ["2"] * 12)  # only the up blocks get a LoRA, at rank 2
    settings = network_settings(lora_cfg(block_dims=dims, up_lr_weight=",".join(["0.5"] * 12)))
    network = LoRANetwork(sd1.unet, sd1.text_encoders, unet_key_style="diffusers", network_dim=4,
                          network_alpha=2, block_dims=settings.block_dims("diffusers"), train_text_encoder=False)
    names = list(network.unet_loras)
    assert names and all(n.startswith("lora_unet_up_blocks_") for n in names)
    assert {lora.rank for lora in network.unet_loras.values()} == {2}
    rates = LearningRates(1e-3, [1e-4], settings.block_lr_weights("diffusers"))
    groups = param_groups(network.named_modules_for_kohya(), rates, "diffusers")
    assert {g["lr"] for g in groups} == {5e-4} and all(g["name"].startswith("unet_block1") for g in groups)


def test_loraplus_and_one_learning_rate_per_text_encoder(sdxl) -> None:
    network = LoRANetwork(sdxl.unet, sdxl.text_encoders, unet_key_style="sgm", network_dim=4, network_alpha=2)
    rates = LearningRates(1e-3, [2e-4, 3e-4], loraplus_unet=16.0)
    groups = {g["name"]: g for g in param_groups(network.named_modules_for_kohya(), rates, "sgm")}
    assert groups["unet plus"]["lr"] == pytest.approx(16e-3) and groups["unet"]["lr"] == 1e-3
    assert groups["textencoder1"]["lr"] == 2e-4 and groups["textencoder2"]["lr"] == 3e-4
    up = {id(p) for _, m in network.unet_loras.items() for p in [m.lora_up.weight]}
    assert {id(p) for p in groups["unet plus"]["params"]} == up
    assert list(groups)[0] == "unet"  # the first group's learning rate is the one reported


def test_text_encoder_lr_takes_one_value_per_text_encoder_as_sd_scripts() -> None:
    from trainers.methods.lora.trainer import learning_rates

    cfg = config_from_dict("lora", {"text_encoder_lr": [2e-4, 3e-4], "learning_rate": 1e-3})
    assert learning_rates(cfg, network_settings(cfg), "sgm").text_encoders == [2e-4, 3e-4]
    typed = config_from_dict("lora", {"text_encoder_lr": "2e-4, 3e-4"})  # as typed in the page
    assert typed.text_encoder_lr == [2e-4, 3e-4]
    assert config_from_dict("lora", {"text_encoder_lr": [5e-5]}).text_encoder_lr == 5e-5
    with pytest.raises(ConfigError, match="one per text encoder"):
        config_from_dict("lora", {"text_encoder_lr": [1e-4, 1e-4, 1e-4]})
    with pytest.raises(ConfigError, match="text_encoder_lr"):
        config_from_dict("lora", {"text_encoder_lr": [1e-4, -1.0]})


def test_dropouts_act_while_training_only(sd1) -> None:
    network = LoRANetwork(sd1.unet, sd1.text_encoders, unet_key_style="diffusers", network_dim=4, network_alpha=4,
                          dropouts=Dropouts(rank=0.5, module=0.3), train_text_encoder=False)
    network.apply_to()
    with torch.no_grad():
        for lora in network.unet_loras.values():
            lora.lora_up.weight.normal_()
    network.eval()
    assert torch.equal(unet_out(sd1), unet_out(sd1))
    network.train()
    torch.manual_seed(0)
    assert not torch.equal(unet_out(sd1), unet_out(sd1))


def test_max_norm_scales_large_updates_down(sd1) -> None:
    network = LoRANetwork(sd1.unet, sd1.text_encoders, unet_key_style="diffusers", network_dim=4, network_alpha=4)
    modules = network.named_modules_for_kohya()
    with torch.no_grad():
        for i, (_, lora) in enumerate(modules):
            lora.lora_up.weight.normal_(std=3.0 if i % 2 else 1e-5)  # every other module far too large
    scaled, _, top = network.max_norm_regularize(1.0)
    assert scaled == len(modules) // 2 and top == pytest.approx(1.0, rel=1e-4)
    assert all(float(lora.update_weight().norm()) <= 1.0 + 1e-4 for _, lora in modules)


def test_dim_from_weights_takes_every_modules_rank(sd1, tmp_path: Path) -> None:
    source = LoRANetwork(sd1.unet, sd1.text_encoders, unet_key_style="diffusers", network_dim=3, network_alpha=1.5,
                         conv_dim=2)
    state = source.kohya_state_dict(torch.float32)
    rebuilt = LoRANetwork(sd1.unet, sd1.text_encoders, unet_key_style="diffusers", network_dim=8, network_alpha=8,
                          modules_dim=LoRANetwork.modules_dim_from_state_dict(state))
    rebuilt.load_kohya_state_dict(state)
    assert {lora.rank for _, lora in rebuilt.named_modules_for_kohya()} == {3, 2}
    assert rebuilt.kohya_state_dict(torch.float32).keys() == state.keys()


def test_base_weights_merge_what_the_lora_adds(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from trainers.methods.lora.base_weights import merge_base_weights

    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    network = LoRANetwork(model.unet, model.text_encoders, unet_key_style="diffusers", network_dim=4,
                          network_alpha=2, conv_dim=2, train_text_encoder=False)
    with torch.no_grad():
        for _, lora in network.named_modules_for_kohya():
            lora.lora_up.weight.normal_(std=0.05)
    path = tmp_path / "base.safetensors"
    save_lora_file(path, network.kohya_state_dict(torch.float32), {})
    network.apply_to()
    network.set_multiplier(0.5)
    with_lora = unet_out(model)
    merged_model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    assert merge_base_weights(merged_model, [str(path)], [0.5]) == ["base.safetensors x 0.5"]
    torch.testing.assert_close(unet_out(merged_model), with_lora, atol=1e-4, rtol=1e-4)


# ---- DyLoRA and LyCORIS --------------------------------------------------------------------------------------

def test_dylora_trains_one_unit_a_step_and_every_process_draws_the_same(sd1) -> None:
    network = DyLoRANetwork(sd1.unet, sd1.text_encoders, unet_key_style="diffusers", network_dim=4,
                            network_alpha=4, unit=2, seed=7, train_text_encoder=False)
    twin = DyLoRANetwork(sd1.unet, sd1.text_encoders, unet_key_style="diffusers", network_dim=4,
                         network_alpha=4, unit=2, seed=7, train_text_encoder=False)
    assert [m.trained for m in network.unet_loras.values()] == [m.trained for m in twin.unet_loras.values()]
    network.apply_to()
    unet_out(sd1).pow(2).sum()  # no grad: just the forward
    for lora in network.unet_loras.values():
        lora.lora_down.weight.grad = torch.ones_like(lora.lora_down.weight)
        lora.lora_up.weight.grad = torch.ones_like(lora.lora_up.weight)
    DyLoRAUnits(network).after_backward()
    for lora in network.unet_loras.values():
        rows = lora.lora_down.weight.grad.flatten(1).abs().sum(1)
        kept = [i for i, v in enumerate(rows.tolist()) if v]
        assert kept == [2 * lora.trained, 2 * lora.trained + 1]


def test_lycoris_names_are_kohyas_on_both_families(sd1, sdxl) -> None:
    for model, style, te_prefix in ((sd1, "diffusers", "lora_te_text_model_"), (sdxl, "sgm", "lora_te1_text_model_")):
        network = LycorisNetwork(model.unet, model.text_encoders, model.vae, unet_key_style=style, network_dim=4,
                                 network_alpha=2, kwargs={"algo": "loha"}, train_unet=True, train_text_encoder=True)
        names = {k.split(".")[0] for k in network.kohya_state_dict(torch.float32)}
        ours = set(LoRANetwork(model.unet, model.text_encoders, unet_key_style=style, network_dim=4, network_alpha=2,
                               conv_dim=4).unet_loras)
        assert any(n.startswith(te_prefix) for n in names)
        unet = {n for n in names if n.startswith("lora_unet_")}
        assert ours <= unet  # every module kohya's LoCon has, under the same name (plus conv_in, time embedding...)
        if style == "sgm":
            assert not any("down_blocks" in n for n in unet)


@pytest.mark.slow
@pytest.mark.parametrize("module, args, key, model", [
    ("lycoris.kohya", ["algo=loha"], ".hada_w1_a", "fake_model_dir"),
    ("lycoris.kohya", ["algo=lokr", "factor=4"], ".lokr_w1", "fake_model_dir"),
    ("networks.dylora", ["unit=2"], ".lora_down.weight", "tiny_sd1_dir"),  # DyLoRA takes diffusers/sgm names only
])
def test_network_modules_train_save_and_reload(module: str, args: list[str], key: str, model: str,
                                               request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """LyCORIS on the tests' fake model family (tests/fake_family/; its names on real UNets are checked above)."""
    data = build_dataset(tmp_path / "data", folder="2_sks shape")
    out = tmp_path / "out"
    values = {"pretrained_model_name_or_path": str(request.getfixturevalue(model)), "train_data_dir": str(data),
              "output_dir": str(out), **FAST, "network_module": module, "network_args": args}
    assert train("lora", tmp_path / "run", **values) == 0
    tensors, meta = read_lora_file(out / "lora.safetensors")
    assert any(k.endswith(key) for k in tensors) and meta["ss_network_module"] == module
    assert json.loads(meta["ss_network_args"]) == dict(a.split("=") for a in args)
    # starting again from the file needs the same network: it reloads exactly
    again = {**values, "output_name": "again", "network_weights": str(out / "lora.safetensors")}
    assert train("lora", tmp_path / "run2", **again) == 0


# ---- what the file records -----------------------------------------------------------------------------------

def test_hashes_are_sd_scripts_and_a1111s(tmp_path: Path) -> None:
    tensors = {"lora_unet_x.lora_down.weight": torch.randn(300, 1000), "lora_unet_x.lora_up.weight": torch.zeros(2, 2)}
    metadata = with_hashes(tensors, {"ss_network_dim": "4", "modelspec.title": "x"})
    path = tmp_path / "a.safetensors"
    save_lora_file(path, tensors, metadata)
    data = path.read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    assert metadata["sshs_model_hash"] == hashlib.sha256(data[header:]).hexdigest()  # the tensor data only
    from safetensors.torch import save

    ss_only = save(tensors, {"ss_network_dim": "4"})  # what sd-scripts hashes: ss_* metadata only
    assert metadata["sshs_legacy_hash"] == hashlib.sha256(ss_only[0x100000:0x110000]).hexdigest()[:8]
    with safe_open(str(path), "pt") as f:
        assert f.metadata()["sshs_model_hash"] == metadata["sshs_model_hash"]
