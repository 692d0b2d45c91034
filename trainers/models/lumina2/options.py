"""Lumina 2: the shared options it reads and its own timestep sampling (torch-free; see
trainers/core/options/families.py)."""
from __future__ import annotations

from trainers.models.option_sets import DENSITY, SAMPLING, SINGLE_FILE

READS = DENSITY | SAMPLING | SINGLE_FILE | {"model_prediction_type", "text_encoder", "ae"}
TIMESTEP_SAMPLINGS = {"nextdit_shift": "uniform then shifted by the image's size as 'flux_shift' (sd-scripts' advice "
                                       "for Lumina 2)."}
NOTES = {"ae": "FLUX.1's ae.safetensors.", "text_encoder": "ComfyUI's text_encoders/gemma_2_2b.safetensors.",
         "tokenizer_cache_dir": "its Gemma 2 tokenizer."}
