"""Krea 2: a single-stream transformer reading stacked Qwen3-VL layers through a text-fusion stage, over 2x2-packed
latents of Qwen-Image's autoencoder."""
