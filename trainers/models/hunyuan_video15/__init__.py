"""HunyuanVideo 1.5 text-to-video (diffusers HunyuanVideo15Transformer3DModel, HunyuanVideo15Pipeline)."""
