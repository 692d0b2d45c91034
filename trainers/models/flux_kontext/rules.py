"""FLUX.1 Kontext without its weights (torch-free): FLUX.1's rules with one control image per target. Its diffusers
folders (FluxKontextPipeline) are told from FLUX.1's by their pipeline; its single files have FLUX.1 dev's keys and
are read as FLUX.1 only (model_family = 'flux_kontext' on one is refused by name: give the diffusers folder)."""
from __future__ import annotations

from trainers.core.memory_facts import with_controls
from trainers.models.edit_rules import EditRules
from trainers.models.flux.rules import FluxRules


class FluxKontextRules(EditRules, FluxRules):
    name = "flux_kontext"
    title = "FLUX.1 Kontext"
    base_model_version = "flux_kontext"  # musubi-tuner's ss_base_model_version (ARCHITECTURE_FLUX_KONTEXT_FULL)
    memory_facts = with_controls(FluxRules.memory_facts, 1, "the published FLUX.1 Kontext dev sizes")
    pipeline_class = "FluxKontextPipeline"
    detect_priority = 4  # before FLUX.1's
    reference_prefixes = ()  # FLUX.1 dev's keys: a single file is detected as FLUX.1
    max_controls = 1  # as musubi-tuner and the pipeline take


FLUX_KONTEXT = FluxKontextRules()
