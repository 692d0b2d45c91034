"""HiDream-O1-Image on its tiny random-init model in Comfy-Org's single-file layout (trainers/models/hidream_o1/
tiny.py), in process: the file holds the published names and loads as HiDream-O1 (HiDream-ai's `model.`-named weights
with their LM head and deepstack mergers too) and round-trips, captions are laid out as musubi-tuner's, the attention
and positions are the reference's, the noise is musubi-tuner's, every LoRA key maps onto ComfyUI's model by its
generic names (musubi-tuner's own names read too), a sample renders, musubi-tuner's config is read with its names,
and Validate refuses a wrong-family model and what HiDream-O1 cannot honour by name before anything loads. The
training runs are in test_hidream_o1_runs.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map
from safetensors.torch import load_file, save_file

from trainers.core.options import BY_NAME
from trainers.models import ModelFiles, load_model
from trainers.models.checks import model_issues
from trainers.models.hidream_o1.tiny import build_tiny_hidream_o1

# Comfy-Org's checkpoints/hidream_o1_image_bf16.safetensors names (ComfyUI's HiDreamO1Transformer's modules)
PUBLISHED = ("language_model.embed_tokens.weight", "language_model.layers.0.self_attn.q_proj.weight",
             "language_model.layers.1.self_attn.k_norm.weight", "language_model.layers.0.mlp.gate_proj.weight",
             "language_model.layers.1.post_attention_layernorm.weight", "language_model.norm.weight",
             "visual.patch_embed.proj.weight", "visual.pos_embed.weight", "visual.blocks.0.attn.qkv.weight",
             "visual.blocks.0.mlp.linear_fc2.weight", "visual.merger.linear_fc1.weight", "t_embedder1.mlp.0.weight",
             "t_embedder1.mlp.2.bias", "x_embedder.proj1.weight", "x_embedder.proj2.bias",
             "final_layer2.linear.weight")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return build_tiny_hidream_o1(tmp_path_factory.mktemp("hidream_o1"))


@pytest.fixture(scope="module")
def model(files: dict[str, str]):  # noqa: ANN201 - a LoadedModel
    return load_model(files["pretrained_model_name_or_path"], "auto", torch.float32, files=ModelFiles.from_values(files))


def _values(files: dict[str, str], **values: object) -> dict[str, object]:
    return {**{n: o.default for n, o in BY_NAME.items()}, **files, **values}


def test_the_file_loads_as_hidream_o1_and_round_trips(files: dict[str, str], model) -> None:
    saved = load_file(files["pretrained_model_name_or_path"])
    assert set(PUBLISHED) <= saved.keys()
    assert not any(k.startswith(("model.", "lm_head.")) or "deepstack" in k for k in saved)
    assert model.family.name == "hidream_o1" and type(model.unet).__name__ == "HiDreamO1Transformer"
    assert type(model.vae).__name__ == "PixelSpace"  # no autoencoder: the pixels are the latents
    from trainers.models.file_kind import model_kind

    assert model_kind(Path(files["pretrained_model_name_or_path"])) == "HiDream-O1-Image checkpoint"  # Browse's
    written = model.family.to_checkpoint(model, model.unet.state_dict())
    assert written.keys() == saved.keys() and all(torch.equal(written[k], saved[k]) for k in saved)


def test_hidream_ais_own_weights_load_too(files: dict[str, str], model, tmp_path: Path) -> None:
    """HiDream-ai's (and musubi-tuner's saves') names sit under `model.`, with an LM head and deepstack mergers."""
    state = {f"model.{k}": v for k, v in load_file(files["pretrained_model_name_or_path"]).items()}
    state["lm_head.weight"] = torch.zeros(4, 32)
    state["model.visual.deepstack_merger_list.0.linear_fc1.weight"] = torch.zeros(4, 4)
    path = tmp_path / "model.safetensors"
    save_file(state, path)
    loaded = load_model(str(path), "auto", torch.float32, files=ModelFiles.from_values(files))
    ours = model.unet.state_dict()
    assert loaded.unet.state_dict().keys() == ours.keys()
    assert all(torch.equal(v, ours[k]) for k, v in loaded.unet.state_dict().items())


def test_captions_are_laid_out_as_musubi_tuner_does(model) -> None:
    tok = model.tokenizers[0]
    mask, ids = model.encode_texts(["sks shape", "x" * 600], 1)
    assert mask.shape == (2, 512, 1) and ids.shape == (2, 512) and ids.dtype == torch.long
    text = "".join(tok.convert_ids_to_tokens(ids[0, : int(mask[0].sum())].tolist()))
    assert text == "<|im_start|>user\nsks shape<|im_end|>\n<|im_start|>assistant\n<|boi_token|><|tms_token|>"
    assert int(mask[1].sum()) == 512 and tok.convert_ids_to_tokens(ids[1, -2:].tolist()) == [
        "<|boi_token|>", "<|tms_token|>"]  # cut, not its end


def test_the_attention_and_positions_are_the_references() -> None:
    from trainers.models.hidream_o1.model import attention_mask, sequence_positions

    ids = torch.tensor([[5, 6, 9, 0]])  # two text tokens, the timestep token (9), one padding token
    text_mask = torch.tensor([[1, 1, 1, 0]])
    allowed = attention_mask(ids, text_mask, 2, 9)[0, 0]
    assert allowed[0].tolist() == [True, False, False, False, False, False]  # text: causal
    assert allowed[2].tolist() == [True, True, True, False, True, True]  # the timestep token: every real token
    assert allowed[4].tolist() == allowed[5].tolist() == [True, True, True, False, True, True]  # the image: too
    positions = sequence_positions(text_mask, (1, 2))
    assert positions[:, 0, :3].tolist() == [[0, 1, 2]] * 3
    assert positions[:, 0, 4:].tolist() == [[4096, 4096], [4096, 4096], [4096, 4097]]  # (t, row, column) + 4096


def test_padding_common_to_a_batch_changes_nothing(model) -> None:
    family = model.family.configured(_values({}, timestep_sampling="uniform"))
    hidden, second = model.encode_texts(["sks shape", "a longer caption here"], 1)
    noisy = torch.randn(1, 3, 64, 64)
    timesteps = torch.tensor([700.0])
    with torch.no_grad():
        alone = family.denoise(model.unet, noisy, timesteps, hidden[:1], second[:1], None)
        padded = family.denoise(model.unet, noisy.repeat(2, 1, 1, 1), timesteps.repeat(2), hidden, second, None)
    assert torch.allclose(alone[0], padded[0], atol=1e-5)


def test_the_noise_is_musubi_tuners_and_the_model_is_scored_on_the_clean_image(model) -> None:
    from trainers.models.hidream_o1.model import patchify, unpatchify
    from trainers.train.flow import prediction_and_target

    family = model.family.configured(_values({}, noise_scale_start=8.0, noise_scale_end=6.0, noise_clip_std=2.0))
    noise = torch.randn(2, 3, 32, 32) * 2
    sigmas = torch.tensor([1.0, 0.25])
    shaped = family.shaped_noise(noise, sigmas)
    limit = 2.0 * noise[1].std()
    assert torch.allclose(shaped[0], noise[0].clamp(-2 * noise[0].std(), 2 * noise[0].std()) * 8.0)
    assert torch.allclose(shaped[1], noise[1].clamp(-limit, limit) * 6.5)  # 8 + (6 - 8) * (1 - 0.25)
    dev = model.family.configured(_values({}, model_type="dev"))
    assert (dev.noise_scale, dev.noise_clip_std) == ((7.5, 7.5), 2.5)  # musubi-tuner's dev defaults
    hidden, second = model.encode_texts(["sks shape"] * 2, 1)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    noisy = (1 - sigmas.view(-1, 1, 1, 1)) * x + sigmas.view(-1, 1, 1, 1) * shaped
    with torch.no_grad():
        output = family.denoise(model.unet, noisy, sigmas * 1000, hidden, second, None)
        length = int(hidden[0, :, 0].sum())  # the caption's tokens, without the padding
        clean = model.unet(second[:, :length], (hidden[:, :length, 0] > 0.5).long(), patchify(noisy), (1, 1),
                           1 - sigmas)
    noised = type("N", (), {"sigmas": sigmas, "noisy": noisy, "noise": shaped})()
    pred, target, _ = prediction_and_target(output, noised, x, family.settings, velocity=False)
    assert torch.equal(target, x) and torch.allclose(pred, unpatchify(clean, 32, 32), atol=1e-4)


def test_every_lora_key_maps_onto_comfyuis_model_and_musubi_names_read_back(model) -> None:
    """ComfyUI's HiDreamO1Transformer has Comfy-Org's names under diffusion_model.; model_lora_keys_unet maps
    `lora_unet_<module with _>` onto each."""
    from trainers.methods.lora.network import LoRANetwork

    unet = model.unet
    targets = model.family.lora_targets(unet)
    network = LoRANetwork(unet, [], unet_key_style="own", network_dim=4, network_alpha=2, train_text_encoder=False,
                          unet_targets=targets)
    torch.manual_seed(0)
    for name, param in network.named_parameters():
        if "lora_up" in name:
            param.data.normal_()
    lora = network.kohya_state_dict(torch.float32)
    comfy = {PREFIX + k: v.shape for k, v in model.family.to_checkpoint(model, unet.state_dict()).items()}
    patches, unloaded = load_lora(lora, unet_key_map(comfy))
    assert unloaded == [] and len(patches) == len(targets) == 2 * 7 + 3  # two decoder layers, the pixel heads
    check_patches(patches, comfy)
    assert {PREFIX + "x_embedder.proj1.weight", PREFIX + "final_layer2.linear.weight"} <= patches.keys()
    assert not any("embed_tokens" in k or "visual" in k or "t_embedder" in k for k in patches)  # t2i's targets
    musubi = {k.replace("lora_unet_", "lora_unet_model_", 1): v for k, v in lora.items()}
    assert model.family.lora_in_own_names(musubi).keys() == lora.keys()
    assert model.family.lora_in_musubi_names(lora).keys() == musubi.keys()  # tools convert --to musubi


def test_a_sample_renders_through_the_familys_sampling_loop(model, tmp_path: Path) -> None:
    from PIL import Image

    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    prompts = config_prompts("", ["sks shape --n blurry --w 64 --h 96 --s 2 --l 3"])
    (first,) = generate_samples(model, prompts, tmp_path, "s", default_size=(64, 64), sampler="euler")
    (again,) = generate_samples(model, prompts, tmp_path / "again", "s", default_size=(64, 64), sampler="euler")
    assert Image.open(first).size == (64, 96)
    assert Image.open(first).tobytes() == Image.open(again).tobytes()  # the seed decides


def test_a_wrong_family_model_is_refused_by_name_before_loading(files: dict[str, str], tmp_path: Path) -> None:
    (issue,) = model_issues(_values(files, model_family="anima"))
    assert issue.field == "model_family" and "HiDream-O1-Image" in issue.message
    lumina = tmp_path / "lumina2.safetensors"  # a Lumina 2 file (NextDiT's caption embedder): headers only are read
    save_file({"cap_embedder.0.weight": torch.ones(4), "x_embedder.weight": torch.ones(4, 4)}, lumina)
    issues = model_issues(_values(files, model_family="hidream_o1", pretrained_model_name_or_path=str(lumina)))
    assert any(i.field == "model_family" and "Lumina 2" in i.message for i in issues)


def test_validate_names_hidream_o1_in_what_it_refuses(files: dict[str, str]) -> None:
    values = _values(files, resolution="1000", ae="/models/ae.safetensors", save_diffusers_lora=True,
                     min_snr_gamma=5.0)
    issues = {i.field: i.message for i in model_issues(values, trains="full")}
    assert {"resolution", "ae", "save_diffusers_lora", "min_snr_gamma", "save_model_as"} <= issues.keys()
    assert all("HiDream-O1" in issues[k] or "diffusers has no HiDream-O1" in issues[k] for k in issues)


def test_the_dev_variant_is_told_by_its_file_name(files: dict[str, str], tmp_path: Path) -> None:
    from trainers.models.hidream_o1.rules import HIDREAM_O1

    found = HIDREAM_O1.distilled_base(tmp_path / "hidream_o1_image_dev_bf16.safetensors")
    assert found is not None and found.variant == "HiDream-O1-Image-Dev" and "model_type = 'dev'" in found.without
    assert HIDREAM_O1.distilled_base(tmp_path / "hidream_o1_image_bf16.safetensors") is None
    from trainers.models.distilled import distilled_notes

    dev = tmp_path / "hidream_o1_image_dev_bf16.safetensors"
    save_file(load_file(files["pretrained_model_name_or_path"]), dev)
    (note,) = distilled_notes(_values(files, pretrained_model_name_or_path=str(dev)))
    assert "HiDream-O1-Image-Dev is a distilled base" in note and "model_type = 'dev'" in note
    loaded = load_model(str(dev), "auto", torch.float32, files=ModelFiles.from_values(files))
    assert (loaded.family.model_type, loaded.family.noise_scale) == ("dev", (7.5, 7.5))  # Generate samples so
    assert loaded.noise_scheduler.config.shift == 1.0
    assert loaded.family.configured(_values(files)).model_type == "full"  # a run's model_type rules


def test_musubi_tuners_config_is_read_with_its_names(tmp_path: Path) -> None:
    from trainers.core.errors import ConfigError
    from trainers.core.options import load_config

    path = tmp_path / "musubi.toml"
    text = ('dit = "/m/hidream_o1_image_bf16.safetensors"\nnetwork_module = "networks.lora_hidream_o1"\n'
            'network_dim = 32\nmodel_type = "dev"\ntask = "t2i"\ntimestep_sampling = "uniform"\n'
            'weighting_scheme = "none"\nnoise_scale_start = 7.5\nnoise_clip_std = 2.5\nflash_attn = true\n'
            'skip_t2i_visual_dummy = true\nlearning_rate = 4e-5\noutput_dir = "/tmp/out"\n')
    path.write_text(text, encoding="utf-8")
    cfg = load_config("lora", path, [])
    assert (cfg.model_family, cfg.pretrained_model_name_or_path, cfg.model_type, cfg.noise_scale_start,
            cfg.noise_clip_std, cfg.network_module) == ("hidream_o1", "/m/hidream_o1_image_bf16.safetensors", "dev",
                                                        7.5, 2.5, "networks.lora")
    path.write_text(text.replace('task = "t2i"', 'task = "i2i"') + "dino_loss_weight = 0.1\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config("lora", path, [])
    assert "task = 'i2i'" in str(err.value) and "dino_loss_weight" in str(err.value)
