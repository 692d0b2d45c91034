"""What the Wan image-to-video tests (Wan 2.1 I2V, the Wan 2.2 I2V pair) share about cached latents: the first
frame's condition cached with each window (and Wan 2.1's CLIP features) trains as the condition encoded in the step
does, without the VAE or the image encoder running in the step; a trainer run with cached latents equals one
without, and resumes exactly."""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch


@dataclasses.dataclass
class _Trainable:
    objective: Any


def _refuse(module: torch.nn.Module, what: str) -> None:
    """Make `module`'s forward (or its encode) raise: what a step must not run."""
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the {what} ran in a step with cached latents")

    if hasattr(module, "encode"):
        module.encode = refused  # type: ignore[method-assign]
    else:
        module.forward = refused  # type: ignore[method-assign]


def check_cached_condition_trains_as_encoded(model: object, tmp: Path, extras: set[str]) -> None:
    """Each batch of the cached pipeline (latents and `extras` cached in memory) gives the loss its window's pixels
    give with the condition encoded in the step, and the step runs neither the VAE nor the image encoder."""
    from family_checks import clips_dataset

    from trainers.core.options import load_config
    from trainers.data.pipeline import build_video_pipeline
    from trainers.data.video_dataset import collate_clips
    from trainers.models.video_data import video_run_catalog
    from trainers.train.diffusion import NoiseOptions
    from trainers.train.flow import flow_loss

    config = clips_dataset(tmp / "data")
    (tmp / "cfg.toml").write_text("")
    cfg = load_config("lora", tmp / "cfg.toml", ["cache_latents=true", "max_data_loader_n_workers=0"])
    accelerator = SimpleNamespace(is_main_process=True, num_processes=1, device=torch.device("cpu"))
    family = model.family.configured({**cfg.values, "timestep_sampling": "shift", "discrete_flow_shift": 3.0})
    run = dataclasses.replace(model, family=family, vae=copy.deepcopy(model.vae))
    if getattr(family, "image_encoder", None) is not None:
        family.image_encoder = copy.deepcopy(family.image_encoder)
    catalog = video_run_catalog({"dataset_config": str(config), "model_family": family.name}, []).video
    data = build_video_pipeline(cfg, catalog, run, accelerator, SimpleNamespace(warn=print, emit=lambda e: None))
    objective = family.adapt_trainable(cfg, None, _Trainable(flow_loss)).objective
    opts = NoiseOptions(seed=3, noise_offset=0.0, min_snr_gamma=None, prediction_type="flow")

    def predictor(noisy: torch.Tensor, timesteps: torch.Tensor, ids: list[torch.Tensor], *rest: object
                  ) -> torch.Tensor:
        hidden, _ = family.encode_prompts(run.text_encoders, ids, 1)
        return family.denoise(run.unet, noisy, timesteps, hidden, None, None)

    encoded = []
    for key in next(iter(data.sampler)):  # the uncached items of the first batch's windows
        dataset = copy.copy(data.dataset)
        dataset.latents = None
        encoded.append(dataset[key])
    plain = collate_clips(encoded)
    with torch.no_grad():
        theirs = objective(predictor, run, plain, opts, torch.float32)
    batch = next(iter(data.loader))
    assert {n.removeprefix("cached_") for n in batch if n.startswith("cached_")} == extras and "pixels" not in batch
    _refuse(run.vae, "VAE")
    if getattr(family, "image_encoder", None) is not None:
        _refuse(family.image_encoder, "image encoder")
    with torch.no_grad():
        ours = objective(predictor, run, batch, opts, torch.float32)
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=1e-5), (ours, theirs)


def check_cached_runs_equal_uncached(tiny: Path, tmp: Path) -> None:
    """A 2-step LoRA with latents cached on disk equals the one without (fp32, the same seed), and a run resumed from
    its step-1 state with the cache equals it too."""
    from family_checks import clips_dataset
    from helpers import resumed_saves, train
    from safetensors.torch import load_file

    from trainers.data.cache import CACHE_DIR

    dataset = clips_dataset(tmp / "data")
    common = {"pretrained_model_name_or_path": str(tiny), "dataset_config": str(dataset),
              "max_data_loader_n_workers": 0, "learning_rate": 1e-2, "network_dim": 4, "network_alpha": 2,
              "timestep_sampling": "shift", "discrete_flow_shift": 3.0}
    cached, resumed = resumed_saves("lora", tmp / "cached", **common, cache_latents=True, cache_latents_to_disk=True)
    assert any((tmp / "data" / "clips" / CACHE_DIR).glob("*.safetensors"))
    assert cached.keys() == resumed.keys()
    assert max((cached[k] - resumed[k]).abs().max().item() for k in cached) < 1e-6
    out = tmp / "plain"
    assert train("lora", out / "run", **common, output_dir=str(out), output_name="plain", save_precision="float",
                 max_train_steps=2) == 0
    plain = load_file(str(out / "plain.safetensors"))
    assert plain.keys() == cached.keys()
    assert max((plain[k] - cached[k]).abs().max().item() for k in plain) < 1e-6
    assert any(v.abs().max() > 0 for k, v in plain.items() if "lora_up" in k)  # it trained
