"""Prompt templates that stand in for the captions (sd-scripts' use_object_template / use_style_template): as in the
textual inversion paper, the word is learned from neutral sentences about "a photo of <word>" (an object) or "a
picture in the style of <word>" (a style), so that it takes in what the images share rather than what captions say.
Torch-free; each sample draws its template from its own random numbers (the same on resume and on any number of
processes)."""
from __future__ import annotations

OBJECT_TEMPLATES = (
    "a photo of a {}", "a close-up photo of a {}", "a cropped photo of the {}", "a bright photo of the {}",
    "a dark photo of a {}", "a photo of my {}", "a photo of one {}", "a blurry photo of the {}",
    "a good photo of a {}", "a clean photo of the {}", "a picture of the small {}", "a picture of a large {}",
    "an image of the nice {}", "a rendition of a {}", "a photo of the weird {}", "a framed picture of the {}",
)
STYLE_TEMPLATES = (
    "a painting in the style of {}", "a picture in the style of {}", "an image in the style of {}",
    "a rendering in the style of {}", "a drawing in the style of {}", "a sketch in the style of {}",
    "a nice painting in the style of {}", "a cropped picture in the style of {}", "a small image in the style of {}",
    "a large drawing in the style of {}", "a dark painting in the style of {}", "a bright rendering in the style of {}",
    "a good sketch in the style of {}", "an artwork in the style of {}", "a weird painting in the style of {}",
    "a clean picture in the style of {}",
)


def templates_for(use_object_template: bool, use_style_template: bool) -> tuple[str, ...]:
    """The templates the options choose; none: the captions are trained on."""
    return OBJECT_TEMPLATES if use_object_template else STYLE_TEMPLATES if use_style_template else ()
