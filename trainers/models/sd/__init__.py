"""Stable Diffusion 1.x and 2.x (`family.py`: SD1, SD2; `tiny.py`: a tiny random-init SD1 for tests and the demo)."""
