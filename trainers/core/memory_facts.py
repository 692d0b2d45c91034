"""What a memory estimate needs of a model (torch-free), and the published sizes families share (text encoders,
autoencoders): counted on the `meta` device from the published configs with diffusers 0.42.1.

Each family's rules.py gives its model's published sizes as `memory_facts` (trainers/models/rules.py), for an
estimate when the model is not on this machine (a hub id, a preset); without them its estimate needs a local model
(its safetensors headers).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

CLIP_L, CLIP_G, T5XXL = 123_060_480, 694_659_840, 4_762_310_656  # text encoders' parameters
CLIP_L_LINEAR, CLIP_G_LINEAR, T5XXL_LINEAR = 84_934_656, 629_145_600, 4_630_511_616  # in their Linear weights
CLIP_L_LORA, CLIP_G_LORA = 165_888, 737_280  # LoRA parameters per rank on their attention and MLP layers
SD_VAE, FLOW_AE = 83_653_863, 83_819_683
# The flow families' language-model text encoders (benchmarks/count_model_sizes.py; never trained: no LoRA figures)
QWEN3_4B, QWEN3_4B_LINEAR = 4_022_468_096, 3_633_315_840  # Qwen3Model (Z-Image); its tied lm_head adds no weights
QWEN3_4B_LM_LINEAR = 4_022_272_000  # Qwen3ForCausalLM (FLUX.2 klein 4B): its lm_head (the embedding, tied) a Linear
QWEN3_8B, QWEN3_8B_LINEAR = 8_190_735_360, 7_568_097_280  # Qwen3ForCausalLM (FLUX.2 klein 9B)
QWEN25_VL_7B, QWEN25_VL_7B_LINEAR = 8_292_166_656, 7_744_815_104  # Qwen-Image's, with its vision tower
QWEN3_VL_4B, QWEN3_VL_4B_LINEAR = 4_437_815_808, 4_044_357_632  # Krea 2's
QWEN3_VL_8B, QWEN3_VL_8B_LINEAR = 8_767_123_696, 8_139_599_872  # Qwen-Image 2.1's
QWEN3_VL_8B_MODEL, QWEN3_VL_8B_MODEL_LINEAR = 8_144_793_840, 7_517_270_016  # Ideogram 4's Qwen3VLModel (no LM head)
MISTRAL3_24B, MISTRAL3_24B_LINEAR = 24_011_361_280, 23_339_204_608  # FLUX.2 dev's Mistral-Small-3.1-24B
GEMMA2_2B, GEMMA2_2B_LINEAR = 2_614_341_888, 2_024_275_968  # Lumina 2's
QWEN3_06B, QWEN3_06B_LINEAR = 596_049_920, 440_401_920  # Anima's Qwen3Model (Qwen3-0.6B base)
MINISTRAL3_3B, MINISTRAL3_3B_LINEAR = 3_849_090_048, 3_445_620_736  # ERNIE-Image's Mistral3Model (Pixtral too)
FLUX2_AE, QWEN_IMAGE_VAE, QWEN_IMAGE21_VAE = 84_046_115, 126_892_531, 337_740_404  # their autoencoders
BYT5_GLYPH, BYT5_GLYPH_LINEAR = 221_537_664, 217_055_232  # HunyuanImage 2.1's ByT5-small glyph encoder
HUNYUAN_IMAGE21_VAE = 405_575_491  # its 32x autoencoder
CLIP_L_248, CLIP_G_248 = 123_781_632, 694_878_720  # HiDream-I1's CLIPs with projections, 248 positions
CLIP_L_248_LINEAR, CLIP_G_248_LINEAR = 85_524_480, 630_784_000
LLAMA31_8B, LLAMA31_8B_LINEAR = 8_030_261_248, 7_504_658_432  # HiDream-I1's LlamaForCausalLM
UMT5_XXL, UMT5_XXL_LINEAR = 5_680_910_336, 4_630_511_616  # Wan's UMT5-XXL encoder (T5-XXL's layers, 256k vocab)
WAN21_VAE = QWEN_IMAGE_VAE  # Wan 2.1's causal 3D autoencoder: Qwen-Image's is the same network
# Wan 2.1 T2V 14B, and each expert of Wan 2.2's A14B pair: WanTransformer3DModel 5120 wide, 40 layers (counted on
# the meta device, diffusers 0.42.1); LoRA parameters per rank on its blocks' attention and feed-forward linears
WAN_14B, WAN_14B_LINEAR, WAN_14B_LORA_PER_RANK = 14_288_491_584, 14_283_243_520, 4_792_320
CLIP_H_VISION = 630_766_080  # Wan 2.1 I2V's CLIP ViT-H/14 image encoder (CLIPVisionModel, 32 layers, 1280 wide)
WAN22_VAE = 704_688_668  # Wan 2.2's 48-channel autoencoder (TI2V 5B's), from its published config on the meta device
# HunyuanVideo 1.5's Qwen2.5-VL text model (its pipeline's Qwen2_5_VLTextModel: no vision tower, no lm_head) and
# its causal 3D autoencoder (16x in space, 4x in time, 32 channels)
QWEN25_VL_7B_TEXT, QWEN25_VL_7B_TEXT_LINEAR = 7_070_619_136, 6_525_288_448
HUNYUAN_VIDEO15_VAE = 1_260_634_115
# LTX-2 (19B): Gemma 3 12B (Gemma3ForConditionalGeneration, its vision tower included, as the pipeline loads it)
# and its text connectors (their 188k-wide input projection of every Gemma layer), and its video autoencoder (32x in
# space, 8x in time, 128 channels): diffusers 0.42.1's defaults on the meta device
GEMMA3_12B, GEMMA3_12B_LINEAR = 13_194_203_760, 12_176_338_944
LTX2_CONNECTORS, LTX2_CONNECTORS_LINEAR = 1_431_475_200, 1_430_323_200
LTX2_VAE = 1_222_479_601


@dataclass(frozen=True)
class Tokens:
    """A transformer's sequence, for activations counted from it (trainers/memory_estimate.py): image tokens from the
    pixels one token covers, the text tokens beside them, the width and the blocks they go through."""

    hidden: int
    blocks: int  # the transformer blocks every token goes through (FLUX.1: 19 double-stream and 38 single-stream)
    pixels_per_token: int  # (the autoencoder's factor x the patch size) squared
    text_tokens: int  # padded to this, or (captions trimmed to the batch's longest) a long caption's
    images: int = 1  # the target, and an edit model's control images
    # A video transformer's frames: its latent frames are 1 + (frames - 1) / frame_rule (the causal VAE's temporal
    # compression, its rules' frame_rule; 0: an image model), each of pixels / pixels_per_token tokens; `frames` is
    # the window counted when the run's dataset states none (the window its activation figures were for)
    frame_rule: int = 0
    frames: int = 1
    # tokens beside the frames' that grow with the window's frames, counted in hidden-wide tokens a frame (LTX-2's
    # audio stream)
    frame_tokens: float = 0.0


# FLUX.1 and Chroma: 3072 wide, 19 + 38 blocks, 8x autoencoder with 2x2 patches, T5 padded to 512 tokens
FLUX1_TOKENS = Tokens(3072, 57, 16 * 16, 512)
# Qwen-Image: 3072 wide, 60 dual-stream blocks, 8x autoencoder with 2x2 patches; Qwen2.5-VL's states trimmed to the
# batch's longest caption (up to 1024 tokens): 256 for a long one
QWEN_IMAGE_TOKENS = Tokens(3072, 60, 16 * 16, 256)
# Z-Image: 3840 wide, 30 layers and 2 noise-refiner layers, FLUX.1's autoencoder with 2x2 patches, Qwen3 up to 512
ZIMAGE_TOKENS = Tokens(3840, 32, 16 * 16, 512)
# Lumina 2: 2304 wide, 26 layers and 2 noise-refiner layers, FLUX.1's autoencoder with 2x2 patches, Gemma 2 at 256
LUMINA2_TOKENS = Tokens(2304, 28, 16 * 16, 256)
# FLUX.2: an 8x autoencoder with 2x2 patches, text padded to 512 tokens; dev 6144 wide, 8 + 48 blocks; klein 9B 4096
# wide, 8 + 24; klein 4B 3072 wide, 5 + 20
FLUX2_DEV_TOKENS, FLUX2_KLEIN9_TOKENS, FLUX2_KLEIN4_TOKENS = (Tokens(6144, 56, 16 * 16, 512),
                                                              Tokens(4096, 32, 16 * 16, 512),
                                                              Tokens(3072, 25, 16 * 16, 512))
# HunyuanImage 2.1: 3584 wide, 20 + 40 blocks, a 32x autoencoder with 1x1 patches, Qwen2.5-VL's 1000 tokens and
# ByT5's 128 beside them
HUNYUAN_IMAGE21_TOKENS = Tokens(3584, 60, 32 * 32, 1000 + 128)
# ERNIE-Image: 4096 wide, 36 single-stream layers, FLUX.2's 8x autoencoder with 2x2 patches; Ministral 3's states
# trimmed to the batch's longest caption (up to 512 tokens): 256 for a long one
ERNIE_IMAGE_TOKENS = Tokens(4096, 36, 16 * 16, 256)
# Anima: 2048 wide, 28 blocks, the Qwen-Image autoencoder (8x) with 2x2 patches; its LLM adapter's 512 tokens
# are the cross-attention's keys and values
ANIMA_TOKENS = Tokens(2048, 28, 16 * 16, 512)
# Ideogram 4: 4608 wide, 34 single-stream blocks, FLUX.2's 8x autoencoder with 2x2 patches, Qwen3-VL's states
# padded to 512 tokens
IDEOGRAM4_TOKENS = Tokens(4608, 34, 16 * 16, 512)
# HiDream-O1-Image: Qwen3-VL 8B's 36 decoder layers 4096 wide, one token a 32x32 pixel patch (no autoencoder), the
# caption's chat-template tokens trimmed to the batch's longest
HIDREAM_O1_TOKENS = Tokens(4096, 36, 32 * 32, 256)

# The video families' sequences: latent frames x (height / spatial factor / patch) x (width / ...) tokens, their text
# beside them (cross-attention's keys and values in Wan and LTX-2, joined in HunyuanVideo 1.5: counted alike).
# Wan 2.1 T2V 1.3B 1536 wide, 30 blocks; its 14B (and I2V 14B, each Wan 2.2 A14B expert) 5120 wide, 40 blocks: an
# 8x VAE with 1x2x2 patches, UMT5 padded to 512 tokens, 81 frames
WAN_1_3B_TOKENS = Tokens(1536, 30, 16 * 16, 512, frame_rule=4, frames=81)
WAN_14B_TOKENS = Tokens(5120, 40, 16 * 16, 512, frame_rule=4, frames=81)
# Wan 2.2 TI2V 5B: 3072 wide, 30 blocks, its 16x VAE with 1x2x2 patches, 121 frames
WAN_TI2V_TOKENS = Tokens(3072, 30, 32 * 32, 512, frame_rule=4, frames=121)
# HunyuanVideo 1.5: 2048 wide, 54 blocks, a 16x VAE with 1x1x1 patches, Qwen2.5-VL's 1000 tokens and ByT5's 256, 33
# frames (musubi-tuner's window)
HUNYUAN_VIDEO15_TOKENS = Tokens(2048, 54, 16 * 16, 1000 + 256, frame_rule=4, frames=33)
# LTX-2: 4096 wide, 48 blocks, a 32x VAE (8x in time) with 1x1x1 patches, Gemma 3's 1024 tokens, 49 frames; its
# audio stream beside, 25 latents a second of 24 frames, 2048 wide (half a video token each)
LTX2_TOKENS = Tokens(4096, 48, 32 * 32, 1024, frame_rule=8, frames=49, frame_tokens=25 / 24 * 2048 / 4096)


@dataclass(frozen=True)
class ModelSize:
    """What a memory estimate needs of a model; counted from its files, or published."""

    denoiser: int  # parameters of the UNet or transformer
    denoiser_linear: int  # of them in Linear weights: what int8, int4 and nf4 quantize
    text_encoders: int
    text_encoders_linear: int
    vae: int
    lora_per_rank: int  # LoRA parameters per unit of network_dim on the denoiser's default targets
    text_lora_per_rank: int  # and on the text encoders' (attention and MLP layers)
    swap_units: int  # what blocks_to_swap counts (two FLUX single blocks count as one; a UNet's down, mid, up blocks)
    source: str  # where the numbers come from, for the message
    native_pixels: int = 1024 * 1024  # the resolution the activation figures below are for
    # Activations of one sample at native_pixels in a 16-bit dtype, in GB: roughly, with and without gradient
    # checkpointing (SDPA attention: linear in the pixel count). Calibrate with benchmarks/memory_benchmark.py on a GPU.
    activations_gb: float = 0.0
    activations_checkpointed_gb: float = 0.0
    tokens: Tokens | None = None  # the sequence: activations counted from it instead of the two figures above



def with_controls(base: ModelSize, controls: int, source: str) -> ModelSize:
    """An edit model's sizes: its base model's weights, and activations for `controls` control images' tokens beside
    the target's (the sequence they join is that much longer; SDPA's activations grow with it)."""
    tokens = replace(base.tokens, images=base.tokens.images + controls) if base.tokens else None
    return replace(base, source=source, activations_gb=base.activations_gb * (1 + controls),
                   activations_checkpointed_gb=base.activations_checkpointed_gb * (1 + controls), tokens=tokens)
