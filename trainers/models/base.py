"""What every model family plug-in provides (ModelFamily), and what a loaded model is (LoadedModel).

A family is one folder under trainers/models/ (listed in trainers/core/registry.py) whose `family`
module holds its ModelFamily object: how to tell its models apart (diffusers folders and single-file
checkpoints), load them, encode prompts and call the UNet, lay its weights out as a single file, name it
in LoRA and model metadata, and render samples with it. Generic code asks the family; it never tests
a family's name.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainers.data.prompt_chunks import PromptFormat, WeightedIds, split_weighted, token_counts, token_ids
from trainers.models.pending_encoders import read_pending
from trainers.models.pipeline_lora import PipelinePart
from trainers.models.rules import (  # noqa: F401 - re-exported: the torch-free half of a family
    CheckpointKeys,
    FamilyRules,
    ModelFiles,
    ModelLoadError,
    TextEncoderPart,
)


@dataclass
class SizeConditioning:
    """SDXL micro-conditioning of one batch, each (B, 2) as (h, w) / (top, left)."""

    original_size: torch.Tensor
    crop_top_left: torch.Tensor
    target_size: torch.Tensor


@dataclass(frozen=True)
class LoraTarget:
    """One module of a kohya LoRA file and the model layers it covers, for families whose files name modules of
    another implementation (FLUX's and SD3's reference code, where q, k and v are one fused layer).

    `layers` share their input and are one layer in the file: their outputs are stacked in order, each taking the
    `rows` of its output (all of them when None, in order; a permutation when the file orders them otherwise)."""

    name: str  # e.g. lora_unet_double_blocks_0_img_attn_qkv
    layers: tuple[nn.Linear, ...]
    rows: tuple[torch.Tensor | None, ...] = ()  # per layer: its output rows in the file's order (None: as they are)
    path: str = ""  # the dotted module path `name` is made from, where the family's files name it so (lora_file_names)


# The slot a method may swap for the duration of its samples (ControlNet renders through its controlled denoiser).
SWAPPABLE = frozenset({"unet"})


@dataclass
class LoadedModel:
    """What loading made, and a run's (or a generation job's) view of it, which is another LoadedModel made with
    `dataclasses.replace` (the run's configured family, prompt format, cached texts): no field but the denoiser is
    assigned once the object is made, so what a run sets is never left on the model it was made from."""

    family: "ModelFamily"
    unet: nn.Module  # the denoiser: a UNet, or the transformer of SD3 and FLUX (the name stays for every family)
    vae: nn.Module
    text_encoders: list[nn.Module]
    tokenizers: list[Any]
    noise_scheduler: Any  # a diffusers DDPMScheduler for training noise; flow families: their inference scheduler
    prediction_type: str  # "epsilon" or "v_prediction"; "flow" for flow-matching families
    source: str  # what the user gave (folder or hub id), for metadata
    # How its prompts are tokenized (max_token_length, weighted captions): the run's or the generation job's, so
    # training captions, cached text-encoder outputs and sample prompts are encoded alike.
    prompt_format: PromptFormat = field(default_factory=PromptFormat)
    # Text-encoder outputs encoded before training (data/cache.py's TextCache: captions and sample prompts), read
    # instead of running the encoders, which then may sit on the CPU.
    cached_texts: Any = None
    # The VAE's outputs of images seen before in a run without cached latents (train/memo.py's RowMemo), or None.
    latent_memo: Any = None

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in SWAPPABLE and (name in self.__dict__ or name not in self.__dataclass_fields__):
            raise AttributeError(f"LoadedModel.{name} is set when the model is made: make the run's view of it with "
                                 f"dataclasses.replace(model, {name}=...)")
        object.__setattr__(self, name, value)

    def tokenize(self, texts: list[str]) -> list[torch.Tensor] | list[WeightedIds]:
        """Token ids per tokenizer (WeightedIds with weighted captions), in `prompt_format`."""
        if not self.prompt_format.weighted:
            return self.family.tokenize(self.tokenizers, texts, self.prompt_format)
        ids, weights = self.family.tokenize_weighted(self.tokenizers, texts, self.prompt_format)
        return [WeightedIds(i, w) for i, w in zip(ids, weights)]

    def encode_texts(self, texts: list[str], clip_skip: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(hidden states, pooled or None) of prompts, encoded as training encodes captions: read from
        `cached_texts` when it holds them all, else the text encoders run where they are."""
        cached = self.cached_texts.embeds if self.cached_texts is not None else {}
        if texts and all(text in cached for text in texts):
            hidden = torch.stack([cached[t][0] for t in texts])
            pooled = [cached[t][1] for t in texts]
            return hidden, None if pooled[0] is None else torch.stack(pooled)
        read_pending(self.text_encoders)  # a text not cached: encoders deferred at loading are read now
        device = next(self.text_encoders[0].parameters()).device
        ids, weights = split_weighted(self.tokenize(texts))
        ids = [t.to(device) for t in ids]
        weights = None if weights is None else [w.to(device) for w in weights]
        return self.family.encode_prompts(self.text_encoders, ids, clip_skip, weights)


class ModelFamily(FamilyRules):
    """One model generation: how to recognise (its FamilyRules), load, run, save and describe it."""

    base_model_version: str  # kohya ss_base_model_version
    native_size: int = 512  # generation size when none is given
    vae_fp16_unsafe: bool = False  # its VAE overflows in fp16: kept float32 under fp16 training
    modelspec_architecture: str  # modelspec.architecture of its full models
    implementation: str  # modelspec.implementation of a full single-file model

    # --- loading and running ---

    @abstractmethod
    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "",
             random_init: bool = False) -> LoadedModel: ...

    @abstractmethod
    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Token ids (one tensor per tokenizer, (B, chunks x 77) as `tokenize` makes them) -> (encoder_hidden_states,
        pooled or None); the chunks are merged as sd-scripts does (prompt_states.py). `weights` (as
        `tokenize_weighted` makes them) multiply each token's hidden state."""

    def unet_kwargs(self, pooled: torch.Tensor | None, sizes: SizeConditioning | None) -> dict[str, Any]:
        """Extra keyword arguments of the UNet call (SDXL's added conditions)."""
        return {}

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                pooled: torch.Tensor | None, sizes: SizeConditioning | None) -> torch.Tensor:
        """The denoiser's prediction for noisy latents (B, C, h, w), in their shape."""
        return unet(noisy, timesteps, hidden.to(noisy.dtype), **self.unet_kwargs(pooled, sizes)).sample

    # --- a run's settings ---

    def configured(self, values: Mapping[str, Any]) -> "ModelFamily":
        """This family with a run's settings (its config's option values) that change how it encodes text or runs
        its denoiser; the same object when it has none."""
        return self

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        """The blocks blocks_to_swap keeps in CPU memory (the last ones, as sd-scripts); ValueError when `count`
        leaves too few on the device. Here a UNet's: its down, mid and up blocks, the last up blocks first."""
        from trainers.models.block_swap import unet_blocks

        units = unet_blocks(denoiser)
        if not units:
            raise ValueError(f"{self.title} models do not swap blocks")
        if count > len(units) - 2:
            raise ValueError(f"this UNet has {len(units)} down, mid and up blocks: blocks_to_swap can keep at most "
                             f"{len(units) - 2} of them in CPU memory")
        return units[len(units) - count:]

    def repeated_blocks(self, denoiser: nn.Module) -> list[nn.Module]:
        """The blocks compile_blocks compiles one by one (diffusers' regional compilation): the modules of the classes
        the denoiser's `_repeated_blocks` names (diffusers' own list), else the entries of its block lists."""
        names = set(getattr(denoiser, "_repeated_blocks", None) or ())
        if names:
            return [m for m in denoiser.modules() if type(m).__name__ in names]
        lists = ("transformer_blocks", "single_transformer_blocks", "double_stream_blocks", "single_stream_blocks",
                 "blocks", "layers")
        return [block for name in lists if isinstance(getattr(denoiser, name, None), nn.ModuleList)
                for block in getattr(denoiser, name)]

    def lora_target_dims(self, targets: list[LoraTarget], args: Mapping[str, str], dim: int) -> dict[str, int] | None:
        """The rank of each of lora_targets' modules under the run's network_args (0: not trained); None: all
        at network_dim."""
        return None

    def tokenize(self, tokenizers: list[Any], captions: list[str],
                 fmt: PromptFormat | None = None) -> list[torch.Tensor]:
        """Token ids per tokenizer, (B, chunks x 77): one chunk for max_token_length None/75, 2 for 150, 3 for 225.
        A caption with more tokens is cut there (a PromptTruncated warning names it)."""
        fmt = fmt or PromptFormat()
        return [token_ids(tok, captions, fmt)[0] for tok in tokenizers]

    def tokenize_weighted(self, tokenizers: list[Any], captions: list[str], fmt: PromptFormat | None = None,
                          ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(ids, weights) per tokenizer of captions with emphasis syntax ((word:1.2), (word), [word]), which
        is removed from the text; weights are 1 where there is none."""
        fmt = replace(fmt or PromptFormat(), weighted=True)
        pairs = [token_ids(tok, captions, fmt) for tok in tokenizers]
        return [ids for ids, _ in pairs], [weights for _, weights in pairs]

    def overlong(self, tokenizers: list[Any], captions: list[str], fmt: PromptFormat) -> list[str]:
        """The captions `tokenize` would cut."""
        counts = token_counts(tokenizers[0], captions, fmt.weighted)
        return [caption for caption, count in zip(captions, counts) if count > fmt.limit]

    def checkpoint_prediction_type(self, global_step: int | None) -> str | None:
        """The prediction type a single file of this family has when it does not say (None: the arch default)."""
        return None

    def default_size(self, prediction_type: str) -> int:
        """The size it generates at when none is given."""
        return self.native_size

    @abstractmethod
    def build_pipeline(self, model: "LoadedModel", scheduler: Any) -> Any:
        """A diffusers pipeline over the model's own modules (LoRA hooks and trained weights apply)."""

    def inference_scheduler(self, model: "LoadedModel", sampler: str) -> Any | None:
        """The scheduler samples are rendered with, when the family has its own (None: the sampler's, built from
        the training noise schedule)."""
        return None

    def pipeline_embeds(self, hidden: torch.Tensor, second: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """The pipeline call's prompt arguments of encoded (prompt, negative) pairs: encode_prompts' hidden states
        and its second output (the pooled embeddings here; a family whose second output is something else, e.g.
        the text's attention mask, names it for its pipeline)."""
        embeds = {"prompt_embeds": hidden[:1], "negative_prompt_embeds": hidden[1:]}
        if second is not None:
            embeds |= {"pooled_prompt_embeds": second[:1], "negative_pooled_prompt_embeds": second[1:]}
        return embeds

    def pipeline_kwargs(self, cfg_scale: float) -> dict[str, Any]:
        """The pipeline call's guidance arguments for a CFG scale."""
        return {"guidance_scale": cfg_scale}

    def edit_inputs(self, images: Sequence[str], width: int, height: int) -> dict[str, Any]:
        """The pipeline call's input images (a sample prompt's --ci, Generate's input image) for edit models
        (trainers/models/edit.py); other families take none."""
        return {}

    def encode_with_images(self, model: "LoadedModel", texts: list[str], clip_skip: int, images: Sequence[str],
                           width: int, height: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """encode_texts of prompts that go with input images (Qwen-Image-Edit's text encoder also reads the
        images); the others encode the text alone."""
        return model.encode_texts(texts, clip_skip)

    def adapt_trainable(self, cfg: Any, session: Any, trainable: Any) -> Any:
        """A method's Trainable with what the family adds to every step (edit models: each sample's control
        images); most add nothing."""
        return trainable

    # a part of the denoiser waits in host RAM until it runs (place_denoiser places it): it is quantized there
    offloads_denoiser = False

    def place_denoiser(self, denoiser: nn.Module, device: torch.device) -> Any:
        """The denoiser on `device` for the steps (no blocks swapped): None, or what keeps a part of it in host RAM
        (Wan 2.2's offload_inactive_dit), which the loop then leaves where it put the weights."""
        denoiser.to(device)
        return None

    def decode_latents(self, vae: nn.Module, latents: torch.Tensor, width: int, height: int) -> torch.Tensor:
        """Pixels (B, 3, H, W) in [-1, 1] of the latents a pipeline returns with output_type="latent"."""
        return vae.decode(latents.to(vae.device, vae.dtype) / vae.config.scaling_factor).sample

    sample_suffix: str = ".png"  # what its samples are written as (save_sample)

    def sample_output(self, pipe: Any, pixels: torch.Tensor) -> Any:
        """What a sample is of decode_latents' pixels: a PIL image here (video families: their frames)."""
        return pipe.image_processor.postprocess(pixels.float(), output_type="pil")[0]

    def sample_with_output(self, sample: Any, output: Any) -> Any:
        """A sample (sample_output's) with what else its pipeline's output (output_type="latent") holds that the
        sample shows (LTX-2 with_audio: its sound); as it is here."""
        return sample

    def save_sample(self, sample: Any, path: Path, parameters: str) -> Path | None:
        """Write a sample (sample_output's) of its own kind as `path` (its sample_suffix) and return it (video
        families: a clip); None: the sampler writes it as a PNG."""
        return None

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: ModelFiles) -> LoadedModel:
        """A single file in the family's own layout (own_checkpoint_layout) as a LoadedModel."""
        raise NotImplementedError

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A single file of the family's own layout (own_checkpoint_layout) of `model` with these denoiser weights."""
        raise NotImplementedError

    # --- LoRA ---

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget] | None:
        """The LoRA modules of the denoiser with their kohya names (None: found by unet_key_style)."""
        return None

    def lora_in_own_names(self, state: dict[str, torch.Tensor],
                          network_alpha: float | None = None) -> dict[str, torch.Tensor]:
        """A LoRA file another tool wrote in its own module names, in the names this family trains (Generate and
        network_weights read both). `network_alpha`: the alpha to give modules whose file folded it into their
        weights (lora_file_names.py; network_weights passes the file's ss_network_alpha)."""
        return state

    def lora_in_musubi_names(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
        """A kohya file of this family in musubi-tuner's own module names (`tools convert --to musubi`); None where
        musubi reads kohya's names as they are."""
        return None

    def lora_file(self, state: dict[str, torch.Tensor], model: "LoadedModel") -> dict[str, torch.Tensor]:
        """A trained network's kohya state (lora_targets' names) as the family's LoRA files name it (lora_in_own_names
        reads it back); most families save kohya's names."""
        return state

    lora_file_naming: str = ""  # how lora_file names a module, for tools inspect ("": kohya's names)

    def lora_file_parts(self, path: Path, state: dict[str, torch.Tensor]) -> dict[Path, dict[str, torch.Tensor]]:
        """Files saved beside a LoRA file `path` (lora_file's `state`), each with its tensors: a family whose file
        holds several models' LoRAs gives one file per model (Wan 2.2's experts); most give none."""
        return {}

    def lora_file_paths(self, keys: Iterable[str]) -> dict[str, str] | None:
        """kohya module name -> the module's path, for each module of a file in lora_file's naming (told from its
        keys); None where the keys are not in it (kohya's names, another family's)."""
        return None

    def lora_file_at_paths(self, state: dict[str, torch.Tensor], paths: Mapping[str, str]) -> dict[str, torch.Tensor]:
        """`state` (kohya names) as lora_file names it, each module's path from `paths` (lora_file_paths' answer, so
        that the tools write a file they read back in its naming without the model)."""
        return state

    def lora_for_pipeline(self, state: dict[str, torch.Tensor], model: "LoadedModel") -> dict[str, torch.Tensor]:
        """A kohya LoRA file's tensors as this family's diffusers pipeline's load_lora_weights takes them."""
        return state

    def lora_pipeline_parts(self, path: Path, listed: Sequence[Path], model: "LoadedModel") -> list[PipelinePart]:
        """Generate: what a LoRA line's file loads, and onto which of the pipeline's denoisers (`listed`: every file
        the job's variant lists); one denoiser: the whole file."""
        return [PipelinePart(path)]

    def own_lora_file(self, path: Path) -> str | None:
        """What a LoRA file is when only this family's models take it (Generate refuses it, naming this family, on
        the models of the others: a Wan 2.2 pair's experts' LoRAs on Wan 2.1), else None."""
        return None

    # --- saving and describing ---

    @abstractmethod
    def text_encoders_to_original(self, states: list[dict[str, torch.Tensor]], text_encoders: list[nn.Module],
                                  prediction_type: str) -> dict[str, torch.Tensor]:
        """The text encoders' weights (and any family marker) under their single-file names."""

    def architecture_for(self, v_prediction: bool) -> str:
        """modelspec.architecture of a full model ("/lora" is appended for a LoRA)."""
        return self.modelspec_architecture

    def model_index(self) -> dict[str, Any]:
        """Entries of a saved diffusers folder's model_index.json beyond the components."""
        return {}

    def save_components(self, folder: Path) -> dict[str, list[str]]:
        """Frozen models of the family's own (beside the denoiser, VAE and text encoders) written into a saved
        diffusers folder being made at `folder`: name -> its model_index.json entry (Wan 2.1 I2V's CLIP image
        encoder and processor); none by default."""
        return {}

    def denoiser_parts(self, denoiser: nn.Module, state: Mapping[str, torch.Tensor]
                       ) -> dict[str, tuple[nn.Module, Mapping[str, torch.Tensor]]]:
        """A saved diffusers folder's denoiser subfolders, each with its model (its config) and weights: the one
        denoiser_folder; a denoiser of several models gives one each (Wan 2.2's experts)."""
        return {self.denoiser_folder: (denoiser, state)}

    def finetuned_part(self, denoiser: nn.Module) -> nn.Module:
        """What of the denoiser a full-weight run trains: all of it (Wan 2.2: the one expert train_expert names)."""
        return denoiser

    def kept_components(self) -> dict[str, tuple[Path, list[str]]]:
        """Components of the loaded folder that a saved diffusers folder keeps as they are (neither trained nor
        loaded, e.g. Ideogram 4's unconditional transformer): name -> (its folder, its model_index.json entry)."""
        return {}

    def lora_metadata(self, v_prediction: bool) -> dict[str, Any]:
        """The family's ss_* and modelspec.* values in a LoRA file (kohya's, for the loaders that read them): these
        four, and any others the family writes (they override the run's; None leaves a key out)."""
        return {"ss_base_model_version": self.base_model_version, "ss_v2": False,
                "modelspec.architecture": f"{self.architecture_for(v_prediction)}/lora",
                "modelspec.implementation": "diffusers" if self.unet_key_style == "diffusers" else self.implementation}


