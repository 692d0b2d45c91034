"""The prompt encoding HunyuanImage 2.1 and HunyuanVideo 1.5 share: Qwen2.5-VL's hidden states of the caption in its
chat template and ByT5's states of the text the caption asks to be drawn (its glyph text), packed into one sequence
with one mask. What differs (the template, the tokens cropped, the glyph text's extraction, the Qwen module called)
is the family's."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from trainers.models.flow import run_frozen
from trainers.models.qwen_image.family import trimmed


def byt5_ids(byt5: object, glyphs: list[str | None], length: int) -> torch.Tensor:
    """ByT5's ids of each caption's glyph text, `length` long; all padding without one (the pipelines' zero states
    and mask)."""
    rows = []
    for text in glyphs:
        ids = byt5(text or "", max_length=length, padding="max_length", truncation=True,  # type: ignore[operator]
                   return_tensors="pt").input_ids
        rows.append(ids if text is not None else torch.full_like(ids, byt5.pad_token_id))  # type: ignore[attr-defined]
    return torch.cat(rows)


def widened(states: torch.Tensor, width: int) -> torch.Tensor:
    """`states` (B, L, D) zero-padded to `width` channels."""
    return torch.nn.functional.pad(states, (0, width - states.shape[-1]))


def qwen_byt5_states(qwen: nn.Module, hidden_states: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                     byt5: nn.Module, ids: torch.Tensor, glyph_ids: torch.Tensor, pad_token_id: int,
                     crop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Qwen's states (`hidden_states` of the ids and mask) after the first `crop` template tokens, then ByT5's
    states of the glyph text, both zero on their padding and on the channels they lack; the mask of both). Qwen reads
    the batch's longest caption, not every padding token."""
    mask = ids != pad_token_id
    longest = int(mask.sum(dim=1).max())
    hidden = run_frozen(qwen, lambda: hidden_states(ids[:, :longest], mask[:, :longest]))
    hidden = torch.cat([hidden, hidden.new_zeros(ids.shape[0], ids.shape[1] - longest, hidden.shape[-1])], dim=1)
    mask = mask[:, crop:]
    text = hidden[:, crop:] * mask[..., None].to(hidden.dtype)
    glyph_mask = glyph_ids != 0  # ByT5's pad id; a caption without glyph text is all padding
    glyph = text.new_zeros(*glyph_ids.shape, byt5.config.d_model)
    if rows := [i for i in range(glyph_ids.shape[0]) if glyph_mask[i].any()]:
        states = run_frozen(byt5, lambda: byt5(glyph_ids[rows], attention_mask=glyph_mask[rows].float())[0])
        glyph[rows] = states.to(glyph.dtype) * glyph_mask[rows][..., None].to(glyph.dtype)
    width = max(text.shape[-1], glyph.shape[-1])
    packed = torch.cat([widened(text, width), widened(glyph, width)], dim=1)
    return packed, torch.cat([mask, glyph_mask], dim=1).to(hidden.dtype)


def pipeline_embeds(hidden: torch.Tensor, text_mask: torch.Tensor, glyph_length: int,
                    glyph_width: int) -> dict[str, torch.Tensor]:
    """qwen_byt5_states' (prompt, negative) rows as the pipelines' four embeddings and masks of each: Qwen's cut
    after the longest caption, ByT5's (the last `glyph_length` tokens) at its `glyph_width` channels."""
    text, mask = trimmed(hidden[:, :-glyph_length], text_mask[:, :-glyph_length])
    glyph, glyph_mask = hidden[:, -glyph_length:, :glyph_width], text_mask[:, -glyph_length:]
    return {"prompt_embeds": text[:1], "prompt_embeds_mask": mask[:1].long(),
            "negative_prompt_embeds": text[1:], "negative_prompt_embeds_mask": mask[1:].long(),
            "prompt_embeds_2": glyph[:1], "prompt_embeds_mask_2": glyph_mask[:1].long(),
            "negative_prompt_embeds_2": glyph[1:], "negative_prompt_embeds_mask_2": glyph_mask[1:].long()}
