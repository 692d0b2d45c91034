"""The memory estimate held to the figures peers publish (issue 42 item 1): each measured point within 15% either way,
each tier a peer says a config runs on fits that card's memory. docs/memory.md states the error per point.

A row's reading decides what it is compared with: "nvidia-smi" (what a card shows in use: the CUDA context and the
allocator's reserve included) the estimate's card_gb, "reserved" reserved_gb, "allocated" gpu_gb. Settings are our
config values for the source's; where a source leaves a setting unstated, the row's note says what is assumed.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from trainers.core.options import TrainConfig
from trainers.memory_estimate import MemoryEstimate, estimate_memory

TOLERANCE = 0.15
GIB = 2**30 / 1e9  # a card sold as N GB holds N GiB


@dataclass(frozen=True)
class Point:
    name: str
    source: str
    values: dict[str, object]
    published_gb: float  # the peak as published; for a tier row, the card's size in GB as sold (GiB)
    reading: str  # "nvidia-smi", "reserved", "allocated", or "tier" (the config runs on a card of that size)
    note: str = ""
    xfail: str = ""  # why the point cannot be met honestly (a strict xfail)
    captions_on_card: bool = True  # a tier row: the peer encodes the captions on the GPU (else on the CPU)


MUSUBI_QWEN = ("kohya-ss/musubi-tuner docs/qwen_image.md, 'VRAM Usage Estimates with Memory Saving Options' "
               "(1024x1024, batch 1, bf16, gradient checkpointing; optimizer and rank from its example command)")
QWEN = {"model_family": "qwen_image", "pretrained_model_name_or_path": "Qwen/Qwen-Image", "resolution": "1024",
        "mixed_precision": "bf16", "gradient_checkpointing": True, "train_batch_size": 1, "network_dim": 16,
        "network_train_unet_only": True, "optimizer_type": "AdamW8bit", "cache_text_encoder_outputs": True}
SIMPLETUNER_FLUX = ("bghira/SimpleTuner documentation/quickstart/FLUX.md, 'Hardware requirements' (a rank-16 LoRA on "
                    "every component, 'a bit more than N G VRAM')")
FLUX_ST = {"model_family": "flux", "resolution": "512", "mixed_precision": "bf16", "gradient_checkpointing": True,
           "train_batch_size": 1, "network_dim": 16, "network_train_unet_only": True, "optimizer_type": "AdamW",
           "cache_text_encoder_outputs": True}
ST_NOTE = ("resolution unstated: 512 px, by the same page's 'Lowest VRAM config' (nf4, 512 px: 9090M, the list's "
           "nf4 figure); optimizer unstated: AdamW (the page recommends adamw_bf16, whose LoRA and states are bf16: "
           "ours counts them in float32, ~0.7 GB more)")
SD_SCRIPTS_FLUX = ("kohya-ss/sd-scripts docs/flux_train_network.md, 6.1 'Recommended Settings by GPU Memory' "
                   "(with --fp8_base; network_dim 16, AdamW8bit, gradient checkpointing, cached text encoder "
                   "outputs from its example command)")
FLUX_SD = {"model_family": "flux", "resolution": "1024", "mixed_precision": "bf16", "gradient_checkpointing": True,
           "train_batch_size": 1, "network_dim": 16, "network_train_unet_only": True, "optimizer_type": "AdamW8bit",
           "cache_text_encoder_outputs": True, "fp8_base": True}
SD_NOTE = "resolution unstated: 1024 px (FLUX.1's)"
AI_TOOLKIT = "ostris/ai-toolkit config/examples/"
ONETRAINER = "Nerogar/OneTrainer training_presets/"
CHROMA_OT = {"model_family": "chroma", "pretrained_model_name_or_path": "lodestones/Chroma1-HD", "resolution": "512",
             "mixed_precision": "bf16", "gradient_checkpointing": True, "train_batch_size": 2, "network_dim": 16,
             "network_train_unet_only": True, "optimizer_type": "AdamW", "cache_text_encoder_outputs": True,
             "base_model_precision": "fp8"}
OT_NOTE = ("transformer FLOAT_8, 512 px, batch 2 (stated); rank 16, AdamW, gradient checkpointing: OneTrainer's "
           "defaults (modules/util/config/TrainConfig.py); text encoder outputs cached (it does not train)")
SD_SCRIPTS_HUNYUAN = ("kohya-ss/sd-scripts docs/hunyuan_image_train_network.md, 6.1 'Recommended Settings by GPU "
                      "Memory' (network_dim 16, AdamW8bit, gradient checkpointing, cached text encoder outputs from "
                      "its example command)")
HUNYUAN_SD = {"model_family": "hunyuan_image21", "resolution": "1024", "mixed_precision": "bf16",
              "gradient_checkpointing": True, "train_batch_size": 1, "network_dim": 16, "network_train_unet_only": True,
              "optimizer_type": "AdamW8bit", "cache_text_encoder_outputs": True, "fp8_base": True}
HUNYUAN_NOTE = "--fp8_scaled (ours: fp8); resolution unstated: 1024 px"
# The caption pass's rows (issue 42 item 2): both fit only with the text encoders alone on the card while they encode
KLEIN_OT = {"model_family": "flux2", "pretrained_model_name_or_path": "black-forest-labs/FLUX.2-klein-base-9B",
            "resolution": "512", "mixed_precision": "bf16", "gradient_checkpointing": True, "train_batch_size": 2,
            "network_dim": 16, "network_train_unet_only": True, "optimizer_type": "AdamW",
            "cache_text_encoder_outputs": True, "base_model_precision": "int8", "text_encoder_precision": "fp8",
            "no_half_vae": True}
QWEN_ST = {**QWEN, "network_dim": 8, "optimizer_type": "Lion", "base_model_precision": "nf4"}

POINTS = (
    Point("musubi Qwen-Image bf16", MUSUBI_QWEN, QWEN, 42, "nvidia-smi"),
    Point("musubi Qwen-Image fp8", MUSUBI_QWEN, {**QWEN, "fp8_base": True}, 30, "nvidia-smi",
          "--fp8_base --fp8_scaled: fp8 Linear weights (ours: base_model_precision fp8)"),
    Point("musubi Qwen-Image fp8, 16 blocks swapped", MUSUBI_QWEN, {**QWEN, "fp8_base": True, "blocks_to_swap": 16},
          24, "nvidia-smi"),
    Point("musubi Qwen-Image fp8, 45 blocks swapped", MUSUBI_QWEN, {**QWEN, "fp8_base": True, "blocks_to_swap": 45},
          12, "nvidia-smi"),
    Point("SimpleTuner FLUX.1 bf16", SIMPLETUNER_FLUX, FLUX_ST, 30, "nvidia-smi", ST_NOTE),
    Point("SimpleTuner FLUX.1 int8", SIMPLETUNER_FLUX, {**FLUX_ST, "base_model_precision": "int8"}, 18, "nvidia-smi",
          ST_NOTE + "; int8-quanto (ours: torchao int8)"),
    Point("SimpleTuner FLUX.1 int4", SIMPLETUNER_FLUX, {**FLUX_ST, "base_model_precision": "int4"}, 13, "nvidia-smi",
          ST_NOTE + "; int4-quanto (ours: torchao int4)",
          xfail="reads 26% low (9.6 GB): optimum-quanto's int4 takes 4 GB more than the same page's nf4 row at the "
                "same settings, though it stores fewer bytes a weight; no term shared with the other rows explains it"),
    Point("SimpleTuner FLUX.1 nf4", SIMPLETUNER_FLUX, {**FLUX_ST, "base_model_precision": "nf4"}, 9, "nvidia-smi",
          ST_NOTE + "; nf4-bnb"),
    Point("SimpleTuner FLUX.1 lowest VRAM", "bghira/SimpleTuner documentation/quickstart/FLUX.md, 'Lowest VRAM config'",
          {**FLUX_ST, "base_model_precision": "nf4", "optimizer_type": "PagedLion8bit"}, 9090 * 2**20 / 1e9,
          "nvidia-smi", "nf4-bnb, bnb-lion8bit-paged, 512 px, batch 1, gradient checkpointing (stated); rank "
                        "unstated: 16 as the page's other rows"),
    Point("sd-scripts FLUX.1 24 GB, batch 2", SD_SCRIPTS_FLUX, {**FLUX_SD, "train_batch_size": 2}, 24, "tier", SD_NOTE),
    Point("sd-scripts FLUX.1 12 GB, 16 blocks swapped", SD_SCRIPTS_FLUX, {**FLUX_SD, "blocks_to_swap": 16}, 12, "tier",
          SD_NOTE),
    Point("sd-scripts FLUX.1 10 GB, 22 blocks swapped, fp8 T5", SD_SCRIPTS_FLUX,
          {**FLUX_SD, "blocks_to_swap": 22, "text_encoder_precision": "fp8"}, 10, "tier", SD_NOTE),
    Point("sd-scripts FLUX.1 8 GB, 28 blocks swapped, fp8 T5", SD_SCRIPTS_FLUX,
          {**FLUX_SD, "blocks_to_swap": 28, "text_encoder_precision": "fp8"}, 8, "tier", SD_NOTE),
    Point("sd-scripts HunyuanImage 2.1 24 GB, 9 blocks swapped", SD_SCRIPTS_HUNYUAN,
          {**HUNYUAN_SD, "blocks_to_swap": 9}, 24, "tier", HUNYUAN_NOTE),
    Point("sd-scripts HunyuanImage 2.1 12 GB, 32 blocks swapped", SD_SCRIPTS_HUNYUAN,
          {**HUNYUAN_SD, "blocks_to_swap": 32, "text_encoder_precision": "fp8"}, 12, "tier",
          HUNYUAN_NOTE + "; --fp8_vl for the text encoder (ours: text_encoder_precision fp8)"),
    Point("sd-scripts HunyuanImage 2.1 8 GB, 37 blocks swapped", SD_SCRIPTS_HUNYUAN,
          {**HUNYUAN_SD, "blocks_to_swap": 37, "text_encoder_precision": "fp8"}, 8, "tier",
          HUNYUAN_NOTE + "; --text_encoder_cpu below 12 GB, as the page advises: the captions are encoded on the CPU",
          captions_on_card=False),
    Point("ai-toolkit FLUX.1 24 GB", AI_TOOLKIT + "train_lora_flux_24gb.yaml",
          {**FLUX_SD, "fp8_base": False, "base_model_precision": "fp8", "text_encoder_precision": "fp8",
           "cache_text_encoder_outputs": False}, 24, "tier",
          "quantize: true (qfloat8; ours fp8), its text encoders too (quantize_te follows quantize, qtype_te qfloat8) "
          "and on the card (no cache_text_embeddings); linear 16, adamw8bit, batch 1, gradient checkpointing, "
          "buckets up to 1024 px (1024 here)"),
    Point("ai-toolkit Qwen-Image 24 GB", AI_TOOLKIT + "train_lora_qwen_image_24gb.yaml",
          {**QWEN, "base_model_precision": "nf4", "text_encoder_precision": "fp8"}, 24, "tier",
          "qtype uint3 with an accuracy recovery adapter (ours: nf4, more bytes a weight: an upper bound), qtype_te "
          "qfloat8, cache_text_embeddings; linear 16, adamw8bit, batch 1, gradient checkpointing, buckets up to "
          "1024 px (1024 here)"),
    Point("OneTrainer Chroma 16 GB", ONETRAINER + "Chroma/#chroma LoRA 16GB.json", CHROMA_OT, 16, "tier", OT_NOTE),
    Point("OneTrainer Chroma 8 GB", ONETRAINER + "Chroma/#chroma LoRA 8GB.json",
          {**CHROMA_OT, "layer_offload_fraction": 0.6, "text_encoder_precision": "fp8"}, 8, "tier",
          OT_NOTE + "; offload_fraction 0.6, the text encoder in FLOAT_8"),
    Point("OneTrainer FLUX.2 klein 9B 16 GB", ONETRAINER + "Flux 2/#flux2 LoRA 16GB.json", KLEIN_OT, 16, "tier",
          "FLUX.2-klein-base-9B, transformer INT_W8A8 (ours: int8 weights), text encoder FLOAT_8, VAE FLOAT_32, "
          "512 px, batch 2 (stated); rank 16, AdamW, gradient checkpointing, cached text encoder outputs: "
          "OneTrainer's defaults. With the int8 transformer on the card beside the text encoder while it encodes, "
          "that pass took ~20 GB"),
    Point("SimpleTuner Qwen-Image 24 GB", "bghira/SimpleTuner documentation/quickstart/QWEN_IMAGE.md, 'Lowest VRAM "
          "config (24GB minimum)'", QWEN_ST, 24, "tier",
          "nf4-bnb, optimi-lion (ours: Lion), rank 8, batch 1, gradient checkpointing (stated); 1024 px as its "
          "example config; text embeds always cached, the text encoder unquantized (~16.6 GB: the page's 'offload "
          "during startup' keeps the transformer off the card meanwhile). With the nf4 transformer on the card "
          "beside it, that pass took ~30 GB"),
)


def reading_gb(estimate: MemoryEstimate, reading: str) -> float:
    """The estimate as the row's source read its card."""
    return {"nvidia-smi": estimate.card_gb, "tier": estimate.card_gb, "reserved": estimate.reserved_gb,
            "allocated": estimate.gpu_gb}[reading]


def _param(point: Point) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=point.xfail)] if point.xfail else []
    return pytest.param(point, id=point.name, marks=marks)


@pytest.mark.parametrize("point", [_param(p) for p in POINTS])
def test_the_estimate_meets_each_published_point(point: Point) -> None:
    estimate = estimate_memory(TrainConfig("lora", point.values))
    assert estimate is not None, point.name
    estimated = reading_gb(estimate, point.reading)
    if point.reading == "tier":  # the peer runs it on that card: its steps and its caption pass fit the card
        card = point.published_gb * GIB
        captions = estimate.caching_card_gb if point.captions_on_card else 0.0
        assert estimated <= card and captions <= card, (
            f"{point.name}: estimated {estimated:.1f} GB (captions {estimate.caching_card_gb:.1f} GB), "
            f"the card holds {card:.1f} GB ({point.source})")
        return
    error = estimated / point.published_gb - 1
    assert abs(error) <= TOLERANCE, (f"{point.name}: published {point.published_gb:.1f} GB ({point.reading}), "
                                     f"estimated {estimated:.1f} GB ({error:+.0%}; {point.source})")


def test_each_point_names_its_source_and_reading() -> None:
    assert all(p.source and p.reading in ("nvidia-smi", "reserved", "allocated", "tier") for p in POINTS)
    assert len({p.name for p in POINTS}) == len(POINTS)
