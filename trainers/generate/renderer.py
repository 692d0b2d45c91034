"""One worker's pipeline: the model on its device, its LoRAs, the prompt-embedding cache, and rendering.

LoRAs load through diffusers' `load_lora_weights` (kohya files as we and other trainers write them) as
named adapters; `set_adapters` gives each its weight. LyCORIS files (LoHa, LoKr, IA3, ...), which diffusers does
not read, are wrapped around the layers they change by lycoris-lora (loras/lycoris_files.py). A weight-0 LoRA is not
loaded at all, so it renders exactly the base image. Each distinct (prompt, negative) is encoded once per worker and
text-encoder setup (the cache key includes the LoRAs that change the text encoders), through the same
chunked encoding as sample images during training (`encode_for_pipeline`).
"""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from trainers.data.prompt_chunks import PromptFormat
from trainers.generate.bundled_words import BundledWord, install_words, reading_words, split_bundled
from trainers.generate.options import GenerateConfig, LoraRef
from trainers.generate.plan import Variant, WorkItem, input_images
from trainers.generate.saves import lora_touches_text_encoder
from trainers.generate.video import CLIP_SUFFIX
from trainers.loras.lora_fit import misfit_for_generate
from trainers.loras.lycoris_files import LycorisFile, is_lycoris_file, with_conv_ups, with_one_alpha
from trainers.models import LoadedModel, ModelFiles, ModelLoadError, load_model
from trainers.models.families import all_families
from trainers.models.half_kernels import slow_half_convolutions
from trainers.models.pipeline_lora import PipelinePart
from trainers.models.video import frame_kwargs
from trainers.sampling.pipeline import build_pipeline, encode_for_pipeline, sampler_title, save_png
from trainers.sampling.pnginfo import lora_short_hash, lora_tag, parameters_text

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Prompts are encoded in as many 75-token chunks as the longer of prompt and negative needs, up to 225 tokens
# (as A1111 and sd-scripts' sample pipeline do): a short prompt encodes as it always did, a long one is used
# whole. The text is taken as written (no emphasis weighting).
PROMPTS = PromptFormat(max_token_length=225, fit=True)


def weight_dtype(precision: str, device: torch.device) -> torch.dtype:
    if precision == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return DTYPES[precision]


def model_name(source: str) -> str:
    """What A1111 writes as `Model:`: the file or folder name, or the hub id's last part."""
    return Path(source.rstrip("/\\")).stem or source


class Renderer:
    def __init__(self, cfg: GenerateConfig, device: str, variants: list[Variant]) -> None:
        self.cfg = cfg
        self.device = torch.device(device)
        self.dtype = weight_dtype(cfg.precision, self.device)
        self.variants = variants
        self.model: LoadedModel | None = None
        self.model_source = ""
        self.pipe: Any = None
        self.adapters: dict[str, str] = {}  # LoRA path -> diffusers adapter name
        self.parts: dict[str, list[PipelinePart]] = {}  # LoRA path -> what its adapter holds on which denoiser
        self.active: dict[str, float] = {}  # the variant's LoRA paths -> their weights
        self.lycoris: dict[str, LycorisFile] = {}  # LyCORIS file path -> its modules, wrapped around the layers
        self.words: dict[str, list[BundledWord]] = {}  # LoRA path -> the words bundled in it (in the encoders)
        self._tokenizers: list[Any] = []  # the model's own tokenizers (prompts read bundled words through wrappers)
        self.variant: int | None = None
        self._embeds: dict[tuple, dict[str, torch.Tensor]] = {}
        self._hashes: dict[Path, str] = {}
        self._touches_te: dict[str, bool] = {}
        self._adapter_count = 0
        self.encodes = 0  # prompt encodings done (the cache's misses)
        self.load_s = 0.0

    # ---- model and LoRAs -------------------------------------------------------------------------------------

    def load(self, source: str) -> None:
        if self.model is not None and source == self.model_source:
            return
        started = time.perf_counter()
        self.model = self.pipe = None
        self.adapters, self.parts, self.lycoris, self.words, self.variant, self._embeds = {}, {}, {}, {}, None, {}
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        model = replace(load_model(source, self.cfg.model_family, self.dtype, self.cfg.vae,
                                   random_init=self.cfg.random_init, files=ModelFiles.from_values(self.cfg.values)),
                        prompt_format=PROMPTS)
        half = self.dtype == torch.bfloat16 and not slow_half_convolutions(self.device, self.dtype)
        vae_dtype = torch.bfloat16 if half else torch.float32
        model.unet.to(self.device).eval().requires_grad_(False)
        model.vae.to(self.device, vae_dtype).eval().requires_grad_(False)
        for te in model.text_encoders:
            te.to(self.device).eval().requires_grad_(False)
        self.model, self.model_source, self._tokenizers = model, source, list(model.tokenizers)
        self.pipe = build_pipeline(model, self.cfg.sampler)
        self.load_s += time.perf_counter() - started

    def use_variant(self, index: int) -> None:
        """Load the variant's model (when it has its own) and LoRAs; unload the LoRAs it does not use."""
        if index == self.variant:
            return
        variant = self.variants[index]
        self.load(variant.model or self.cfg.model)
        active = {str(Path(r.path).expanduser()): r.weight for r in variant.loras if r.weight != 0}
        listed = [str(Path(r.path).expanduser()) for r in variant.loras]  # at weight 0 too: left off on purpose
        parts = {path: self._parts(path, listed) for path in active}
        unused = [name for path, name in self.adapters.items() if self.parts.get(path) != parts.get(path)]
        if unused:
            self.pipe.delete_adapters(unused)
            self.adapters = {p: n for p, n in self.adapters.items() if n not in unused}
        for path in [p for p in self.lycoris if p not in active]:
            self.lycoris.pop(path).remove()
        for path in active:
            if path not in self.adapters and path not in self.lycoris:
                self._load_lora(path, parts[path])
        adapters = {p: w for p, w in active.items() if p in self.adapters}
        if adapters:
            self.pipe.set_adapters([self.adapters[p] for p in adapters], adapter_weights=list(adapters.values()))
        for path, lycoris in self.lycoris.items():
            lycoris.set_weight(active[path])
        assert self.model is not None
        # the variant's view of the model: its prompts read the words bundled in its LoRAs
        self.model = replace(self.model, tokenizers=reading_words(self._tokenizers,
                                                                  [w for p in active for w in self.words.get(p, [])]))
        self.active, self.variant = active, index

    def _parts(self, path: str, listed: list[str]) -> list[PipelinePart]:
        """What the LoRA line's file loads onto which of the pipeline's denoisers (the family's answer)."""
        assert self.model is not None
        family = self.model.family
        try:
            for other in all_families():
                if not isinstance(family, type(other)) and (what := other.own_lora_file(Path(path))):
                    raise ModelLoadError(f"loras: {Path(path).name} is {what}, which this {family.title} model does "
                                         f"not take: use it with the {other.title} model it was trained on")
            return family.lora_pipeline_parts(Path(path), [Path(p) for p in listed], self.model)
        except FileNotFoundError:
            raise ModelLoadError(f"loras: {path}: no such file") from None
        except ModelLoadError:
            raise
        except (OSError, ValueError) as err:  # not a safetensors file
            raise ModelLoadError(f"loras: {err}") from None

    def _load_lora(self, path: str, parts: list[PipelinePart] | None = None) -> None:
        from safetensors.torch import load_file

        parts = self._parts(path, [path]) if parts is None else parts
        self._adapter_count += 1
        name = f"lora{self._adapter_count}"  # unique for the worker's life (deleted names are not reused)
        try:
            assert self.model is not None
            state, words = split_bundled(with_conv_ups(load_file(path)))
            if words and path not in self.words:
                self.words[path] = install_words(replace(self.model, tokenizers=self._tokenizers), words, name)
            if is_lycoris_file(state):
                if parts != [PipelinePart(Path(path))]:
                    raise ModelLoadError(f"loras: {path}: a LyCORIS file loads onto one denoiser only; this "
                                         f"{self.model.family.title} model takes LoRA files for each of its own")
                misfit = misfit_for_generate(path, state, self.model)
                if misfit is not None:
                    raise ModelLoadError(f"loras: {misfit}")
                self.lycoris[path] = LycorisFile(state, self.model, self.device, self.dtype)
                return
            for part in parts:
                read = state if str(part.path) == path else split_bundled(with_conv_ups(load_file(part.path)))[0]
                own = with_one_alpha(part.own_keys(self.model.family.lora_in_own_names(read)))
                misfit = misfit_for_generate(str(part.path), own, self.model)
                if misfit is not None:
                    raise ModelLoadError(f"loras: {misfit}")
                self.pipe.load_lora_weights(self.model.family.lora_for_pipeline(part.pipeline_keys(own), self.model),
                                            adapter_name=name, **dict(part.load_kwargs))
        except FileNotFoundError as err:
            raise ModelLoadError(f"loras: {err.filename or path}: no such file") from None
        except ModelLoadError:
            raise
        except Exception as err:  # noqa: BLE001 - diffusers/peft raise many types; say which file
            assert self.model is not None
            raise ModelLoadError(f"loras: {path} cannot be loaded as a LoRA of this {self.model.family.title} model "
                                 f"({type(err).__name__}: {err})") from None
        self.adapters[path], self.parts[path] = name, parts

    # ---- prompts ---------------------------------------------------------------------------------------------

    def embeds(self, prompt: str, negative: str, images: tuple[str, ...] = (),
               size: tuple[int, int] = (0, 0)) -> dict[str, torch.Tensor]:
        """Prompt and negative embeddings of batch 1, encoded once per text-encoder setup (and edit model's input
        images, which some text encoders read)."""
        assert self.model is not None and self.variant is not None
        te_loras = tuple(sorted((p, w) for p, w in self.active.items() if self._touches(p)))
        key = (self.model_source, te_loras, self.cfg.clip_skip, prompt, negative, images, size)
        if key not in self._embeds:
            with torch.no_grad():
                self._embeds[key] = encode_for_pipeline(self.model, [prompt, negative], self.cfg.clip_skip,
                                                        self.device, images, size)
            self.encodes += 1
        return self._embeds[key]

    def _touches(self, path: str) -> bool:
        if path not in self._touches_te:
            self._touches_te[path] = path in self.words or lora_touches_text_encoder(Path(path))
        return self._touches_te[path]

    # ---- rendering -------------------------------------------------------------------------------------------

    def native_size(self) -> int:
        """The size the model itself says it makes (its UNet's sample size in pixels), as diffusers' pipelines
        default to; the family's size when the model does not say. A 64 px demo model renders at 64 px."""
        assert self.model is not None
        sample_size = getattr(self.model.unet.config, "sample_size", None)
        vae_blocks = len(getattr(self.model.vae.config, "block_out_channels", ()) or ())
        if isinstance(sample_size, int) and vae_blocks:
            return sample_size * 2 ** (vae_blocks - 1)
        return self.model.family.default_size(self.model.prediction_type)

    def render(self, item: WorkItem) -> list[Path]:
        """Render one work item (a batch of one prompt's images, a video model's clips) and write its files through
        the family's sample hooks (sample_output, save_sample: PNGs, or mp4s with the parameters in their comment),
        as samples during training are written."""
        self.use_variant(item.variant)
        assert self.model is not None
        family = self.model.family
        self._check_suffix(Path(item.images[0].path).suffix)
        width, height = item.width or self.native_size(), item.height or self.native_size()
        clip = frame_kwargs(family, item.frames)
        batch = len(item.images)
        images = input_images(self.cfg, item.prompt)
        one = self.embeds(item.prompt.prompt, item.prompt.negative, images, (width, height))
        embeds = {k: _repeated(v, batch) for k, v in one.items()}
        generators = [torch.Generator("cpu").manual_seed(image.seed) for image in item.images]
        with torch.no_grad():
            latents = self.pipe(**embeds, width=width, height=height, num_inference_steps=item.steps,
                                **(family.pipeline_kwargs(item.cfg_scale) | clip),
                                **family.edit_inputs(images, width, height),
                                generator=generators,
                                output_type="latent")[0]  # its images (a video pipeline's frames) as latents
            pixels = family.decode_latents(self.model.vae, latents, width, height)
        written = []
        for n, image in enumerate(item.images):
            sample = family.sample_output(self.pipe, pixels[n:n + 1])
            text = self.parameters(item, image.seed, width, height, clip.get("num_frames"))
            path = Path(image.path)
            written.append(family.save_sample(sample, path, text) or save_png(sample, path, text))
        return written

    def _check_suffix(self, planned: str) -> None:
        """The plan named its files before the model loaded (trainers/generate/video.py); a model whose family
        could only be told now (a hub id) and makes the other kind is named, not written with the wrong suffix."""
        assert self.model is not None
        family = self.model.family
        if planned.lower() != family.sample_suffix:
            kind = "clips" if family.sample_suffix == CLIP_SUFFIX else "images"
            raise ModelLoadError(f"model_family: {model_name(self.model_source)} is a {family.title} model, which "
                                 f"makes {kind}, and its family could not be told before it loaded: set "
                                 f"model_family = {family.name}")

    def parameters(self, item: WorkItem, seed: int, width: int, height: int, frames: int | None = None) -> str:
        loras = [r for r in self.variants[item.variant].loras if r.weight != 0]
        prompt = " ".join([item.prompt.prompt] + [lora_tag(Path(r.path), r.weight) for r in loras])
        hashes = ", ".join(f"{path.stem}: {self._hash(path)}" for path in self._files(loras))
        return parameters_text(prompt, item.prompt.negative, {
            "Steps": item.steps, "Sampler": sampler_title(self.cfg.sampler), "CFG scale": item.cfg_scale,
            "Seed": seed, "Size": f"{width}x{height}", "Frames": frames, "Model": model_name(self.model_source),
            "Clip skip": self.cfg.clip_skip if self.cfg.clip_skip > 1 else None, "Lora hashes": hashes or None})

    def _files(self, loras: list[LoraRef]) -> list[Path]:
        """Every file the lines loaded (a Wan 2.2 pair's other file, brought by the line naming one, too)."""
        paths = [Path(r.path).expanduser() for r in loras]
        return list(dict.fromkeys(part.path for p in paths for part in self.parts.get(str(p), [PipelinePart(p)])))

    def _hash(self, path: Path) -> str:
        if path not in self._hashes:
            self._hashes[path] = lora_short_hash(path)
        return self._hashes[path]


def _repeated(embeds: Any, times: int) -> Any:
    """A prompt's embeddings for a batch of `times` images: a tensor repeated along its batch dimension, or a list of
    per-prompt tensors (Z-Image's captions without padding) with each entry repeated."""
    if isinstance(embeds, list):
        return [entry for entry in embeds for _ in range(times)]
    return embeds.repeat(times, *[1] * (embeds.dim() - 1))
