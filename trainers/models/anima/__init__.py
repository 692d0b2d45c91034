"""Anima (CircleStone Labs): Cosmos-Predict2 2B's DiT with an LLM adapter, a Qwen3-0.6B text encoder and the
Qwen-Image autoencoder, trained by rectified flow."""
