"""Translators of other tools' configs into Atelier's options (torch-free): musubi-tuner (musubi/). sd-scripts' and
kohya_ss's translators still live in trainers/core/options/kohya_*.py."""
