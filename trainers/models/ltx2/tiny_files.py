"""The tiny LTX-2 folder (tiny.py) as LTX-2's users have the model in files (tests): Lightricks' single file in its
layout (layout.py) with the `config` metadata its ltx-core writes (the settings the shapes do not tell, in its own
names), ComfyUI's Gemma 3 file (text_encoders/gemma_3_12B_it.safetensors: the language model as `model.layers...`),
and a tokenizer_cache_dir holding Lightricks/LTX-2's tokenizer as a first run leaves it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainers.models.ltx2 import layout
from trainers.models.ltx2.rules import FILE, TEXT_ENCODER

GEMMA_FILE = "gemma_3_12B_it.safetensors"  # ComfyUI's text_encoders file


def file_metadata(pipe: Any) -> dict[str, str]:
    """The `config` metadata of the pipeline's parts as Lightricks' files carry it (ltx-core's names)."""
    transformer, connectors, vocoder = pipe.transformer.config, pipe.connectors.config, pipe.vocoder.config
    config = {
        "transformer": {
            "num_attention_heads": transformer.num_attention_heads,
            "attention_head_dim": transformer.attention_head_dim,
            "audio_num_attention_heads": transformer.audio_num_attention_heads,
            "audio_attention_head_dim": transformer.audio_attention_head_dim,
            "rope_type": transformer.rope_type, "positional_embedding_theta": transformer.rope_theta,
            "frequencies_precision": "float64" if transformer.rope_double_precision else "float32",
            "positional_embedding_max_pos": [transformer.pos_embed_max_pos, transformer.base_height,
                                             transformer.base_width],
            "timestep_scale_multiplier": transformer.timestep_scale_multiplier,
            "av_ca_timestep_scale_multiplier": transformer.cross_attn_timestep_scale_multiplier,
            "connector_num_attention_heads": connectors.video_connector_num_attention_heads,
            "connector_attention_head_dim": connectors.video_connector_attention_head_dim,
            "connector_num_layers": connectors.video_connector_num_layers,
            "audio_connector_num_attention_heads": connectors.audio_connector_num_attention_heads,
            "audio_connector_attention_head_dim": connectors.audio_connector_attention_head_dim,
            "audio_connector_num_layers": connectors.audio_connector_num_layers,
            "connector_positional_embedding_max_pos": [connectors.connector_rope_base_seq_len]},
        "vocoder": {"upsample_rates": list(vocoder.upsample_factors),
                    "upsample_kernel_sizes": list(vocoder.upsample_kernel_sizes),
                    "resblock_kernel_sizes": list(vocoder.resnet_kernel_sizes),
                    "resblock_dilation_sizes": [list(d) for d in vocoder.resnet_dilations],
                    "upsample_initial_channel": vocoder.hidden_channels,
                    "output_sampling_rate": vocoder.output_sampling_rate}}
    return {"config": json.dumps(config)}


def model_file_state(pipe: Any) -> dict[str, Any]:
    """Every part of the pipeline but Gemma 3 under the names of Lightricks' single file."""
    state = {layout.DIFFUSION + k: v for k, v in layout.transformer_to_reference(pipe.transformer.state_dict()).items()}
    state.update(layout.connectors_to_reference(pipe.connectors.state_dict()))
    for prefix, module, names in ((layout.VAE, pipe.vae, layout.vae_to_reference),
                                  (layout.AUDIO_VAE, pipe.audio_vae, layout.audio_vae_to_reference),
                                  (layout.VOCODER, pipe.vocoder, layout.vocoder_to_reference)):
        state.update({prefix + k: v for k, v in names(module.state_dict()).items()})
    return state


def write_tiny_files(folder: Path, out: Path) -> dict[str, Path]:
    """The files of the tiny folder `folder` in `out`; returns the options that name them."""
    from diffusers import LTX2Pipeline
    from safetensors.torch import save_file

    from trainers.models.flow_checkpoint import tokenizer_id

    pipe = LTX2Pipeline.from_pretrained(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = {"pretrained_model_name_or_path": out / FILE, "text_encoder": out / GEMMA_FILE,
             "tokenizer_cache_dir": out / "tokenizers"}
    save_file({k: v.contiguous() for k, v in model_file_state(pipe).items()}, files["pretrained_model_name_or_path"],
              metadata=file_metadata(pipe))
    language = pipe.text_encoder.model.language_model.state_dict()
    save_file({f"model.{k}": v.contiguous() for k, v in language.items()}, files["text_encoder"])
    pipe.tokenizer.save_pretrained(files["tokenizer_cache_dir"] / tokenizer_id(TEXT_ENCODER).replace("/", "_"))
    return files
