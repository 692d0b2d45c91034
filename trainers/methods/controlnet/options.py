"""ControlNet's own options (torch-free). Names and meanings as sd-scripts' train_control_net.py,
sdxl_train_control_net.py and flux_train_control_net.py; the control images come from the shared
conditioning_data_dir. A new FLUX.1 ControlNet's size: diffusers' train_controlnet_flux.py's names and defaults
(sd-scripts' FLUX.1 script has a fixed size)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import only

CONTROLNET = only("controlnet")
GROUPS = {"controlnet": "ControlNet"}
OPEN_GROUPS = ("controlnet",)
SD_SCRIPTS: dict[str, str] = {"sd1": "train_control_net.py", "sd2": "train_control_net.py",
                              "sdxl": "sdxl_train_control_net.py", "flux": "flux_train_control_net.py"}
SD_SCRIPTS_OPTIONS = ("controlnet_model_name_or_path",)  # those scripts read it by this name
FLUX_ONLY = ("num_double_layers", "num_single_layers")
FLUX_FAMILIES = ("flux",)  # the families whose ControlNet FLUX_ONLY sizes (a copy of the transformer's blocks)

OPTIONS: tuple[Option, ...] = (
    Option("controlnet_model_name_or_path", "str", "", "An existing ControlNet to train further: a diffusers "
           "ControlNet folder or hub id (ControlNetModel.from_pretrained; FluxControlNetModel's for FLUX.1). Empty: a "
           "new ControlNet initialised from the model's UNet (its encoder half copied, its zero convolutions at "
           "zero), as sd-scripts does; for FLUX.1 from the transformer's first blocks (num_double_layers, "
           "num_single_layers), its control input at zero.",
           "controlnet", methods=CONTROLNET, path="any"),
    Option("num_double_layers", "int", 4, "FLUX.1: how many double blocks a new ControlNet has (copies of the "
           "transformer's first ones, as diffusers' FluxControlNetModel.from_transformer makes them): more follow the "
           "control image more closely and take more memory.", "controlnet", methods=CONTROLNET, min=0,
           advanced=True),
    Option("num_single_layers", "int", 4, "FLUX.1: how many single blocks a new ControlNet has (copies of the "
           "transformer's first single blocks).", "controlnet", methods=CONTROLNET, min=0, advanced=True),
    Option("conditioning_scale", "float", 1.0, "How strongly the ControlNet's residuals are added to the UNet's "
           "(FLUX.1: the transformer's blocks'), in training and in samples (diffusers' "
           "controlnet_conditioning_scale).", "controlnet",
           methods=CONTROLNET, min=0, advanced=True),
)
