"""FLUX.2 (dev, klein 4B/9B): a FLUX-style transformer over 2x2 patches of a 32-channel autoencoder, with a Mistral 3
(dev) or Qwen3 (klein) text encoder whose hidden layers are stacked."""
