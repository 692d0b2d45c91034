"""HunyuanImage 2.1 as a one-folder flow plug-in, in process on a tiny random-init model of its real diffusers classes
(HunyuanImageTransformer2DModel, AutoencoderKLHunyuanImage, Qwen2.5-VL and ByT5 text encoders): the folder is claimed,
its refiner and other families' models are refused by name before anything loads, captions are encoded and the
transformer called as HunyuanImagePipeline does, and a LoRA file loads with every key in diffusers (the transformer's
load_lora_adapter: the pipeline has no LoRA loader) and in ComfyUI (comfy_lora.py), sd-scripts' names read too."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import torch
from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map
from family_checks import checkpointing_runs, check_wrong_family_refused, model_fixtures, saved_fixture

from trainers.core.options import BY_NAME
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.hunyuan_image21.family import glyph_text
from trainers.models.hunyuan_image21.rules import HUNYUAN_IMAGE21
from trainers.models.hunyuan_image21.tiny import build_tiny_hunyuan_image21
from trainers.models.rules import folder_rules

CAPTIONS = ['a red sign that says "OPEN"', "a blue square"]


tiny, model = model_fixtures(build_tiny_hunyuan_image21, "hunyuan")


def _values(model_dir: Path, **options: object) -> dict[str, object]:
    return {**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(model_dir), **options}


def test_the_tiny_folder_is_claimed_and_its_refiner_refused_by_name(tiny: Path, tmp_path: Path) -> None:
    assert folder_rules(tiny) is HUNYUAN_IMAGE21
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["_class_name"] == "HunyuanImagePipeline" and index["text_encoder_2"][1] == "T5EncoderModel"
    refiner = tmp_path / "refiner"
    refiner.mkdir()
    (refiner / "model_index.json").write_text(json.dumps({"_class_name": "HunyuanImageRefinerPipeline"}))
    (issue,) = model_issues(_values(refiner))
    assert issue.field == "pretrained_model_name_or_path" and "refiner" in issue.message
    assert "HunyuanImageRefinerPipeline" in issue.message


def test_a_wrong_family_model_is_refused_by_name_before_loading(tiny: Path, tmp_path: Path) -> None:
    check_wrong_family_refused(_values, tiny, tmp_path, "hunyuan_image21", "HunyuanImage 2.1", "qwen_image")


def test_validate_names_the_family_in_what_it_refuses(tiny: Path) -> None:
    issues = model_issues(_values(tiny, min_snr_gamma=5.0, save_model_as="safetensors", text_encoder_lr=[1e-4]))
    assert sorted(i.field for i in issues) == ["min_snr_gamma", "save_model_as", "text_encoder_lr"]
    assert all("HunyuanImage 2.1" in i.message for i in issues)


def test_glyph_text_is_the_quoted_text_as_its_pipeline_extracts_it() -> None:
    from diffusers.pipelines.hunyuan_image.pipeline_hunyuanimage import extract_glyph_text

    for caption in ['a sign "OPEN" and ‘shop’', "no text here", "“你好” and 'hi'"]:
        assert glyph_text(caption) == extract_glyph_text(caption)


def test_captions_are_encoded_and_rendered_as_its_pipeline_does(model: object) -> None:
    family = model.family.configured({})
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    pipe = family.build_pipeline(model, family.inference_scheduler(model, "euler"))
    pipe.set_progress_bar_config(disable=True)
    text, text_mask, glyph, glyph_mask = pipe.encode_prompt(CAPTIONS, device="cpu", batch_size=2)
    ours = family.pipeline_embeds(hidden, mask)
    length = ours["prompt_embeds"].shape[1]
    for row in range(2):
        key = "" if row == 0 else "negative_"
        keep = text_mask[row, :length].bool()
        assert torch.equal(ours[f"{key}prompt_embeds_mask"][0].bool(), keep)
        assert torch.allclose(ours[f"{key}prompt_embeds"][0][keep], text[row, :length][keep], atol=1e-5)
        assert torch.equal(ours[f"{key}prompt_embeds_mask_2"][0].bool(), glyph_mask[row].bool())
        assert torch.allclose(ours[f"{key}prompt_embeds_2"][0], glyph[row] * glyph_mask[row, :, None], atol=1e-5)
    assert glyph_mask[0].any() and not glyph_mask[1].any()  # only the first caption has glyph text

    def image(**kwargs: object) -> torch.Tensor:
        return pipe(height=64, width=64, num_inference_steps=2, output_type="latent", guidance_scale=4.0,
                    generator=torch.Generator().manual_seed(0), **kwargs).images

    embeds = family.pipeline_embeds(*family.encode_prompts(
        model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1))
    assert torch.allclose(image(**embeds), image(prompt=CAPTIONS[0], negative_prompt=CAPTIONS[1]), atol=1e-4)


def test_denoise_calls_the_transformer_as_its_pipeline_does(model: object) -> None:
    family = model.family.configured({})
    hidden, mask = family.encode_prompts(model.text_encoders, family.tokenize(model.tokenizers, CAPTIONS), 1)
    embeds = family.pipeline_embeds(hidden, mask)
    noisy, timesteps = torch.randn(2, 8, 2, 2), torch.tensor([700.0, 700.0])
    with torch.no_grad():
        ours = family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        first = model.unet(hidden_states=noisy[:1], timestep=timesteps[:1],
                           encoder_hidden_states=embeds["prompt_embeds"],
                           encoder_attention_mask=embeds["prompt_embeds_mask"],
                           encoder_hidden_states_2=embeds["prompt_embeds_2"],
                           encoder_attention_mask_2=embeds["prompt_embeds_mask_2"], return_dict=False)[0]
    assert ours.shape == noisy.shape and torch.allclose(ours[:1], first, atol=1e-5)


def _comfy_shapes(unet: torch.nn.Module) -> dict[str, torch.Size]:
    """The blocks' weights of ComfyUI's HunyuanImage 2.1 model (FLUX.1's DoubleStreamBlock and SingleStreamBlock of
    comfy/ldm/flux/layers.py: img_mod.lin, img_attn.qkv, img_mlp.0, ..., linear1, linear2, modulation.lin)."""
    config = unet.config
    width = config.num_attention_heads * config.attention_head_dim
    mlp = int(width * config.mlp_ratio)
    shapes = {}
    for i in range(config.num_layers):
        for stream in ("img", "txt"):
            for name, shape in (("mod.lin", (6 * width, width)), ("attn.qkv", (3 * width, width)),
                                ("attn.proj", (width, width)), ("mlp.0", (mlp, width)), ("mlp.2", (width, mlp))):
                shapes[f"{PREFIX}double_blocks.{i}.{stream}_{name}.weight"] = torch.Size(shape)
    for i in range(config.num_single_layers):
        for name, shape in (("linear1", (3 * width + mlp, width)), ("linear2", (width, width + mlp)),
                            ("modulation.lin", (3 * width, width))):
            shapes[f"{PREFIX}single_blocks.{i}.{name}.weight"] = torch.Size(shape)
    return shapes


saved = saved_fixture()


def test_its_lora_file_has_comfyuis_names_and_comfyui_loads_every_key(saved: SimpleNamespace) -> None:
    assert {t.name for t in saved.targets} >= {"lora_unet_double_blocks_0_img_attn_qkv",
                                               "lora_unet_double_blocks_0_img_mlp_0",
                                               "lora_unet_double_blocks_0_txt_mod_lin",
                                               "lora_unet_single_blocks_0_linear1",
                                               "lora_unet_single_blocks_0_modulation_lin"}
    shapes = _comfy_shapes(saved.unet)
    key_map = unet_key_map(shapes)
    patches, not_loaded = load_lora(saved.file, key_map)
    assert not_loaded == []  # ComfyUI warns "lora key not loaded" for each of these
    assert len(patches) == len(saved.targets) == len(shapes)  # every block weight has its LoRA
    check_patches(patches, shapes)
    paths = {id(m): p for p, m in saved.unet.named_modules()}
    for target in saved.targets:
        update = torch.cat([saved.updates[paths[id(layer)]] for layer in target.layers])
        assert torch.allclose(patches[key_map[target.name]], update, atol=1e-5), target.name


def test_diffusers_loads_every_key_into_the_layer_that_was_trained(model: object, saved: SimpleNamespace) -> None:
    import diffusers

    assert not hasattr(diffusers.HunyuanImagePipeline, "load_lora_weights")  # no LoRA loader mixin in 0.42.1
    converted = model.family.lora_for_pipeline(saved.file, saved.view)
    unet = copy.deepcopy(model.unet).eval()
    unet.load_lora_adapter(converted, prefix="transformer", adapter_name="default_0")
    loaded = {name: module.lora_B["default_0"].weight @ module.lora_A["default_0"].weight * module.scaling["default_0"]
              for name, module in unet.named_modules() if hasattr(module, "lora_A") and "default_0" in module.lora_A}
    assert loaded.keys() == saved.updates.keys()
    for name, update in saved.updates.items():
        assert torch.allclose(loaded[name], update, atol=1e-5), name
    noisy, timesteps = torch.randn(1, 8, 2, 2), torch.tensor([500.0])
    text, glyph = torch.randn(1, 5, 32), torch.randn(1, 3, 24)
    inputs = {"hidden_states": noisy, "timestep": timesteps, "encoder_hidden_states": text,
              "encoder_attention_mask": torch.ones(1, 5), "encoder_hidden_states_2": glyph,
              "encoder_attention_mask_2": torch.ones(1, 3), "return_dict": False}
    saved.network.apply_to()  # the network as training runs it (on the fixture's copy) computes what diffusers does
    with torch.no_grad():
        assert torch.allclose(unet(**inputs)[0], saved.unet(**inputs)[0], atol=1e-4)


def test_sd_scripts_names_read_as_the_trained_modules(model: object, saved: SimpleNamespace) -> None:
    renames = (("_img_mlp_0.", "_img_mlp_fc1."), ("_txt_mlp_2.", "_txt_mlp_fc2."),
               ("_img_mod_lin.", "_img_mod_linear."), ("_modulation_lin.", "_modulation_linear."))
    theirs = {}
    for key, value in saved.file.items():
        for ours, sd_scripts in renames:
            key = key.replace(ours, sd_scripts)
        theirs[key] = value
    assert theirs.keys() != saved.file.keys()
    assert model.family.lora_in_own_names(theirs).keys() == saved.file.keys()


def test_the_distilled_variant_gets_its_guidance_and_meanflow_timestep(tmp_path: Path) -> None:
    folder = build_tiny_hunyuan_image21(tmp_path / "distilled", guidance_embeds=True, use_meanflow=True)
    distilled = load_model(str(folder), "auto", torch.float32)
    family = distilled.family.configured({"guidance_scale": 3.25})
    assert family.pipeline_kwargs(4.0) == {"guidance_scale": 1.0, "distilled_guidance_scale": 3.25}  # no CFG
    hidden, mask = family.encode_prompts(distilled.text_encoders, family.tokenize(distilled.tokenizers, CAPTIONS), 1)
    embeds = family.pipeline_embeds(hidden, mask)
    noisy, timesteps = torch.randn(2, 8, 2, 2), torch.tensor([600.0, 600.0])
    with torch.no_grad():
        ours = family.denoise(distilled.unet, noisy, timesteps, hidden, mask, None)
        first = distilled.unet(hidden_states=noisy[:1], timestep=timesteps[:1], timestep_r=timesteps[:1],
                               guidance=torch.tensor([3250.0]), encoder_hidden_states=embeds["prompt_embeds"],
                               encoder_attention_mask=embeds["prompt_embeds_mask"],
                               encoder_hidden_states_2=embeds["prompt_embeds_2"],
                               encoder_attention_mask_2=embeds["prompt_embeds_mask_2"], return_dict=False)[0]
    assert torch.allclose(ours[:1], first, atol=1e-5)
    pipe = family.build_pipeline(distilled, family.inference_scheduler(distilled, "euler"))
    pipe.set_progress_bar_config(disable=True)
    latents = pipe(height=64, width=64, num_inference_steps=2, output_type="latent", **embeds,
                   **family.pipeline_kwargs(1.0), generator=torch.Generator().manual_seed(0)).images
    assert latents.shape == (1, 8, 2, 2) and torch.isfinite(latents).all()


def test_gradient_checkpointing_trains_as_without_it(tiny: Path) -> None:
    """diffusers 0.42.1's transformer hands its checkpointing function keyword arguments (the family's load makes
    the default one take them)."""
    grads = []
    for loaded, family, (hidden, mask) in checkpointing_runs(tiny, CAPTIONS):
        torch.manual_seed(0)
        family.denoise(loaded.unet, torch.randn(2, 8, 2, 2), torch.tensor([300.0, 800.0]), hidden, mask,
                       None).square().mean().backward()
        grads.append(loaded.unet.transformer_blocks[0].attn.to_q.weight.grad)
    assert grads[0].abs().max() > 0 and torch.allclose(grads[0], grads[1], atol=1e-6)
