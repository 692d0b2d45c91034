"""LTX-2 text-to-video (diffusers LTX2VideoTransformer3DModel, LTX2Pipeline): the video stream of its audio-video
transformer trained, the audio stream frozen and fed a silent track. Captions are read as the pipeline reads them:
stripped, left-padded to 1024 Gemma 3 tokens, every hidden state of Gemma 3 (its embeddings and each layer's) stacked,
then LTX2TextConnectors (frozen: the per-layer masked normalisation, the projection, one connector per stream, their
learnable registers in the padding) give the video stream's and the audio stream's text states and their mask. The
latents are its causal video autoencoder's (AutoencoderKLLTX2Video: 1 + 8k frames to 1 + k latent frames, 32x
smaller sides, 128 channels normalised by its per-channel mean and std), each latent one token (1x1 patches),
timestep = 1000 x sigma, the velocity (noise - latents) as its output, no guidance embedding. Images train as
1-frame clips.

The audio stream reads the clip's length of audio latents (the pipeline's count: frames / 24 fps x 25 latents a
second) of a silent track noised to the video's sigma (sigma x noise: SimpleTuner's zero audio latents for clips
without sound, noised as the video; ai-toolkit gives pure noise), at the video's timestep; its output is not scored.
The noise of that track is seeded by the batch's noise levels, so a resumed run draws what an uninterrupted one does.
With `with_audio` the audio stream trains from the clips' sound instead (audio.py), its LoRA on the audio stream's
attention and feed-forward and both audio-video cross-attentions too.

Its LoRA files name the video stream's attention and feed-forward linears of every block (`attn1` self-attention,
`attn2` text cross-attention, `ff.net.0.proj`, `ff.net.2`; SimpleTuner's attention targets and the feed-forward of
ai-toolkit's, the audio stream and its cross-modal attention left out) in kohya's form of the reference names
(`lora_unet_transformer_blocks_0_attn1_to_q`: Lightricks' module names, which are diffusers' and ComfyUI's), which
ComfyUI reads; lora_for_pipeline's PEFT keys load with LTX2Pipeline.load_lora_weights (its LTX2LoraLoaderMixin).

An LTX2ImageToVideoPipeline folder trains image-to-video from each clip's first frame (first_frame.py); Lightricks'
single file with ComfyUI's Gemma 3 file loads as the folder does (single_file.py).
"""
from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.models.base import (CheckpointKeys, LoadedModel, LoraTarget, ModelFamily, ModelFiles, ModelLoadError,
                                  SizeConditioning)
from trainers.models.flow import FlowFamily, TextEncoderSpec, run_frozen
from trainers.data.clip_audio import ClipSound
from trainers.data.video_cache import WindowExtras
from trainers.models.ltx2.audio import AudioSlot, audio_trainable, clip_sound, mel_settings, noisy_audio
from trainers.models.ltx2.first_frame import FirstFrameSlot, conditioned_trainable, video_timesteps
from trainers.models.ltx2.mel import N_FFT, MelSettings
from trainers.models.ltx2.rules import I2V_PIPELINE, LTX2Rules
from trainers.models.video import VideoFamily, encode_images_as_frames

TEXT_LENGTH = 1024  # LTX2Pipeline's max_sequence_length (left padding, as Gemma reads chat prompts)
SCALE_FACTOR = 8  # the connectors' scale of the normalised Gemma states (the pipeline's)
# diffusers' (and Lightricks') module names of a block's video-stream linears LoRAs train
VIDEO_LINEARS = ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0", "attn2.to_q", "attn2.to_k",
                 "attn2.to_v", "attn2.to_out.0", "ff.net.0.proj", "ff.net.2")
# those of the audio stream (self- and text cross-attention, feed-forward) and of both audio-video cross-attentions,
# which a LoRA trains with_audio (Lightricks' ltx-trainer's audio and audio-video modules)
AUDIO_LINEARS = tuple(f"{attn}.{linear}" for attn in ("audio_attn1", "audio_attn2", "audio_to_video_attn",
                                                       "video_to_audio_attn")
                      for linear in ("to_q", "to_k", "to_v", "to_out.0")) + ("audio_ff.net.0.proj", "audio_ff.net.2")


@dataclasses.dataclass
class AudioParts:
    """The audio autoencoder and vocoder of a folder, which its pipeline is built with (frozen; the autoencoder
    encodes the clips' sound with_audio), and its STFT size (a single file's metadata, else Lightricks' 1024)."""

    audio_vae: nn.Module
    vocoder: nn.Module
    n_fft: int = N_FFT


class LTX2Video(LTX2Rules, VideoFamily, FlowFamily, ModelFamily):
    implementation = "https://github.com/Lightricks/LTX-2"
    native_size = 512  # its pipeline's default 768x512
    vae_class = "AutoencoderKLLTX2Video"
    default_t5_length = TEXT_LENGTH
    fixed_settings = {"model_prediction_type": "raw", "guidance_scale": 0.0}  # no guidance embedding
    text_encoder_specs = (TextEncoderSpec("Gemma3ForConditionalGeneration", "text_encoder", "auto", "tokenizer",
                                          "Gemma 3", max_length=TEXT_LENGTH),)
    latent_scaling = (1.0, 0.0)  # unused: its autoencoder normalises by its per-channel statistics
    sample_frames = 25  # 1 + 8k: about a second at 24 fps
    parts: AudioParts | None = None  # set when loaded
    video_text_width: int = 0  # the video connector's width (the packed states' first channels), set when loaded
    folder: Path | None = None  # the loaded folder (its connectors and audio parts are kept in saved folders)
    checkpoint: Path | None = None  # or the loaded single file (its parts are written for saved folders)
    _kept: Any = None  # the folder those are written in, once a save asks for them
    first_frame = False  # image-to-video: an LTX2ImageToVideoPipeline folder (first_frame.py)
    slot = FirstFrameSlot()
    # with_audio as the run sets it; None (not configured: Generate, the tools) reads the audio targets of any file
    with_audio: bool | None = None
    audio = AudioSlot()

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "", random_init: bool = False) -> Any:
        import diffusers
        from diffusers.pipelines.ltx2 import LTX2TextConnectors
        from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder, LTX2VocoderWithBWE

        from trainers.models.components import load_component

        model = super().load(folder, weight_dtype, vae_path, random_init)
        vocoder_class = LTX2VocoderWithBWE if _class_in_index(folder, "vocoder") == "LTX2VocoderWithBWE" \
            else LTX2Vocoder
        connectors = load_component(LTX2TextConnectors, folder, "connectors", weight_dtype, random_init)
        parts = AudioParts(load_component(diffusers.AutoencoderKLLTX2Audio, folder, "audio_vae", weight_dtype,
                                          random_init), load_component(vocoder_class, folder, "vocoder", weight_dtype,
                                                                       random_init))
        model = self._assembled(model, connectors, parts, Path(folder), None)
        model.family.first_frame = _model_index(folder).get("_class_name") == I2V_PIPELINE
        return model

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> Any:
        """Lightricks' single file (ltx-2-19b-dev.safetensors: the transformer, its connectors, both autoencoders and
        the vocoder) with ComfyUI's Gemma 3 file as `text_encoder` (single_file.py reads them)."""
        from diffusers import FlowMatchEulerDiscreteScheduler

        from trainers.models.ltx2 import single_file

        if issues := self.checkpoint_issues(CheckpointKeys(ckpt.shapes, str(ckpt.path)), files, vae_path):
            raise ModelLoadError("; ".join(f"{i.field}: {i.message}" for i in issues))
        gemma, tokenizer = single_file.gemma3(ckpt, files, weight_dtype)
        model = LoadedModel(self, single_file.transformer(ckpt, weight_dtype), single_file.video_vae(ckpt, files),
                            [gemma], [tokenizer], FlowMatchEulerDiscreteScheduler(**self.scheduler_config()), "flow",
                            str(ckpt.path))
        stft = ((single_file.file_config(ckpt).get("audio_vae") or {}).get("preprocessing") or {}).get("stft") or {}
        parts = AudioParts(*single_file.audio_parts(ckpt, weight_dtype), int(stft.get("filter_length") or N_FFT))
        model = self._assembled(model, single_file.connectors(ckpt, weight_dtype), parts, None, Path(ckpt.path))
        gemma.config.pad_token_id = model.tokenizers[0].pad_token_id  # where each caption's mask comes from
        return model

    def _assembled(self, model: LoadedModel, connectors: nn.Module, parts: AudioParts, folder: Path | None,
                   checkpoint: Path | None) -> LoadedModel:
        """The loaded model as the family runs it: images encoded as frames, the tokenizer padding as the pipeline
        does, the connectors after Gemma 3 among the text encoders, the audio parts and where they came from
        kept."""
        encode_images_as_frames(model.vae)
        ready_tokenizer(model.tokenizers[0])
        # the connectors are the second of its text encoders: placed, quantized (text_encoder_precision) and set
        # aside with Gemma 3 as the run places its text encoders
        connectors.requires_grad_(False).eval()
        # what the run asks of every text encoder with gradient checkpointing on (transformers' method): nothing
        # for these, which run frozen without autograd
        connectors.gradient_checkpointing_enable = lambda *args, **kwargs: None
        for module in (parts.audio_vae, parts.vocoder):
            module.requires_grad_(False).eval()
        family = copy.copy(model.family)
        family.parts, family.folder, family.checkpoint = parts, folder, checkpoint
        family.video_text_width = connectors.video_connector.inner_dim
        return dataclasses.replace(model, family=family, text_encoders=[*model.text_encoders, connectors])

    def configured(self, values: Mapping[str, Any]) -> Any:
        clone = super().configured(values)
        clone.slot = FirstFrameSlot()  # the run's own
        clone.audio = AudioSlot()
        clone.with_audio = bool(values.get("with_audio", False))
        return clone

    @property
    def mel(self) -> MelSettings:
        assert self.parts is not None, "LTX-2's audio parts are loaded with the model"
        return mel_settings(self.parts.audio_vae, self.parts.n_fft)

    def adapt_trainable(self, cfg: Any, session: Any, trainable: Any) -> Any:
        """with_audio: the clips' sound trained beside the frames (audio.py). Image-to-video: each clip's first frame
        the condition, out of the loss (first_frame.py)."""
        if self.with_audio:
            trainable = audio_trainable(trainable, self)
        return conditioned_trainable(trainable, self) if self.first_frame else trainable

    def clip_sound(self, model: LoadedModel) -> ClipSound | None:
        """with_audio: each window's sound at the audio autoencoder's rate, in its channels."""
        if not self.with_audio:
            return None
        assert self.parts is not None, "LTX-2's audio parts are loaded with the model"
        return clip_sound(self.parts.audio_vae, self.frame_rate)

    def window_extras(self, model: LoadedModel) -> WindowExtras | None:
        """with_audio: each window's audio latents (and whether its clip has sound) cached with its video latents."""
        if not self.with_audio:
            return None
        from trainers.models.ltx2.audio import window_extras

        assert self.parts is not None, "LTX-2's audio parts are loaded with the model"
        return window_extras(self.parts.audio_vae, self.mel, self.frame_rate, model.vae.device)

    def tokenize(self, tokenizers: list[Any], captions: list[str], fmt: Any = None) -> list[torch.Tensor]:
        """Gemma 3's ids of each caption stripped, left-padded to 1024 tokens (as the pipeline)."""
        return super().tokenize(tokenizers, [c.strip() for c in captions], fmt)

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(the video connector's states, then the audio connector's, on the channel axis; their mask), as
        LTX2Pipeline encodes a caption and its connectors read it."""
        (gemma, connectors), (ids,) = text_encoders, input_ids
        pad = gemma.config.get_text_config().pad_token_id
        mask = (ids != pad).long() if pad is not None else torch.ones_like(ids)
        states = run_frozen(gemma, lambda: torch.stack(gemma(input_ids=ids, attention_mask=mask,
                                                             output_hidden_states=True).hidden_states, dim=-1))
        states = states.flatten(2, 3)  # in the dtype Gemma 3 computes in (its stored one may be quantized)
        video, audio, text_mask = run_frozen(connectors, lambda: connectors(states, mask, padding_side="left",
                                                                            scale_factor=SCALE_FACTOR))
        return torch.cat([video, audio.to(video.dtype)], dim=-1), text_mask.to(video.dtype)

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                text_mask: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The video velocity for latents (B, C, F, h, w) (an image's F = 1), packed as the pipeline packs them,
        beside the silent audio track's latents at the same sigma; the timestep 1000 x sigma. Image-to-video (a
        first frame in the slot): that frame clean, its tokens at timestep 0 (first_frame.py)."""
        from diffusers import LTX2Pipeline

        assert text_mask is not None, "LTX-2's encode_prompts gives the text mask"
        config = unet.config
        batch, _, frames, height, width = noisy.shape
        timestep = timesteps.to(noisy.dtype)
        video_timestep = timestep
        if self.slot.first is not None:
            noisy = torch.cat([self.slot.first.to(noisy.device, noisy.dtype), noisy[:, :, 1:]], dim=2)
            video_timestep = video_timesteps(timestep, frames, height * width // config.patch_size ** 2)
        packed = LTX2Pipeline._pack_latents(noisy, config.patch_size, config.patch_size_t)
        track = self.audio.track  # with_audio: the batch's sound (audio.py), else the silent track
        audio = noisy_audio(track, timesteps) if track is not None else \
            silent_audio(config, batch, frames, timesteps, self.frame_rate)
        audio = audio.to(noisy.device, noisy.dtype)
        text = hidden.to(noisy.dtype)
        mask = text_mask.to(noisy.device)
        # both cross-attentions at the step's timestep (the pipelines' use_cross_timestep)
        video, audio_out = unet(hidden_states=packed, audio_hidden_states=audio,
                        encoder_hidden_states=text[..., :self.video_text_width],
                        audio_encoder_hidden_states=text[..., self.video_text_width:], timestep=video_timestep,
                        audio_timestep=timestep, sigma=timestep, encoder_attention_mask=mask,
                        audio_encoder_attention_mask=mask, num_frames=frames, height=height, width=width,
                        fps=self.frame_rate, audio_num_frames=audio.shape[1], use_cross_timestep=True,
                        return_dict=False)
        if track is not None:
            self.audio.output = audio_out
        return LTX2Pipeline._unpack_latents(video, frames, height, width, config.patch_size, config.patch_size_t)

    def vae_latents(self, raw: torch.Tensor, vae: nn.Module) -> torch.Tensor:
        mean, std = latent_stats(vae, raw)
        return (raw - mean) * vae.config.scaling_factor / std

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        from trainers.models.flow import last_blocks

        return last_blocks(denoiser.transformer_blocks, count, "blocks")

    def model_index(self) -> dict[str, Any]:
        """A finetune's folder names its pipeline (image-to-video's too), its autoencoder's class and the parts it
        keeps as they were."""
        return {"_class_name": I2V_PIPELINE if self.first_frame else self.pipeline_class,
                "vae": ["diffusers", self.vae_class],
                **{name: entry for name, (_, entry) in self.kept_components().items()}}

    def kept_components(self) -> dict[str, tuple[Path, list[str]]]:
        """The loaded folder's connectors, audio autoencoder and vocoder, copied into a saved folder as they were
        (none of them trains), so that LTX2Pipeline.from_pretrained loads it; a single file's, read from it again
        (as it holds them, not as the run may have quantized them) and written once for the run's saves."""
        if self.folder is None:
            return self._file_components()
        index = json.loads((self.folder / "model_index.json").read_text(encoding="utf-8"))
        return {name: (self.folder / name, list(index[name])) for name in ("connectors", "audio_vae", "vocoder")
                if (self.folder / name).is_dir() and (index.get(name) or [None, None])[-1]}

    def _file_components(self) -> dict[str, tuple[Path, list[str]]]:
        import tempfile

        from trainers.models.ltx2.single_file import write_kept_parts

        if self.checkpoint is None:
            return {}
        if self._kept is None:
            folder = tempfile.TemporaryDirectory(prefix="atelier-ltx2-")  # removed with the family
            self._kept = (folder, write_kept_parts(self.checkpoint, Path(folder.name)))
        return dict(self._kept[1])

    # --- samples ---

    def scheduler_config(self) -> dict[str, Any]:
        """Its published scheduler: the exponential resolution-dependent shift (0.95 at 1024 tokens to 2.05 at
        4096), a terminal sigma of 0.1."""
        from trainers.models.ltx2.tiny import SCHEDULER

        return dict(SCHEDULER)

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        """LTX2Pipeline (image-to-video: LTX2ImageToVideoPipeline) over the model's modules; encode_prompts' packed
        states stand in for the connectors' output (their pass-through, with the real connectors kept for LoRA files
        that train them)."""
        import diffusers

        assert self.parts is not None, "LTX-2's audio parts are loaded with the model"
        pipeline = getattr(diffusers, I2V_PIPELINE if self.first_frame else self.pipeline_class)
        return pipeline(scheduler=scheduler, vae=model.vae, audio_vae=self.parts.audio_vae,
                            text_encoder=model.text_encoders[0], tokenizer=model.tokenizers[0],
                            connectors=PackedConnectorStates(self.video_text_width), transformer=model.unet,
                            vocoder=self.parts.vocoder)

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """Image-to-video: the sample's first frame (a sample prompt's --ci) at its size."""
        if not self.first_frame:
            return {}
        if not images:
            raise ValueError(f"{self.title} image-to-video renders from a first frame: give the sample prompt "
                             "`--ci path`")
        from trainers.models.edit import sample_images

        return {"image": sample_images(images[:1], width, height)[0]}

    def sample_with_output(self, sample: Any, output: Any) -> Any:
        """with_audio: the sample's frames with its sound (the pipeline's audio latents through the audio autoencoder
        and the vocoder); else its frames alone, silent."""
        if not self.with_audio or self.parts is None or len(output) < 2 or output[1] is None:
            return sample
        from trainers.models.ltx2.audio import SoundedClip, decode_sound

        return SoundedClip(sample, decode_sound(self.parts.audio_vae, self.parts.vocoder, output[1]))

    def save_sample(self, sample: Any, path: Path, parameters: str) -> Path:
        from trainers.models.ltx2.audio import SoundedClip
        from trainers.models.video import write_mp4

        if isinstance(sample, SoundedClip):
            return write_mp4(sample.frames, path, self.frame_rate, parameters, sound=sample.sound)
        return super().save_sample(sample, path, parameters)

    def pipeline_embeds(self, hidden: torch.Tensor, text_mask: torch.Tensor | None) -> dict[str, Any]:
        assert text_mask is not None, "LTX-2's encode_prompts gives the text mask"
        return {"prompt_embeds": hidden[:1], "prompt_attention_mask": text_mask[:1],
                "negative_prompt_embeds": hidden[1:], "negative_prompt_attention_mask": text_mask[1:]}

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        """Classifier-free guidance of the scale on both streams, without the pipeline's spatio-temporal and
        modality guidance or its rescale (LTX-2.3's defaults); its audio latents come out beside the video's,
        rendered with_audio (sample_with_output)."""
        return {"guidance_scale": cfg_scale, "audio_guidance_scale": cfg_scale, "stg_scale": 0.0,
                "audio_stg_scale": 0.0, "modality_scale": 1.0, "audio_modality_scale": 1.0,
                "guidance_rescale": 0.0, "audio_guidance_rescale": 0.0, "spatio_temporal_guidance_blocks": None,
                "num_frames": self.sample_frames, "frame_rate": self.frame_rate}

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        """Frames (B, 3, F, H, W) in [-1, 1] of the latents LTX2Pipeline returns (output_type="latent": already
        denormalised), decoded as it decodes them (decode_timestep 0, no decode noise)."""
        latents = latents.to(vae.device, vae.dtype)
        timestep = latents.new_zeros(latents.shape[0]) if vae.config.timestep_conditioning else None
        return vae.decode(latents, timestep).sample

    # --- LoRA ---

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        return {**super().lora_metadata(v_prediction), "modelspec.implementation": self.implementation,
                "modelspec.prediction_type": None, **self.flow_metadata()}

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        """The video stream's linears of every block; with_audio (or not configured: a file read) the audio
        stream's and the audio-video cross-attentions' after them."""
        modules = dict(unet.named_modules())
        linears = VIDEO_LINEARS + (AUDIO_LINEARS if self.with_audio is not False else ())
        return [LoraTarget(f"lora_unet_{path.replace('.', '_')}", (modules[path],), path=path)
                for i in range(len(unet.transformer_blocks)) for path in
                (f"transformer_blocks.{i}.{linear}" for linear in linears)]


class PackedConnectorStates(nn.Module):
    """What LTX2Pipeline's connectors give, of encode_prompts' packed states: the video connector's channels, the
    audio connector's, and the mask as it is."""

    anchor: torch.Tensor

    def __init__(self, video_width: int) -> None:
        super().__init__()
        self.video_width = video_width
        self.register_buffer("anchor", torch.zeros(0), persistent=False)  # where it is, for the pipeline

    @property
    def device(self) -> torch.device:
        return self.anchor.device

    @property
    def dtype(self) -> torch.dtype:
        return self.anchor.dtype

    def forward(self, states: torch.Tensor, mask: torch.Tensor, padding_side: str = "left",
                scale_factor: int = SCALE_FACTOR) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return states[..., :self.video_width], states[..., self.video_width:], mask


def silent_audio(config: Any, batch: int, frames: int, timesteps: torch.Tensor, fps: float) -> torch.Tensor:
    """The packed audio latents (B, L, C) of `batch` silent tracks as long as `frames` latent frames, noised to
    sigma = timesteps / 1000 (sigma x noise), the noise seeded by the noise levels."""
    pixel_frames = (frames - 1) * config.vae_scale_factors[0] + 1
    per_second = config.audio_sampling_rate / config.audio_hop_length / config.audio_scale_factor
    length = max(1, round(pixel_frames / fps * per_second))
    seed = int((timesteps.detach().double().cpu() * 1e6).sum().item()) % (2 ** 63)
    noise = torch.randn(batch, length, config.audio_in_channels, generator=torch.Generator().manual_seed(seed))
    return noise * (timesteps.detach().float().cpu() / 1000).view(-1, 1, 1)


def latent_stats(vae: nn.Module, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The autoencoder's per-channel latent mean and std (its buffers), shaped (1, C, 1, 1, 1) like `like`."""
    shape = (1, -1) + (1,) * (like.ndim - 2)
    return (vae.latents_mean.view(shape).to(like.device, like.dtype),
            vae.latents_std.view(shape).to(like.device, like.dtype))


def ready_tokenizer(tokenizer: Any) -> Any:
    """Gemma 3's tokenizer padding on the left, as LTX2Pipeline sets it (its eos where it names no pad token)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _model_index(folder: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((Path(folder) / "model_index.json").read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def _class_in_index(folder: Path, component: str) -> str:
    return str((_model_index(folder).get(component) or [None, ""])[-1])


LTX2 = LTX2Video()
