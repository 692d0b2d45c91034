"""Lumina Image 2.0: a single-stream NextDiT transformer with a Gemma 2 text encoder and FLUX.1's autoencoder."""
