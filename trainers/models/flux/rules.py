"""FLUX.1 without its weights (torch-free): its pipeline, the reference-layout transformer file and the parts it
lacks (clip_l, t5xxl, ae), its network_args, and the options it does not take."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainers.core.errors import ConfigIssue
from trainers.core.fsio import read_safetensors_header
from trainers.core.memory_facts import CLIP_L, CLIP_L_LINEAR, CLIP_L_LORA, FLOW_AE, T5XXL, T5XXL_LINEAR, ModelSize
from trainers.core.memory_facts import FLUX1_TOKENS
from trainers.models.flux.options import NETWORK_ARGS
from trainers.models.flow_rules import FlowRules, Part
from trainers.models.flux import lora_layers
from trainers.models.rules import DistilledBase, json_or_empty

SCHNELL_ADAPTER = "ostris/FLUX.1-schnell-training-adapter (pytorch_lora_weights.safetensors)"


class FluxRules(FlowRules):
    name = "flux"
    title = "FLUX.1"
    memory_facts = ModelSize(11_891_178_560, 11_888_099_328, CLIP_L + T5XXL, CLIP_L_LINEAR + T5XXL_LINEAR, FLOW_AE,
                             5_369_856, CLIP_L_LORA, 38, "the published FLUX.1 dev sizes", 1024 * 1024, 24.0, 2.2,
                             tokens=FLUX1_TOKENS)
    arch_dir = Path(__file__).with_name("arch")  # none: a single file's config is read from its shapes
    pipeline_class = "FluxPipeline"
    reference_prefixes = ("double_blocks.", "model.diffusion_model.double_blocks.", "diffusion_model.double_blocks.")
    checkpoint_parts = (Part("clip_l", "text_encoders.clip_l.transformer.", "clip_l", "CLIP-L text encoder"),
                        Part("t5", "text_encoders.t5xxl.transformer.", "t5xxl", "T5-XXL text encoder"),
                        Part("vae", "vae.", "ae", "autoencoder",
                             denoiser_input=("img_in.weight", 4)))
    network_arg_keys = frozenset(NETWORK_ARGS)

    def distilled_base(self, path: Path) -> DistilledBase | None:
        """schnell: a transformer without a guidance embedding (guidance_embeds false; a single file without
        guidance_in.*), where dev has one."""
        if path.is_dir():
            config = json_or_empty(path / "transformer" / "config.json")
            if "guidance_embeds" not in config or config["guidance_embeds"]:
                return None
            told = "its transformer's config has guidance_embeds false"
        else:
            try:
                shapes, _ = read_safetensors_header(path)
            except ValueError:
                return None
            if any(".guidance_in." in f".{k}" for k in shapes):
                return None
            told = "its transformer has no guidance embedding (guidance_in.*)"
        return DistilledBase("FLUX.1 schnell", told, SCHNELL_ADAPTER)

    def tells_distilled(self, path: Path) -> bool:
        return True  # a single file has guidance_in.* or not

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = super().option_issues(values)
        args = dict(str(a).split("=", 1) for a in values.get("network_args") or [] if "=" in str(a))
        try:  # their form; the block numbers are checked against the model when it is loaded
            lora_layers.layer_dims([], {k.strip(): v.strip() for k, v in args.items()}, 1,
                                   {"double": 10 ** 6, "single": 10 ** 6})
        except ValueError as err:
            issues.append(ConfigIssue("network_args", str(err), "network"))
        for name in ("min_timestep", "max_timestep"):
            if values.get(name) is not None:
                issues.append(ConfigIssue(name, "is not used with FLUX.1 models (timestep_sampling draws the noise "
                                          "level, as in sd-scripts): unset it", "loss"))
        return issues


FLUX = FluxRules()
