"""Dreambooth's own options (torch-free): generating class images, and when the text encoders stop training.
The full-weight options it shares with finetune are in trainers/core/options/groups/full_weights.py."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import only

DREAMBOOTH = only("dreambooth")
SD_SCRIPTS: dict[str, str] = {"sd1": "train_db.py", "sd2": "train_db.py", "sdxl": "sdxl_train.py",
                              "sd3": "sd3_train.py", "flux": "flux_train.py",
                              "chroma": "flux_train.py", "lumina2": "lumina_train.py"}

OPTIONS: tuple[Option, ...] = (
    Option("class_prompt", "str", "", "Dreambooth: prompt of the class images (e.g. 'a photo of a dog'). With "
           "num_class_images, the missing ones are generated with the base model into "
           "<reg_data_dir>/1_<class_prompt>/ before training (kept for later runs).", "dataset", methods=DREAMBOOTH),
    Option("num_class_images", "int", 0, "Dreambooth: how many class images reg_data_dir's class folder should "
           "hold; fewer are topped up by generating (0 = generate none).", "dataset", methods=DREAMBOOTH, min=0,
           max=100000),
    Option("stop_text_encoder_training", "int", None, "Freeze the text encoder(s) after this many steps and train "
           "the UNet alone from then on (unset: train them to the end).", "training", methods=DREAMBOOTH, min=1,
           nullable=True, advanced=True),
)
