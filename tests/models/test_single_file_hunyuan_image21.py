"""HunyuanImage 2.1 from ComfyUI's split files: the conversion between Tencent's reference layout (double_blocks.N.
img_attn_qkv, single_blocks.N.linear1, byt5_in, txt_in's token refiner; the autoencoder's encoder.down.N.block.M)
and diffusers' names round trips to the same weights; a tiny HunyuanImage 2.1 (heads as wide as the published ones
where the files do not tell) saved as the diffusion_models file, qwen_2.5_vl_7b, byt5_small_glyphxl and vae files
loads to its folder's weights and outputs, and a LoRA trained from them equals one from the folder; a missing part
is named by file and option before anything loads."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from family_checks import load_split_files, loras_from_files_and_folder, write_split_files
from helpers import train
from safetensors.torch import save_file

from trainers.core.options import BY_NAME
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.hunyuan_image21 import reference, single_file
from trainers.models.hunyuan_image21.tiny import GLYPH_WIDTH, LATENT_CHANNELS, tiny_hunyuan_transformer

CAPTION = 'sks shape, a sign that reads "OPEN"'  # glyph text: ByT5 reads it


@pytest.mark.parametrize("guidance, meanflow", [(False, False), (True, False), (False, True)])
def test_the_reference_layout_round_trips(guidance: bool, meanflow: bool) -> None:
    transformer = tiny_hunyuan_transformer(guidance, meanflow)
    state = transformer.state_dict()
    ref = reference.to_reference(state, transformer.config)
    assert {"byt5_in.fc1.weight", "img_in.proj.weight", "double_blocks.0.img_attn_qkv.weight",
            "double_blocks.0.txt_attn_k_norm.weight", "double_blocks.0.img_mod.linear.weight",
            "single_blocks.0.linear1.weight", "single_blocks.0.q_norm.weight", "final_layer.adaLN_modulation.1.bias",
            "txt_in.individual_token_refiner.blocks.0.self_attn_qkv.weight", "time_in.mlp.0.weight"} <= set(ref)
    assert ("guidance_in.mlp.0.weight" in ref) is guidance and ("time_r_in.mlp.0.weight" in ref) is meanflow
    config = reference.config_from_shapes({k: tuple(v.shape) for k, v in ref.items()}, "dit.safetensors")
    assert {k: config[k] for k in ("num_layers", "num_single_layers", "num_attention_heads", "text_embed_2_dim")} == \
        {k: transformer.config[k] for k in ("num_layers", "num_single_layers", "num_attention_heads",
                                            "text_embed_2_dim")}
    back = reference.to_diffusers(ref, config, "dit.safetensors")
    assert back.keys() == state.keys() and all(torch.equal(back[k], state[k]) for k in state)


def test_the_autoencoders_layouts_round_trip() -> None:
    from diffusers import AutoencoderKLHunyuanImage

    vae = AutoencoderKLHunyuanImage(in_channels=3, out_channels=3, latent_channels=LATENT_CHANNELS,
                                    block_out_channels=(32, 64, 64, 64, 64, 64), layers_per_block=2,
                                    spatial_compression_ratio=32, sample_size=64, scaling_factor=0.75289)
    ref = single_file.to_reference(vae.state_dict())
    assert {"encoder.down.0.block.1.conv1.weight", "encoder.down.0.downsample.conv.weight",
            "decoder.up.0.block.2.norm1.weight", "decoder.up.4.upsample.conv.weight", "encoder.mid.attn_1.q.weight",
            "decoder.mid.block_2.conv2.weight"} <= set(ref)
    ref["encoder.conv_in.weight"] = ref["encoder.conv_in.weight"].unsqueeze(2)  # the checkpoint's one-frame 3D conv
    read = single_file.autoencoder(ref)
    assert list(read.config.block_out_channels) == [32, 64, 64, 64, 64, 64] and read.config.layers_per_block == 2
    pixels = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    with torch.no_grad():
        assert torch.allclose(read.encode(pixels).latent_dist.mean, vae.encode(pixels).latent_dist.mean, atol=1e-6)


def _tiny_folder(folder: Path) -> Path:
    """A tiny HunyuanImagePipeline whose text encoder has Qwen2.5-VL's published head widths (its head count is not in
    its file)."""
    from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanImagePipeline, HunyuanImageTransformer2DModel
    from transformers import AutoTokenizer, ByT5Tokenizer

    from trainers.models.hunyuan_image21.family import HUNYUAN_IMAGE21
    from trainers.models.hunyuan_image21.tiny import tiny_byt5, tiny_hunyuan_vae
    from trainers.models.qwen_image.tiny import tiny_qwen_vl
    from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

    torch.manual_seed(0)
    write_tiny_qwen_tokenizer(folder / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    transformer = HunyuanImageTransformer2DModel(
        in_channels=LATENT_CHANNELS, out_channels=LATENT_CHANNELS, num_attention_heads=2, attention_head_dim=16,
        num_layers=1, num_single_layers=1, num_refiner_layers=1, patch_size=(1, 1), text_embed_dim=128,
        text_embed_2_dim=GLYPH_WIDTH, rope_axes_dim=(8, 8))
    HunyuanImagePipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**HUNYUAN_IMAGE21.scheduler_config()), vae=tiny_hunyuan_vae(),
        text_encoder=tiny_qwen_vl(len(tokenizer), tokenizer.pad_token_id, published_heads=True), tokenizer=tokenizer,
        text_encoder_2=tiny_byt5(), tokenizer_2=ByT5Tokenizer(), transformer=transformer).save_pretrained(folder)
    return folder


def _comfy_files(folder: Path, out: Path) -> dict[str, str]:
    """The folder's model as ComfyUI's users have it (diffusion_models/, text_encoders/, vae/) and its tokenizers
    where a first run leaves them in tokenizer_cache_dir."""
    import importlib

    from trainers.models.flow_checkpoint import tokenizer_id
    from trainers.models.hunyuan_image21.rules import SPLIT_PARTS

    model = load_model(str(folder), "auto", torch.float32)
    qwen, byt5, vae = SPLIT_PARTS
    files = {"pretrained_model_name_or_path": out / "diffusion_models" / "hunyuanimage2.1_tiny_bf16.safetensors",
             "text_encoder": out / "text_encoders" / "qwen_2.5_vl_7b.safetensors",
             "byt5": out / "text_encoders" / "byt5_small_glyphxl_fp16.safetensors",
             "ae": out / "vae" / "hunyuan_image_2.1_vae_fp16.safetensors", "tokenizer_cache_dir": out / "tokenizers"}
    states = {"pretrained_model_name_or_path": {f"model.diffusion_model.{k}": v for k, v in reference.to_reference(
                  model.unet.state_dict(), model.unet.config).items()},
              "text_encoder": importlib.import_module(qwen.reader).file_state(qwen, model.text_encoders[0]),
              "byt5": {k: v for k, v in model.text_encoders[1].state_dict().items()
                       if k != "encoder.embed_tokens.weight"},
              "ae": single_file.file_state(vae, model.vae)}
    return write_split_files(states, files, [(tokenizer_id(part), tokenizer)
                                             for part, tokenizer in zip((qwen, byt5), model.tokenizers)])


@pytest.fixture(scope="module")
def hunyuan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("hunyuan image split files")
    folder = _tiny_folder(root / "model")
    return folder, _comfy_files(folder, root / "comfy")


def _issues(**values: object) -> list:
    return model_issues({**{n: o.default for n, o in BY_NAME.items()}, **values})


@pytest.mark.slow  # builds, saves and loads the tiny model twice
def test_comfyuis_split_files_load_as_the_folder(hunyuan: tuple[Path, dict[str, str]]) -> None:
    folder, files = hunyuan
    assert set(files) == {"pretrained_model_name_or_path", "text_encoder", "byt5", "ae", "tokenizer_cache_dir"}
    assert _issues(**files) == []  # Validate takes them
    single = load_split_files(files)
    ours = load_model(str(folder), "auto", torch.float32)
    assert single.family.name == "hunyuan_image21" and single.family.glyph_width == GLYPH_WIDTH
    for got, want in ((single.unet, ours.unet), (single.text_encoders[1], ours.text_encoders[1]),
                      (single.vae, ours.vae)):
        theirs = want.state_dict()
        assert got.state_dict().keys() == theirs.keys()
        assert all(torch.equal(v, theirs[k]) for k, v in got.state_dict().items())
    ids = single.family.tokenize(single.tokenizers, [CAPTION])
    assert all(torch.equal(a, b) for a, b in zip(ids, ours.family.tokenize(ours.tokenizers, [CAPTION])))
    hidden, mask = single.encode_texts([CAPTION], 1)
    want_hidden, want_mask = ours.encode_texts([CAPTION], 1)
    assert torch.allclose(hidden, want_hidden, atol=1e-5) and torch.equal(mask, want_mask)
    noisy = torch.randn(1, LATENT_CHANNELS, 2, 2, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = single.family.denoise(single.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
        want = ours.family.denoise(ours.unet, noisy, torch.tensor([500.0]), hidden, mask, None)
    assert torch.allclose(got, want, atol=1e-5)
    assert single.vae.config.scaling_factor == ours.vae.config.scaling_factor


@pytest.mark.slow  # two 1-step LoRA runs
def test_a_lora_trained_from_the_files_equals_one_from_the_folder(hunyuan: tuple[Path, dict[str, str]],
                                                                  tmp_path: Path) -> None:
    folder, files = hunyuan
    from_files, from_folder = loras_from_files_and_folder(files, folder, tmp_path, steps=1)
    assert from_files.keys() == from_folder.keys() and "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight" in \
        from_files
    assert max((from_files[k] - from_folder[k]).abs().max().item() for k in from_files) < 1e-5


@pytest.mark.slow  # builds and saves the tiny model
def test_a_missing_or_wrong_part_is_named_with_its_file_and_option(hunyuan: tuple[Path, dict[str, str]],
                                                                   tmp_path: Path) -> None:
    _, files = hunyuan
    model = files["pretrained_model_name_or_path"]
    issues = _issues(pretrained_model_name_or_path=model)
    assert [i.field for i in issues] == ["text_encoder", "byt5", "ae"]
    assert all(Path(model).name in i.message and "HunyuanImage 2.1" in i.message for i in issues)
    assert "set byt5" in issues[1].message and "byt5_small_glyphxl" in issues[1].message
    (wrong,) = _issues(**{**files, "byt5": files["text_encoder"]})
    assert wrong.field == "byt5" and "ByT5" in wrong.message
    (unread,) = _issues(**files, t5xxl=files["byt5"])
    assert unread.field == "t5xxl" and "leave it empty" in unread.message
    out = tmp_path / "out"  # a run without its ByT5 file stops before writing anything
    assert train("lora", tmp_path / "run", **{k: v for k, v in files.items() if k != "byt5"},
                 train_data_dir=str(tmp_path), output_dir=str(out), max_train_steps=1) != 0
    assert not out.exists() or not any(out.iterdir())


def test_a_scaled_fp8_transformer_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "hunyuanimage2.1_fp8_scaled.safetensors"
    save_file({f"model.diffusion_model.{k}": torch.zeros(1) for k in (
        "byt5_in.fc1.weight", "double_blocks.0.img_attn_qkv.weight", "double_blocks.0.img_attn_qkv.scale_weight",
        "scaled_fp8")}, path)
    (issue,) = _issues(pretrained_model_name_or_path=str(path))
    assert issue.field == "pretrained_model_name_or_path" and "scaled fp8" in issue.message
    assert path.name in issue.message and "HunyuanImage 2.1" in issue.message


@pytest.mark.slow  # builds and saves the tiny model
def test_an_sd_scripts_config_with_its_files_validates(hunyuan: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """hunyuan_image_train_network.py's TOML (its DiT, text_encoder, byt5 and vae files) imports and validates."""
    from trainers.adapters.kohya.page_import import import_kohya_file

    _, files = hunyuan
    toml = tmp_path / "sd_scripts.toml"
    toml.write_text(f'pretrained_model_name_or_path = "{files["pretrained_model_name_or_path"]}"\n'
                    f'text_encoder = "{files["text_encoder"]}"\nbyt5 = "{files["byt5"]}"\nvae = "{files["ae"]}"\n'
                    'network_module = "networks.lora_hunyuan_image"\nnetwork_dim = 4\n', encoding="utf-8")
    _, values, _ = import_kohya_file(toml)
    assert values["ae"] == files["ae"] and values["vae"] == ""
    assert model_issues({**values, "tokenizer_cache_dir": files["tokenizer_cache_dir"]}) == []
