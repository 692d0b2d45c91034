"""The LoRA files Lumina 2, Krea 2 and Qwen-Image 2.1 runs save load with every key in plain diffusers (the family
pipeline's lora_state_dict and load_lora_into_transformer: what its load_lora_weights runs) and in ComfyUI
(comfy_lora.py, after comfy/lora.py), each module's update the one training computed; the kohya-named files written
before read as they did (network_weights, Generate)."""
from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map
from lora_networks import random_network
from torch import nn

from trainers.methods.lora.file_format import save_lora_file
from trainers.models.flow_lora import kohya_to_diffusers


def _lumina2() -> nn.Module:
    """Lumina 2 with the published attention widths (diffusers' loader splits its fused qkv at 2304, 768, 768): one
    block of each kind, a narrow feed-forward."""
    from diffusers import Lumina2Transformer2DModel

    return Lumina2Transformer2DModel(sample_size=16, patch_size=2, in_channels=4, hidden_size=2304, num_layers=1,
                                     num_refiner_layers=1, num_attention_heads=24, num_kv_heads=8, multiple_of=16,
                                     ffn_dim_multiplier=0.01, axes_dim_rope=(32, 32, 32), axes_lens=(300, 64, 64),
                                     cap_feat_dim=32)


def _lumina2_comfy(unet: nn.Module) -> dict[str, torch.Size]:
    from trainers.models.lumina2.reference import to_reference

    return {PREFIX + k: v.shape for k, v in to_reference(unet.state_dict(), unet.config).items()}


def _krea2_comfy(unet: nn.Module) -> dict[str, torch.Size]:
    from trainers.models.krea2.family import reference_name

    return {f"{PREFIX}{reference_name(path)}.weight": m.weight.shape for path, m in unet.named_modules()
            if isinstance(m, nn.Linear)}


def _qwen21_comfy(unet: nn.Module) -> dict[str, torch.Size]:
    """diffusers' names, each block's img_mlp gate_layer and proj fused into gate_up (ComfyUI's Qwen-Image 2.1)."""
    shapes = {PREFIX + k: v.shape for k, v in unet.state_dict().items()}
    for key in [k for k in shapes if k.endswith(".img_mlp.gate_layer.weight")]:
        gate, proj = shapes.pop(key), shapes.pop(key.replace(".gate_layer.", ".proj."))
        shapes[key.replace(".gate_layer.", ".gate_up.")] = torch.Size([gate[0] + proj[0], gate[1]])
    return shapes


def _family(name: str):  # noqa: ANN202 - a ModelFamily
    from trainers.models import family

    return family(name)


def _families() -> list[tuple[str, str, Callable[[], nn.Module], Callable[[nn.Module], dict], bool]]:
    from trainers.models.krea2.tiny import tiny_krea2_transformer
    from trainers.models.qwen_image21.tiny import tiny_qwen21_transformer

    return [("lumina2", "Lumina2Pipeline", _lumina2, _lumina2_comfy, False),
            ("krea2", "Krea2Pipeline", tiny_krea2_transformer, _krea2_comfy, False),
            ("qwen_image21", "QwenImage21Pipeline", tiny_qwen21_transformer, _qwen21_comfy, True)]


@pytest.fixture(scope="module", params=["lumina2", "krea2", "qwen_image21"])
def saved(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A trained network's file (random weights, alpha 2 at rank 4) and what training computed of each layer."""
    name, pipeline, build, comfy, qwen = next(f for f in _families() if f[0] == request.param)
    family = _family(name)
    torch.manual_seed(0)
    unet = build().eval()
    network, targets, state = random_network(family, unet)
    model = SimpleNamespace(unet=unet, text_encoders=[], family=family)
    path = tmp_path_factory.mktemp(name) / "lora.safetensors"
    save_lora_file(path, family.lora_file(state, model), {"ss_network_module": "networks.lora"})
    from safetensors.torch import load_file

    trained = [t for t in targets if f"{t.name}.lora_down.weight" in state]
    paths = {id(m): p for p, m in unet.named_modules()}
    layers = {t.name: [paths[id(layer)] for layer in t.layers] for t in trained}
    return SimpleNamespace(family=family, pipeline=pipeline, unet=unet, state=state, targets=trained, path=path,
                           layers=layers, network=network,
                           file=load_file(str(path)), comfy=comfy(unet), qwen=qwen, model=model,
                           expected=_updates(kohya_to_diffusers(state, model, targets, ())))


def _updates(peft: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`transformer.<layer>.lora_A/B.weight` (alpha folded in) as <layer> -> B @ A."""
    return {k.removeprefix("transformer.").removesuffix(".lora_A.weight"): peft[k.replace("lora_A", "lora_B")] @ v
            for k, v in peft.items() if k.endswith(".lora_A.weight")}


def test_diffusers_loads_every_key_into_the_layer_that_was_trained(saved: SimpleNamespace) -> None:
    import diffusers

    pipeline = getattr(diffusers, saved.pipeline)
    unet = copy.deepcopy(saved.unet)  # diffusers wraps its layers
    state, metadata = pipeline.lora_state_dict(str(saved.path), return_lora_metadata=True)
    pipeline.load_lora_into_transformer(state, transformer=unet, metadata=metadata)
    loaded = {name: module.lora_B["default_0"].weight @ module.lora_A["default_0"].weight * module.scaling["default_0"]
              for name, module in unet.named_modules() if hasattr(module, "lora_A") and "default_0" in module.lora_A}
    assert loaded.keys() == saved.expected.keys()
    for name, update in saved.expected.items():
        assert torch.allclose(loaded[name], update, atol=1e-5), name


def test_comfyui_loads_every_key_into_the_layer_that_was_trained(saved: SimpleNamespace) -> None:
    key_map = unet_key_map(saved.comfy, qwen_image=saved.qwen)
    patches, not_loaded = load_lora(saved.file, key_map)
    assert not_loaded == []  # ComfyUI warns "lora key not loaded" for each of these
    check_patches(patches, saved.comfy)
    for target in saved.targets:
        update = torch.cat([saved.expected[layer] for layer in saved.layers[target.name]])
        assert torch.allclose(patches[key_map[saved.family.lora_file_prefix + target.path]], update, atol=1e-5)


def test_the_file_reads_back_as_the_network_trained_it_and_older_files_as_they_are(saved: SimpleNamespace) -> None:
    family, model = saved.family, saved.model
    assert family.lora_in_own_names(saved.state) is saved.state  # kohya-named files written before
    assert not any("final_layer" in k for k in saved.file)  # Lumina 2's, which diffusers' loader refuses
    back = family.lora_in_own_names(saved.file)
    assert set(back) <= set(saved.state) and {k.partition(".")[0] for k in back} == {t.name for t in saved.targets}
    read = _updates(kohya_to_diffusers(back, model, family.lora_targets(saved.unet), ()))
    assert read.keys() == saved.expected.keys()
    assert all(torch.allclose(read[k], v, atol=1e-5) for k, v in saved.expected.items())
    # network_weights: read with the run's alpha (the file's ss_network_alpha), a network at that alpha takes it
    again = family.lora_in_own_names(saved.file, 2.0)
    assert {float(v) for k, v in again.items() if k.endswith(".alpha")} == {2.0}
    saved.network.load_kohya_state_dict(again)
    assert all(torch.allclose(again[k], v, atol=1e-5) for k, v in saved.state.items())
