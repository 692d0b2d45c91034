"""Checks of the loss, noise and timestep options (torch-free: the GUI's Validate runs them).

An option that would have no effect in its combination is an error rather than silently ignored.
Checks that need the loaded model (its prediction type) are repeated when training starts
(trainers/train/diffusion.py NoiseOptions).
"""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.core.options.loading import TrainConfig
from trainers.core.options.training import BY_NAME

HUBER_LOSSES = ("huber", "smooth_l1")


def loss_issues(cfg: TrainConfig, edit_model: bool = False) -> list[ConfigIssue]:
    """Every problem of the loss group's options, each naming the option and how to fix it. `edit_model`: the run's
    model takes control images (the caller knows its family), which conditioning_data_dir may hold."""
    issues = _huber_issues(cfg) + _timestep_issues(cfg) + _noise_issues(cfg) + _prediction_issues(cfg)
    return issues + _mask_issues(cfg, edit_model)


def _issue(name: str, message: str) -> ConfigIssue:
    return ConfigIssue(name, message, BY_NAME[name].group)


def _changed(cfg: TrainConfig, name: str) -> bool:
    return cfg.values[name] != BY_NAME[name].default


def _huber_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    if cfg.loss_type not in HUBER_LOSSES:
        return [_issue(name, f"only applies with loss_type 'huber' or 'smooth_l1' (it is {cfg.loss_type!r}): choose "
                       f"one of those or leave {name} at its default ({BY_NAME[name].default!r})")
                for name in ("huber_schedule", "huber_c", "huber_scale") if _changed(cfg, name)]
    issues = []
    if cfg.huber_c <= 0:
        issues.append(_issue("huber_c", f"must be above 0 with loss_type = {cfg.loss_type!r} (0 makes the loss "
                             "vanish or, with 'exponential', undefined): e.g. 0.1"))
    if cfg.huber_schedule == "snr" and _changed(cfg, "huber_scale"):
        issues.append(_issue("huber_scale", "has no effect with huber_schedule = 'snr' (as in sd-scripts): choose "
                             "'constant' or 'exponential', or set huber_scale = 1"))
    return issues


def _timestep_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    low, high = cfg.min_timestep, cfg.max_timestep
    if low is None or high is None:
        return []
    if low > high:
        return [_issue("min_timestep", f"is {low}, above max_timestep ({high}): timesteps are drawn from "
                       "min_timestep up to (not including) max_timestep; swap them or lower min_timestep")]
    if low == high == 1000:
        return [_issue("max_timestep", "equal to min_timestep trains at that one timestep, and 1000 is past the last "
                       "one (999): lower both, or unset min_timestep")]
    return []


def _noise_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    issues = []
    multires = cfg.noise_offset_type == "Multires"
    if multires and not cfg.multires_noise_iterations:
        issues.append(_issue("multires_noise_iterations", "is 0 but noise_offset_type is 'Multires': set the number "
                             "of levels (6-10 is typical) or choose noise_offset_type = 'Original'"))
    if not multires:
        issues += [_issue(name, "only applies with noise_offset_type = 'Multires': choose it, or set "
                          f"{name} = {BY_NAME[name].default!r}")
                   for name in ("multires_noise_iterations", "multires_noise_discount") if _changed(cfg, name)]
    if not cfg.noise_offset:
        if cfg.adaptive_noise_scale is not None:
            issues.append(_issue("adaptive_noise_scale", "adds to noise_offset, which is 0: set noise_offset (e.g. "
                                 "0.05) or unset adaptive_noise_scale"))
        if cfg.noise_offset_random_strength:
            issues.append(_issue("noise_offset_random_strength", "draws a strength up to noise_offset, which is 0: "
                                 "set noise_offset or turn this off"))
    if cfg.ip_noise_gamma_random_strength and not cfg.ip_noise_gamma:
        issues.append(_issue("ip_noise_gamma_random_strength", "draws a strength up to ip_noise_gamma, which is 0: "
                             "set ip_noise_gamma (e.g. 0.1) or turn this off"))
    return issues


def _prediction_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    issues = []
    if cfg.scale_v_pred_loss_like_noise_pred and not cfg.v_parameterization:
        issues.append(_issue("scale_v_pred_loss_like_noise_pred", "works with v-prediction only: set "
                             "v_parameterization = true (also for models that predict v by themselves) or turn "
                             "it off"))
    if cfg.v_pred_like_loss and cfg.v_parameterization:
        issues.append(_issue("v_pred_like_loss", "adds a v-prediction-like loss to an epsilon-prediction loss, but "
                             "v_parameterization is on: set v_pred_like_loss = 0 or turn v_parameterization off"))
    return issues


def _mask_issues(cfg: TrainConfig, edit_model: bool) -> list[ConfigIssue]:
    issues = []
    masks_dir = cfg.conditioning_data_dir.strip()
    config = cfg.dataset_config.strip()
    controls = cfg.method == "controlnet" or edit_model  # there it holds the control images
    if masks_dir and not cfg.masked_loss and not controls:
        issues.append(_issue("conditioning_data_dir", "holds the mask images of masked_loss, which is off: set "
                             "masked_loss = true or clear conditioning_data_dir"))
    if masks_dir and config:
        issues.append(_issue("conditioning_data_dir", "is ignored when dataset_config is set: give each subset its "
                             "own conditioning_data_dir there, and clear this one"))
    elif masks_dir and not cfg.train_data_dir.strip():
        issues.append(_issue("conditioning_data_dir", "holds masks for train_data_dir's images, but train_data_dir "
                             "is not set: set it, or use a dataset_config with conditioning_data_dir per subset"))
    if masks_dir and cfg.alpha_mask:
        issues.append(_issue("alpha_mask", "and conditioning_data_dir are two sources of the same mask: turn "
                             "alpha_mask off or clear conditioning_data_dir"))
    if cfg.masked_loss and not (masks_dir or config or cfg.alpha_mask):
        issues.append(_issue("masked_loss", "needs masks: set conditioning_data_dir (a mask image for each training "
                             "image), alpha_mask = true (the images' transparency) or a dataset_config whose subsets "
                             "have conditioning_data_dir"))
    return issues
