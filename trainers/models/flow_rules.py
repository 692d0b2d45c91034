"""What the flow-matching families (SD3, FLUX) share without their weights (torch-free): how their folders and
single files are told apart, the parts a single file may lack, and the options flow matching cannot honour.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainers.core.errors import ConfigIssue
from trainers.core.options.groups.flow import COMMON_TIMESTEP_SAMPLINGS
from trainers.core.options.training import FAMILY_TIMESTEP_SAMPLINGS, family_declaration, in_group
from trainers.models.rules import CheckpointKeys, FamilyRules, ModelFiles

Kind = Literal["clip_l", "clip_g", "t5", "vae", "llm"]  # llm: a language model (Qwen3, ...) in transformers' layout
SIZE_STEP = 16  # the VAE's 8 x the transformer's 2x2 patches (SD3) or packed tokens (FLUX)


@dataclass(frozen=True)
class Part:
    """A text encoder or the autoencoder of a flow family's single file."""

    kind: Kind
    prefix: str  # where an all-in-one file holds it
    option: str  # the option naming its own file; "" when only the `vae` option (a diffusers folder) can stand in
    what: str  # for messages
    projection: bool = False  # a CLIP text encoder with its text projection (SD3's pooled outputs)
    # a language-model text encoder (kind "llm"): the transformers class the family runs, its published config (what
    # the tensor shapes do not tell: rope, norms), and the hub id of the tokenizer its file lacks
    encoder_class: str = ""
    base_config: Path | None = None
    tokenizer: str = ""
    tokenizer_subfolder: str = ""  # where that repository holds it ("": at its root)
    # a family's own reader of this part (a module with load(part, state, dtype) and file_state(part, module)) where
    # the readers of component_files.py do not fit (Qwen-Image's Qwen2.5-VL and autoencoder); "": theirs
    reader: str = ""
    # an autoencoder part's own file as its reader takes it: the tensor names it must have (each group: one of them;
    # by default the original LDM layout, which component_files.autoencoder reads)
    file_keys: tuple[tuple[str, ...], ...] = (("encoder.conv_in.weight",), ("encoder.down.0.block.0.conv1.weight",),
                                              ("decoder.conv_in.weight",))
    # an autoencoder part's latent channels (its decoder's first conv's inputs): FLUX.1's ae, SD3's VAE and
    # Qwen-Image's all work in 16 (an SD/SDXL VAE in 4, FLUX.2's in 32)
    latent_channels: int = 16
    # an autoencoder part: the denoiser's tensor (in the reference single file) whose inputs are the latents, and
    # how many of its inputs one latent channel fills (its patch area). Where the model file has it, the latent
    # channels needed are read from it (a model's own width rules over the family's published one)
    denoiser_input: tuple[str, int] = ()


def part_issues(parts: tuple[Part, ...], keys: CheckpointKeys, files: ModelFiles, vae_path: str,
                title: str) -> list[ConfigIssue]:
    """The parts a file lacks with no option to stand in, named before anything loads."""
    issues = []
    for part in parts:
        if keys.has(part.prefix) or (part.kind == "vae" and vae_path) or (part.option and getattr(files,
                                                                                                   part.option)):
            continue
        fix = (f"set {part.option} to its .safetensors file (as for sd-scripts)" if part.option else
               "set vae to its VAE as a diffusers AutoencoderKL folder")
        issues.append(ConfigIssue(part.option or "vae", f"{Path(keys.name).name} holds the {title} denoiser but no "
                                  f"{part.what}: {fix}", "model"))
    return issues


class FlowRules(FamilyRules):
    """The rules the flow families share; each family names its own options, parts and reference layout."""

    unet_key_style = "own"  # lora_targets names the modules after the reference code
    objective = "flow"
    denoiser_folder = "transformer"
    supports_clip_skip = False
    detect_priority = 3
    single_file_text_encoders = ()  # their single files are read by flow_checkpoint.py, not by single_file/
    own_checkpoint_layout = True
    reference_prefixes: tuple[str, ...]  # key prefixes of its reference (single-file) checkpoints
    checkpoint_parts: tuple[Part, ...]  # its text encoders (in load order) and autoencoder
    reads_single_files: bool = True  # False: its single files are recognised (reference_prefixes) and refused
    writes_single_files: bool | None = None  # its finetunes' single file (to_checkpoint); None: as reads_single_files
    frozen_text_encoder: str = ""  # its only text encoder, which LoRAs never train (e.g. "Gemma 2"); "": none such
    size_step: int = SIZE_STEP  # image sides and bucket steps are multiples of it
    size_reason: str = ""  # why, for the message ("" for the VAE-and-patches 16)

    @property
    def own_options(self) -> frozenset[str]:
        """The options this family reads: what its options.py declares (READS and its own OPTIONS)."""
        found = family_declaration(self.name)
        return found.reads if found is not None else frozenset()

    @property
    def own_timestep_samplings(self) -> frozenset[str]:
        """Its own timestep_sampling values (its draw_sigmas reads them): its options.py's TIMESTEP_SAMPLINGS."""
        found = family_declaration(self.name)
        return frozenset(found.samplings) if found is not None else frozenset()

    def claims_folder(self, index: dict[str, Any], unet_config: dict[str, Any], folder: Path) -> bool:
        return str(index.get("_class_name", "")) == self.pipeline_class

    def claims_by_pipeline_or_transformer(self, index: dict[str, Any], transformer_class: str) -> bool:
        """Its pipeline's folders, or any whose model_index.json names `transformer_class` (["diffusers", class])."""
        transformer = index.get("transformer")
        named = isinstance(transformer, list) and len(transformer) == 2 and transformer[1] == transformer_class
        return str(index.get("_class_name", "")) == self.pipeline_class or named

    def claims_checkpoint(self, keys: CheckpointKeys) -> bool:
        return any(keys.has(prefix) for prefix in self.reference_prefixes)

    def checkpoint_issues(self, keys: CheckpointKeys, files: ModelFiles, vae_path: str = "") -> list[ConfigIssue]:
        if not self.reads_single_files:
            return [ConfigIssue("pretrained_model_name_or_path", f"{Path(keys.name).name} is a {self.title} single "
                                "file, which Atelier does not read yet: give the model as a diffusers folder "
                                f"({self.pipeline_class}) or its hub id", "model")]
        return part_issues(self.checkpoint_parts, keys, files, vae_path, self.title)

    def option_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        issues = [ConfigIssue(o.name, f"is not used with {self.title} models: leave it at {o.default!r}", o.group)
                  for o in in_group("flow")
                  if o.name not in self.own_options and values.get(o.name, o.default) != o.default]
        sampling = values.get("timestep_sampling")
        if ("timestep_sampling" in self.own_options and sampling in FAMILY_TIMESTEP_SAMPLINGS
                and sampling not in self.own_timestep_samplings):
            issues.append(ConfigIssue("timestep_sampling", f"{sampling!r} is another family's; {self.title} models "
                                      f"draw by {', '.join(map(repr, COMMON_TIMESTEP_SAMPLINGS))}", "flow"))
        for name, group, refused, why in _REFUSED:
            if name in values and refused(values[name]):
                issues.append(ConfigIssue(name, f"{why} ({self.title} trains by flow matching)", group))
        issues += self._size_issues(values) + self.network_arg_issues(values)
        issues += self._frozen_encoder_issues(values)
        if values.get("network_module", "networks.lora") != "networks.lora":
            issues.append(ConfigIssue("network_module", f"{self.title} LoRAs are trained with 'networks.lora' "
                                      "(sd-scripts' networks.lora_flux / networks.lora_sd3) only", "network"))
        block_args = [key for key in _BLOCK_ARGS if values.get(key) not in (None, "")]
        block_args += [a.split("=")[0].strip() for a in values.get("network_args", []) if
                       a.split("=")[0].strip() in _BLOCK_ARGS]
        issues += [ConfigIssue(key, f"is for the 3x3 convolutions of SD/SDXL UNets; {self.title} models have none"
                               if key.startswith("conv_") else f"is for the blocks of SD/SDXL UNets; {self.title} "
                               "models have other blocks", "network") for key in block_args]
        writes = self.reads_single_files if self.writes_single_files is None else self.writes_single_files
        if not writes and values.get("save_model_as", "diffusers") != "diffusers":
            issues.append(ConfigIssue("save_model_as", f"{self.title} finetunes are saved as diffusers folders only: "
                                      "set save_model_as = 'diffusers'", "saving"))
        return issues + huber_schedule_issue(values, self.title) + self.other_family_issues(values)

    def _size_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        step, why = self.size_step, f" ({self.size_reason})" if self.size_reason else ""
        issues = []
        sides = [p.strip() for p in str(values.get("resolution", "")).replace("x", ",").split(",")]
        if all(p.isdigit() for p in sides) and any(int(p) % step for p in sides):
            issues.append(ConfigIssue("resolution", f"{self.title} models take sizes in multiples of {step}{why}: "
                                      f"e.g. {32 * step} or {64 * step}", "dataset"))
        if values.get("enable_bucket") and int(values.get("bucket_reso_steps") or 64) % step:
            issues.append(ConfigIssue("bucket_reso_steps", f"must be a multiple of {step} for {self.title} "
                                      f"models{why}: 64 is safest", "dataset"))
        return issues

    def _frozen_encoder_issues(self, values: Mapping[str, Any]) -> list[ConfigIssue]:
        """Text-encoder training options set for a family whose text encoder stays frozen (as in musubi-tuner and
        sd-scripts): named rather than ignored."""
        if not self.frozen_text_encoder:
            return []
        why = (f"{self.title}'s {self.frozen_text_encoder} text encoder is never trained (only the transformer's LoRA "
               "is, as in musubi-tuner and sd-scripts)")
        rates = values.get("text_encoder_lr")
        checks = (("text_encoder_lr", "optimizer", any(rates) if isinstance(rates, list) else bool(rates),
                   "leave it unset"),
                  ("network_train_text_encoder_only", "network", bool(values.get("network_train_text_encoder_only")),
                   "set it to false"),
                  ("loraplus_text_encoder_lr_ratio", "network",
                   values.get("loraplus_text_encoder_lr_ratio") is not None, "leave it unset"))
        return [ConfigIssue(name, f"{why}: {fix}", group) for name, group, is_set, fix in checks if is_set]


_BLOCK_ARGS = ("block_dims", "block_alphas", "conv_block_dims", "conv_block_alphas", "down_lr_weight", "mid_lr_weight",
               "up_lr_weight", "conv_dim", "conv_alpha")


def _on(value: Any) -> bool:
    return bool(value)


# (option, group, refused when, why): SD/SDXL options with no meaning for flow matching.
_REFUSED: tuple[tuple[str, str, Callable[[Any], bool], str], ...] = (
    ("v_parameterization", "model", _on, "v-prediction does not apply"),
    ("clip_skip", "model", lambda v: v != 1, "the text encoders' layers are fixed: set clip_skip = 1"),
    ("max_token_length", "dataset", lambda v: v not in (None, 75), "CLIP reads 77 tokens; the T5 encoder's length is "
     "text_encoder_max_tokens"),
    ("weighted_captions", "dataset", _on, "weighted captions are not available"),
    ("min_snr_gamma", "loss", lambda v: v not in (None, 0), "min-SNR weighting needs a noise schedule's SNR; "
     "weighting_scheme weights flow matching"),
    ("debiased_estimation_loss", "loss", _on, "debiased estimation needs a noise schedule's SNR"),
    ("scale_v_pred_loss_like_noise_pred", "loss", _on, "v-prediction does not apply"),
    ("v_pred_like_loss", "loss", _on, "v-prediction does not apply"),
    ("zero_terminal_snr", "loss", _on, "it rescales a DDPM noise schedule, which flow matching has not"),
    ("noise_offset", "loss", _on, "noise offset is not used (as in sd-scripts)"),
    ("multires_noise_iterations", "loss", _on, "multires noise is not used (as in sd-scripts)"),
    ("adaptive_noise_scale", "loss", lambda v: v is not None, "noise offset is not used (as in sd-scripts)"),
    ("train_text_encoder", "training", _on, "full finetunes train the transformer only here (sd-scripts' flux_train "
     "does too); LoRAs can train CLIP"),
    ("base_weights", "network", _on, "merging LoRAs into the base model is not available for it yet"),
    ("sdpa", "precision", lambda v: v is False, "the transformer's attention is always PyTorch's scaled-dot-product "
     "attention: set sdpa = true"),
)



def huber_schedule_issue(values: Mapping[str, Any], title: str) -> list[ConfigIssue]:
    if values.get("loss_type") in ("huber", "smooth_l1") and values.get("huber_schedule", "snr") == "snr":
        return [ConfigIssue("huber_schedule", f"'snr' needs a noise schedule's SNR, which {title} models have not "
                            "(as in sd-scripts): choose 'exponential' or 'constant'", "loss")]
    return []
