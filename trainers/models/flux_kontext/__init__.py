"""FLUX.1 Kontext [dev]: FLUX.1 that edits an input image (trainers/models/edit.py)."""
