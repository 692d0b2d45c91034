"""Generate's check that a LoRA fits the model before rendering covers the modules diffusers' loader would fail on
with a size-mismatch traceback: FLUX's and SD3's fused modules (q, k and v as one kohya module, the family's
`lora_targets`) and LyCORIS files (LoKr, LoHa, LoCon with a Tucker middle), each refused naming the module."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from trainers.loras.lora_fit import lycoris_change, misfit_for_generate
from trainers.models import load_model

CROSS = "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k"  # reads the text's width


def _fused_lora(model, fused: str, rows_off: int = 0) -> dict[str, torch.Tensor]:
    """A kohya LoRA of the model's fused q, k, v module `fused` (rows_off rows short: another model's)."""
    from trainers.loras.layers import layer_map

    out, inputs = layer_map(model)[fused].shape()
    return {f"{fused}.lora_down.weight": torch.randn(4, inputs),
            f"{fused}.lora_up.weight": torch.zeros(out - rows_off, 4), f"{fused}.alpha": torch.tensor(4.0)}


@pytest.mark.parametrize(("folder", "fused", "title"), [
    ("tiny_flux_dir", "lora_unet_double_blocks_0_img_attn_qkv", "FLUX.1"),
    ("tiny_sd3_dir", "lora_unet_joint_blocks_0_x_block_attn_qkv", "SD3"),
])
def test_a_fused_module_of_other_shapes_is_named(request: pytest.FixtureRequest, tmp_path: Path, folder: str,
                                                 fused: str, title: str) -> None:
    from safetensors.torch import load_file

    model = load_model(str(request.getfixturevalue(folder)), "auto", torch.float32)
    good, bad = tmp_path / "same model.safetensors", tmp_path / "other model.safetensors"
    save_file(_fused_lora(model, fused), good)
    save_file(_fused_lora(model, fused, rows_off=3), bad)
    assert misfit_for_generate(str(good), load_file(good), model) is None
    text = misfit_for_generate(str(bad), load_file(bad), model) or ""
    assert text.startswith(f"other model.safetensors: module {fused} changes a "), text
    assert f"but that layer of this {title}" in text, text


def _lokr(out: int, inputs: int) -> dict[str, torch.Tensor]:
    """A LoKr module as lycoris-lora saves a linear layer's (factor 4: w1 whole, w2 as two low-rank factors)."""
    return {f"{CROSS}.lokr_w1": torch.randn(4, 4), f"{CROSS}.lokr_w2_a": torch.randn(out // 4, 2),
            f"{CROSS}.lokr_w2_b": torch.randn(2, inputs // 4), f"{CROSS}.alpha": torch.tensor(2.0)}


def test_a_lokr_file_of_other_shapes_is_named(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    from trainers.loras.lycoris_files import kohya_modules

    out, inputs = kohya_modules(model)[CROSS].weight.shape
    good, wide = _lokr(out, inputs), _lokr(out, inputs * 2)  # the second reads a text twice as wide (SD2 against SD1)
    for name, state in (("good.safetensors", good), ("sd2 lokr.safetensors", wide)):
        save_file(state, tmp_path / name)
    assert misfit_for_generate(str(tmp_path / "good.safetensors"), good, model) is None
    text = misfit_for_generate(str(tmp_path / "sd2 lokr.safetensors"), wide, model) or ""
    assert text.startswith(f"sd2 lokr.safetensors: module {CROSS} changes a {out} x {inputs * 2} weight, but that "
                           f"layer of this SD1.x model is {out} x {inputs}"), text


@pytest.mark.parametrize(("parts", "change"), [
    ({"lokr_w1": (4, 2), "lokr_w2": (8, 16, 3, 3)}, (32, 288)),  # a conv's LoKr, w2 whole with its kernel
    ({"lokr_w1_a": (4, 2), "lokr_w1_b": (2, 2), "lokr_w2_a": (8, 2), "lokr_w2_b": (2, 144)}, (32, 288)),
    ({"lokr_w1": (4, 2), "lokr_t2": (2, 2, 3, 3), "lokr_w2_a": (2, 8), "lokr_w2_b": (2, 16)}, (32, 288)),  # Tucker
    ({"hada_w1_a": (32, 4), "hada_w1_b": (4, 288), "hada_w2_a": (32, 4), "hada_w2_b": (4, 288)}, (32, 288)),
    ({"hada_t1": (4, 4, 3, 3), "hada_w1_a": (4, 32), "hada_w1_b": (4, 32)}, (32, 288)),  # LoHa with Tucker
    ({"diff": (32, 32, 3, 3)}, (32, 288)),
    ({"on_input": (1,), "weight": (32,)}, None),  # IA3: no weight change of that kind
])
def test_each_lycoris_kind_tells_the_shape_of_its_change(parts: dict, change: tuple | None) -> None:
    assert lycoris_change({k: torch.empty(s) for k, s in parts.items()}) == change


def test_a_locon_with_a_tucker_middle_is_checked_with_its_kernel() -> None:
    from trainers.loras.lora_fit import first_misfit

    module = {"lora_down.weight": torch.empty(4, 16, 1, 1), "lora_mid.weight": torch.empty(4, 4, 3, 3),
              "lora_up.weight": torch.empty(32, 4, 1, 1)}
    assert first_misfit({"conv": module}, {"conv": (32, 16, 3, 3)}) is None
    assert first_misfit({"conv": module}, {"conv": (32, 16, 1, 1)}) == ("conv", (32, 16, 3, 3), (32, 16, 1, 1))


def test_generate_refuses_a_cut_lora_file_by_name_before_loading(tmp_path: Path) -> None:
    from trainers.generate.options import GenerateConfig, check_config

    lora = tmp_path / "cut lora.safetensors"
    save_file({f"{CROSS}.lora_down.weight": torch.zeros(4, 32), f"{CROSS}.lora_up.weight": torch.zeros(32, 4)}, lora)
    assert not [i for i in check_config(GenerateConfig({"model": "org/model", "loras": [str(lora)]}))
                if i.field == "loras"]
    lora.write_bytes(lora.read_bytes()[:-40])
    said = [i.message for i in check_config(GenerateConfig({"model": "org/model", "loras": [f"{lora}:0.5"],
                                                            "mode": "compare", "compare_loras": [str(lora)]}))
            if i.field in ("loras", "compare_loras")]
    assert len(said) == 2 and all(m.startswith(f"{lora} is cut short: its header lists") for m in said), said


@pytest.mark.parametrize(("algo", "extra"), [
    ("loha", {}), ("loha", {"use_tucker": True}), ("lokr", {"factor": 4}), ("lokr", {"use_tucker": True}),
    ("locon", {"use_tucker": True}), ("locon", {"dora_wd": True}), ("full", {}), ("ia3", {}), ("diag-oft", {}),
    ("boft", {}), ("glora", {}),
])
def test_every_lycoris_file_of_the_model_itself_fits(tiny_sd1_dir: Path, algo: str, extra: dict) -> None:
    """No false refusal: each algorithm's file, made on the model (its convolutions too), fits it."""
    from trainers.methods.lora.lycoris_net import LycorisNetwork

    model = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    network = LycorisNetwork(model.unet, model.text_encoders, model.vae, unet_key_style=model.family.unet_key_style,
                             network_dim=4, network_alpha=4, train_unet=True, train_text_encoder=True,
                             kwargs={"algo": algo, "conv_dim": "4", "conv_alpha": "4",
                                     **{k: str(v) for k, v in extra.items()}})
    state = network.kohya_state_dict(torch.float32)
    network.restore() if hasattr(network, "restore") else None
    fresh = load_model(str(tiny_sd1_dir), "auto", torch.float32)
    assert misfit_for_generate("made here.safetensors", state, fresh) is None


def test_the_renderer_refuses_a_lokr_of_other_shapes_before_wrapping_a_layer(tiny_sd1_dir: Path,
                                                                            tmp_path: Path) -> None:
    from trainers.generate.options import GenerateConfig
    from trainers.generate.renderer import Renderer
    from trainers.models import ModelLoadError

    renderer = Renderer(GenerateConfig({"model": str(tiny_sd1_dir), "precision": "fp32"}), "cpu", [])
    renderer.load(str(tiny_sd1_dir))
    from trainers.loras.lycoris_files import kohya_modules

    out, inputs = kohya_modules(renderer.model)[CROSS].weight.shape
    save_file(_lokr(out, inputs * 2), tmp_path / "sd2 lokr.safetensors")
    with pytest.raises(ModelLoadError, match=rf"^loras: sd2 lokr\.safetensors: module {CROSS} changes a "):
        renderer._load_lora(str(tmp_path / "sd2 lokr.safetensors"))
    assert not renderer.lycoris
