"""LTX-2's log-mel spectrogram of a waveform, what AutoencoderKLLTX2Audio.encode reads, in plain torch (torchaudio is
not a dependency). The settings are Lightricks' audio processor's (ltx-core's audio_vae AudioProcessor): an STFT of
`n_fft` points with a periodic Hann window of the same length, `hop` samples apart, centred (the signal reflected at
both ends), its magnitude (power 1), a mel filterbank on the Slaney scale with Slaney's area normalisation from 0 Hz to
half the sample rate, then log(max(x, 1e-5)); laid out (batch, channels, frames, mel bins).

The rate, hop and mel bins come from the audio autoencoder's config (sample_rate, mel_hop_length, mel_bins);
n_fft from a single file's `config` metadata (audio_vae.preprocessing.stft.filter_length) where it has one, else
1024, Lightricks' published value (diffusers' config does not record it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

N_FFT = 1024  # Lightricks' stft filter_length for LTX-2's audio autoencoder
LOG_FLOOR = 1e-5
# Slaney's mel scale (the Auditory Toolbox's): linear below 1 kHz (200/3 Hz a mel), logarithmic above
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = math.log(6.4) / 27.0


def hz_to_mel(hz: torch.Tensor) -> torch.Tensor:
    linear = hz / _F_SP
    logarithmic = _MIN_LOG_MEL + torch.log(hz.clamp(min=_MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return torch.where(hz >= _MIN_LOG_HZ, logarithmic, linear)


def mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    linear = mel * _F_SP
    logarithmic = _MIN_LOG_HZ * torch.exp(_LOG_STEP * (mel - _MIN_LOG_MEL))
    return torch.where(mel >= _MIN_LOG_MEL, logarithmic, linear)


def mel_filterbank(sample_rate: int, n_fft: int, mel_bins: int) -> torch.Tensor:
    """(n_fft // 2 + 1, mel_bins) float64: triangular filters between mel-spaced edges from 0 Hz to sample_rate / 2,
    each scaled by 2 / its width in Hz (Slaney's normalisation: every filter the same area)."""
    bins = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)
    top = hz_to_mel(torch.tensor(sample_rate / 2, dtype=torch.float64))
    edges = mel_to_hz(torch.linspace(0.0, float(top), mel_bins + 2, dtype=torch.float64))
    widths = edges[1:] - edges[:-1]  # (mel_bins + 1,)
    rising = (bins[:, None] - edges[None, :-2]) / widths[None, :-1]
    falling = (edges[None, 2:] - bins[:, None]) / widths[None, 1:]
    filters = torch.minimum(rising, falling).clamp(min=0.0)
    return filters * (2.0 / (edges[2:] - edges[:-2]))[None, :]


@dataclass(frozen=True)
class MelSettings:
    sample_rate: int
    hop: int
    mel_bins: int
    n_fft: int = N_FFT


def log_mel(waveform: torch.Tensor, settings: MelSettings) -> torch.Tensor:
    """(B, channels, frames, mel_bins) of a waveform (B, channels, samples) at settings.sample_rate, in float32;
    frames = 1 + samples // hop."""
    batch, channels, samples = waveform.shape
    signal = waveform.float().reshape(batch * channels, samples)
    window = torch.hann_window(settings.n_fft, periodic=True, dtype=torch.float32, device=signal.device)
    spectrum = torch.stft(signal, settings.n_fft, hop_length=settings.hop, win_length=settings.n_fft, window=window,
                          center=True, pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    magnitude = spectrum.abs()  # (B x channels, n_fft // 2 + 1, frames)
    filters = mel_filterbank(settings.sample_rate, settings.n_fft, settings.mel_bins).to(signal.device, torch.float32)
    mel = torch.einsum("bft,fm->btm", magnitude, filters)
    return torch.log(mel.clamp(min=LOG_FLOOR)).reshape(batch, channels, -1, settings.mel_bins)
