"""LTX-2's audio stream trained from the clips' sound (with_audio), in process on the tiny model of the real diffusers
classes: the log-mel spectrogram matches an independent numpy computation of Lightricks' processor settings (written
from the formulas: a periodic Hann STFT, reflect-centred, magnitude, Slaney's mel scale and area normalisation), one
step trains the audio LoRA targets and scores the audio output (a clip without sound: not scored), the cached audio
latents are the ones a step encodes, a LoRA with the audio targets loads with every key in ComfyUI and LTX2Pipeline,
the memory estimate counts them, and other families refuse with_audio by name. The windows' sound itself:
tests/data/test_clip_audio.py."""
from __future__ import annotations

import copy
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from comfy_lora import check_patches, load_lora, unet_key_map
from lora_networks import random_network
from sound_clips import CAPTION, window, write_sound_clip
from test_ltx2 import _comfy_shapes

from trainers.core.options import BY_NAME
from trainers.data.clip_audio import ClipSound, window_sound
from trainers.models import load_model
from trainers.models.ltx2.mel import MelSettings, hz_to_mel, log_mel, mel_filterbank, mel_to_hz
from trainers.models.ltx2.tiny import build_tiny_ltx2


# --- an independent computation (numpy, float64) -------------------------------------------------------------

def _slaney_hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, np.float64)
    return np.where(hz < 1000, 3 * hz / 200, 15 + 27 * np.log(np.maximum(hz, 1e-9) / 1000) / np.log(6.4))


def _slaney_mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, np.float64)
    return np.where(mel < 15, 200 * mel / 3, 1000 * 6.4 ** ((mel - 15) / 27))


def _numpy_filters(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1): for each mel band, the triangle over its neighbours' centres, area-normalised."""
    freqs = np.arange(n_fft // 2 + 1) * sr / n_fft
    centres = _slaney_mel_to_hz(np.linspace(0, _slaney_hz_to_mel(sr / 2), n_mels + 2))
    out = np.zeros((n_mels, len(freqs)))
    for band in range(n_mels):
        low, mid, high = centres[band:band + 3]
        up = (freqs - low) / (mid - low)
        down = (high - freqs) / (high - mid)
        out[band] = np.maximum(0, np.minimum(up, down)) * 2 / (high - low)
    return out


def _numpy_log_mel(wave: np.ndarray, sr: int, n_fft: int, hop: int, n_mels: int) -> np.ndarray:
    """(frames, n_mels) of a mono waveform."""
    padded = np.pad(wave.astype(np.float64), n_fft // 2, mode="reflect")
    window = 0.5 * (1 - np.cos(2 * np.pi * np.arange(n_fft) / n_fft))
    count = 1 + (len(padded) - n_fft) // hop
    spectra = np.abs(np.stack([np.fft.rfft(window * padded[i * hop:i * hop + n_fft]) for i in range(count)]))
    return np.log(np.maximum(spectra @ _numpy_filters(sr, n_fft, n_mels).T, 1e-5))


def test_the_slaney_mel_scale_is_linear_to_1khz_then_logarithmic() -> None:
    hz = torch.tensor([0.0, 500.0, 1000.0, 6400.0, 8000.0], dtype=torch.float64)
    assert torch.allclose(hz_to_mel(hz), torch.tensor([0.0, 7.5, 15.0, 42.0, float(_slaney_hz_to_mel(8000.0))],
                                                      dtype=torch.float64))
    assert torch.allclose(mel_to_hz(hz_to_mel(hz)), hz)
    assert torch.allclose(mel_filterbank(16000, 1024, 64).T, torch.from_numpy(_numpy_filters(16000, 1024, 64)))


@pytest.mark.parametrize("mel_bins", [64, 16])  # the published audio autoencoder's and the tiny's
def test_the_log_mel_matches_an_independent_numpy_computation(mel_bins: int) -> None:
    settings = MelSettings(16000, 160, mel_bins, 1024)
    t = np.arange(8000) / 16000
    rng = np.random.default_rng(0)
    left = 0.4 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(8000)
    right = 0.3 * np.sin(2 * np.pi * 3000 * t) * np.exp(-3 * t)
    wave = torch.tensor(np.stack([left, right])[None], dtype=torch.float32)
    ours = log_mel(wave, settings)
    assert ours.shape == (1, 2, 1 + 8000 // 160, mel_bins)  # (batch, channels, frames, mel bins)
    for channel, signal in enumerate((left, right)):
        theirs = _numpy_log_mel(signal.astype(np.float32), 16000, 1024, 160, mel_bins)
        assert np.abs(ours[0, channel].numpy() - theirs).max() < 2e-3
    # a 440 Hz tone is loudest in the band whose centre is nearest 440 Hz
    centres = _slaney_mel_to_hz(np.linspace(0, _slaney_hz_to_mel(8000), mel_bins + 2))[1:-1]
    assert int(ours[0, 0].mean(0).argmax()) == int(np.abs(centres - 440).argmin())


# --- the model -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_ltx2(tmp_path_factory.mktemp("ltx2") / "model")


@pytest.fixture(scope="module")
def model(tiny: Path) -> object:
    return load_model(str(tiny), "auto", torch.float32)


def _configured(model: object, **options: object) -> object:
    return model.family.configured({**{n: o.default for n, o in BY_NAME.items()}, "timestep_sampling": "shift",
                                    "discrete_flow_shift": 4.7, **options})


def test_the_audio_targets_train_only_with_audio(model: object) -> None:
    off, on = _configured(model), _configured(model, with_audio=True)
    assert off.clip_sound(model) is None and off.window_extras(model) is None
    assert len(off.lora_targets(model.unet)) == 2 * 10
    names = {t.name for t in on.lora_targets(model.unet)}
    assert len(names) == 2 * 28 and {"lora_unet_transformer_blocks_0_audio_attn1_to_q",
                                     "lora_unet_transformer_blocks_1_audio_ff_net_2",
                                     "lora_unet_transformer_blocks_0_audio_to_video_attn_to_out_0",
                                     "lora_unet_transformer_blocks_1_video_to_audio_attn_to_v"} <= names
    assert on.clip_sound(model) == ClipSound(16000, 24.0, 2)


def test_one_step_with_audio_trains_the_audio_stream_and_scores_its_output(model: object, tmp_path: Path) -> None:
    from trainers.models.ltx2.audio import encode_sound, with_audio
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    family = _configured(model, with_audio=True)
    run = SimpleNamespace(**{**model.__dict__, "family": family, "unet": copy.deepcopy(model.unet)})
    hidden, mask = model.encode_texts([CAPTION], 1)

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, *rest: object) -> torch.Tensor:
        n = noisy.shape[0]
        return family.denoise(run.unet, noisy, timesteps, hidden.expand(n, -1, -1), mask.expand(n, -1), None)

    clip = write_sound_clip(tmp_path / "tone.mp4", 9)
    wave, _ = window_sound(window(clip, tuple(range(9))), family.clip_sound(model))
    opts = NoiseOptions(seed=1, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")
    batch = {"pixels": torch.rand(1, 9, 3, 64, 64) * 2 - 1, "keys": torch.tensor([[0, 3]]),
             "sound": torch.from_numpy(wave)[None], "sound_present": torch.tensor([1.0])}
    objective = with_audio(flow_loss, family)
    loss = objective(predictor, run, batch, opts, torch.float32)
    loss.backward()
    assert torch.isfinite(loss) and loss > flow_loss(predictor, run, batch, opts, torch.float32)
    for target in family.lora_targets(run.unet):
        assert target.layers[0].weight.grad.abs().sum() > 0, target.name
    assert run.unet.audio_proj_out.weight.grad.abs().sum() > 0  # the audio output is scored
    # 9 frames at 24 fps: 0.375 s of 16 kHz audio, 38 mel frames, 10 latents of 2 channels x 4 mel bins
    latents = encode_sound(family.parts.audio_vae, batch["sound"], family.mel)
    assert latents.shape == (1, 10, 8)
    # a clip without sound: the audio stream reads a silent track and its output is not scored
    run.unet.zero_grad()
    silent = {**batch, "sound_present": torch.tensor([0.0])}
    objective(predictor, run, silent, opts, torch.float32).backward()
    assert run.unet.audio_proj_out.weight.grad is None or not run.unet.audio_proj_out.weight.grad.any()


def test_cached_audio_latents_are_the_ones_a_step_encodes(model: object, tmp_path: Path) -> None:
    from trainers.data.video_cache import build_clip_latent_cache
    from trainers.data.video_catalog import VideoCatalog
    from trainers.data.video_dataset import ClipWindows, collate_clips
    from trainers.data.video_toml import VideoDatasetSpec
    from trainers.models.ltx2.audio import batch_track

    family = _configured(model, with_audio=True)
    clip = write_sound_clip(tmp_path / "tone.mp4", 9)
    one = window(clip, tuple(range(9)))
    catalog = VideoCatalog([VideoDatasetSpec("clips", False, tmp_path, None, (64, 64))], [one], [0])
    encode = lambda pixels: (torch.zeros(1, 8, 2, 2, 2), torch.ones(1, 8, 2, 2, 2))  # noqa: E731
    cache, failed = build_clip_latent_cache(catalog, encode, "vae", False, extras=family.window_extras(model))
    assert not failed
    cached = collate_clips([ClipWindows(catalog, model.tokenize, cache)[(0, 0, False)]])
    uncached = collate_clips([ClipWindows(catalog, model.tokenize, sound=family.clip_sound(model))[(0, 0, False)]])
    tracks = [batch_track(family.parts.audio_vae, family.mel, b, 5, torch.device("cpu")) for b in (cached, uncached)]
    assert torch.allclose(tracks[0].latents, tracks[1].latents, atol=1e-6)
    assert torch.equal(tracks[0].noise, tracks[1].noise) and tracks[0].present.tolist() == [1.0]


@pytest.fixture(scope="module")
def saved(model: object) -> SimpleNamespace:
    family = _configured(model, with_audio=True)
    unet = copy.deepcopy(model.unet).eval()
    network, targets, state = random_network(family, unet)
    view = SimpleNamespace(unet=unet, text_encoders=[], family=family)
    return SimpleNamespace(unet=unet, network=network, targets=targets, file=family.lora_file(state, view),
                           state=state, view=view)


def test_an_audio_lora_loads_with_every_key_in_comfyui(saved: SimpleNamespace) -> None:
    shapes = _comfy_shapes(saved.unet)
    patches, not_loaded = load_lora(saved.file, unet_key_map(shapes))
    assert not_loaded == [] and len(patches) == len(saved.targets) == 2 * 28
    check_patches(patches, {key: shapes[key] for key in patches})


def test_an_audio_lora_loads_with_every_key_in_ltx2pipeline(saved: SimpleNamespace, tiny: Path) -> None:
    from diffusers import LTX2Pipeline

    from trainers.models.ltx2.family import LTX2

    pipe = LTX2Pipeline.from_pretrained(tiny)
    pipe.transformer = copy.deepcopy(saved.unet).eval()
    state = LTX2.lora_for_pipeline(saved.state, saved.view)  # the family as Generate holds it: not configured
    assert len(state) == 2 * len(saved.targets)
    pipe.load_lora_weights(state, adapter_name="trained")
    layers = [name for name, module in pipe.transformer.named_modules()
              if hasattr(module, "lora_A") and "trained" in module.lora_A]
    assert len(layers) == 2 * 28 and any("video_to_audio_attn" in name for name in layers)
    inputs = {"hidden_states": torch.randn(1, 12, 8), "audio_hidden_states": torch.randn(1, 4, 8),
              "encoder_hidden_states": torch.randn(1, 7, 32), "audio_encoder_hidden_states": torch.randn(1, 7, 32),
              "timestep": torch.tensor([500.0]), "encoder_attention_mask": torch.ones(1, 7),
              "audio_encoder_attention_mask": torch.ones(1, 7), "num_frames": 2, "height": 2, "width": 3,
              "audio_num_frames": 4, "return_dict": False}
    saved.network.apply_to()
    with torch.no_grad():
        theirs, ours = pipe.transformer(**inputs), saved.unet(**inputs)
    assert torch.allclose(theirs[0], ours[0], atol=1e-4) and torch.allclose(theirs[1], ours[1], atol=1e-4)
    assert not math.isnan(float(theirs[1].abs().sum()))


def test_the_memory_estimate_counts_the_audio_lora_with_audio_and_the_audio_tokens() -> None:
    import dataclasses

    from trainers.core.memory_facts import LTX2_TOKENS
    from trainers.memory_estimate import sequence_tokens
    from trainers.models.ltx2.rules import LTX2

    size = LTX2.memory_facts
    assert LTX2.trained_size({"with_audio": False}, size) is size
    assert LTX2.trained_size({"with_audio": True}, size).lora_per_rank == 5_111_808 + 4_521_984
    # a 49-frame window's ~51 audio latents, each half a video token wide, beside its 7 x 384 video tokens
    video_only = sequence_tokens(dataclasses.replace(LTX2_TOKENS, frame_tokens=0.0), 768 * 512, 49)
    assert sequence_tokens(LTX2_TOKENS, 768 * 512, 49) - video_only == pytest.approx(49 * 25 / 24 / 2)


def test_with_audio_is_refused_by_name_on_other_families() -> None:
    from trainers.models.rules import rules_of

    values = {**{n: o.default for n, o in BY_NAME.items()}, "with_audio": True}
    assert not [i for i in rules_of("ltx2").option_issues(values) if i.field == "with_audio"]
    for family, words in (("wan21", "is not used with Wan 2.1 models"), ("sdxl", "applies to LTX-2 models only")):
        messages = [i.message for i in rules_of(family).option_issues(values) if i.field == "with_audio"]
        assert len(messages) == 1 and words in messages[0], messages
