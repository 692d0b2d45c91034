"""Chroma's transformer in the reference layout (lodestones' `chroma-unlocked-*.safetensors`, as sd-scripts'
model_type chroma and ComfyUI read it): FLUX.1's blocks without their modulations, no time/vector/guidance
embedders and no final modulation, and the distilled guidance layer that computes every modulation instead.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainers.models import reference_layout as layout
from trainers.models.flux import reference as flux
from trainers.models.reference_layout import Rule, linear

MARKER = flux.MARKER
PREFIXES = flux.PREFIXES
# what FLUX.1's layout has and Chroma's has not (its modulations come from the distilled guidance layer)
_NOT_IN_CHROMA = ("time_in.", "vector_in.", "guidance_in.", "final_layer.adaLN_modulation.")
_MODULATIONS = ("_mod.lin.", "modulation.lin.")


def rules(double_blocks: int, single_blocks: int, guidance_layers: int) -> list[Rule]:
    out = [rule for rule in flux.rules(double_blocks, single_blocks, guidance=False)
           if not rule.reference.startswith(_NOT_IN_CHROMA) and not any(m in rule.reference for m in _MODULATIONS)]
    guide = "distilled_guidance_layer."
    out += [*linear(f"{guide}in_proj", f"{guide}in_proj"), *linear(f"{guide}out_proj", f"{guide}out_proj")]
    for i in range(guidance_layers):
        out += linear(f"{guide}layers.{i}.in_layer", f"{guide}layers.{i}.linear_1")
        out += linear(f"{guide}layers.{i}.out_layer", f"{guide}layers.{i}.linear_2")
        out.append(Rule(f"{guide}norms.{i}.scale", (f"{guide}norms.{i}.weight",)))
    return out


def config_from_shapes(shapes: Mapping[str, tuple[int, ...]], name: str) -> dict[str, Any]:
    """ChromaTransformer2DModel's config of a reference-layout transformer, read from its tensor shapes."""
    def own(found: Mapping[str, tuple[int, ...]]) -> dict[str, Any]:
        hidden, channels = found["distilled_guidance_layer.in_proj.weight"]
        return {"approximator_num_channels": channels, "approximator_hidden_dim": hidden,
                "approximator_layers": layout.count(found, "distilled_guidance_layer.layers.")}

    return flux.blocks_config(shapes, name, "Chroma", own)


def _rules_of(config: Mapping[str, Any]) -> list[Rule]:
    return rules(config["num_layers"], config["num_single_layers"], config["approximator_layers"])


LAYOUT = layout.Layout(PREFIXES, MARKER, _rules_of)  # the same nesting as FLUX.1's files
strip_prefix, to_diffusers, to_reference = LAYOUT.strip_prefix, LAYOUT.to_diffusers, LAYOUT.to_reference
