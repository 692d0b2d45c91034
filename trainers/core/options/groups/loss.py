"""Options: the loss, the noise and the timesteps it is computed at (sd-scripts' names, meanings and defaults)."""
from __future__ import annotations

from trainers.core.options.schema import Option

LOSS_TYPES = ("l2", "l1", "huber", "smooth_l1")
HUBER_SCHEDULES = ("snr", "exponential", "constant")
NOISE_OFFSET_TYPES = ("Original", "Multires")

OPTIONS: tuple[Option, ...] = (
    Option("loss_type", "str", "l2", "Loss between the prediction and its target: 'l2' (mean squared error), 'l1', "
           "'huber' or 'smooth_l1' (pseudo-Huber: like l2 for small errors, like l1 for large ones; see huber_*).",
           "loss", choices=LOSS_TYPES, advanced=True),
    Option("huber_schedule", "str", "snr", "How the Huber threshold varies with the timestep (huber and smooth_l1 "
           "only): 'snr' = huber_c + (1 - huber_c) / (1 + sigma)^2, 'exponential' = huber_scale * huber_c^(t/T), "
           "'constant' = huber_c * huber_scale.", "loss", choices=HUBER_SCHEDULES, advanced=True),
    Option("huber_c", "float", 0.1, "Huber threshold (decay) parameter, > 0 (huber and smooth_l1 only).", "loss",
           min=0, advanced=True),
    Option("huber_scale", "float", 1.0, "Huber threshold scale for the 'constant' and 'exponential' schedules "
           "(huber and smooth_l1 only; 'snr' does not use it, as in sd-scripts).", "loss", min=0, advanced=True),
    Option("min_snr_gamma", "float", None, "Min-SNR loss weighting (5 is typical); unset for none.", "loss",
           min=0, nullable=True, advanced=True),
    Option("debiased_estimation_loss", "bool", False, "Weight the loss by 1/sqrt(SNR) (1/(SNR+1) with "
           "v-prediction): debiased estimation, arXiv 2310.08442.", "loss", advanced=True),
    Option("scale_v_pred_loss_like_noise_pred", "bool", False, "v-prediction only: scale the loss by SNR/(SNR+1) "
           "so that it weighs timesteps like an epsilon (noise) prediction loss. Needs v_parameterization.",
           "loss", advanced=True),
    Option("v_pred_like_loss", "float", 0.0, "Epsilon-prediction only: add this share of a v-prediction-like loss "
           "(loss * (SNR+1)/SNR * value); 0 = off.", "loss", min=0, advanced=True),
    Option("min_timestep", "int", None, "Train at timesteps from this one (0-999; unset = 0).", "loss", min=0,
           max=999, nullable=True, advanced=True),
    Option("max_timestep", "int", None, "Train at timesteps below this one (1-1000, exclusive; unset = 1000). When "
           "it equals min_timestep every sample trains at that one timestep, as in sd-scripts.", "loss", min=1,
           max=1000, nullable=True, advanced=True),
    Option("noise_offset_type", "str", "Original", "'Original': noise_offset (with adaptive_noise_scale, "
           "noise_offset_random_strength) only. 'Multires': multires noise (multires_noise_iterations, "
           "multires_noise_discount), added after noise_offset when that is set too, as sd-scripts does.", "loss",
           choices=NOISE_OFFSET_TYPES, advanced=True),
    Option("noise_offset", "float", 0.0, "Noise offset (e.g. 0.05) to learn darker and brighter images.",
           "loss", min=0, max=1, advanced=True),
    Option("adaptive_noise_scale", "float", None, "Add |mean of each latent channel| x this to noise_offset (per "
           "image; may be negative, the sum is kept >= 0). Needs noise_offset; unset = off.", "loss",
           nullable=True, advanced=True),
    Option("noise_offset_random_strength", "bool", False, "Use a random strength between 0 and noise_offset. "
           "Drawn for each image (sd-scripts draws one a batch), so any batch split trains alike.", "loss",
           advanced=True),
    Option("multires_noise_iterations", "int", 0, "Multires (pyramid) noise with this many levels (6-10 is "
           "typical; 0 = off). Needs noise_offset_type = 'Multires'. Each image gets its own level sizes and is "
           "rescaled to unit std on its own (sd-scripts shares them across the batch).", "loss", min=0, max=64,
           advanced=True),
    Option("multires_noise_discount", "float", 0.3, "Weight of each coarser multires noise level relative to the "
           "previous one (multires noise only).", "loss", min=0, max=1, advanced=True),
    Option("ip_noise_gamma", "float", 0.0, "Input perturbation noise (about 0.1; arXiv 2301.11706): the noised "
           "input gets this much extra noise that the target does not have; 0 = off.", "loss", min=0, max=1,
           advanced=True),
    Option("ip_noise_gamma_random_strength", "bool", False, "Use a random strength between 0 and ip_noise_gamma, "
           "drawn for each image (sd-scripts draws one a batch).", "loss", advanced=True),
    Option("zero_terminal_snr", "bool", False, "Rescale the noise schedule so the last timestep is pure noise "
           "(arXiv 2305.08891); sample images use the same schedule. Meant for v-prediction. The SNR weightings "
           "(min_snr_gamma, debiased_estimation_loss, ...) keep using the original schedule's SNR, as in "
           "sd-scripts.", "loss", advanced=True),
    Option("masked_loss", "bool", False, "Weight the loss by a mask: a grey-scale image (its red channel; white = "
           "train, black = ignore) with the name and size (or aspect ratio) of each training image, in "
           "conditioning_data_dir or a dataset_config subset's conditioning_data_dir. Subsets without masks, e.g. "
           "regularization images, train on the whole image.", "loss", advanced=True),
    Option("conditioning_data_dir", "str", "", "masked_loss: folder laid out like train_data_dir (the same "
           "<repeats>_<tokens> subfolders) holding a mask image for every training image, with the image's "
           "name and any image extension. ControlNet: the control image of every training image, laid out the "
           "same way.", "loss", path="dir", advanced=True),
    Option("control_directory", "str", "", "Edit models: the images each edit starts from (musubi-tuner's name), "
           "matched to the training images by file name (any image extension); stem_0.png, stem_1.png ... for "
           "models that take several. Laid out like train_data_dir (the same <repeats>_<tokens> subfolders), or all "
           "in the folder itself. Captions are the edit instructions.", "loss", path="dir", advanced=True),
    Option("no_resize_control", "bool", False, "Edit models (musubi-tuner's option): keep each control image's own "
           "size (cut down to a multiple of 16 pixels) instead of fitting it to its target's bucket; with "
           "control_resolution, controls larger than that are resized to it. Every control of a batch must then have "
           "the same size (or train_batch_size = 1).", "loss", advanced=True),
    Option("control_resolution", "str", "", "Edit models (musubi-tuner's option): resize each control image to "
           "about this many pixels ('1024' or 'W,H', e.g. 1024,1024), keeping its own aspect ratio, instead of "
           "fitting it to its target's bucket; empty: fitted to the target.", "loss", advanced=True),
    Option("alpha_mask", "bool", False, "Weight the loss by each image's transparency (alpha 0 = ignored); "
           "images without alpha train whole. The pixels themselves are composited on white (sd-scripts keeps "
           "their hidden colour).", "loss", advanced=True),
)
