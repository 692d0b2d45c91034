"""The fake family's model: a denoiser of a few thousand parameters (a conv in, one attention over the text, a conv
out), a VAE that is one strided conv each way, a text "encoder" that is an embedding and two small MLP layers, the
tiny models' character-level CLIP tokenizer and a DDPM schedule. Its linear layers take LoRAs (lora_targets; the text
encoder's through kohya's CLIPMLP class name), so saves, resumes and faults exercise real networks.

A full model (finetune, dreambooth) saves through the real families' path (trainers/models/single_file/save.py): a
diffusers-style folder (each part's save_config / save_pretrained, the files family.load reads back) and a single
file in the family's own layout (to_checkpoint; load_checkpoint reads it back). Samples render with
pipeline.FakePipeline."""
from __future__ import annotations

import json
import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from tests.fake_family.pipeline import LATENT, SCALE, FakePipeline
from tests.fake_family.rules import CHECKPOINT_PREFIXES, PIPELINE, FakeRules
from trainers.models.base import LoadedModel, LoraTarget, ModelFamily
from trainers.models.prompt_states import apply_weights, chunk_count, merge_chunks

WIDTH = 16  # the denoiser's and the text encoder's width
# Each part's weights file in a model folder, as save.py writes them (diffusers' name; transformers' for the encoder).
WEIGHTS = {"denoiser": "diffusion_pytorch_model.safetensors", "vae": "diffusion_pytorch_model.safetensors",
           "text_encoder": "model.safetensors"}


def in_the_batch(rows: torch.Tensor) -> torch.Tensor:
    """`rows` with low bits that depend on the batch they came in, as a real encoder's float rounding makes them (the
    tiny SD1 VAE's: tests/train/test_memo.py): a row encoded alone and in a batch differ, which is what the memos
    (trainers/train/memo.py: each row encoded on its own) are there for and what their tests need to see."""
    return rows + 1e-6 * rows.detach().mean()


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

    def config_dict(self) -> dict[str, Any]:
        return {}

    def save_config(self, folder: Path) -> None:
        """Its config.json, as diffusers' ConfigMixin writes one (save.py's diffusers folder calls it)."""
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "config.json").write_text(json.dumps({"_class_name": type(self).__name__,
                                                              **self.config_dict()}), encoding="utf-8")


class FakeVae(_Placed):
    config = VaeConfig()

    def config_dict(self) -> dict[str, Any]:
        return asdict(self.config)

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Conv2d(3, 2 * LATENT, SCALE, stride=SCALE)
        self.decoder = nn.ConvTranspose2d(LATENT, 3, SCALE, stride=SCALE)

    def encode(self, pixels: torch.Tensor) -> _Encoded:
        mean, logvar = self.encoder(pixels).chunk(2, dim=1)
        return _Encoded(_Latents(in_the_batch(mean), torch.exp(0.5 * logvar.clamp(-30, 20))))

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

    def config_dict(self) -> dict[str, Any]:
        return asdict(self.config)

    def save_pretrained(self, folder: Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """config.json and its weights (`state_dict`, else its own), as transformers' save_pretrained writes them."""
        self.save_config(folder)
        state = self.state_dict() if state_dict is None else state_dict
        save_file({k: v.contiguous() for k, v in state.items()}, str(Path(folder) / WEIGHTS["text_encoder"]))

    def forward(self, ids: torch.Tensor, clip_skip: int = 1) -> torch.Tensor:
        x = self.embeddings(ids) + self.positions[: ids.shape[1]]
        for layer in self.layers[: len(self.layers) - max(clip_skip, 1) + 1]:
            x = layer(x)
        return in_the_batch(x)

    def gradient_checkpointing_enable(self) -> None:
        """Nothing to save: its activations are a few kilobytes."""

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings

    def resize_token_embeddings(self, count: int, mean_resizing: bool = True) -> nn.Embedding:
        """`count` rows, the first ones kept, as transformers' (textual inversion adds its word's tokens): new rows
        are the old rows' mean with `mean_resizing`, else random."""
        old = self.embeddings.weight.detach()
        resized = nn.Embedding(count, WIDTH).to(old)
        with torch.no_grad():
            kept = min(count, old.shape[0])
            resized.weight[:kept] = old[:kept]
            if mean_resizing and count > kept:
                resized.weight[kept:] = old.mean(dim=0)
        self.embeddings = resized
        self.config = TextConfig(count, self.config.num_hidden_layers, self.config.max_position_embeddings)
        return resized


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


def _index_entries() -> dict[str, list[str]]:
    return {"denoiser": ["tests.fake_family", "FakeDenoiser"], "vae": ["tests.fake_family", "FakeVae"],
            "text_encoder": ["tests.fake_family", "FakeTextEncoder"]}


def _training_scheduler() -> Any:
    from diffusers import DDPMScheduler

    return DDPMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                         steps_offset=1)


def _tokenizer(folder: Path | None = None) -> Any:
    """The tiny character-level CLIP tokenizer: a model folder's, or (a single file holds none) written afresh."""
    from transformers import CLIPTokenizer

    from trainers.models.tiny import write_tiny_tokenizer

    if folder is not None:
        return CLIPTokenizer.from_pretrained(folder)
    with tempfile.TemporaryDirectory() as tmp:
        write_tiny_tokenizer(Path(tmp))
        return CLIPTokenizer.from_pretrained(tmp)


def _parts(vocab: int) -> dict[str, _Placed]:
    return {"denoiser": FakeDenoiser(), "vae": FakeVae(), "text_encoder": FakeTextEncoder(vocab)}


def build_fake_model(folder: Path, seed: int = 0) -> Path:
    """Write a fake-family model folder (random weights from `seed`) and return it."""
    from trainers.models.tiny import write_tiny_tokenizer

    torch.manual_seed(seed)
    write_tiny_tokenizer(folder / "tokenizer")
    vocab = len(_tokenizer(folder / "tokenizer"))
    for name, module in _parts(vocab).items():
        module.save_config(folder / name)
        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(folder / name / WEIGHTS[name]))
    _training_scheduler().save_pretrained(folder / "scheduler")
    (folder / "model_index.json").write_text(json.dumps({"_class_name": PIPELINE, **_index_entries()}),
                                             encoding="utf-8")
    return folder


class FakeFamily(FakeRules, ModelFamily):
    base_model_version = "fake"
    modelspec_architecture = "fake-denoiser"
    implementation = "tests.fake_family"
    native_size = 64

    def load(self, folder: Path, weight_dtype: torch.dtype, vae_path: str = "",
             random_init: bool = False) -> LoadedModel:
        from diffusers import DDPMScheduler

        tokenizer = _tokenizer(folder / "tokenizer")
        parts = _parts(len(tokenizer))
        for name, module in parts.items():
            if not random_init:
                module.load_state_dict(load_file(str(folder / name / WEIGHTS[name])))
        scheduler = DDPMScheduler.from_pretrained(folder / "scheduler")
        return self._loaded(parts, tokenizer, scheduler, weight_dtype, str(folder))

    def _loaded(self, parts: dict[str, _Placed], tokenizer: Any, scheduler: Any, weight_dtype: torch.dtype,
                source: str) -> LoadedModel:
        return LoadedModel(self, parts["denoiser"].to(weight_dtype), parts["vae"], [parts["text_encoder"]],
                           [tokenizer], scheduler, scheduler.config.prediction_type, source)

    def load_checkpoint(self, ckpt: Any, weight_dtype: torch.dtype, vae_path: str, files: Any) -> LoadedModel:
        """A single file to_checkpoint wrote (the scheduler and tokenizer are the fake models' own)."""
        tokenizer = _tokenizer()
        parts = _parts(len(tokenizer))
        for name, prefix in CHECKPOINT_PREFIXES.items():
            parts[name].load_state_dict({k[len(prefix):]: v for k, v in ckpt.tensors(prefix).items()})
        return self._loaded(parts, tokenizer, _training_scheduler(), weight_dtype, str(ckpt.path))

    def to_checkpoint(self, model: LoadedModel, denoiser_state: Any) -> dict[str, torch.Tensor]:
        """Every part under its CHECKPOINT_PREFIXES; the denoiser's weights are `denoiser_state` (e.g. an EMA's)."""
        from accelerate.utils import extract_model_from_parallel

        states = {"denoiser": denoiser_state, "vae": extract_model_from_parallel(model.vae).state_dict(),
                  "text_encoder": extract_model_from_parallel(model.text_encoders[0]).state_dict()}
        return {CHECKPOINT_PREFIXES[name] + k: v for name, state in states.items() for k, v in state.items()}

    def model_index(self) -> dict[str, Any]:
        return _index_entries()

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
        return FakePipeline(model.unet, scheduler)

    def text_encoders_to_original(self, states: list[dict[str, torch.Tensor]], text_encoders: list[nn.Module],
                                  prediction_type: str) -> dict[str, torch.Tensor]:
        return {f"text_encoder.{k}": v for k, v in states[0].items()}


FAKE = FakeFamily.of(FakeRules())
