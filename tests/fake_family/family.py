"""The fake family's model: a denoiser of a few thousand parameters (a conv in, one attention over the text, a conv
out), a VAE that is one strided conv each way, a text "encoder" that is an embedding and two small MLP layers, the
tiny models' character-level CLIP tokenizer and a DDPM schedule. Its linear layers take LoRAs (lora_targets; the text
encoder's through kohya's CLIPMLP class name), so saves, resumes and faults exercise real networks."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from tests.fake_family.rules import PIPELINE, FakeRules
from trainers.models.base import LoadedModel, LoraTarget, ModelFamily
from trainers.models.prompt_states import apply_weights, chunk_count, merge_chunks

LATENT = 4  # latent channels
SCALE = 8  # image pixels per latent pixel, each side
WIDTH = 16  # the denoiser's and the text encoder's width
WEIGHTS = "model.safetensors"


@dataclass(frozen=True)
class VaeConfig:
    scaling_factor: float = 0.18215


@dataclass
class _Latents:
    mean: torch.Tensor
    std: torch.Tensor

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.mean + self.std * torch.randn(self.mean.shape, generator=generator).to(self.mean)


@dataclass
class _Encoded:
    latent_dist: _Latents


@dataclass
class _Decoded:
    sample: torch.Tensor


class _Placed(nn.Module):
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype


class FakeVae(_Placed):
    config = VaeConfig()

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Conv2d(3, 2 * LATENT, SCALE, stride=SCALE)
        self.decoder = nn.ConvTranspose2d(LATENT, 3, SCALE, stride=SCALE)

    def encode(self, pixels: torch.Tensor) -> _Encoded:
        mean, logvar = self.encoder(pixels).chunk(2, dim=1)
        return _Encoded(_Latents(mean, torch.exp(0.5 * logvar.clamp(-30, 20))))

    def decode(self, latents: torch.Tensor) -> _Decoded:
        return _Decoded(self.decoder(latents).clamp(-1, 1))


class CLIPMLP(nn.Module):  # kohya's text-encoder LoRA targets are found by this class name
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(WIDTH, WIDTH)
        self.fc2 = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(x)))


@dataclass(frozen=True)
class TextConfig:
    vocab_size: int
    num_hidden_layers: int = 2
    max_position_embeddings: int = 77


class FakeTextEncoder(_Placed):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.config = TextConfig(vocab_size)
        self.embeddings = nn.Embedding(vocab_size, WIDTH)
        self.positions = nn.Parameter(torch.zeros(77, WIDTH))
        self.layers = nn.ModuleList(CLIPMLP() for _ in range(self.config.num_hidden_layers))

    def forward(self, ids: torch.Tensor, clip_skip: int = 1) -> torch.Tensor:
        x = self.embeddings(ids) + self.positions[: ids.shape[1]]
        for layer in self.layers[: len(self.layers) - max(clip_skip, 1) + 1]:
            x = layer(x)
        return x

    def gradient_checkpointing_enable(self) -> None:
        """Nothing to save: its activations are a few kilobytes."""


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.to_q = nn.Linear(WIDTH, WIDTH)
        self.to_k = nn.Linear(WIDTH, WIDTH)
        self.to_v = nn.Linear(WIDTH, WIDTH)
        self.to_out = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        q, k, v = self.to_q(x), self.to_k(text), self.to_v(text)
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(WIDTH), dim=-1)
        return x + self.to_out(weights @ v)


class FakeDenoiser(_Placed):
    def __init__(self) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(LATENT, WIDTH, 3, padding=1)
        self.time_proj = nn.Linear(WIDTH, WIDTH)
        self.attn = Attention()
        self.ff = nn.Linear(WIDTH, WIDTH)
        self.conv_out = nn.Conv2d(WIDTH, LATENT, 3, padding=1)
        self.gradient_checkpointing = False

    def forward(self, noisy: torch.Tensor, timesteps: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        b, _, h, w = noisy.shape
        half = torch.arange(WIDTH // 2, device=noisy.device, dtype=torch.float32)
        angles = timesteps.float()[:, None] * torch.exp(-math.log(10000) * half / (WIDTH // 2))[None]
        t = self.time_proj(torch.cat([angles.sin(), angles.cos()], dim=1).to(noisy.dtype))
        x = self.conv_in(noisy) + t[:, :, None, None]
        tokens = self.attn(x.flatten(2).transpose(1, 2), text.to(x.dtype))
        tokens = tokens + self.ff(torch.nn.functional.silu(tokens))
        return self.conv_out(tokens.transpose(1, 2).reshape(b, WIDTH, h, w))

    def enable_gradient_checkpointing(self) -> None:
        self.gradient_checkpointing = True

    def set_attn_processor(self, processor: Any) -> None:
        """One attention, always computed the same way."""


def build_fake_model(folder: Path, seed: int = 0) -> Path:
    """Write a fake-family model folder (random weights from `seed`) and return it."""
    from diffusers import DDPMScheduler
    from transformers import CLIPTokenizer

    from trainers.models.tiny import write_tiny_tokenizer

    torch.manual_seed(seed)
    write_tiny_tokenizer(folder / "tokenizer")
    vocab = len(CLIPTokenizer.from_pretrained(folder / "tokenizer"))
    parts: dict[str, nn.Module] = {"denoiser": FakeDenoiser(), "vae": FakeVae(), "text_encoder": FakeTextEncoder(vocab)}
    for name, module in parts.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(folder / name / WEIGHTS))
        config = {"vocab_size": vocab, "num_hidden_layers": 2} if name == "text_encoder" else {}
        (folder / name / "config.json").write_text(json.dumps(config), encoding="utf-8")
    DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                  steps_offset=1).save_pretrained(folder / "scheduler")
    index = {"_class_name": PIPELINE, **{name: ["tests.fake_family", type(m).__name__] for name, m in parts.items()}}
    (folder / "model_index.json").write_text(json.dumps(index), encoding="utf-8")
    return folder


class FakeFamily(FakeRules, ModelFamily):
    base_model_version = "fake"
    modelspec_architecture = "fake-denoiser"
    implementation = "tests.fake_family"
    native_size = 64

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "",
             random_init: bool = False) -> LoadedModel:
        from diffusers import DDPMScheduler
        from transformers import CLIPTokenizer

        tokenizer = CLIPTokenizer.from_pretrained(folder / "tokenizer")
        parts = {"denoiser": FakeDenoiser(), "vae": FakeVae(), "text_encoder": FakeTextEncoder(len(tokenizer))}
        for name, module in parts.items():
            if not random_init:
                module.load_state_dict(load_file(str(folder / name / WEIGHTS)))
        scheduler = DDPMScheduler.from_pretrained(folder / "scheduler")
        return LoadedModel(self, parts["denoiser"].to(weight_dtype), parts["vae"], [parts["text_encoder"]],
                           [tokenizer], scheduler, scheduler.config.prediction_type, str(folder))

    def encode_prompts(self, text_encoders: list[nn.Module], input_ids: list[torch.Tensor], clip_skip: int,
                       weights: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, None]:
        ids = input_ids[0]
        chunks = chunk_count(ids, 77)
        hidden = text_encoders[0](ids.reshape(ids.shape[0] * chunks, -1), clip_skip)
        hidden = merge_chunks(hidden.reshape(ids.shape[0], -1, hidden.shape[-1]), chunks)
        return apply_weights(hidden, None if weights is None else weights[0], chunks), None

    def denoise(self, unet: nn.Module, noisy: torch.Tensor, timesteps: torch.Tensor, hidden: torch.Tensor,
                pooled: torch.Tensor | None, sizes: Any) -> torch.Tensor:
        return unet(noisy, timesteps, hidden)

    def swap_blocks(self, denoiser: nn.Module, count: int) -> list[nn.Module]:
        raise ValueError("Fake models do not swap blocks")

    def lora_targets(self, unet: nn.Module) -> list[LoraTarget]:
        return [LoraTarget("lora_unet_" + path.replace(".", "_"), (module,), path=path)
                for path, module in unet.named_modules() if isinstance(module, nn.Linear)]

    def build_pipeline(self, model: LoadedModel, scheduler: Any) -> Any:
        raise NotImplementedError("the fake family renders no samples: test samples on a real tiny model")

    def text_encoders_to_original(self, states: list[dict[str, torch.Tensor]], text_encoders: list[nn.Module],
                                  prediction_type: str) -> dict[str, torch.Tensor]:
        return {f"text_encoder.{k}": v for k, v in states[0].items()}


FAKE = FakeFamily.of(FakeRules())
