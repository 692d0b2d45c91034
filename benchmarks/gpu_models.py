"""The models benchmarks/gpu_check.py trains and renders, as folders of configs that the trainers build with random
weights (`random_init`: only the configs are read, nothing is downloaded).

Real size: SD1.5 and SDXL from the published configs the repo ships (trainers/models/*/arch), FLUX.1-dev from its
published hyperparameters written below (diffusers' FluxTransformer2DModel defaults with the dev guidance
embedding; T5 v1.1 XXL; the 16-channel autoencoder), Wan 2.2 TI2V 5B from Wan-AI/Wan2.2-TI2V-5B-Diffusers' configs
(its transformer and UMT5-XXL written below, its 48-channel autoencoder the one trainers/models/wan/arch ships),
Z-Image and Qwen-Image from the published configs their families ship (`transformer.json`, `text_encoder.json`,
Qwen-Image's `vae.json`; Z-Image's autoencoder is FLUX.1's) with the tests' character-level tokenizer carrying Qwen's
chat tokens (the real vocabularies are not shipped; captions' token counts differ a little, images' not at all).
`--dry-run`: the tests' tiny models of each family.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ARCH = {"sd15": REPO / "trainers" / "models" / "sd" / "arch" / "sd15",
        "sdxl": REPO / "trainers" / "models" / "sdxl" / "arch" / "sdxl",
        "wan22_vae": REPO / "trainers" / "models" / "wan" / "arch" / "vae22"}
MODELS = REPO / "trainers" / "models"
FAMILIES = ("sd15", "sdxl", "flux", "wan22_ti2v", "zimage", "qwen_image")

T5_XXL_ENCODER = {  # google/t5-v1_1-xxl's encoder
    "architectures": ["T5EncoderModel"], "model_type": "t5", "d_model": 4096, "d_ff": 10240, "d_kv": 64,
    "num_heads": 64, "num_layers": 24, "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
    "dense_act_fn": "gelu_new", "is_gated_act": True, "layer_norm_epsilon": 1e-6,
    "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "tie_word_embeddings": False,
    "is_encoder_decoder": False, "use_cache": False, "pad_token_id": 0, "eos_token_id": 1,
    "decoder_start_token_id": 0}
FLUX_DEV = {  # black-forest-labs/FLUX.1-dev, as diffusers' configs of it say
    "model_index.json": {
        "_class_name": "FluxPipeline", "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "tokenizer_2": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "FluxTransformer2DModel"], "vae": ["diffusers", "AutoencoderKL"]},
    "transformer/config.json": {
        "_class_name": "FluxTransformer2DModel", "patch_size": 1, "in_channels": 64, "num_layers": 19,
        "num_single_layers": 38, "attention_head_dim": 128, "num_attention_heads": 24, "joint_attention_dim": 4096,
        "pooled_projection_dim": 768, "guidance_embeds": True, "axes_dims_rope": [16, 56, 56]},
    "vae/config.json": {
        "_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": [128, 256, 512, 512],
        "down_block_types": ["DownEncoderBlock2D"] * 4, "up_block_types": ["UpDecoderBlock2D"] * 4,
        "in_channels": 3, "out_channels": 3, "latent_channels": 16, "layers_per_block": 2, "norm_num_groups": 32,
        "sample_size": 1024, "scaling_factor": 0.3611, "shift_factor": 0.1159, "force_upcast": True,
        "mid_block_add_attention": True, "use_quant_conv": False, "use_post_quant_conv": False},
    "text_encoder_2/config.json": T5_XXL_ENCODER,
    "scheduler/scheduler_config.json": {
        "_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000, "shift": 3.0,
        "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 1.15, "base_image_seq_len": 256,
        "max_image_seq_len": 4096},
}
WAN22_TI2V_5B = {  # Wan-AI/Wan2.2-TI2V-5B-Diffusers, as its configs say (the autoencoder: ARCH["wan22_vae"])
    "model_index.json": {
        "_class_name": "WanPipeline", "expand_timesteps": True, "boundary_ratio": None, "transformer_2": [None, None],
        "scheduler": ["diffusers", "UniPCMultistepScheduler"], "text_encoder": ["transformers", "UMT5EncoderModel"],
        "tokenizer": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "WanTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"]},
    "transformer/config.json": {
        "_class_name": "WanTransformer3DModel", "added_kv_proj_dim": None, "attention_head_dim": 128,
        "cross_attn_norm": True, "eps": 1e-06, "ffn_dim": 14336, "freq_dim": 256, "image_dim": None,
        "in_channels": 48, "num_attention_heads": 24, "num_layers": 30, "out_channels": 48, "patch_size": [1, 2, 2],
        "pos_embed_seq_len": None, "qk_norm": "rms_norm_across_heads", "rope_max_seq_len": 1024, "text_dim": 4096},
    "text_encoder/config.json": {  # google/umt5-xxl's encoder: T5-XXL's layers over a 256k vocabulary
        **T5_XXL_ENCODER, "architectures": ["UMT5EncoderModel"], "model_type": "umt5", "vocab_size": 256384},
    "scheduler/scheduler_config.json": {
        "_class_name": "UniPCMultistepScheduler", "num_train_timesteps": 1000, "prediction_type": "flow_prediction",
        "use_flow_sigmas": True, "flow_shift": 5.0, "solver_order": 2, "predict_x0": True, "solver_type": "bh2",
        "lower_order_final": True, "timestep_spacing": "linspace"},
}
FLOW_SCHEDULER = {"_class_name": "FlowMatchEulerDiscreteScheduler", "num_train_timesteps": 1000}
ZIMAGE = {  # Tongyi-MAI/Z-Image's folder: the transformer and Qwen3-4B configs are its family's (below)
    "model_index.json": {
        "_class_name": "ZImagePipeline", "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen3Model"], "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "ZImageTransformer2DModel"], "vae": ["diffusers", "AutoencoderKL"]},
    "vae/config.json": FLUX_DEV["vae/config.json"],
    "scheduler/scheduler_config.json": {**FLOW_SCHEDULER, "shift": 6.0, "use_dynamic_shifting": False},
}
QWEN_IMAGE = {  # Qwen/Qwen-Image's folder: the transformer, Qwen2.5-VL 7B and autoencoder configs are its family's
    "model_index.json": {
        "_class_name": "QwenImagePipeline", "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"], "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"]},
    "scheduler/scheduler_config.json": {
        **FLOW_SCHEDULER, "shift": 1.0, "use_dynamic_shifting": True, "base_shift": 0.5, "max_shift": 0.9,
        "base_image_seq_len": 256, "max_image_seq_len": 8192, "shift_terminal": 0.02,
        "time_shift_type": "exponential"},
}
TINY_FLUX_BLOCKS = (4, 4)  # double, single: enough that the dry run can swap some (2 of each must stay)
TINY_QWEN_BLOCKS = 4  # as many, for its 24 GB preset's blocks_to_swap (Sizes.swap_cap of them in a dry run)


def model_folder(family: str, work: Path, tiny: bool) -> Path:
    """A folder the trainers load `family` from with random_init: real-size configs, or a tiny model's folder."""
    folder = work / f"{'tiny-' if tiny else ''}{family}"
    if folder.is_dir():
        return folder
    if tiny:
        return _tiny(family, folder)
    if family in REAL_CONFIGS:
        write_configs(folder, *REAL_CONFIGS[family])
        if family in ("zimage", "qwen_image"):
            from trainers.models.zimage.tiny import write_tiny_qwen_tokenizer

            write_tiny_qwen_tokenizer(folder / "tokenizer")
        return folder
    # the shipped tokenizer folders hold only their configs: without them a random-init load uses a tiny tokenizer
    shutil.copytree(ARCH[family], folder, ignore=shutil.ignore_patterns("tokenizer*"))
    return folder


def write_configs(folder: Path, configs: dict[str, dict[str, Any]], copied: dict[str, Path]) -> Path:
    """A model folder of `configs` ({file: config}) and the shipped config files `copied` ({file: source}): no
    weights and no tokenizers."""
    for name, config in configs.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    for name, source in copied.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, folder / name)
    return folder


# FLUX.1-dev's CLIP-L text encoder is SD1.5's
REAL_CONFIGS = {"flux": (FLUX_DEV, {"text_encoder/config.json": ARCH["sd15"] / "text_encoder" / "config.json"}),
                "wan22_ti2v": (WAN22_TI2V_5B, {"vae/config.json": ARCH["wan22_vae"] / "config.json"}),
                "zimage": (ZIMAGE, {"transformer/config.json": MODELS / "zimage" / "transformer.json",
                                    "text_encoder/config.json": MODELS / "zimage" / "text_encoder.json"}),
                "qwen_image": (QWEN_IMAGE, {f"{part}/config.json": MODELS / "qwen_image" / f"{part}.json"
                                            for part in ("transformer", "text_encoder", "vae")})}


def _tiny(family: str, folder: Path) -> Path:
    from trainers.models.flux.tiny import build_tiny_flux
    from trainers.models.sd.tiny import build_tiny_sd1
    from trainers.models.sdxl.tiny import build_tiny_sdxl
    from trainers.models.qwen_image.tiny import build_tiny_qwen_image
    from trainers.models.wan.ti2v.tiny import build_tiny_wan22_ti2v
    from trainers.models.zimage.tiny import build_tiny_zimage

    if family == "flux":
        return build_tiny_flux(folder, blocks=TINY_FLUX_BLOCKS)
    if family == "zimage":
        return build_tiny_zimage(folder, turbo=False)  # the base model, as the presets train
    if family == "qwen_image":
        return build_tiny_qwen_image(folder, blocks=TINY_QWEN_BLOCKS)
    return {"sd15": build_tiny_sd1, "sdxl": build_tiny_sdxl, "wan22_ti2v": build_tiny_wan22_ti2v}[family](folder)


def component_params(folder: Path) -> dict[str, int]:
    """Parameters of each component the trainers build from `folder`, built on the meta device (no memory, no
    time): the same loader a run uses, so a typo in a config shows here before any GPU time is spent."""
    import torch

    from trainers.models import load_model

    with torch.device("meta"):
        model = load_model(str(folder), "auto", torch.bfloat16, random_init=True)
    parts: dict[str, Any] = {"denoiser": model.unet, "vae": model.vae}
    parts.update({f"text_encoder_{i + 1}": te for i, te in enumerate(model.text_encoders)})
    return {name: sum(p.numel() for p in module.parameters()) for name, module in parts.items()}
