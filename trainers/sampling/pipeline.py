"""Sample images during training: render prompts with the model as it is being trained.

The pipeline is assembled from the loaded modules themselves (no copies, no reloading), so
LoRA hooks and finetuned weights take part exactly as trained. Prompts are encoded by the model's own
chunked encoding (max_token_length, weighted captions: see `encode_for_pipeline`) and passed as embeddings. Sampling leaves training as
it found it: train/eval flags, autograd and the torch RNG streams are restored afterwards.

Every rank calls `generate_samples` with the same prompt list and renders its share;
image names and seeds depend only on the prompt, never on the number of processes, so
rank 0 can announce every image (`sample_path`, `sample_event`) after a barrier.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager

import torch
from torch import nn

from trainers.core.events import Sample
from trainers.core.fsio import atomic_path
from trainers.core.prompts import SamplePrompt
from trainers.models import LoadedModel
from trainers.models.pending_encoders import is_pending
from trainers.models.training_adapter import training_adapter_off
from trainers.models.video import frame_kwargs

# What one prompt renders with, given (prompt, width, height): a ControlNet sets its control image.
PerPrompt = Callable[[SamplePrompt, int, int], ContextManager[Any]]


@dataclass(frozen=True)
class Sampler:
    scheduler: str  # diffusers scheduler class
    title: str  # A1111's name, written into the PNG's parameters
    options: dict[str, Any] = field(default_factory=dict)  # over the training scheduler's config


_SAMPLERS: dict[str, Sampler] = {
    "ddim": Sampler("DDIMScheduler", "DDIM", {"set_alpha_to_one": False}),
    "euler": Sampler("EulerDiscreteScheduler", "Euler"),
    "euler_a": Sampler("EulerAncestralDiscreteScheduler", "Euler a"),
    "dpmpp_2m": Sampler("DPMSolverMultistepScheduler", "DPM++ 2M",
                        {"algorithm_type": "dpmsolver++", "solver_order": 2}),
}
SAMPLERS: tuple[str, ...] = tuple(_SAMPLERS)
# sd-scripts' `sample_sampler` names for the samplers we have.
KOHYA_SAMPLERS: dict[str, str] = {"ddim": "ddim", "euler": "euler", "k_euler": "euler", "euler_a": "euler_a",
                                  "k_euler_a": "euler_a", "dpmsolver++": "dpmpp_2m"}
# How SD1/SD2/SDXL ship their inference schedulers; the training DDPM config does not carry these.
_INFERENCE_DEFAULTS = {"timestep_spacing": "leading", "steps_offset": 1}


def _sampler(name: str) -> Sampler:
    if name not in _SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
    return _SAMPLERS[name]


def sampler_title(name: str) -> str:
    """A1111's name of a sampler (written into the PNG's parameters)."""
    return _sampler(name).title


def build_scheduler(model: LoadedModel, sampler: str) -> Any:
    """A new inference scheduler built from the training noise scheduler's config (prediction type included)."""
    import diffusers

    own = model.family.inference_scheduler(model, sampler)
    if own is not None:  # flow-matching families sample with their own (flow-match Euler) scheduler
        return own
    spec = _sampler(sampler)
    cls = getattr(diffusers, spec.scheduler)
    config = {k: v for k, v in model.noise_scheduler.config.items() if not k.startswith("_")}
    return cls.from_config({**config, **_INFERENCE_DEFAULTS, "prediction_type": model.prediction_type,
                            **spec.options})


def build_pipeline(model: LoadedModel, sampler: str) -> Any:
    """A diffusers pipeline over the model's own modules (same objects: LoRA hooks and trained weights apply)."""
    pipe = model.family.build_pipeline(model, build_scheduler(model, sampler))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sample_path(out_dir: Path, tag: str, prompt: SamplePrompt, suffix: str = ".png") -> Path:
    """Where a prompt's image goes (a video family's clip: its family's sample_suffix): the same on every rank, so
    rank 0 can announce all of them."""
    return Path(out_dir) / f"{tag}_{prompt.index:02d}{suffix}"


def sample_event(path: Path, prompt: SamplePrompt, step: int, epoch: int) -> Sample:
    """The `sample` event of one image (rank 0 announces every rank's images)."""
    return Sample(path=str(path), prompt=prompt.prompt, step=step, epoch=epoch, index=prompt.index)


@dataclass(frozen=True)
class _Settings:
    """One image's resolved parameters."""

    prompt: SamplePrompt
    width: int
    height: int
    steps: int
    cfg_scale: float
    seed: int
    sampler: str
    clip_skip: int

    def parameters(self) -> str:
        """A1111's "parameters" text, which A1111/Forge/ComfyUI and image viewers read back."""
        from trainers.sampling.pnginfo import parameters_text

        return parameters_text(self.prompt.prompt, self.prompt.negative, {
            "Steps": self.steps, "Sampler": sampler_title(self.sampler), "CFG scale": self.cfg_scale,
            "Seed": self.seed, "Size": f"{self.width}x{self.height}",
            "Clip skip": self.clip_skip if self.clip_skip > 1 else None})


def generate_samples(model: LoadedModel, prompts: list[SamplePrompt], out_dir: Path, tag: str, *,
                     sampler: str = "euler_a", default_size: tuple[int, int], default_steps: int = 20,
                     default_cfg: float = 7.0, base_seed: int = 0, rank: int = 0, world_size: int = 1,
                     clip_skip: int = 1, device: torch.device | str | None = None,
                     dtype: torch.dtype | None = None, per_prompt: PerPrompt | None = None) -> list[Path]:
    """Render this rank's share of `prompts` (`prompts[rank::world_size]`) to `out_dir/{tag}_{index:02d}.png`.

    `default_size` is (width, height) for prompts without --w/--h. A prompt without --d gets the seed
    `base_seed + prompt.index`. `clip_skip` is kohya's (1 = last layer), as in training. `device` is
    where the UNet runs (default: where its weights are); `dtype` fp16/bf16 runs the UNet under
    autocast (pass the training's weight dtype); the VAE decodes in its own dtype, without autocast.
    `per_prompt` gives the context each prompt renders in (a ControlNet's control image).
    Returns the files this rank wrote.
    """
    _sampler(sampler)  # fail before any work
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    device = torch.device(device) if device is not None else next(model.unet.parameters()).device
    pipe = build_pipeline(model, sampler)
    written = []
    # samples show what the saved weights give: a distilled base's training adapter is off
    # text encoders never read (every prompt cached) are left unread; one read for a prompt is read in eval mode
    encoders = [te for te in model.text_encoders if not is_pending(te)]
    with _sampling_mode([model.unet, model.vae, *encoders]), training_adapter_off(model.unet):
        for prompt in prompts[rank::world_size]:
            settings = _Settings(
                prompt, width=prompt.width or default_size[0], height=prompt.height or default_size[1],
                steps=prompt.steps or default_steps,
                cfg_scale=default_cfg if prompt.cfg_scale is None else prompt.cfg_scale,
                seed=base_seed + prompt.index if prompt.seed is None else prompt.seed,
                sampler=sampler, clip_skip=clip_skip)
            with (per_prompt or _nothing)(prompt, settings.width, settings.height):
                image = _render(pipe, model, settings, device, dtype)
            path, parameters = sample_path(out_dir, tag, prompt, model.family.sample_suffix), settings.parameters()
            written.append(model.family.save_sample(image, path, parameters) or save_png(image, path, parameters))
    return written


def _nothing(prompt: SamplePrompt, width: int, height: int) -> ContextManager[Any]:
    return contextlib.nullcontext()


@contextlib.contextmanager
def _sampling_mode(modules: list[nn.Module]) -> Iterator[None]:
    """Eval mode, no autograd and forked RNG streams; every module's train flag restored afterwards."""
    flags = [(m, m.training) for root in modules for m in root.modules()]
    cuda_devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    try:
        with torch.random.fork_rng(devices=cuda_devices), torch.no_grad():
            for root in modules:
                root.eval()
            yield
    finally:
        for module, training in flags:
            module.training = training


def _render(pipe: Any, model: LoadedModel, s: _Settings, device: torch.device, dtype: torch.dtype | None) -> Any:
    half = dtype in (torch.float16, torch.bfloat16)
    with torch.autocast(device.type, dtype=dtype, enabled=half):
        embeds = encode_for_pipeline(model, [s.prompt.prompt, s.prompt.negative], s.clip_skip, device,
                                     s.prompt.edit_images, (s.width, s.height))
        output = pipe(
            **embeds, width=s.width, height=s.height, num_inference_steps=s.steps,
            **(model.family.pipeline_kwargs(s.cfg_scale) | frame_kwargs(model.family, s.prompt.frames)),
            **model.family.edit_inputs(s.prompt.edit_images, s.width, s.height),
            generator=torch.Generator("cpu").manual_seed(s.seed),
            output_type="latent",
        )
        latents = output[0]  # its images (a video pipeline's frames) as latents
    pixels = model.family.decode_latents(model.vae, latents, s.width, s.height)
    return model.family.sample_with_output(model.family.sample_output(pipe, pixels), output)


def encode_for_pipeline(model: LoadedModel, texts: list[str], clip_skip: int, device: torch.device,
                        images: Sequence[str] = (), size: tuple[int, int] = (0, 0)) -> dict[str, torch.Tensor]:
    """Prompt and negative embeddings the way training encodes captions: same clip skip and layers, same
    max_token_length chunks and emphasis weights (the model's `prompt_format`), so nothing is cut at 77 tokens.

    The text encoders run where they are (they may sit on the CPU when their outputs were cached). `images`: an
    edit model's input images at the output's `size` (width, height), which some text encoders read too.
    """
    hidden, second = (model.family.encode_with_images(model, texts, clip_skip, images, *size) if images
                      else model.encode_texts(texts, clip_skip))
    return model.family.pipeline_embeds(hidden.to(device), None if second is None else second.to(device))


def save_png(image: Any, path: Path, parameters: str) -> Path:
    """Write a PNG with its A1111 parameters, atomically (readers never see half a file)."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("parameters", parameters)  # written as iTXt when the text is not Latin-1
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", pnginfo=info)
    return path
