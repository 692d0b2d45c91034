"""HunyuanVideo 1.5 text-to-video and image-to-video (diffusers HunyuanVideo15Transformer3DModel,
HunyuanVideo15Pipeline and HunyuanVideo15ImageToVideoPipeline), as musubi-tuner's hv_1_5_train_network.py trains it: captions in the pipeline's video template read by Qwen2.5-VL (its
third-last hidden states, less the first 108 template tokens, up to 1000 caption tokens), the text in double quotes
of a caption (its glyph text) read by ByT5 (256 bytes), a transformer of 54 dual-stream blocks over the unpatched
latents of its causal 3D autoencoder (AutoencoderKLHunyuanVideo15: 1 + 4k frames to 1 + k latent frames, 16x smaller
sides, 32 channels scaled by 1.03682), timestep = 1000 x sigma, the velocity (noise - latents) as its output, no
guidance embedding. Its input is the noisy latents beside the condition latents and their mask: zero for text to
video (as the pipeline and musubi-tuner give them), with no image states; image to video: each clip's first frame's
(i2v.py), with SigLIP's states of it. Images train as 1-frame clips.

encode_prompts gives both encoders' states in one tensor (HunyuanImage 2.1's packing): Qwen2.5-VL's tokens, then
GLYPH_LENGTH ByT5 tokens, each zero-padded to the wider of the two (the mask likewise); denoise splits them again.
Its LoRA files use ComfyUI's names of the reference's double blocks (`lora_unet_double_blocks_0_img_attn_qkv`, q, k
and v fused; `..._img_mlp_0`, `..._img_mod_lin`), every linear layer of the blocks as musubi-tuner's lora_hv_1_5
trains them; musubi-tuner's own files (q, k and v apart, `img_mlp_fc1`, `img_mod_linear`) are read too, fused as its
convert_hunyuan_video_1_5_lora_to_comfy.py fuses them. diffusers' HunyuanVideo15Pipeline has no LoRA loader:
lora_for_pipeline's PEFT keys load with `pipe.transformer.load_lora_adapter(state, prefix="transformer")`.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import LoadedModel, LoraTarget, ModelFamily, SizeConditioning
from trainers.models.flow import FlowFamily, TextEncoderSpec
from trainers.models.flux.family import double_block_targets
from trainers.models.hunyuan_video15.i2v import FirstFrame, ImageEncoder, conditioned_objective, window_extras
from trainers.models.hunyuan_video15.rules import I2V_PIPELINE, HunyuanVideo15Rules, is_i2v_folder
from trainers.models.hunyuan_video15.single_file import image_encoder as image_encoder_file
from trainers.models.pipeline_lora import TransformerLoraLoading
from trainers.models.qwen_byt5 import byt5_ids, pipeline_embeds, qwen_byt5_states
from trainers.models.qwen_image.family import trimmed
from trainers.models.video import VideoFamily, encode_images_as_frames

# HunyuanVideo15Pipeline's system message (its line continuations leave nine spaces between the aspects)
SYSTEM_MESSAGE = (" " * 9).join((
    "You are a helpful assistant. Describe the video by detailing the following aspects:",
    "1. The main content and theme of the video.",
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects.",
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects.",
    "4. background environment, light, style and atmosphere.",
    "5. camera angles, movements, and transitions used in the video."))
# the chat template as Qwen2.5-VL's tokenizer renders a system and a user turn with the generation prompt
CHAT_TEMPLATE = (f"<|im_start|>system\n{SYSTEM_MESSAGE}<|im_end|>\n<|im_start|>user\n{{}}<|im_end|>\n"
                 "<|im_start|>assistant\n")
CROP_START = 108  # its prompt_template_encode_start_idx: the template tokens dropped from the states
TEXT_LENGTH = 1000  # its tokenizer_max_length (caption tokens after the dropped ones)
GLYPH_LENGTH = 256  # its tokenizer_2_max_length (ByT5's bytes of the glyph text)
HIDDEN_LAYER = -3  # the hidden states it reads: num_hidden_layers_to_skip 2
_QUOTED = r"\"(.*?)\"|“(.*?)”"
# musubi-tuner's names of the reference's layers -> ComfyUI's (its convert_hunyuan_video_1_5_lora_to_comfy.py)
MUSUBI_NAMES = ((r"_(img|txt)_mlp_fc1\.", r"_\1_mlp_0."), (r"_(img|txt)_mlp_fc2\.", r"_\1_mlp_2."),
                (r"_(img|txt)_mod_linear\.", r"_\1_mod_lin."))
_MUSUBI_Q = re.compile(r"^(lora_unet_double_blocks_\d+_(?:img|txt)_attn)_q\.lora_down\.weight$")


def glyph_text(caption: str) -> str | None:
    """The text a caption asks to be drawn (in double quotes) as ByT5 reads it, None when there is none
    (HunyuanVideo15Pipeline's extract_glyph_texts: repeats dropped when there are several)."""
    found = [a or b for a, b in re.findall(_QUOTED, caption)]
    found = list(dict.fromkeys(found)) if len(found) > 1 else found
    return ". ".join(f'Text "{text}"' for text in found) + ". " if found else None


class HunyuanVideo15(HunyuanVideo15Rules, VideoFamily, FlowFamily, ModelFamily):
    implementation = "https://github.com/Tencent-Hunyuan/HunyuanVideo-1.5"
    native_size = 480  # its 480p model samples 848x480
    vae_class = "AutoencoderKLHunyuanVideo15"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    text_encoder_specs = (
        TextEncoderSpec("Qwen2_5_VLTextModel", "text_encoder", "auto", "tokenizer", "Qwen2.5-VL",
                        max_length=TEXT_LENGTH + CROP_START, template=CHAT_TEMPLATE),
        TextEncoderSpec("T5EncoderModel", "text_encoder_2", "auto", "tokenizer_2", "ByT5", max_length=GLYPH_LENGTH))
    latent_scaling = (1.03682, 0.0)  # its autoencoder's scaling_factor (no shift)
    lora_network_module = "networks.lora_hv_1_5"  # musubi-tuner's (ss_network_module)
    sample_frames = 25  # 1 + 4k: about a second at 24 fps
    pad_token_id: int = 0  # Qwen2.5-VL's tokenizer's, set when loaded
    glyph_width: int = 0  # ByT5's d_model, set when loaded (the packed states' glyph channels)
    i2v = False  # HunyuanVideo15ImageToVideoPipeline's folder: the first frame conditions (i2v.py)
    image_encoder: ImageEncoder | None = None  # I2V's SigLIP, set when loaded
    slot = FirstFrame()  # each run's own (configured): the batch's first-frame condition
    folder: Path | None = None  # the loaded folder (its guider and image encoder are kept in saved folders)

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        model = super().load(folder, weight_dtype, vae_path, random_init)
        encoder = load_image_encoder(Path(folder), weight_dtype, random_init) if is_i2v_folder(Path(folder)) else None
        return self._ready(model, encoder, Path(folder))

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: Any) -> Any:
        """ComfyUI's split files (or Tencent's transformer file): the diffusion_models file (reference.py),
        text_encoder, byt5, ae, and for image to video image_encoder (SigLIP's file: the two tasks' transformer
        files have the same tensors, so image_encoder says which one trains)."""
        model = super().load_checkpoint(ckpt, weight_dtype, vae_path, files)
        encoder = None
        if files.image_encoder:
            encoder = ImageEncoder(*image_encoder_file(files.image_encoder, weight_dtype))
        model.unet.register_to_config(task_type="i2v" if encoder is not None else "t2v")
        return self._ready(model, encoder, None)

    def _ready(self, model: LoadedModel, encoder: ImageEncoder | None, folder: Path | None) -> LoadedModel:
        encode_images_as_frames(model.vae)
        batched_vae_attention(model.vae)
        model.vae.enable_tiling()  # 256-pixel tiles, as its pipeline's example and musubi-tuner's caching tile it
        family = copy.copy(model.family)  # knowing its tokenizer's pad token and ByT5's width
        family.pad_token_id = model.tokenizers[0].pad_token_id
        family.glyph_width = model.text_encoders[1].config.d_model
        family.folder = folder
        if encoder is not None:
            family.i2v, family.pipeline_class, family.image_encoder = True, I2V_PIPELINE, encoder
        return dataclasses.replace(model, family=family)

    def configured(self, values: Mapping[str, Any]) -> Any:
        clone = super().configured(values)
        clone.slot = FirstFrame()
        return clone

    def window_extras(self, model: LoadedModel) -> Any:
        """I2V: each window's first-frame latent and SigLIP's states of it, cached beside its latents (i2v.py)."""
        if not self.i2v:
            return None
        assert self.image_encoder is not None, "an image-to-video model loads its image encoder"
        return window_extras(model.vae, self.image_encoder)

    def adapt_trainable(self, cfg: Any, session: Any, trainable: Any) -> Any:
        """I2V: each step's first-frame condition (i2v.py) in the slot denoise reads."""
        if not self.i2v:
            return trainable
        assert self.image_encoder is not None, "an image-to-video folder loads its image encoder"
        return dataclasses.replace(trainable, objective=conditioned_objective(trainable.objective, self.slot,
                                                                              self.image_encoder))

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """Qwen2.5-VL's ids of each caption in the template (an empty one as a space, as the pipeline), and ByT5's
        of its glyph text (all padding without one: the pipeline's zero states and mask)."""
        (qwen_ids,) = super().tokenize(tokenizers[:1], [c or " " for c in captions], fmt)
        return [qwen_ids, byt5_ids(tokenizers[1], [glyph_text(c) for c in captions], GLYPH_LENGTH)]

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(Qwen2.5-VL's third-last hidden states after the first 108 template tokens, then ByT5's states of the
        glyph text, both zero on their padding and on the channels they lack; the mask of both), as
        HunyuanVideo15Pipeline encodes. Qwen2.5-VL reads the batch's longest caption, not every padding token."""
        (qwen, byt5), (ids, glyph_ids) = text_encoders, input_ids

        def hidden_states(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return qwen(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[HIDDEN_LAYER]

        return qwen_byt5_states(qwen, hidden_states, byt5, ids, glyph_ids, self.pad_token_id, CROP_START)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The velocity for latents (B, C, F, h, w) (an image's F = 1), each latent one token: the transformer reads
        them beside zero condition latents and a zero mask (text to video), each encoder's states cut after the
        batch's longest (the rest is padding it masks), and no image states (the pipeline's zero ones are masked
        out: none is the same sum), the timestep 1000 x sigma."""
        assert text_mask is not None, "HunyuanVideo 1.5's encode_prompts gives the text mask"
        config = unet.config
        text, mask = trimmed(hidden[:, :-GLYPH_LENGTH, :config.text_embed_dim], text_mask[:, :-GLYPH_LENGTH])
        glyph, glyph_mask = trimmed(hidden[:, -GLYPH_LENGTH:, :config.text_embed_2_dim],
                                    text_mask[:, -GLYPH_LENGTH:])
        batch, _, frames, height, width = noisy.shape
        condition = noisy.new_zeros(batch, config.in_channels - noisy.shape[1], frames, height, width)
        image_embeds = noisy.new_zeros(batch, 0, config.image_embed_dim)
        if self.i2v:  # the first frame's latent and mask, and SigLIP's states of it, as the I2V pipeline
            if self.slot.latents is None or self.slot.image_embeds is None:
                raise ValueError("HunyuanVideo 1.5 image-to-video needs each clip's first frame (adapt_trainable)")
            condition = self.slot.latents.to(noisy.device, noisy.dtype)
            image_embeds = self.slot.image_embeds.to(noisy.device, noisy.dtype)
        return unet(hidden_states=torch.cat([noisy, condition], dim=1), timestep=timesteps.to(noisy.dtype),
                    encoder_hidden_states=text.to(noisy.dtype), encoder_attention_mask=mask.bool().to(noisy.device),
                    encoder_hidden_states_2=glyph.to(noisy.dtype),
                    encoder_attention_mask_2=glyph_mask.bool().to(noisy.device),
                    image_embeds=image_embeds, return_dict=False)[0]

    def model_index(self) -> dict[str, Any]:
        """A finetune's folder names its autoencoder's class (and no guider where the loaded folder had none:
        diffusers then takes one as `from_pretrained(folder, guider=ClassifierFreeGuidance(guidance_scale=6.0))`)."""
        return {"vae": ["diffusers", self.vae_class], "guider": [None, None],
                **{name: entry for name, (_, entry) in self.kept_components().items()}}

    def kept_components(self) -> dict[str, tuple[Path, list[str]]]:
        """The loaded folder's guider and (I2V) SigLIP image encoder and processor, copied into a saved folder as
        they were (none of them trains), so that its pipeline's from_pretrained loads it."""
        if self.folder is None:
            return {}
        index = json.loads((self.folder / "model_index.json").read_text(encoding="utf-8"))
        names = ("guider", "image_encoder", "feature_extractor") if self.i2v else ("guider",)
        return {name: (self.folder / name, list(index[name])) for name in names
                if (self.folder / name).is_dir() and (index.get(name) or [None, None])[-1]}

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        """The sampling shift of musubi-tuner's hv_1_5_generate_video.py (--flow_shift 7.0)."""
        return {"shift": 7.0}

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        components = {"text_encoder": model.text_encoders[0], "tokenizer": model.tokenizers[0],
                      "transformer": model.unet, "vae": model.vae, "scheduler": scheduler,
                      "text_encoder_2": model.text_encoders[1], "tokenizer_2": model.tokenizers[1], "guider": None}
        if self.i2v:
            assert self.image_encoder is not None, "an image-to-video folder loads its image encoder"
            components.update(image_encoder=self.image_encoder.model, feature_extractor=self.image_encoder.processor)
        return _pipeline_class(self.i2v)(**components)

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """I2V: the sample's first frame (a sample prompt's --ci, Generate's input image) at its size."""
        if not self.i2v:
            return {}
        if not images:
            raise ValueError("HunyuanVideo 1.5 image-to-video renders from a first frame: give the sample prompt "
                             "`--ci path`")
        from trainers.models.edit import sample_images

        return {"image": sample_images(images[:1], width, height)[0]}

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        """encode_prompts' (prompt, negative) rows as the pipeline's four embeddings and masks of each."""
        assert text_mask is not None, "HunyuanVideo 1.5's encode_prompts gives the text mask"
        return pipeline_embeds(hidden, text_mask, GLYPH_LENGTH, self.glyph_width)

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        return {"guidance_scale": cfg_scale, "num_frames": self.sample_frames}

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, "ss_network_module": self.lora_network_module,
                **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """Every linear layer of the dual-stream blocks under ComfyUI's names (as musubi-tuner's lora_hv_1_5 trains
        them, modulations included)."""
        return list(double_block_targets(unet))

    def lora_in_own_names(self, state: dict[str, torch.Tensor],
                          network_alpha: float | None = None) -> dict[str, torch.Tensor]:
        """musubi-tuner's files in ComfyUI's names: `img_mlp_fc1`, `img_mod_linear` renamed, and q, k and v fused
        into one `_qkv` module of three times the rank (the downs stacked, the ups block-diagonal, alpha x 3: the
        same update), as its convert_hunyuan_video_1_5_lora_to_comfy.py."""
        out = dict(state)
        for key in [k for k in state if _MUSUBI_Q.match(k)]:
            base = _MUSUBI_Q.match(key).group(1)  # type: ignore[union-attr]
            parts = [f"{base}_{p}" for p in "qkv"]
            downs = [out.pop(f"{p}.lora_down.weight") for p in parts]
            ups = [out.pop(f"{p}.lora_up.weight") for p in parts]
            alphas = [out.pop(f"{p}.alpha", None) for p in parts]
            out[f"{base}_qkv.lora_down.weight"] = torch.cat(downs)
            out[f"{base}_qkv.lora_up.weight"] = torch.block_diag(*ups)
            alpha = alphas[0] if alphas[0] is not None else torch.tensor(float(network_alpha or downs[0].shape[0]))
            out[f"{base}_qkv.alpha"] = alpha * 3
        renamed = {}
        for key, value in out.items():
            for pattern, name in MUSUBI_NAMES:
                key = re.sub(pattern, name, key) if key.startswith("lora_unet_") else key
            renamed[key] = value
        return renamed


def load_image_encoder(folder: Path, weight_dtype: torch.dtype, random_init: bool) -> ImageEncoder:
    """An I2V folder's SigLIP vision model (frozen, in eval mode) and its image processor."""
    import transformers

    from trainers.models.components import load_component

    model = load_component(transformers.SiglipVisionModel, folder, "image_encoder", weight_dtype, random_init)
    model.requires_grad_(False).eval()
    return ImageEncoder(model, transformers.SiglipImageProcessor.from_pretrained(folder / "feature_extractor"))


def batched_vae_attention(vae: nn.Module) -> None:
    """Make the autoencoder's attention blocks take batches of more than one clip: diffusers 0.42.1's causal mask
    (B, L, L) broadcasts against the (B, 1, L, D) heads as (1, B, L, L) and fails; the mask is given a head axis (and
    built without a Python loop over the tokens). The instances' methods: the saved model is unchanged."""
    from diffusers.models.autoencoders.autoencoder_kl_hunyuanvideo15 import HunyuanVideo15AttnBlock

    def causal_mask(n_frame: int, n_hw: int, dtype: torch.dtype, device: torch.device,
                    batch_size: int | None = None) -> torch.Tensor:
        frame = torch.arange(n_frame * n_hw, device=device) // n_hw
        mask = torch.zeros(frame.shape * 2, dtype=dtype, device=device).masked_fill(
            frame[None, :] > frame[:, None], float("-inf"))
        return mask.expand(batch_size or 1, 1, -1, -1)

    for module in vae.modules():
        if isinstance(module, HunyuanVideo15AttnBlock):
            module.prepare_causal_attention_mask = causal_mask


def _pipeline_class(i2v: bool = False) -> type:
    """HunyuanVideo15Pipeline (or, `i2v`, HunyuanVideo15ImageToVideoPipeline) taking a CFG scale (`guidance_scale`):
    classifier-free guidance of that scale for the call (the pipeline takes a guider object); the I2V pipeline at the
    sample's size (it picks one from its target size and the image's shape otherwise); and the LoRA calls Generate
    makes of a pipeline, which it lacks (no LoRA loader mixin in diffusers 0.42.1), through its transformer's
    PeftAdapterMixin."""
    import diffusers
    from diffusers.guiders import ClassifierFreeGuidance

    base = getattr(diffusers, I2V_PIPELINE if i2v else "HunyuanVideo15Pipeline")

    class ScaledHunyuanVideo15Pipeline(TransformerLoraLoading, base):  # type: ignore[misc, valid-type]
        def __call__(self, *args: Any, guidance_scale: float = 1.0, **kwargs: Any) -> Any:
            self.guider = ClassifierFreeGuidance(guidance_scale=guidance_scale, enabled=guidance_scale > 1)
            if i2v:
                height, width = kwargs.pop("height", None), kwargs.pop("width", None)
                if height and width:
                    self.video_processor.calculate_default_height_width = lambda *a, **k: (height, width)
            return super().__call__(*args, **kwargs)

    return ScaledHunyuanVideo15Pipeline


HUNYUAN_VIDEO15 = HunyuanVideo15()
