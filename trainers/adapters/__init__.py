"""Translators of other tools' configs into Atelier's options (torch-free), named in trainers/core/registry.py:
sd-scripts and kohya_ss (kohya/, SD_SCRIPTS_ADAPTER), musubi-tuner (musubi/) and sd-scripts' Chroma and Lumina 2
keys (sd_scripts_families.py, both CONFIG_ADAPTERS). The core imports none of them by name.
"""
