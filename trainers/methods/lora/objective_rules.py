"""The checks of a slider's and of preservation's options (torch-free; LoRA's rules run them)."""
from __future__ import annotations

from trainers.core.errors import ConfigIssue
from trainers.core.options import TrainConfig

WITH_MULTIPLIER = ("networks.lora", "networks.dylora")  # networks whose weight the objective turns (set_multiplier)


def objective_issues(cfg: TrainConfig) -> list[ConfigIssue]:
    found: list[ConfigIssue] = []

    def bad(name: str, message: str, group: str = "objective") -> None:
        found.append(ConfigIssue(name, message, group))

    positive, negative = cfg.slider_positive.strip(), cfg.slider_negative.strip()
    if bool(positive) != bool(negative):
        missing = "slider_negative" if positive else "slider_positive"
        given = "slider_positive" if positive else "slider_negative"
        bad(missing, f"is needed with {given}: a slider learns the direction between the two prompts (e.g. "
            "'person, smiling' and 'person, frowning')")
    preserving = cfg.preservation_weight > 0
    if preserving and not cfg.preservation_trigger.strip():
        bad("preservation_trigger", "is needed with preservation_weight: the trigger word taken out of each caption "
            "for the prompt whose prediction is preserved (e.g. 'sks')")
    if (positive or negative) and preserving:
        bad("preservation_weight", "and a slider cannot be combined: a slider's targets are the base model's own "
            "predictions already; set preservation_weight = 0")
    if (positive or negative or preserving) and cfg.network_module not in WITH_MULTIPLIER:
        bad("network_module", f"must be one of {', '.join(WITH_MULTIPLIER)} for a slider or preservation (the base "
            "model's prediction is made with the LoRA turned off)", "network")
    if preserving and cfg.cache_text_encoder_outputs:
        bad("cache_text_encoder_outputs", "cannot be used with preservation: the caption without its trigger is "
            "encoded at every step; turn caching off", "dataset")
    if preserving and cfg.weighted_captions:
        bad("weighted_captions", "cannot be used with preservation (the trigger is taken out of the token ids); "
            "turn it off", "dataset")
    if preserving and (cfg.max_token_length or 75) > 75:
        bad("max_token_length", "must be 75 (unset) with preservation: the trigger is taken out of one 75-token "
            "chunk", "dataset")
    return found
