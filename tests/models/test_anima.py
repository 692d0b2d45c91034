"""Anima on its tiny random-init model in its published split files (trainers/models/anima/tiny.py), in process: the
files hold the published names and load as Anima (the VAE in Wan's names as ComfyUI's qwen_image_vae file), the DiT
file round-trips, the LLM adapter is read from llm_adapter_path for a DiT file without it, every key of a LoRA maps
onto ComfyUI's Anima model (its generic lora_unet_<module> names), a sample renders, and Validate refuses a
wrong-family model and what Anima cannot honour by name before anything loads. The training runs are in
test_anima_runs.py."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map
from safetensors.torch import load_file, save_file
from test_single_file_flow_families import _wan_names

from trainers.core.options import BY_NAME
from trainers.models import ModelFiles, load_model
from trainers.models.anima import reference
from trainers.models.anima.tiny import build_tiny_anima
from trainers.models.checks import model_issues

# the published file's names (circlestone-labs/Anima's diffusion_models file, as sd-scripts and ComfyUI read it)
PUBLISHED = ("net.x_embedder.proj.1.weight", "net.t_embedder.1.linear_1.weight", "net.t_embedder.1.linear_2.weight",
             "net.t_embedding_norm.weight", "net.blocks.0.self_attn.q_proj.weight", "net.blocks.0.self_attn.q_norm.weight",
             "net.blocks.1.cross_attn.output_proj.weight", "net.blocks.1.mlp.layer2.weight",
             "net.blocks.0.adaln_modulation_cross_attn.2.weight", "net.final_layer.adaln_modulation.1.weight",
             "net.final_layer.linear.weight", "net.pos_embedder.dim_spatial_range",
             "net.llm_adapter.embed.weight", "net.llm_adapter.blocks.1.cross_attn.o_proj.weight",
             "net.llm_adapter.blocks.0.norm_self_attn.weight", "net.llm_adapter.blocks.0.mlp.2.bias",
             "net.llm_adapter.out_proj.weight", "net.llm_adapter.norm.weight")


@pytest.fixture(scope="module")
def split_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The tiny model's options, its VAE rewritten in Wan's names (as the published qwen_image_vae file)."""
    files = build_tiny_anima(tmp_path_factory.mktemp("anima"))
    save_file(_wan_names(load_file(files["ae"]), resnets=3), files["ae"])  # two residual blocks a stage (+1)
    return files


@pytest.fixture(scope="module")
def model(split_files: dict[str, str]):  # noqa: ANN201 - a LoadedModel
    return load_model(split_files["pretrained_model_name_or_path"], "auto", torch.float32,
                      files=ModelFiles.from_values(split_files))


def _values(split_files: dict[str, str], **values: object) -> dict[str, object]:
    return {**{n: o.default for n, o in BY_NAME.items()}, **split_files, **values}


def test_the_split_files_load_as_anima_and_the_dit_file_round_trips(split_files: dict[str, str], model) -> None:
    dit = load_file(split_files["pretrained_model_name_or_path"])
    assert set(PUBLISHED) <= dit.keys()
    assert "encoder.conv1.weight" in load_file(split_files["ae"])  # Wan's names, read by Qwen-Image's reader
    assert model.family.name == "anima" and type(model.unet).__name__ == "AnimaTransformer"
    assert [type(te).__name__ for te in model.text_encoders] == ["Qwen3Model"]
    assert len(model.tokenizers) == 2 and type(model.tokenizers[1]).__name__.startswith("T5")  # the adapter's ids
    assert model.unet.config.in_channels == 17  # the latents' 16 and the padding mask's channel
    saved = model.family.to_checkpoint(model, model.unet.state_dict())
    assert saved.keys() == dit.keys() and all(torch.equal(saved[k], dit[k]) for k in dit)


def test_one_all_in_one_file_loads_as_the_split_files_do(model, tmp_path: Path) -> None:
    from trainers.models.anima.tiny import build_tiny_anima_file

    path = build_tiny_anima_file(tmp_path / "anima-all-in-one")
    files = ModelFiles(tokenizer_cache_dir=str(tmp_path / "anima-all-in-one-parts" / "tokenizers"))
    whole = load_model(str(path), "auto", torch.float32, files=files)
    assert whole.family.name == "anima"
    hidden, second = whole.encode_texts(["sks shape"], 1)
    assert torch.allclose(hidden, model.encode_texts(["sks shape"], 1)[0])  # the same seed: the same tiny model
    assert torch.equal(second, model.encode_texts(["sks shape"], 1)[1])


def test_captions_are_encoded_as_sd_scripts_does(model) -> None:
    hidden, second = model.encode_texts(["sks shape", ""], 1)
    assert hidden.shape[:2] == (2, 512) and second.shape == (2, 512 + 512) and second.dtype == torch.long
    mask, t5_ids = second[:, :512], second[:, 512:]
    assert mask[0].sum() == len("sks shape") and mask[1].sum() == 0  # the tiny tokenizer: a token a character
    assert hidden[0, mask[0] == 0].abs().max() == 0  # zero on the padding
    assert t5_ids[1, 0] == model.tokenizers[1].eos_token_id and t5_ids[1, 1:].abs().max() == 0  # "": </s> alone
    # the empty caption's adapter attends to its first (zero) state: what a fully masked attention gives on the CPU,
    # without the NaN some GPU kernels give for it
    from trainers.models.anima.family import split_text

    read, ids = split_text(hidden, second)
    assert read[1, 0] == 1 and read[1, 1:].sum() == 0 and torch.equal(read[0], mask[0])
    adapter = model.unet.llm_adapter
    assert torch.equal(adapter(hidden, ids, ids != 0, read), adapter(hidden, ids, ids != 0, mask))


def test_the_llm_adapter_is_read_from_llm_adapter_path_for_a_dit_file_without_it(split_files: dict[str, str],
                                                                                 model, tmp_path: Path) -> None:
    dit = load_file(split_files["pretrained_model_name_or_path"])
    bare, adapter = tmp_path / "cosmos_dit.safetensors", tmp_path / "llm_adapter.safetensors"
    save_file({k: v for k, v in dit.items() if not k.startswith("net.llm_adapter.")}, bare)
    save_file({k.removeprefix("net."): v for k, v in dit.items() if k.startswith("net.llm_adapter.")}, adapter)
    values = _values(split_files, pretrained_model_name_or_path=str(bare))
    (issue,) = model_issues(values)
    assert issue.field == "llm_adapter_path" and "Anima" in issue.message
    values["llm_adapter_path"] = str(adapter)
    assert model_issues(values) == []
    loaded = load_model(str(bare), "auto", torch.float32, files=ModelFiles.from_values(values))
    ours = model.unet.state_dict()
    assert all(torch.equal(v, ours[k]) for k, v in loaded.unet.state_dict().items())


def test_every_lora_key_maps_onto_comfyuis_anima_model(model) -> None:
    """ComfyUI's Anima model (comfy/ldm/anima/model.py: MiniTrainDIT with llm_adapter) has the published file's
    names without `net.`; model_lora_keys_unet maps `lora_unet_<module with _>` onto each of them."""
    from trainers.methods.lora.network import LoRANetwork

    unet = model.unet
    targets = model.family.lora_targets(unet)
    dims = model.family.lora_target_dims(targets, {"train_llm_adapter": "True"}, 4)
    network = LoRANetwork(unet, [], unet_key_style="own", network_dim=4, network_alpha=2, train_text_encoder=False,
                          unet_targets=targets, target_dims=dims)
    torch.manual_seed(0)
    for name, param in network.named_parameters():
        if "lora_up" in name:
            param.data.normal_()
    lora = network.kohya_state_dict(torch.float32)  # the network is not applied: the model is left as it was
    ours = {k: v.detach() for k, v in unet.state_dict().items()}
    paths = {id(m): p for p, m in unet.named_modules()}
    deltas = {}
    for target in targets:
        down, up = lora[f"{target.name}.lora_down.weight"], lora[f"{target.name}.lora_up.weight"]
        (layer,) = target.layers
        deltas[f"{paths[id(layer)]}.weight"] = up @ down * float(lora[f"{target.name}.alpha"]) / down.shape[0]
    comfy = {PREFIX + k.removeprefix("net."): v.shape
             for k, v in reference.to_reference(ours, unet.config).items()}
    patches, unloaded = load_lora(lora, unet_key_map(comfy))
    assert unloaded == [] and len(patches) == len(targets) == 2 * 10 + 2 * 10  # two DiT and two adapter blocks
    check_patches(patches, comfy)
    # each patch is the delta of the module it was trained on, under the published name
    renamed = {PREFIX + rule.reference: deltas[rule.parts[0]] for rule in reference.rules(unet.config)
               if rule.parts[0] in deltas}
    assert patches.keys() == renamed.keys()
    assert all(torch.allclose(patches[k], renamed[k], atol=1e-6) for k in patches)
    assert any(k.startswith(PREFIX + "llm_adapter.blocks.") for k in patches)


def test_a_file_in_the_dotted_naming_reads_back_as_its_kohya_names(model) -> None:
    """sd-scripts' networks/convert_anima_lora_to_comfy.py writes `diffusion_model.<module>.lora_A/lora_B.weight` and
    `.alpha` (what diffusers' AnimaModularPipeline reads): read as the kohya names it came from."""
    kohya = {"lora_unet_blocks_0_self_attn_q_proj.lora_down.weight": torch.ones(2, 48),
             "lora_unet_blocks_0_self_attn_q_proj.lora_up.weight": torch.ones(48, 2),
             "lora_unet_blocks_0_self_attn_q_proj.alpha": torch.tensor(1.0),
             "lora_unet_llm_adapter_blocks_1_mlp_0.lora_down.weight": torch.ones(2, 32),
             "lora_unet_llm_adapter_blocks_1_mlp_0.lora_up.weight": torch.ones(128, 2)}
    dotted = {"diffusion_model.blocks.0.self_attn.q_proj.lora_A.weight": kohya[
                  "lora_unet_blocks_0_self_attn_q_proj.lora_down.weight"],
              "diffusion_model.blocks.0.self_attn.q_proj.lora_B.weight": kohya[
                  "lora_unet_blocks_0_self_attn_q_proj.lora_up.weight"],
              "diffusion_model.blocks.0.self_attn.q_proj.alpha": kohya["lora_unet_blocks_0_self_attn_q_proj.alpha"],
              "diffusion_model.llm_adapter.blocks.1.mlp.0.lora_A.weight": kohya[
                  "lora_unet_llm_adapter_blocks_1_mlp_0.lora_down.weight"],
              "diffusion_model.llm_adapter.blocks.1.mlp.0.lora_B.weight": kohya[
                  "lora_unet_llm_adapter_blocks_1_mlp_0.lora_up.weight"]}
    read = model.family.lora_in_own_names(dotted)
    assert read.keys() == {*kohya, "lora_unet_llm_adapter_blocks_1_mlp_0.alpha"}
    assert float(read["lora_unet_llm_adapter_blocks_1_mlp_0.alpha"]) == 2.0  # no alpha: its rank, scale 1
    assert model.family.lora_in_own_names(kohya) is kohya


def test_the_adapter_is_left_out_of_a_lora_unless_train_llm_adapter(model) -> None:
    targets = model.family.lora_targets(model.unet)
    dims = model.family.lora_target_dims(targets, {}, 8)
    trained = {name for name, dim in dims.items() if dim}
    assert "lora_unet_blocks_0_self_attn_q_proj" in trained and "lora_unet_blocks_1_mlp_layer2" in trained
    assert not any(name.startswith("lora_unet_llm_adapter_") for name in trained)
    assert not any("adaln" in name or "embedder" in name or "final" in name for name in dims)  # sd-scripts' excludes


def test_a_sample_renders_through_the_familys_sampling_loop(model, tmp_path: Path) -> None:
    from PIL import Image

    from trainers.core.prompts import config_prompts
    from trainers.sampling.pipeline import generate_samples

    prompts = config_prompts("", ["sks shape --n blurry --w 64 --h 48 --s 2 --l 3"])
    (first,) = generate_samples(model, prompts, tmp_path, "s", default_size=(64, 64), sampler="euler")
    (again,) = generate_samples(model, prompts, tmp_path / "again", "s", default_size=(64, 64), sampler="euler")
    assert Image.open(first).size == (64, 48)
    assert Image.open(first).tobytes() == Image.open(again).tobytes()  # the seed decides


def test_a_wrong_family_model_is_refused_by_name_before_loading(split_files: dict[str, str], tmp_path: Path) -> None:
    (issue,) = model_issues(_values(split_files, model_family="lumina2"))
    assert issue.field == "model_family" and "Anima" in issue.message
    lumina = tmp_path / "lumina2.safetensors"  # a Lumina 2 file (NextDiT's caption embedder): headers only are read
    save_file({"cap_embedder.0.weight": torch.ones(4), "x_embedder.weight": torch.ones(4, 4)}, lumina)
    issues = model_issues(_values(split_files, model_family="anima", pretrained_model_name_or_path=str(lumina)))
    assert issues[0].field == "model_family" and "Lumina 2" in issues[0].message


def test_validate_names_anima_in_what_it_refuses(split_files: dict[str, str]) -> None:
    values = _values(split_files, min_snr_gamma=5.0, vae="/models/vae", save_diffusers_lora=True)
    issues = model_issues(values, trains="full")
    assert [i.field for i in issues] == ["min_snr_gamma", "vae", "save_diffusers_lora", "save_model_as"]
    assert all("Anima" in i.message for i in issues)
    assert model_issues(_values(split_files, save_model_as="safetensors"), trains="full") == []
    (frozen,) = model_issues(_values(split_files, network_train_text_encoder_only=True), trains="network")
    assert "Qwen3" in frozen.message and "Anima" in frozen.message
