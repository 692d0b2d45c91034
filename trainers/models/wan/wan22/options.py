"""Wan 2.2's own options (the expert pair) and the shared ones it reads (torch-free; see
trainers/core/options/families.py). Names and meanings are musubi-tuner's (wan_train_network.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.models.option_sets import DENSITY, SAMPLING
from trainers.models.wan.options import NOTES as WAN21_NOTES
from trainers.models.wan.options import SPLIT_FILES

EXPERTS = ("both", "high_noise", "low_noise")
READS = DENSITY | SAMPLING | SPLIT_FILES
NOTES = WAN21_NOTES
OPTIONS: tuple[Option, ...] = (
    Option("timestep_boundary", "float", None, "Where the A14B pair switches experts: the high-noise expert "
           "(transformer) takes timesteps at or above it, the low-noise one (transformer_2) those below. A ratio "
           "0-1, or a timestep above 1 (read as timestep / 1000, as musubi-tuner reads it). Unset: the model's "
           "boundary_ratio (model_index.json), else 0.875 for text-to-video and 0.9 for image-to-video.", "flow",
           min=0, max=1000, nullable=True),
    Option("train_expert", "str", "both", "Which expert of the A14B pair the LoRA trains: 'both' (each on its own "
           "timestep range, a LoRA saved per expert beside the run's file: <name>_high_noise.safetensors and "
           "<name>_low_noise.safetensors), or one of them ('high_noise', 'low_noise': its timesteps scaled into its "
           "range, as musubi-tuner's min_timestep/max_timestep do, the other expert frozen for samples). A finetune "
           "trains the experts it names and saves the pair's folder (the other expert as it was loaded).", "flow",
           choices=EXPERTS),
    Option("dit_high_noise", "str", "", "A pair from ComfyUI's diffusion_models files (musubi-tuner's --dit_high_noise):"
           " the high-noise expert's file (wan2.2_t2v_high_noise_14B_fp16.safetensors, wan2.2_i2v_high_noise_14B_fp16"
           ".safetensors), with the low-noise one as pretrained_model_name_or_path (musubi-tuner's --dit). A T2V pair's "
           "files have Wan 2.1 T2V 14B's layout: set model_family = 'wan22' for them. A diffusers folder holds both.",
           "model", path="file", advanced=True),
    Option("offload_inactive_dit", "bool", False, "Keep the A14B expert not being called in CPU memory (musubi-tuner's "
           "name and meaning): an expert's weights come to the GPU when its timesteps come (in a step or a sample) "
           "and the other's go back, so the GPU holds one expert instead of two. Each switch copies one expert (~14 "
           "GB in fp8) from pinned CPU memory; a batch holding both experts' timesteps runs each expert's forward "
           "again in its backward. Not with blocks_to_swap or layer_offload_fraction (as musubi-tuner), one "
           "process only; LoRA runs only (a finetune trains the weights it would park).", "precision", advanced=True),
)
