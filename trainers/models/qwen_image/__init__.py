"""Qwen-Image: a dual-stream transformer with a Qwen2.5-VL text encoder and its own (Wan-style) autoencoder."""
