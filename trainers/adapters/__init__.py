"""Translators of other tools' configs into Atelier's options (torch-free), listed in trainers/core/registry.py
CONFIG_ADAPTERS: musubi-tuner (musubi/), sd-scripts' Chroma and Lumina 2 keys (sd_scripts_families.py). The core
imports none of them by name; sd-scripts' and kohya_ss's own translators still live in trainers/core/options/kohya_*.py.
"""
