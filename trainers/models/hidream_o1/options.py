"""HiDream-O1-Image: its own options (musubi-tuner's hidream_o1_train_network.py names and meanings: the variant and
its noise settings) and the shared ones it reads (torch-free; see trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

# no diffusers copy of a LoRA (save_diffusers_lora): diffusers has no HiDream-O1 DiffusionPipeline to load one
READS = (DENSITY - {"save_diffusers_lora"}) | SAMPLING | SINGLE_FILE
OPTIONS: tuple[Option, ...] = (
    Option("model_type", "str", "full", "The HiDream-O1-Image variant the model file is (musubi-tuner's "
           "--model_type): 'full' (HiDream-ai/HiDream-O1-Image) or 'dev' (the distilled HiDream-O1-Image-Dev). It "
           "sets the noise settings left unset (full: 8.0 / 8.0 / 0.0; dev: 7.5 / 7.5 / 2.5) and the samples' "
           "shift (full: 3; dev: 1; their steps and CFG are the sample options', musubi-tuner's being 50 at CFG 5 "
           "for full, 28 without CFG for dev).", "model",
           choices=("full", "dev")),
    Option("noise_scale_start", "float", None, "The noise's scale at the noisiest level (musubi-tuner's "
           "--noise_scale_start): the noisy input is (1 - sigma) x + sigma * scale * noise. Unset: 8.0 (full) or "
           "7.5 (dev).", "flow", min=0.0, nullable=True, advanced=True),
    Option("noise_scale_end", "float", None, "The noise's scale at the cleanest level (musubi-tuner's "
           "--noise_scale_end), linear in sigma between the two. Unset: noise_scale_start.", "flow", min=0.0,
           nullable=True, advanced=True),
    Option("noise_clip_std", "float", None, "Clip the Gaussian noise at this many standard deviations before it is "
           "scaled (musubi-tuner's --noise_clip_std; each image's own deviation here). 0: no clipping. Unset: 0.0 "
           "(full) or 2.5 (dev).", "flow", min=0.0, nullable=True, advanced=True),
)
NOTES = {
    "tokenizer_cache_dir": "its Qwen3-VL tokenizer and chat template (HiDream-ai/HiDream-O1-Image's, or "
                           "HiDream-ai/HiDream-O1-Image-Dev's for a file whose name says Dev).",
    "timestep_sampling": "musubi-tuner's HiDream-O1 docs train with 'uniform' (the presets set it).",
}
