"""HunyuanVideo 1.5 text-to-video, in process on a tiny random-init model of its real diffusers classes
(HunyuanVideo15Transformer3DModel, the causal AutoencoderKLHunyuanVideo15, Qwen2_5_VLTextModel and ByT5): the folder
is claimed, its image-to-video pipeline and other families' models are refused by name before anything loads,
captions are encoded and the transformer called as HunyuanVideo15Pipeline does on (B, C, F, h, w) latents (images as
1-frame clips), one flow-matching step trains every block, and its LoRA file (ComfyUI's names; musubi-tuner's read)
loads with every key in ComfyUI (comfy_lora.py) and in the pipeline's transformer."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map
from family_checks import (check_adapter_updates, check_preset, clip_and_image_flow_steps, check_wrong_family_refused,
                           model_fixtures, clips_dataset, index_folder, option_values, saved_fixture)

from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.hunyuan_video15.rules import HUNYUAN_VIDEO15
from trainers.models.hunyuan_video15.tiny import build_tiny_hunyuan_video15
from trainers.models.rules import checkpoint_rules, folder_rules

CAPTIONS = ['a neon sign that reads "OPEN" flickers', "waves at dusk"]


tiny, model = model_fixtures(build_tiny_hunyuan_video15, "hv15")


@pytest.fixture(scope="module")
def pipe(tiny: Path) -> object:
    from diffusers import HunyuanVideo15Pipeline

    return HunyuanVideo15Pipeline.from_pretrained(tiny)


_values, _folder = option_values, index_folder


def test_the_tiny_folder_is_claimed_and_incomplete_or_step_distilled_folders_refused(
        tiny: Path, tmp_path: Path) -> None:
    assert folder_rules(tiny) is HUNYUAN_VIDEO15
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["transformer"][1] == "HunyuanVideo15Transformer3DModel"
    assert index["vae"][1] == "AutoencoderKLHunyuanVideo15" and index["text_encoder"][1] == "Qwen2_5_VLTextModel"
    i2v = _folder(tmp_path, "i2v", {**index, "_class_name": "HunyuanVideo15ImageToVideoPipeline"})
    (issue,) = model_issues(_values(i2v))
    assert issue.field == "pretrained_model_name_or_path" and "without its image_encoder" in issue.message
    distilled = _folder(tmp_path, "step_distilled", index)
    (distilled / "transformer").mkdir()
    (distilled / "transformer" / "config.json").write_text(json.dumps({"use_meanflow": True}))
    (issue,) = model_issues(_values(distilled))
    assert issue.field == "pretrained_model_name_or_path" and "step-distilled (MeanFlow)" in issue.message


def test_a_wrong_family_model_is_refused_by_name_before_loading(tiny: Path, tmp_path: Path) -> None:
    check_wrong_family_refused(_values, tiny, tmp_path, "hunyuan_video15", "HunyuanVideo 1.5", "wan21",
                               ("HunyuanImagePipeline", "HunyuanImage 2.1"))


def test_its_single_files_are_recognised() -> None:
    """Tencent's (and ComfyUI's) transformer files: their condition-type embedding is the family's own (HunyuanImage
    2.1's files share the ByT5 mapper). How they are read: test_single_file_hunyuan_video15.py."""
    shapes = {"cond_type_embedding.weight": (3, 2048), "byt5_in.fc1.weight": (2048, 1472),
              "double_blocks.0.img_attn_q.weight": (2048, 2048)}
    assert checkpoint_rules(shapes, "hunyuanvideo1.5_480p_t2v.safetensors") is HUNYUAN_VIDEO15
    assert checkpoint_rules({f"model.diffusion_model.{k}": v for k, v in shapes.items()}, "x.safetensors") is \
        HUNYUAN_VIDEO15


def test_validate_names_the_family_in_what_it_refuses(tiny: Path) -> None:
    issues = model_issues(_values(tiny, min_snr_gamma=5.0, save_model_as="safetensors", text_encoder_lr=[1e-4]))
    assert sorted(i.field for i in issues) == ["min_snr_gamma", "save_model_as", "text_encoder_lr"]
    assert all("HunyuanVideo 1.5" in i.message for i in issues)


def test_captions_are_encoded_as_its_pipeline_does(model: object, pipe: object) -> None:
    """Qwen2.5-VL's states after the 108 template tokens (1000 of them) and ByT5's of the quoted text (256), each
    with its mask; a caption without quoted text has ByT5's zero states and mask."""
    with torch.no_grad():
        text, text_mask, glyph, glyph_mask = pipe.encode_prompt(CAPTIONS, device=torch.device("cpu"),
                                                                dtype=torch.float32, batch_size=2)
        ours, mask = model.encode_texts(CAPTIONS, 1)
    assert ours.shape == (2, 1000 + 256, 32) and text.shape == (2, 1000, 32) and glyph.shape == (2, 256, 24)
    assert torch.equal(mask[:, :1000], text_mask) and torch.equal(mask[:, 1000:], glyph_mask)
    assert torch.allclose(ours[:, :1000], text * text_mask[..., None], atol=1e-5)
    assert torch.allclose(ours[:, 1000:, :24], glyph * glyph_mask[..., None], atol=1e-5)
    assert glyph_mask[0].sum() > 0 and glyph_mask[1].sum() == 0 and ours[1, 1000:].abs().sum() == 0


def test_clips_and_images_encode_to_latents_with_a_frame_axis(model: object) -> None:
    """Causal temporal compression 4 (1 + 4k frames to 1 + k), spatial 16, its channels scaled by 1.03682; an image
    is one frame."""
    with torch.no_grad():
        clip = model.vae.encode(torch.rand(1, 3, 9, 32, 48) * 2 - 1).latent_dist.mean
        image = model.vae.encode(torch.rand(2, 3, 32, 48) * 2 - 1).latent_dist.mean
    assert clip.shape == (1, 8, 3, 2, 3) and image.shape == (2, 8, 1, 2, 3)
    assert torch.allclose(model.family.vae_latents(clip, model.vae), clip * 1.03682)


def test_denoise_calls_the_transformer_as_its_pipeline_does(model: object, pipe: object) -> None:
    """Zero condition latents and mask beside the noisy ones; the pipeline's 729 zero image states (masked out) and
    its untrimmed text give the same velocity as none and the trimmed text."""
    noisy, timesteps = torch.randn(2, 8, 2, 2, 3), torch.tensor([900.0, 100.0])
    hidden, mask = model.encode_texts(CAPTIONS, 1)
    with torch.no_grad():
        text, text_mask, glyph, glyph_mask = pipe.encode_prompt(CAPTIONS, device=torch.device("cpu"),
                                                                dtype=torch.float32, batch_size=2)
        ours = model.family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        theirs = model.unet(hidden_states=torch.cat([noisy, torch.zeros(2, 9, 2, 2, 3)], dim=1), timestep=timesteps,
                            encoder_hidden_states=text, encoder_attention_mask=text_mask,
                            encoder_hidden_states_2=glyph, encoder_attention_mask_2=glyph_mask,
                            image_embeds=torch.zeros(2, 729, 16), return_dict=False)[0]
    assert ours.shape == noisy.shape and torch.isfinite(ours).all()
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_one_flow_matching_step_on_a_clip_and_an_image_trains_every_block(model: object) -> None:
    for run in clip_and_image_flow_steps(model, CAPTIONS[0], 2.0, masked=True):
        blocks = run.unet.transformer_blocks
        for i, block in enumerate(blocks):
            assert block.attn.to_q.weight.grad.abs().sum() > 0, i
            assert block.ff.net[2].weight.grad.abs().sum() > 0, i
        # the text stream's last feed-forward feeds nothing (the text tokens are dropped after the last block)
        assert blocks[0].ff_context.net[2].weight.grad.abs().sum() > 0 and blocks[-1].ff_context.net[2].weight.grad is None


def _comfy_shapes(unet: torch.nn.Module) -> dict[str, torch.Size]:
    """The double blocks' linear weights of ComfyUI's HunyuanVideo 1.5 model (comfy/ldm/hunyuan_video/model.py on
    FLUX's DoubleStreamBlock: img_mod.lin, img_attn.qkv, img_attn.proj, img_mlp.0, img_mlp.2 and the txt_ ones)."""
    config = unet.config
    width = config.num_attention_heads * config.attention_head_dim
    mlp = int(width * config.mlp_ratio)
    shapes = {}
    for i in range(config.num_layers):
        for stream in ("img", "txt"):
            shapes[f"{PREFIX}double_blocks.{i}.{stream}_mod.lin.weight"] = torch.Size((6 * width, width))
            shapes[f"{PREFIX}double_blocks.{i}.{stream}_attn.qkv.weight"] = torch.Size((3 * width, width))
            shapes[f"{PREFIX}double_blocks.{i}.{stream}_attn.proj.weight"] = torch.Size((width, width))
            shapes[f"{PREFIX}double_blocks.{i}.{stream}_mlp.0.weight"] = torch.Size((mlp, width))
            shapes[f"{PREFIX}double_blocks.{i}.{stream}_mlp.2.weight"] = torch.Size((width, mlp))
    return shapes


saved = saved_fixture()


def test_its_lora_file_has_comfyuis_names_and_comfyui_loads_every_key(saved: SimpleNamespace) -> None:
    assert {t.name for t in saved.targets} >= {"lora_unet_double_blocks_0_img_attn_qkv",
                                               "lora_unet_double_blocks_0_txt_mod_lin",
                                               "lora_unet_double_blocks_1_img_mlp_0",
                                               "lora_unet_double_blocks_1_txt_attn_proj"}
    shapes = _comfy_shapes(saved.unet)
    patches, not_loaded = load_lora(saved.file, unet_key_map(shapes))
    assert not_loaded == []  # ComfyUI warns "lora key not loaded" for each of these
    assert len(patches) == len(saved.targets) == len(shapes) == 2 * 10  # every block linear has its LoRA
    check_patches(patches, shapes)


def test_the_pipelines_transformer_loads_every_key_into_the_layer_that_was_trained(saved: SimpleNamespace,
                                                                                   pipe: object) -> None:
    """HunyuanVideo15Pipeline has no LoRA loader: its transformer's load_lora_adapter takes lora_for_pipeline's
    keys, every one, and computes what the network as training runs it does."""
    from trainers.models.hunyuan_video15.family import HUNYUAN_VIDEO15

    transformer = copy.deepcopy(saved.unet).eval()
    state = HUNYUAN_VIDEO15.lora_for_pipeline(saved.state, saved.view)
    transformer.load_lora_adapter(state, prefix="transformer", adapter_name="default_0")
    check_adapter_updates(transformer, saved.updates)
    assert len(saved.updates) == 2 * 14  # q, k, v apart in diffusers
    inputs = {"hidden_states": torch.randn(1, 17, 2, 2, 2), "timestep": torch.tensor([500.0]),
              "encoder_hidden_states": torch.randn(1, 7, 32), "encoder_attention_mask": torch.ones(1, 7),
              "encoder_hidden_states_2": torch.randn(1, 3, 24), "encoder_attention_mask_2": torch.ones(1, 3),
              "image_embeds": torch.zeros(1, 0, 16), "return_dict": False}
    saved.network.apply_to()  # the network as training runs it computes what diffusers does
    with torch.no_grad():
        assert torch.allclose(transformer(**inputs)[0], saved.unet(**inputs)[0], atol=1e-4)


def test_musubis_lora_files_are_read_in_comfyuis_names(saved: SimpleNamespace) -> None:
    """musubi-tuner's lora_hv_1_5 names (q, k and v apart, img_mlp_fc1, img_mod_linear) fused and renamed as its
    convert_hunyuan_video_1_5_lora_to_comfy.py does: the same update of every layer."""
    from trainers.models.hunyuan_video15.family import HUNYUAN_VIDEO15

    musubi: dict[str, torch.Tensor] = {}
    renames = {"_mlp_0": "_mlp_fc1", "_mlp_2": "_mlp_fc2", "_mod_lin": "_mod_linear"}
    for target in saved.targets:
        name = target.name
        down, up = saved.state[f"{name}.lora_down.weight"], saved.state[f"{name}.lora_up.weight"]
        alpha = saved.state[f"{name}.alpha"]
        if name.endswith("_qkv"):  # musubi-tuner trains q, k and v as layers of their own, each of the rank
            for j, part in enumerate("qkv"):
                rows = slice(j * up.shape[0] // 3, (j + 1) * up.shape[0] // 3)
                musubi[f"{name[:-4]}_{part}.lora_down.weight"] = down
                musubi[f"{name[:-4]}_{part}.lora_up.weight"] = up[rows]
                musubi[f"{name[:-4]}_{part}.alpha"] = alpha
            continue
        for ours, theirs in renames.items():
            name = name.replace(ours, theirs) if name.endswith(ours) else name
        musubi.update({f"{name}.lora_down.weight": down, f"{name}.lora_up.weight": up, f"{name}.alpha": alpha})
    read = HUNYUAN_VIDEO15.lora_in_own_names(musubi)
    assert set(read) == set(saved.state)
    shapes = _comfy_shapes(saved.unet)
    key_map = unet_key_map(shapes)
    ours, _ = load_lora(saved.state, key_map)
    theirs, not_loaded = load_lora(read, key_map)
    assert not_loaded == [] and ours.keys() == theirs.keys()
    for key in ours:
        assert torch.allclose(ours[key], theirs[key], atol=1e-5), key


def video_dataset(tmp: Path) -> Path:
    """3 tiny clips (9, 5 and 12 frames at 24 fps, a sign in their captions) and an image, as a musubi-tuner video
    dataset config."""
    return clips_dataset(tmp, fps=24, caption_tail=', a sign reading "HI"')


PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("hunyuan_video15_t2v_lora_*gb.toml"))


def test_there_is_a_preset_for_each_small_tier() -> None:
    assert [p.stem.rsplit("_", 1)[1] for p in PRESETS] == ["12gb", "16gb", "24gb"]


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_fits_its_tier_and_validates_on_clips(path: Path, tiny: Path, tmp_path: Path) -> None:
    """By the estimate for the published 480p T2V model (as its comment says, the caption pass too), and Validate's
    preflight on the tiny model with a video dataset config."""
    estimate, comment = check_preset(path, "hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v", tiny,
                                     video_dataset(tmp_path / "data"), tmp_path / "out")
    assert estimate.source.startswith("the published HunyuanVideo 1.5")
    assert f"~{estimate.caching_card_gb:.1f} GB while the captions are encoded" in comment


@pytest.fixture(scope="module")
def tiny_i2v(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_hunyuan_video15(tmp_path_factory.mktemp("hv15-i2v") / "model", i2v=True)


def test_an_image_to_video_first_frame_conditions_as_its_pipeline_does(tiny_i2v: Path) -> None:
    """The first frame alone through the VAE (its mode, scaled) on the first latent frame, a mask of ones there,
    SigLIP's states of it; and denoise calls the transformer with them as HunyuanVideo15ImageToVideoPipeline does."""
    from diffusers import HunyuanVideo15ImageToVideoPipeline
    from PIL import Image

    from trainers.models.hunyuan_video15.i2v import first_frame_condition

    assert folder_rules(tiny_i2v) is HUNYUAN_VIDEO15
    model = load_model(str(tiny_i2v), "auto", torch.float32)
    family = model.family
    assert family.i2v and family.pipeline_class == "HunyuanVideo15ImageToVideoPipeline"
    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(tiny_i2v)
    first = torch.randint(0, 256, (32, 48, 3), dtype=torch.uint8)  # 8-bit pixels, as a PIL image has them
    pixels = (first.permute(2, 0, 1).float() / 127.5 - 1)[None, None].expand(1, 5, -1, -1, -1)
    condition = first_frame_condition(model.vae, family.image_encoder, pixels, 2, torch.float32)
    image = Image.fromarray(first.numpy())
    with torch.no_grad():
        latents, mask = pipe.prepare_cond_latents_and_mask(torch.zeros(1, 8, 2, 2, 3), image, 1, 32, 48,
                                                           torch.float32, torch.device("cpu"))
        embeds = pipe.encode_image(image, 1, torch.device("cpu"), torch.float32)
    assert torch.allclose(condition.latents[:, :8], latents, atol=1e-4) and torch.equal(condition.latents[:, 8:], mask)
    assert torch.allclose(condition.image_embeds, embeds, atol=1e-5) and embeds.shape == (1, 4, 16)
    noisy, timesteps = torch.randn(1, 8, 2, 2, 3), torch.tensor([700.0])
    hidden, text_mask = model.encode_texts(CAPTIONS[:1], 1)
    family.slot.latents, family.slot.image_embeds = condition.latents, condition.image_embeds
    with torch.no_grad():
        ours = family.denoise(model.unet, noisy, timesteps, hidden, text_mask, None)
        text, text_mask_, glyph, glyph_mask = pipe.encode_prompt(CAPTIONS[:1], device=torch.device("cpu"),
                                                                 dtype=torch.float32)
        theirs = model.unet(hidden_states=torch.cat([noisy, latents, mask], dim=1), timestep=timesteps,
                            encoder_hidden_states=text, encoder_attention_mask=text_mask_,
                            encoder_hidden_states_2=glyph, encoder_attention_mask_2=glyph_mask,
                            image_embeds=embeds, return_dict=False)[0]
    family.slot.latents = family.slot.image_embeds = None
    assert torch.allclose(ours, theirs, atol=1e-4)
    with pytest.raises(ValueError, match="first frame"):
        family.denoise(model.unet, noisy, timesteps, hidden, text_mask, None)
