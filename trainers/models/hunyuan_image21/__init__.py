"""HunyuanImage 2.1: a dual- and single-stream transformer over the 64-channel latents of its own 32x autoencoder, with
Qwen2.5-VL and ByT5 (glyph) text encoders."""
