"""ControlNet's own options (torch-free). Names and meanings as sd-scripts' train_control_net.py and
sdxl_train_control_net.py; the control images come from the shared conditioning_data_dir."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import only

CONTROLNET = only("controlnet")
GROUPS = {"controlnet": "ControlNet"}
OPEN_GROUPS = ("controlnet",)
SD_SCRIPTS: dict[str, str] = {"sd1": "train_control_net.py", "sd2": "train_control_net.py",
                              "sdxl": "sdxl_train_control_net.py"}
SD_SCRIPTS_OPTIONS = ("controlnet_model_name_or_path",)  # those scripts read it by this name

OPTIONS: tuple[Option, ...] = (
    Option("controlnet_model_name_or_path", "str", "", "An existing ControlNet to train further: a diffusers "
           "ControlNet folder or hub id (ControlNetModel.from_pretrained). Empty: a new ControlNet initialised from "
           "the model's UNet (its encoder half copied, its zero convolutions at zero), as sd-scripts does.",
           "controlnet", methods=CONTROLNET),
    Option("conditioning_scale", "float", 1.0, "How strongly the ControlNet's residuals are added to the UNet's, "
           "in training and in samples (diffusers' controlnet_conditioning_scale).", "controlnet",
           methods=CONTROLNET, min=0, advanced=True),
)
