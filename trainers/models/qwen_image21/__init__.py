"""Qwen-Image 2.1: a single-stream block-causal transformer with a Qwen3-VL text encoder and its own 16x autoencoder."""
