"""LTX-2: its own option and the shared options it reads (torch-free; see trainers/core/options/families.py). Its
pipeline samples with a resolution-dependent shift (mu from 0.95 at 1024 tokens to 2.05 at 4096, as ai-toolkit and
SimpleTuner train it); the presets train at the fixed shift that gives for their clips (timestep_sampling 'shift',
discrete_flow_shift)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING

READS = DENSITY | SAMPLING
OPTIONS: tuple[Option, ...] = (
    Option("with_audio", "bool", False, "Train the audio stream too, from the clips' sound (Lightricks' ltx-trainer's "
           "with_audio): each window's audio, resampled to the audio autoencoder's rate and turned into its log-mel "
           "spectrogram, is encoded by the frozen audio autoencoder, noised at the video's noise level and scored "
           "beside the video; a LoRA then also trains the audio stream's attention and feed-forward and both "
           "audio-video cross-attentions. Clips without sound and images train with a silent track, not scored "
           "(each named in the log). Off: the audio stream is frozen and fed a silent track.", "flow"),
)
