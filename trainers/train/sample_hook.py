"""Sample images during training: when to make them and how they reach the run directory."""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager

from trainers.core.options import parse_resolution
from trainers.core.options.typed import DatasetOptions, ModelOptions, OptimizerOptions, SamplingOptions, SavingOptions
from trainers.core.prompts import config_prompts
from trainers.core.rundir import HEALTH, SAMPLES
from trainers.models import LoadedModel
from trainers.train.session import Session

if TYPE_CHECKING:
    from trainers.sampling.pipeline import PerPrompt


def sample_hook(session: Session, model: LoadedModel, weights: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
                per_prompt: "PerPrompt | None" = None) -> Callable[[int, int], None] | None:
    """A function (step, epoch) -> None that renders the run's sample prompts, or None without prompts.

    Every rank renders its share of the prompts; rank 0 then announces all of them as `sample`
    events (names and seeds depend only on the prompt, so rank 0 knows the other ranks' files).
    `weights` gives the weights to sample with (e.g. an EMA's, swapped in for the duration); `per_prompt` what
    each prompt renders with (a ControlNet's control image).
    """
    cfg, accelerator = session.cfg, session.accelerator
    sampling, saving = SamplingOptions.of(cfg), SavingOptions.of(cfg)
    prompts = config_prompts(sampling.sample_prompts, list(sampling.sample_prompt_lines))
    if not prompts:
        return None
    from trainers.models.video import frame_kwargs
    from trainers.sampling.pipeline import generate_samples, sample_event, sample_path

    for prompt in prompts:  # a clip length (--f) the video model cannot make stops the run before its first step
        try:
            frame_kwargs(model.family, prompt.frames)
        except ValueError as err:
            raise ValueError(f"sample prompt {prompt.index + 1}: {err}") from None
    out_dir = (session.run_dir or Path(saving.output_dir).expanduser()) / SAMPLES
    if accelerator.is_main_process:  # said once in the page, not at every sampling
        texts = [p.prompt for p in prompts] + [p.negative for p in prompts if p.negative]
        for text in model.family.overlong(model.tokenizers, texts, model.prompt_format):
            session.events.warn(f"a sample prompt is longer than max_token_length ({model.prompt_format.limit} "
                                f"tokens) and is cut there: {text[:200]!r}")
    size = parse_resolution(DatasetOptions.of(cfg).resolution)
    seed, clip_skip = OptimizerOptions.of(cfg).seed, ModelOptions.of(cfg).clip_skip

    def sample(step: int, epoch: int) -> None:
        tag = f"{saving.output_name}_{step:06d}"
        accelerator.wait_for_everyone()
        with weights():
            generate_samples(model, prompts, out_dir, tag, sampler=sampling.sample_sampler, default_size=size,
                             default_steps=sampling.sample_steps, default_cfg=sampling.sample_cfg_scale, base_seed=seed,
                             rank=accelerator.process_index, world_size=accelerator.num_processes,
                             clip_skip=clip_skip, device=accelerator.device, dtype=session.weight_dtype,
                             per_prompt=per_prompt)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            for prompt in prompts:
                path = sample_path(out_dir, tag, prompt, model.family.sample_suffix)
                session.events.emit(sample_event(path, prompt, step, epoch))

    return sample


EffectRenders = Callable[[str], "tuple[Path, Path] | str"]


def effect_renders(session: Session, model: LoadedModel, without_output: Callable[[], ContextManager[Any]] | None,
                   weights: Callable[[], ContextManager[Any]] = contextlib.nullcontext,
                   per_prompt: "PerPrompt | None" = None) -> EffectRenders:
    """A function (save name) -> (base image, image with the save's weights) of the first sample prompt at the
    sample settings, or the reason the effect cannot be checked; every rank calls it, as it does the sample hook.

    The base image (the trained output switched off by `without_output`) is rendered once per run and kept in the
    run's health/ folder under a name made from the prompt and settings; the other is rendered for each save."""
    cfg, accelerator = session.cfg, session.accelerator
    sampling = SamplingOptions.of(cfg)
    prompts = config_prompts(sampling.sample_prompts, list(sampling.sample_prompt_lines))[:1]
    if not prompts:
        return lambda name: "the run renders no samples (sample_prompts is empty): the effect was not checked"
    if not (sampling.sample_every_n_steps or sampling.sample_every_n_epochs):  # not a render the run did not ask for
        return lambda name: ("the run renders no samples (neither sample_every_n_steps nor sample_every_n_epochs is "
                             "set): the effect was not checked")
    if without_output is None:
        return lambda name: ("the effect was not checked: this method's output cannot be switched off to render "
                             "the base model")
    from trainers.sampling.pipeline import generate_samples, sample_path

    out_dir = (session.run_dir or Path(SavingOptions.of(cfg).output_dir).expanduser()) / HEALTH
    size = parse_resolution(DatasetOptions.of(cfg).resolution)
    seed, clip_skip = OptimizerOptions.of(cfg).seed, ModelOptions.of(cfg).clip_skip
    settings = (prompts[0], size, sampling.sample_sampler, sampling.sample_steps, sampling.sample_cfg_scale, seed,
                clip_skip)
    base_tag = "base-" + hashlib.sha1(repr(settings).encode("utf-8")).hexdigest()[:10]

    def render(tag: str) -> Path:
        written = generate_samples(model, prompts, out_dir, tag, sampler=sampling.sample_sampler, default_size=size,
                                   default_steps=sampling.sample_steps, default_cfg=sampling.sample_cfg_scale,
                                   base_seed=seed, rank=accelerator.process_index,
                                   world_size=accelerator.num_processes, clip_skip=clip_skip,
                                   device=accelerator.device, dtype=session.weight_dtype, per_prompt=per_prompt)
        return written[0] if written else sample_path(out_dir, tag, prompts[0])  # the main process renders it

    clips: list[str] = []  # a video family's samples are clips: their suffix, once its base was rendered

    def renders(name: str) -> tuple[Path, Path] | str:
        try:  # a failed render is a reason in the report, not a failed run
            with weights():
                base = sample_path(out_dir, base_tag, prompts[0])
                if not clips and not base.exists():
                    with without_output():
                        base = render(base_tag)
                    if base.suffix != ".png":
                        clips.append(base.suffix)
                if clips:
                    return f"the effect was not checked: the samples are {clips[0]} clips, which it does not compare"
                return base, render(name)
        except Exception as err:  # noqa: BLE001 - reported in the save's health report
            return f"the effect check could not render its images: {type(err).__name__}: {err}"
        finally:
            accelerator.wait_for_everyone()

    return renders
