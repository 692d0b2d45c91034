"""LoRA's own options (torch-free): what it learns besides denoising its images, a slider's direction and
preservation without class images. Its network options are shared by every method that trains a network
(trainers/core/options/groups/network.py)."""
from __future__ import annotations

from trainers.core.options.schema import Option
from trainers.core.registry import only

SD_SCRIPTS: dict[str, str] = {"sd1": "train_network.py", "sd2": "train_network.py", "sdxl": "sdxl_train_network.py",
                              "sd3": "sd3_train_network.py", "flux": "flux_train_network.py",
                              "chroma": "flux_train_network.py", "lumina2": "lumina_train_network.py",
                              "anima": "anima_train_network.py"}
GROUPS = {"objective": "Slider and preservation"}


def _objective(name: str, kind: str, default: object, help: str, **kw: object) -> Option:
    return Option(name, kind, default, help, "objective", methods=only("lora"), **kw)  # type: ignore[arg-type]


OPTIONS: tuple[Option, ...] = (
    _objective("slider_positive", "str", "", "Slider LoRA (LECO, ai-toolkit's concept sliders): the prompt the "
               "LoRA moves toward at weight +1 (e.g. 'person, smiling'); at -1 it moves toward slider_negative. "
               "Each image's caption is the neutral prompt; the base model's own predictions are the targets, so "
               "the images need no pairs. Needs slider_negative; SD1.x/2.x and SDXL."),
    _objective("slider_negative", "str", "", "Slider LoRA: the prompt the LoRA moves toward at weight -1 (e.g. "
               "'person, frowning')."),
    _objective("slider_strength", "float", 1.0, "Slider LoRA: how far weight 1 moves along the direction between "
               "the two prompts (LECO's guidance scale).", min=0, max=100),
    _objective("preservation_weight", "float", 0.0, "Preservation without class images (ai-toolkit's differential "
               "output preservation): every step also asks the LoRA to keep the base model's prediction for the "
               "caption with preservation_trigger taken out (or replaced by preservation_class), weighted by this "
               "(1 is usual); the subject stays on its trigger. 0: off.", min=0, max=100),
    _objective("preservation_trigger", "str", "", "Preservation: the trigger word(s) taken out of each caption for "
               "the preserved prompt, e.g. 'sks'."),
    _objective("preservation_class", "str", "", "Preservation: what the trigger becomes in the preserved prompt, "
               "e.g. 'dog' ('sks dog' -> 'dog dog' is avoided by writing captions as 'sks, dog'); empty: it is "
               "taken out.", advanced=True),
)
