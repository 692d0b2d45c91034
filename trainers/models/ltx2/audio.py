"""LTX-2's audio stream trained from the clips' sound (`with_audio`, Lightricks' ltx-trainer's name), as their trainer
trains it: each window's sound (clip_audio.py: its time in the clip, resampled to the audio autoencoder's rate,
stereo) turned into Lightricks' log-mel spectrogram (mel.py), encoded by the frozen AutoencoderKLLTX2Audio (the mean
of its latent distribution, packed (B, L, C x M) as LTX2Pipeline packs audio latents and normalised by the
autoencoder's per-channel latents_mean / latents_std), noised at the video's sigma (`(1 - sigma) x latents + sigma x
noise`, the noise the sample's own draw), and its velocity (noise - latents) scored by mean squared error beside the
video's loss, each sample's audio term added to its video term at weight 1 (Lightricks' `video_loss + audio_loss`).

Windows without sound (a clip without an audio stream, an image) get a silent track (zero latents noised the same)
whose output is not scored; the data layer names them once. The latents are made in the latent cache when latents are
cached (`window_extras`: `audio_latents` and `audio_present` beside each window's video latents, under a key of the
audio autoencoder's weights and the mel settings), else at each step from the batch's `sound`.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from trainers.data.clip_audio import ClipSound
from trainers.data.dataset import sample_generator
from trainers.data.video_cache import WindowExtras
from trainers.models.ltx2.mel import MelSettings, log_mel

LATENTS, PRESENT = "audio_latents", "audio_present"  # the latent cache's names (the batch's cached_<name>)
NOISE_STREAM = "audio_noise"  # the per-sample random stream of the audio track's noise


@dataclass
class AudioTrack:
    """The batch's audio stream for one step: clean latents (B, L, D), their noise, which samples have sound (B,)."""

    latents: torch.Tensor
    noise: torch.Tensor
    present: torch.Tensor


@dataclass
class AudioSlot:
    """The step's track (set around the method's objective) and the audio stream's output denoise leaves in it."""

    track: AudioTrack | None = None
    output: torch.Tensor | None = None


def mel_settings(audio_vae: nn.Module, n_fft: int) -> MelSettings:
    config = audio_vae.config
    return MelSettings(int(config.sample_rate), int(config.mel_hop_length), int(config.mel_bins), int(n_fft))


def clip_sound(audio_vae: nn.Module, frame_rate: float) -> ClipSound:
    return ClipSound(int(audio_vae.config.sample_rate), frame_rate, int(audio_vae.config.in_channels))


def pack(latents: torch.Tensor) -> torch.Tensor:
    """(B, C, L, M) -> (B, L, C x M), LTX2Pipeline's _pack_audio_latents without patches."""
    return latents.transpose(1, 2).flatten(2, 3)


def encode_sound(audio_vae: nn.Module, wave: torch.Tensor, settings: MelSettings) -> torch.Tensor:
    """The normalised packed latents (B, L, C x M) of waveforms (B, channels, samples), in float32."""
    device, dtype = audio_vae.device, audio_vae.dtype
    mel = log_mel(wave.to(device), settings)
    with torch.no_grad():
        latents = pack(audio_vae.encode(mel.to(dtype)).latent_dist.mode().float())
    mean = audio_vae.latents_mean.to(device, torch.float32)
    std = audio_vae.latents_std.to(device, torch.float32)
    return (latents - mean) / std


def window_extras(audio_vae: nn.Module, settings: MelSettings, frame_rate: float, device: torch.device) -> WindowExtras:
    """What the latent cache keeps of each window's sound: its latents and whether its clip has any."""
    from trainers.data.cache import vae_fingerprint

    def encode(wave: torch.Tensor, present: torch.Tensor) -> dict[str, torch.Tensor]:
        ready(audio_vae, device)
        latents = encode_sound(audio_vae, wave, settings) * present.to(device).view(-1, 1, 1)
        return {LATENTS: latents.cpu(), PRESENT: present}

    text = f"ltx2-audio-1|{vae_fingerprint(audio_vae)}|{settings}|{frame_rate}"
    return WindowExtras(hashlib.blake2b(text.encode(), digest_size=16).hexdigest(), lambda pixels: {},
                        sound=clip_sound(audio_vae, frame_rate), encode_sound=encode)


def ready(audio_vae: nn.Module, device: torch.device) -> None:
    """The frozen audio autoencoder on `device` in float32 (Lightricks encodes in float32 for its quality)."""
    if audio_vae.device != torch.device(device) or audio_vae.dtype != torch.float32:
        audio_vae.to(device, torch.float32)


def batch_track(audio_vae: nn.Module, settings: MelSettings, batch: dict[str, Any], seed: int,
                device: torch.device) -> AudioTrack | None:
    """The batch's audio track: its cached latents, or its sound encoded; None for a batch with neither (an image
    dataset's), which trains with the silent track unscored."""
    if "cached_" + LATENTS in batch:
        latents, present = batch["cached_" + LATENTS].to(device).float(), batch["cached_" + PRESENT].to(device)
    elif "sound" in batch:
        ready(audio_vae, device)
        present = batch["sound_present"].to(device)
        latents = encode_sound(audio_vae, batch["sound"], settings) * present.view(-1, 1, 1)
    else:
        return None
    shape = latents.shape[1:]
    noise = torch.stack([torch.randn(shape, generator=sample_generator(seed, int(e), int(i), NOISE_STREAM))
                         for e, i in batch["keys"].tolist()])
    return AudioTrack(latents, noise.to(device), present.float())


def noisy_audio(track: AudioTrack, timesteps: torch.Tensor) -> torch.Tensor:
    """The track at the step's noise levels (sigma = timesteps / 1000, the video's)."""
    sigma = (timesteps.detach().float() / 1000).view(-1, 1, 1).to(track.latents.device)
    return (1 - sigma) * track.latents + sigma * track.noise


def audio_loss(track: AudioTrack, output: torch.Tensor, loss_weights: torch.Tensor | None) -> torch.Tensor:
    """The batch's audio term: each sample's mean squared error of the velocity, times whether it has sound and its
    loss weight, averaged over the batch as the video's loss is."""
    per_sample = (output.float() - (track.noise - track.latents)).pow(2).mean(dim=(1, 2)) * track.present
    if loss_weights is not None:
        per_sample = per_sample * loss_weights.to(per_sample.device)
    return per_sample.mean()


Objective = Callable[..., torch.Tensor]


def with_audio(inner: Objective, family: Any) -> Objective:
    """The method's objective with the batch's audio track in the family's slot and its audio term added."""
    def objective(predictor: nn.Module, model: Any, batch: dict[str, Any], opts: Any,
                  weight_dtype: torch.dtype) -> torch.Tensor:
        device = next(p for p in model.unet.parameters()).device
        track = batch_track(family.parts.audio_vae, family.mel, batch, opts.seed, device)
        if track is None:
            return inner(predictor, model, batch, opts, weight_dtype)
        slot = family.audio
        slot.track, slot.output = track, None
        try:
            loss = inner(predictor, model, batch, opts, weight_dtype)
            output = slot.output
        finally:
            slot.track, slot.output = None, None
        assert output is not None, "LTX-2's denoise leaves the audio stream's output in the slot"
        return loss + audio_loss(track, output, batch.get("loss_weights"))

    return objective


def audio_trainable(trainable: Any, family: Any) -> Any:
    return dataclasses.replace(trainable, objective=with_audio(trainable.objective, family))


@dataclass
class SoundedClip:
    """A sample's frames (F, H, W, 3) uint8 and its sound (waveform (channels, samples), samples a second)."""

    frames: Any
    sound: tuple[Any, int]


def decode_sound(audio_vae: nn.Module, vocoder: nn.Module, latents: torch.Tensor) -> tuple[Any, int]:
    """The first sample's waveform (channels, samples) float32 and its rate, of the audio latents LTX2Pipeline
    returns with output_type="latent" (denormalised, (B, C, L, M)), decoded as it decodes them: the audio
    autoencoder's mel spectrogram, then the vocoder."""
    with torch.no_grad():
        mel = audio_vae.decode(latents[:1].to(audio_vae.device, audio_vae.dtype), return_dict=False)[0]
        wave = vocoder(mel.to(vocoder.device, vocoder.dtype))
    return wave[0].float().cpu().numpy(), int(vocoder.config.output_sampling_rate)
