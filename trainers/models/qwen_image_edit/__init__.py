"""Qwen-Image-Edit: Qwen-Image that edits an input image (trainers/models/edit.py)."""
