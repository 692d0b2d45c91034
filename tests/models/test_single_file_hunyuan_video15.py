"""HunyuanVideo 1.5 from ComfyUI's split files (Comfy-Org/HunyuanVideo_1.5_repackaged) and Tencent's transformer file:
the reference layouts (ComfyUI's fused img_attn_qkv, Tencent's q, k and v apart; the autoencoder's
encoder.down.N.block.M) round trip to the same weights; a tiny HunyuanVideo 1.5 (heads as wide as the published ones
where the files do not tell) saved as diffusion_models/hunyuanvideo1.5_720p_<task>_fp16, text_encoders/qwen_2.5_vl_7b
and byt5_small_glyphxl_fp16, vae/hunyuanvideo15_vae_fp16 and (I2V) clip_vision/sigclip_vision_patch14_384 loads to its
folder's weights and outputs, and a 2-step LoRA trained from them equals one from the folder; the files a task lacks
or should not have are named by file and option before anything loads."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from family_checks import clips_dataset, load_split_files, write_split_files
from helpers import train
from safetensors.torch import load_file, save_file

from trainers.core.options import BY_NAME
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.hunyuan_video15 import reference, single_file
from trainers.models.hunyuan_video15.tiny import (LATENT_CHANNELS, build_tiny_hunyuan_video15,
                                                  tiny_hunyuan_video15_transformer, tiny_hunyuan_video15_vae)

CAPTION = 'a neon sign that reads "OPEN" flickers'  # glyph text: ByT5 reads it
TASK_FILES = {"t2v": "hunyuanvideo1.5_720p_t2v_fp16.safetensors", "i2v": "hunyuanvideo1.5_720p_i2v_fp16.safetensors"}


@pytest.mark.parametrize("tencent", [False, True], ids=["comfyui", "tencent"])
def test_the_transformers_reference_layouts_round_trip(tencent: bool) -> None:
    transformer = tiny_hunyuan_video15_transformer("i2v")
    state = transformer.state_dict()
    ref = reference.to_reference(state, transformer.config, tencent=tencent)
    qkv = {"double_blocks.0.img_attn_q.weight", "double_blocks.1.txt_attn_v.bias"} if tencent else \
        {"double_blocks.0.img_attn_qkv.weight", "double_blocks.1.txt_attn_qkv.bias"}
    assert qkv | {"cond_type_embedding.weight", "vision_in.proj.4.bias", "byt5_in.fc3.weight", "time_in.mlp.2.weight",
                  "txt_in.individual_token_refiner.blocks.0.self_attn_qkv.weight",
                  "final_layer.adaLN_modulation.1.bias", "double_blocks.1.img_mod.linear.weight",
                  "double_blocks.0.txt_attn_k_norm.weight"} <= set(ref)
    config = reference.config_from_shapes({k: tuple(v.shape) for k, v in ref.items()}, TASK_FILES["i2v"])
    sizes = ("in_channels", "out_channels", "num_layers", "num_refiner_layers", "num_attention_heads",
             "attention_head_dim", "text_embed_dim", "text_embed_2_dim", "image_embed_dim", "mlp_ratio")
    assert {k: config[k] for k in sizes} == {k: transformer.config[k] for k in sizes}
    assert config["rope_axes_dim"] == list(transformer.config.rope_axes_dim) and config["target_size"] == 960
    back = reference.to_diffusers(ref, config, "dit.safetensors")
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)


def test_the_autoencoders_tencent_layout_round_trips() -> None:
    from diffusers import AutoencoderKLHunyuanVideo15

    for vae in (tiny_hunyuan_video15_vae(), AutoencoderKLHunyuanVideo15(
            latent_channels=LATENT_CHANNELS, block_out_channels=(16, 32, 32, 64, 64), layers_per_block=2,
            spatial_compression_ratio=16, temporal_compression_ratio=4)):
        ref = single_file.to_reference(vae.state_dict())
        assert {"encoder.down.0.block.0.conv1.conv.weight", "encoder.down.3.downsample.conv.conv.weight",
                "decoder.up.1.upsample.conv.conv.bias", "encoder.mid.attn_1.q.weight",
                "decoder.mid.block_2.norm1.gamma", "decoder.up.4.block.0.conv2.conv.weight"} <= set(ref)
        read = single_file.autoencoder(ref)
        for key in ("block_out_channels", "layers_per_block", "spatial_compression_ratio",
                    "temporal_compression_ratio", "latent_channels", "scaling_factor"):
            assert tuple(read.config[key]) == tuple(vae.config[key]) if key == "block_out_channels" else \
                read.config[key] == vae.config[key]
        pixels = torch.rand(1, 3, 5, 32, 32, generator=torch.Generator().manual_seed(0)) * 2 - 1
        with torch.no_grad():
            assert torch.allclose(read.encode(pixels).latent_dist.mean, vae.encode(pixels).latent_dist.mean, atol=1e-6)


def comfy_files(folder: Path, out: Path, task: str) -> dict[str, str]:
    """The folder's model as ComfyUI's users have it (diffusion_models/, text_encoders/, vae/, clip_vision/ for I2V:
    Qwen2.5-VL with a vision tower and a head the reader leaves out) and its tokenizers where a first run leaves them
    in tokenizer_cache_dir."""
    from trainers.models.flow_checkpoint import tokenizer_id
    from trainers.models.hunyuan_video15.rules import SPLIT_PARTS

    model = load_model(str(folder), "auto", torch.float32)
    qwen, byt5, vae = SPLIT_PARTS
    files = {"pretrained_model_name_or_path": out / "diffusion_models" / TASK_FILES[task],
             "text_encoder": out / "text_encoders" / "qwen_2.5_vl_7b.safetensors",
             "byt5": out / "text_encoders" / "byt5_small_glyphxl_fp16.safetensors",
             "ae": out / "vae" / "hunyuanvideo15_vae_fp16.safetensors", "tokenizer_cache_dir": out / "tokenizers"}
    text = model.text_encoders[0].state_dict()
    states = {"pretrained_model_name_or_path": reference.to_reference(model.unet.state_dict(), model.unet.config),
              "text_encoder": {**{f"model.{k}": v for k, v in text.items()},
                               "lm_head.weight": text["embed_tokens.weight"].clone(),
                               "visual.patch_embed.proj.weight": torch.zeros(8, 3, 2, 14, 14)},
              "byt5": {k: v for k, v in model.text_encoders[1].state_dict().items()
                       if k != "encoder.embed_tokens.weight"},
              "ae": single_file.file_state(vae, model.vae)}
    if task == "i2v":
        files["image_encoder"] = out / "clip_vision" / "sigclip_vision_patch14_384.safetensors"
        states["image_encoder"] = {("" if k.startswith("vision_model.") else "vision_model.") + k: v
                                   for k, v in model.family.image_encoder.model.state_dict().items()}
    return write_split_files(states, files, [(tokenizer_id(part), tokenizer)
                                             for part, tokenizer in zip((qwen, byt5), model.tokenizers)])


@pytest.fixture(scope="module", params=["t2v", "i2v"])
def hunyuan(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp(f"hunyuan video split files {request.param}")
    folder = build_tiny_hunyuan_video15(root / "model", i2v=request.param == "i2v", published_heads=True)
    return folder, comfy_files(folder, root / "comfy", request.param)


def _issues(**values: object) -> list:
    return model_issues({**{n: o.default for n, o in BY_NAME.items()}, **values})


def _same_weights(got: torch.nn.Module, want: torch.nn.Module) -> bool:
    theirs = want.state_dict()
    return got.state_dict().keys() == theirs.keys() and all(torch.equal(v, theirs[k])
                                                            for k, v in got.state_dict().items())


@pytest.mark.slow  # builds, saves and loads the tiny model twice per task
def test_comfyuis_split_files_load_as_the_folder(hunyuan: tuple[Path, dict[str, str]]) -> None:
    folder, files = hunyuan
    assert _issues(**files) == []  # Validate takes them
    single = load_split_files(files)
    ours = load_model(str(folder), "auto", torch.float32)
    family = single.family
    assert family.name == "hunyuan_video15" and family.i2v == ours.family.i2v == ("image_encoder" in files)
    assert family.pipeline_class == ours.family.pipeline_class
    assert single.unet.config.task_type == ours.unet.config.task_type
    pairs = [(single.unet, ours.unet), (single.text_encoders[0], ours.text_encoders[0]),
             (single.text_encoders[1], ours.text_encoders[1]), (single.vae, ours.vae)]
    if family.i2v:
        pairs.append((family.image_encoder.model, ours.family.image_encoder.model))
        assert family.image_encoder.processor.size == ours.family.image_encoder.processor.size
    assert all(_same_weights(got, want) for got, want in pairs)
    assert type(single.text_encoders[0]).__name__ == "Qwen2_5_VLTextModel"
    assert single.vae.config.scaling_factor == ours.vae.config.scaling_factor == 1.03682
    hidden, mask = single.encode_texts([CAPTION], 1)
    want_hidden, want_mask = ours.encode_texts([CAPTION], 1)
    assert torch.allclose(hidden, want_hidden, atol=1e-5) and torch.equal(mask, want_mask)
    assert mask[0, -256:].any()  # the glyph text reached ByT5
    noisy = torch.randn(1, LATENT_CHANNELS, 2, 2, 2, generator=torch.Generator().manual_seed(1))
    condition = torch.randn(1, LATENT_CHANNELS + 1, 2, 2, 2), torch.randn(1, 4, single.unet.config.image_embed_dim)
    outputs = []
    for loaded in (single, ours):
        loaded.family.slot.latents, loaded.family.slot.image_embeds = condition
        with torch.no_grad():
            outputs.append(loaded.family.denoise(loaded.unet, noisy, torch.tensor([500.0]), hidden, mask, None))
        loaded.family.slot.latents = loaded.family.slot.image_embeds = None
    assert torch.allclose(*outputs, atol=1e-5)


@pytest.mark.slow  # two 2-step LoRA runs per task
def test_a_lora_trained_from_the_files_equals_one_from_the_folder(hunyuan: tuple[Path, dict[str, str]],
                                                                  tmp_path: Path) -> None:
    folder, files = hunyuan
    common = {"dataset_config": str(clips_dataset(tmp_path / "data", fps=24)), "max_train_steps": 2,
              "max_data_loader_n_workers": 0, "learning_rate": 1e-2, "network_dim": 4, "save_precision": "float",
              "seed": 3, "timestep_sampling": "shift", "discrete_flow_shift": 2.0}
    assert train("lora", tmp_path / "files", **files, **common, output_dir=str(tmp_path / "a"), output_name="l") == 0
    assert train("lora", tmp_path / "folder", **common, pretrained_model_name_or_path=str(folder),
                 output_dir=str(tmp_path / "b"), output_name="l") == 0
    from_files, from_folder = load_file(tmp_path / "a" / "l.safetensors"), load_file(tmp_path / "b" / "l.safetensors")
    assert from_files.keys() == from_folder.keys()
    assert "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight" in from_files
    assert any(v.abs().sum() > 0 for k, v in from_files.items() if k.endswith("lora_up.weight"))
    # the same weights (test above), but a file's tensors sit at unaligned addresses, which float32 matmuls round a
    # unit in the last place apart (1e-7 of the outputs); Adam's first steps take that to 1e-5 of 1e-2 updates
    assert max((from_files[k] - from_folder[k]).abs().max().item() for k in from_files) < 1e-4


def _header_file(path: Path, keys: tuple[str, ...]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.zeros(1) for k in keys}, path)
    return str(path)


_TRANSFORMER = ("cond_type_embedding.weight", "byt5_in.fc1.weight", "double_blocks.0.img_attn_qkv.weight")
_SIGLIP = ("vision_model.embeddings.patch_embedding.weight", "vision_model.embeddings.position_embedding.weight",
           "vision_model.encoder.layers.0.mlp.fc1.weight")


def test_a_missing_part_or_a_task_the_files_do_not_fit_is_named_before_loading(tmp_path: Path) -> None:
    parts = {option: _header_file(tmp_path / f"{option}.safetensors", ("x",)) for option in
             ("text_encoder", "byt5", "ae")}
    t2v = _header_file(tmp_path / "diffusion_models" / TASK_FILES["t2v"], _TRANSFORMER)
    i2v = _header_file(tmp_path / "diffusion_models" / TASK_FILES["i2v"], _TRANSFORMER)
    siglip = _header_file(tmp_path / "clip_vision" / "sigclip_vision_patch14_384.safetensors", _SIGLIP)
    lacking = [i for i in _issues(pretrained_model_name_or_path=t2v) if i.field in ("text_encoder", "byt5", "ae")]
    assert [i.field for i in lacking] == ["text_encoder", "byt5", "ae"]
    assert all(TASK_FILES["t2v"] in i.message and "HunyuanVideo 1.5" in i.message for i in lacking)

    def task_issues(model: str, **values: str) -> list:
        return [i for i in _issues(pretrained_model_name_or_path=model, **values) if i.field == "image_encoder"]

    (no_siglip,) = task_issues(i2v)
    assert TASK_FILES["i2v"] in no_siglip.message and "image-to-video" in no_siglip.message
    assert "sigclip_vision_patch14_384" in no_siglip.message
    (t2v_with_siglip,) = task_issues(t2v, image_encoder=siglip)
    assert TASK_FILES["t2v"] in t2v_with_siglip.message and "text-to-video" in t2v_with_siglip.message
    assert task_issues(i2v, image_encoder=siglip) == []
    (not_siglip,) = task_issues(i2v, image_encoder=parts["byt5"])
    assert parts["byt5"] in not_siglip.message and "SigLIP" in not_siglip.message
    tencent = _header_file(tmp_path / "transformer" / "720p_i2v" / "diffusion_pytorch_model.safetensors", _TRANSFORMER)
    (issue,) = task_issues(tencent)  # Tencent's folder names the task
    assert "diffusion_pytorch_model.safetensors" in issue.message


@pytest.mark.parametrize("extra, words", [(("double_blocks.0.img_attn_qkv.scale_weight", "scaled_fp8"), "scaled fp8"),
                                          (("time_r_in.mlp.0.weight",), "step-distilled (MeanFlow)")])
def test_scaled_fp8_and_step_distilled_transformer_files_are_refused_by_name(tmp_path: Path, extra: tuple[str, ...],
                                                                            words: str) -> None:
    path = _header_file(tmp_path / "hunyuanvideo1.5_480p_i2v_step_distilled.safetensors", _TRANSFORMER + extra)
    (issue,) = _issues(pretrained_model_name_or_path=path)
    assert issue.field == "pretrained_model_name_or_path" and words in issue.message
    assert Path(path).name in issue.message and "HunyuanVideo 1.5" in issue.message


def test_image_encoder_with_a_folder_is_named(tmp_path: Path) -> None:
    folder = build_tiny_hunyuan_video15(tmp_path / "model")
    siglip = _header_file(tmp_path / "sigclip_vision_patch14_384.safetensors", _SIGLIP)
    (issue,) = _issues(pretrained_model_name_or_path=str(folder), image_encoder=siglip)
    assert issue.field == "image_encoder" and "diffusers folder" in issue.message
