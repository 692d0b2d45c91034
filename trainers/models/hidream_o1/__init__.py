"""HiDream-O1-Image (HiDream-ai): a pixel-space image model, Qwen3-VL 8B denoising 32x32 RGB patch tokens with its
own patch, timestep and output heads (no VAE, no separate text encoder), trained as musubi-tuner trains it."""
