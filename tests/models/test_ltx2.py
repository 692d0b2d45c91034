"""LTX-2 text-to-video, in process on a tiny random-init model of its real diffusers classes
(LTX2VideoTransformer3DModel, the causal AutoencoderKLLTX2Video, Gemma3ForConditionalGeneration, LTX2TextConnectors,
the audio autoencoder and vocoder): the folder is claimed, its other pipelines, LTX-Video 0.9's and other families'
models are refused by name before anything loads, captions are encoded as LTX2Pipeline does, the transformer is called
as the pipeline calls it on (B, C, F, h, w) latents (1 + 8k frames; images as 1-frame clips) beside a silent audio
track, one flow-matching step trains the video stream and leaves the audio stream's output unscored, and its LoRA
file loads with every key in ComfyUI (comfy_lora.py) and in LTX2Pipeline."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from comfy_lora import PREFIX, check_patches, load_lora, unet_key_map
from lora_networks import random_network

from trainers.core.options import BY_NAME
from trainers.models import load_model
from trainers.models.checks import model_issues
from trainers.models.ltx2.rules import LTX2
from trainers.models.ltx2.tiny import build_tiny_ltx2
from trainers.models.rules import checkpoint_rules, folder_rules

CAPTIONS = ["  a robot dances in the rain ", "waves at dusk"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx2") / "model")


@pytest.fixture(scope="module")
def model(tiny: Path) -> object:
    return load_model(str(tiny), "auto", torch.float32)


@pytest.fixture(scope="module")
def pipe(tiny: Path) -> object:
    from diffusers import LTX2Pipeline

    return LTX2Pipeline.from_pretrained(tiny)


def _values(model_dir: Path, **options: object) -> dict[str, object]:
    return {**{n: o.default for n, o in BY_NAME.items()}, "pretrained_model_name_or_path": str(model_dir), **options}


def _folder(tmp_path: Path, name: str, index: dict[str, object]) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps(index))
    return folder


def test_the_tiny_folder_is_claimed_and_its_other_pipelines_refused_by_name(tiny: Path, tmp_path: Path) -> None:
    assert folder_rules(tiny) is LTX2
    index = json.loads((tiny / "model_index.json").read_text())
    assert index["transformer"][1] == "LTX2VideoTransformer3DModel" and index["vae"][1] == "AutoencoderKLLTX2Video"
    assert index["text_encoder"][1] == "Gemma3ForConditionalGeneration" and index["connectors"][1] == \
        "LTX2TextConnectors"
    for pipeline, what in (("LTX2ConditionPipeline", "LTX-2 condition"), ("LTXPipeline", "LTX-Video 0.9")):
        folder = _folder(tmp_path, pipeline, {**index, "_class_name": pipeline})
        (issue,) = model_issues(_values(folder))
        assert issue.field == "pretrained_model_name_or_path" and what in issue.message, issue.message


def test_a_wrong_family_model_is_refused_by_name_before_loading(tiny: Path, tmp_path: Path) -> None:
    (issue,) = model_issues(_values(tiny, model_family="wan21"))
    assert issue.field == "model_family" and "LTX-2" in issue.message
    image = _folder(tmp_path, "flux", {"_class_name": "FluxPipeline", "transformer": ["diffusers",
                                                                                     "FluxTransformer2DModel"]})
    (issue,) = model_issues(_values(image, model_family="ltx2"))
    assert issue.field == "model_family" and "FLUX.1" in issue.message, issue.message


def test_its_single_files_are_claimed_by_the_audio_timestep_embedding() -> None:
    shapes = {"audio_adaln_single.linear.weight": (12288, 2048), "adaln_single.linear.weight": (24576, 4096),
              "transformer_blocks.0.attn1.to_q.weight": (4096, 4096)}
    assert checkpoint_rules({f"model.diffusion_model.{k}": v for k, v in shapes.items()}, "ltx-2-19b-dev.safetensors") \
        is LTX2


def test_validate_names_the_family_in_what_it_refuses(tiny: Path) -> None:
    issues = model_issues(_values(tiny, min_snr_gamma=5.0, save_model_as="safetensors", text_encoder_lr=[1e-4]))
    assert sorted(i.field for i in issues) == ["min_snr_gamma", "save_model_as", "text_encoder_lr"]
    assert all("LTX-2" in i.message for i in issues)
    (issue,) = model_issues(_values(tiny, text_encoder_precision="fp8"))
    assert issue.field == "text_encoder_precision" and "'int8' or 'nf4'" in issue.message


def test_its_frames_follow_the_1_plus_8k_rule() -> None:
    from trainers.data.frames import target_lengths

    assert LTX2.frame_rule == 8 and LTX2.frame_rate == 24.0 and LTX2.bucket_step == 32
    assert target_lengths([1, 9, 12, 25, 49], LTX2.frame_rule) == (1, 9, 25, 49)


def test_captions_are_encoded_as_its_pipeline_does(model: object, pipe: object) -> None:
    """Gemma 3's stacked hidden states of the stripped, left-padded captions (1024 tokens) through the connectors:
    the video connector's states, then the audio connector's, and their mask (all ones: the registers fill the
    padding)."""
    with torch.no_grad():
        states, mask, _, _ = pipe.encode_prompt(CAPTIONS, do_classifier_free_guidance=False,
                                                device=torch.device("cpu"), dtype=torch.float32)
        video, audio, text_mask = pipe.connectors(states, mask, padding_side="left")
        ours, our_mask = model.encode_texts(CAPTIONS, 1)
    width = video.shape[-1]
    assert states.shape[1] == 1024 and ours.shape == (2, 1024, 2 * width)
    assert torch.equal(our_mask, text_mask.float())
    assert torch.allclose(ours[..., :width], video, atol=1e-5) and torch.allclose(ours[..., width:], audio, atol=1e-5)


def test_clips_and_images_encode_to_normalised_latents_with_a_frame_axis(model: object) -> None:
    """Causal temporal compression 8 (1 + 8k frames to 1 + k), spatial 32, its channels normalised by its
    per-channel mean and std; an image is one frame."""
    with torch.no_grad():
        clip = model.vae.encode(torch.rand(1, 3, 9, 64, 96) * 2 - 1).latent_dist.mean
        image = model.vae.encode(torch.rand(2, 3, 64, 96) * 2 - 1).latent_dist.mean
    assert clip.shape == (1, 8, 2, 2, 3) and image.shape == (2, 8, 1, 2, 3)
    mean, std = model.vae.latents_mean.view(1, -1, 1, 1, 1), model.vae.latents_std.view(1, -1, 1, 1, 1)
    assert torch.allclose(model.family.vae_latents(clip, model.vae), (clip - mean) / std)


def test_denoise_calls_the_transformer_as_its_pipeline_does(model: object, pipe: object) -> None:
    """The latents packed as the pipeline packs them, the connectors' states of each stream with their mask, the
    audio track as long as the clip (the pipeline's count), the timestep 1000 x sigma for both streams."""
    from trainers.models.ltx2.family import silent_audio

    noisy, timesteps = torch.randn(2, 8, 2, 2, 3), torch.tensor([900.0, 100.0])
    hidden, mask = model.encode_texts(CAPTIONS, 1)
    with torch.no_grad():
        ours = model.family.denoise(model.unet, noisy, timesteps, hidden, mask, None)
        states, text_mask, _, _ = pipe.encode_prompt(CAPTIONS, do_classifier_free_guidance=False,
                                                     device=torch.device("cpu"), dtype=torch.float32)
        video, audio, connector_mask = pipe.connectors(states, text_mask, padding_side="left")
        audio_frames = round(9 / 24.0 * pipe.audio_sampling_rate / pipe.audio_hop_length
                             / pipe.audio_vae_temporal_compression_ratio)
        track = silent_audio(model.unet.config, 2, 2, timesteps, 24.0)
        theirs = model.unet(hidden_states=pipe._pack_latents(noisy), audio_hidden_states=track,
                            encoder_hidden_states=video, audio_encoder_hidden_states=audio, timestep=timesteps,
                            sigma=timesteps, encoder_attention_mask=connector_mask,
                            audio_encoder_attention_mask=connector_mask, num_frames=2, height=2, width=3, fps=24.0,
                            audio_num_frames=audio_frames, use_cross_timestep=True, return_dict=False)[0]
    assert track.shape[1] == audio_frames and ours.shape == noisy.shape and torch.isfinite(ours).all()
    assert torch.allclose(ours, pipe._unpack_latents(theirs, 2, 2, 3), atol=1e-5)
    # the silent track is noised to each sample's sigma, the same for the same noise levels
    assert torch.equal(track, silent_audio(model.unet.config, 2, 2, timesteps, 24.0))
    assert track[1].std() < track[0].std()


def test_one_flow_matching_step_on_a_clip_and_an_image_trains_the_video_stream(model: object) -> None:
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    family = model.family.configured({**{n: o.default for n, o in BY_NAME.items()},
                                      "timestep_sampling": "shift", "discrete_flow_shift": 4.7})
    run = SimpleNamespace(**{**model.__dict__, "family": family, "unet": copy.deepcopy(model.unet)})
    hidden, mask = model.encode_texts(CAPTIONS[:1], 1)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, ids: object, sizes: object,
                  embeds: object) -> torch.Tensor:
        n = noisy.shape[0]
        return family.denoise(run.unet, noisy, timesteps, hidden.expand(n, -1, -1), mask.expand(n, -1), None)

    opts = NoiseOptions(seed=1, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    sizes = {name: torch.zeros(1, 2) for name in ("original_size", "crop_top_left", "target_size")}
    # a clip as the video dataset gives it (B, F, C, H, W), an image as the image dataset does (B, C, H, W)
    for pixels in (torch.rand(1, 9, 3, 64, 64) * 2 - 1, torch.rand(1, 3, 64, 64) * 2 - 1):
        run.unet.zero_grad()
        batch = {"pixels": pixels, "keys": torch.tensor([[0, 3]]), **sizes}
        loss = flow_loss(predictor, run, batch, opts, torch.float32)
        loss.backward()
        assert torch.isfinite(loss) and loss > 0
        targets = family.lora_targets(run.unet)
        assert len(targets) == 2 * 10
        for target in targets:
            assert target.layers[0].weight.grad.abs().sum() > 0, target.name
        # the audio stream's output is not scored
        assert run.unet.audio_proj_out.weight.grad is None


def loaded_in_comfyui_and_ltx2pipeline(tiny: Path, file: Path) -> tuple[list[str], int, int]:
    """A saved LoRA file loaded as it is by ComfyUI's key map of the tiny model and, in its diffusers form, by
    LTX2Pipeline.load_lora_weights: (the keys ComfyUI left, its patched modules, the pipeline's LoRA layers)."""
    import copy

    from comfy_lora import load_lora, unet_key_map
    from diffusers import LTX2Pipeline
    from safetensors.torch import load_file

    from trainers.models.ltx2.family import LTX2

    pipe = LTX2Pipeline.from_pretrained(tiny)
    on_disk = load_file(file)
    patches, not_loaded = load_lora(on_disk, unet_key_map(_comfy_shapes(pipe.transformer)))
    view = SimpleNamespace(unet=copy.deepcopy(pipe.transformer), text_encoders=[], family=LTX2)
    pipe.load_lora_weights(LTX2.lora_for_pipeline(on_disk, view), adapter_name="trained")
    layers = [name for name, module in pipe.transformer.named_modules()
              if hasattr(module, "lora_A") and "trained" in module.lora_A]
    return not_loaded, len(patches), len(layers)


def _comfy_shapes(unet: torch.nn.Module) -> dict[str, torch.Size]:
    """The linear weights of ComfyUI's LTX-2 model (comfy/ldm/lightricks: Lightricks' module names, which are
    diffusers': transformer_blocks.N.attn1.to_q, ..., ff.net.0.proj, ff.net.2, the audio stream's beside)."""
    return {f"{PREFIX}{name}.weight": module.weight.shape for name, module in unet.named_modules()
            if isinstance(module, torch.nn.Linear)}


@pytest.fixture(scope="module")
def saved(model: object) -> SimpleNamespace:
    """A network on every target a run trains without with_audio (random weights, alpha 2 at rank 4), its file's
    tensors, each layer's update."""
    unet = copy.deepcopy(model.unet).eval()
    family = model.family.configured({n: o.default for n, o in BY_NAME.items()})
    network, targets, state = random_network(family, unet)
    view = SimpleNamespace(unet=unet, text_encoders=[], family=family)
    return SimpleNamespace(unet=unet, network=network, targets=targets, file=family.lora_file(state, view),
                           state=state, view=view)


def test_its_lora_file_has_the_reference_names_and_comfyui_loads_every_key(saved: SimpleNamespace) -> None:
    assert {t.name for t in saved.targets} >= {"lora_unet_transformer_blocks_0_attn1_to_q",
                                               "lora_unet_transformer_blocks_0_attn2_to_out_0",
                                               "lora_unet_transformer_blocks_1_ff_net_0_proj"}
    assert not any("audio" in t.name for t in saved.targets)  # the audio stream is frozen
    shapes = _comfy_shapes(saved.unet)
    patches, not_loaded = load_lora(saved.file, unet_key_map(shapes))
    assert not_loaded == []  # ComfyUI warns "lora key not loaded" for each of these
    assert len(patches) == len(saved.targets) == 2 * 10
    check_patches(patches, {key: shapes[key] for key in patches})


def test_ltx2pipeline_loads_every_key_into_the_layer_that_was_trained(saved: SimpleNamespace, pipe: object) -> None:
    """LTX2Pipeline.load_lora_weights (its LTX2LoraLoaderMixin) takes lora_for_pipeline's keys, every one, and
    its transformer computes what the network as training runs it does."""
    from trainers.models.ltx2.family import LTX2

    pipe = copy.copy(pipe)
    pipe.transformer = copy.deepcopy(saved.unet).eval()
    state = LTX2.lora_for_pipeline(saved.state, saved.view)
    pipe.load_lora_weights(state, adapter_name="trained")
    layers = [name for name, module in pipe.transformer.named_modules()
              if hasattr(module, "lora_A") and "trained" in module.lora_A]
    assert len(layers) == len(state) // 2 == 2 * 10
    inputs = {"hidden_states": torch.randn(1, 12, 8), "audio_hidden_states": torch.randn(1, 4, 8),
              "encoder_hidden_states": torch.randn(1, 7, 32), "audio_encoder_hidden_states": torch.randn(1, 7, 32),
              "timestep": torch.tensor([500.0]), "encoder_attention_mask": torch.ones(1, 7),
              "audio_encoder_attention_mask": torch.ones(1, 7), "num_frames": 2, "height": 2, "width": 3,
              "audio_num_frames": 4, "return_dict": False}
    saved.network.apply_to()  # the network as training runs it computes what diffusers does
    with torch.no_grad():
        assert torch.allclose(pipe.transformer(**inputs)[0], saved.unet(**inputs)[0], atol=1e-4)


def write_clip(path: Path, frames: int, size: tuple[int, int] = (64, 64), fps: int = 24) -> Path:
    """An mpeg4 clip whose frames brighten, with a caption beside it."""
    import av
    import numpy as np

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = *size, "yuv420p"
        for i in range(frames):
            pixels = np.full((size[1], size[0], 3), i * 12 % 256, np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    path.with_suffix(".txt").write_text(f"a clip of {frames} frames brightening")
    return path


def video_dataset(tmp: Path) -> Path:
    """3 tiny clips (9, 5 and 12 frames) and an image, as a musubi-tuner video dataset config (windows of 1 and 9
    frames: LTX-2's 1 + 8k)."""
    from PIL import Image

    clips, images = tmp / "clips", tmp / "images"
    clips.mkdir(parents=True)
    images.mkdir()
    for name, frames in (("a.mp4", 9), ("b.mp4", 5), ("c.mp4", 12)):
        write_clip(clips / name, frames)
    Image.new("RGB", (64, 64), (200, 40, 40)).save(images / "red.png")
    (images / "red.txt").write_text("a red square")
    config = tmp / "dataset.toml"
    config.write_text(f'[general]\nresolution = [64, 64]\nbatch_size = 1\n\n[[datasets]]\nvideo_directory = '
                      f'"{clips}"\ntarget_frames = [1, 9]\n\n[[datasets]]\nimage_directory = "{images}"\n')
    return config


PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").glob("ltx2_t2v_lora_*gb.toml"))


def test_there_is_a_preset_for_each_tier_its_caption_pass_fits() -> None:
    """12, 16 and 24 GB: Gemma 3 12B's caption pass takes ~11.3 GB in nf4 with the autoencoder off the card
    (docs/video.md)."""
    assert [p.stem.rsplit("_", 1)[1] for p in PRESETS] == ["12gb", "16gb", "24gb"]


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_each_preset_fits_its_tier_and_validates_on_clips(path: Path, tiny: Path, tmp_path: Path) -> None:
    """By the estimate for the published 19B model (as its comment says, the caption pass too), and Validate's
    preflight on the tiny model with a video dataset config."""
    from trainers.core.options import load_config
    from trainers.memory_estimate import FIT_MARGIN, estimate_memory
    from trainers.preflight.report import preflight

    tier = int(path.stem.rsplit("_", 1)[1].removesuffix("gb"))
    published = load_config("lora", path, ['pretrained_model_name_or_path="Lightricks/LTX-2"'])
    estimate = estimate_memory(published)
    assert estimate.source.startswith("the published LTX-2")
    assert estimate.card_gb <= FIT_MARGIN * tier and estimate.caching_card_gb <= tier
    comment = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    assert f"~{estimate.card_gb:.1f} GB of the card" in comment
    assert f"~{estimate.caching_card_gb:.1f} GB while the captions are encoded" in comment
    cfg = load_config("lora", path, [f'pretrained_model_name_or_path="{tiny}"',
                                     f'dataset_config="{video_dataset(tmp_path / "data")}"',
                                     f'output_dir="{tmp_path / "out"}"'])
    report = preflight(cfg)
    assert [str(issue) for issue in report.errors] == [] and report.train_samples == 6
