"""Long and weighted prompts as sd-scripts encodes them: max_token_length chunks, emphasis weights, pooled output,
in training, the text-encoder cache, sample images and generation jobs.

The tiny models' tokenizers are character-level (spaces dropped), so a caption of ~80 letters fills a chunk.
"""
from __future__ import annotations

import copy
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from trainers.data.cache import build_text_cache
from trainers.data.prompt_chunks import PromptFormat, PromptTruncated, WeightedIds
from trainers.data.prompt_weights import ROUND, SQUARE
from trainers.models import LoadedModel, SizeConditioning, load_model
from trainers.models.components import final_layer_norm
from trainers.models.prompt_states import merge_chunks

LONG = "a red fox jumping over a sleeping brown dog in the green park, " * 2  # 100 tokens (letters)
TAIL_A = LONG + "with a blue hat"  # 112 tokens: more than 75, less than 150; differs from B after 110
TAIL_B = LONG + "with a gold cup"


@pytest.fixture(scope="module")
def models(tiny_sd1_dir: Path, tiny_sdxl_dir: Path) -> dict[str, LoadedModel]:
    return {name: load_model(str(folder), "auto", torch.float32)
            for name, folder in (("sd1", tiny_sd1_dir), ("sdxl", tiny_sdxl_dir))}


def with_format(model: LoadedModel, fmt: PromptFormat) -> LoadedModel:
    """The same modules with another prompt format (the fixture's model is shared)."""
    return replace(model, prompt_format=fmt)


def reference_chunks(tokenizer, text: str, chunks: int) -> list[torch.Tensor]:
    """sd-scripts' ids by hand: one sequence of chunks x 75 + 2 tokens cut into BOS + 75 + last-token chunks."""
    ids = tokenizer(text, padding="max_length", truncation=True, max_length=chunks * 75 + 2,
                    return_tensors="pt").input_ids[0]
    out = []
    for k in range(chunks):
        part = torch.cat([ids[:1], ids[1 + 75 * k:76 + 75 * k], ids[-1:]])
        if tokenizer.pad_token_id != tokenizer.eos_token_id:
            if part[-2] not in (tokenizer.eos_token_id, tokenizer.pad_token_id):
                part[-1] = tokenizer.eos_token_id
            if part[1] == tokenizer.pad_token_id:
                part[1] = tokenizer.eos_token_id
        out.append(part)
    return out


def reference_hidden(states: list[torch.Tensor]) -> torch.Tensor:
    """sd-scripts' merge: the first chunk's BOS, each chunk's 75 token states, the last chunk's final state."""
    if len(states) == 1:
        return states[0]
    return torch.cat([states[0][:, :1]] + [s[:, 1:76] for s in states] + [states[-1][:, 76:]], dim=1)


# ---- tokenization ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [None, 75, 150, 225])
def test_chunked_ids_match_sd_scripts(models: dict[str, LoadedModel], length: int | None) -> None:
    model = models["sdxl"]
    chunks = (length or 75) // 75
    texts = ["sks dog", LONG, LONG * 2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PromptTruncated)
        got = model.family.tokenize(model.tokenizers, texts, PromptFormat(length))
    assert len(got) == 2 and got[0].shape == (3, chunks * 77)
    for tok, ids in zip(model.tokenizers, got):
        for row, text in zip(ids, texts):
            assert torch.equal(row, torch.cat(reference_chunks(tok, text, chunks)))
    if chunks == 1:  # the plain 77-token tokenization, as before max_token_length existed
        plain = model.tokenizers[0](texts, padding="max_length", max_length=77, truncation=True,
                                    return_tensors="pt").input_ids
        assert torch.equal(got[0], plain)


def test_padding_that_is_not_eos_gets_sd2_chunk_ends(models: dict[str, LoadedModel]) -> None:
    tok = copy.deepcopy(models["sd1"].tokenizers[0])
    tok.pad_token = "!"  # SD2's and SDXL's second tokenizer pad with '!', not EOS
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    assert pad != eos
    ids = models["sd1"].family.tokenize([tok], ["x" * 80, "short"], PromptFormat(225))[0]
    first, second, third = ids[0].view(3, 77)
    assert first[0] == bos and first[-1] == eos  # the text runs through chunk 1: it is closed with EOS
    assert second[1:6].tolist() == [tok.convert_tokens_to_ids("x")] * 4 + [tok.convert_tokens_to_ids("x</w>")]
    assert second[6] == eos and second[-1] == pad
    assert third[:2].tolist() == [bos, eos] and set(third[2:].tolist()) == {pad}  # an empty chunk: BOS EOS pad...
    for row, text in zip(ids, ["x" * 80, "short"]):
        assert torch.equal(row, torch.cat(reference_chunks(tok, text, 3)))


def test_a_prompt_longer_than_max_token_length_is_cut_with_a_warning(models: dict[str, LoadedModel]) -> None:
    model = models["sd1"]
    with pytest.warns(PromptTruncated, match=r"more than the 75 max_token_length allows.*max_token_length to 150"):
        cut = model.family.tokenize(model.tokenizers, [TAIL_A], PromptFormat())[0]
        other = model.family.tokenize(model.tokenizers, [TAIL_B], PromptFormat())[0]
    assert torch.equal(cut, other)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PromptTruncated)
        model.family.tokenize(model.tokenizers, [TAIL_A], PromptFormat(225))  # it fits: no warning
    assert model.family.overlong(model.tokenizers, [TAIL_A, "short"], PromptFormat()) == [TAIL_A]
    assert model.family.overlong(model.tokenizers, [TAIL_A, LONG * 2], PromptFormat(150)) == [LONG * 2]


# ---- encoding ---------------------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::trainers.data.prompt_chunks.PromptTruncated")
@pytest.mark.parametrize("length", [None, 150, 225])
@pytest.mark.parametrize("clip_skip", [1, 2])
def test_sd_chunks_encode_as_sd_scripts(models: dict[str, LoadedModel], length: int | None, clip_skip: int) -> None:
    model = models["sd1"]
    te, tok = model.text_encoders[0], model.tokenizers[0]
    chunks = (length or 75) // 75
    hidden, pooled = model.family.encode_prompts(
        model.text_encoders, model.family.tokenize(model.tokenizers, [LONG], PromptFormat(length)), clip_skip)
    states = []
    for chunk in reference_chunks(tok, LONG, chunks):
        if clip_skip == 1:
            states.append(te(chunk[None]).last_hidden_state)
        else:
            states.append(final_layer_norm(te)(te(chunk[None], output_hidden_states=True).hidden_states[-2]))
    assert pooled is None and hidden.shape == (1, chunks * 75 + 2, 32)
    torch.testing.assert_close(hidden, reference_hidden(states))


@pytest.mark.filterwarnings("ignore::trainers.data.prompt_chunks.PromptTruncated")
@pytest.mark.parametrize("length", [None, 150, 225])
def test_sdxl_chunks_and_pooled_output_encode_as_sd_scripts(models: dict[str, LoadedModel],
                                                            length: int | None) -> None:
    model = models["sdxl"]
    te1, te2 = model.text_encoders
    chunks = (length or 75) // 75
    texts = [LONG, "sks dog"]
    hidden, pooled = model.family.encode_prompts(
        model.text_encoders, model.family.tokenize(model.tokenizers, texts, PromptFormat(length)), 1)
    assert hidden.shape == (2, chunks * 75 + 2, 64) and pooled.shape == (2, 32)
    for b, text in enumerate(texts):
        c1 = reference_chunks(model.tokenizers[0], text, chunks)
        c2 = reference_chunks(model.tokenizers[1], text, chunks)
        h1 = reference_hidden([te1(c[None], output_hidden_states=True).hidden_states[-2] for c in c1])
        h2 = reference_hidden([te2(c[None], output_hidden_states=True).hidden_states[-2] for c in c2])
        torch.testing.assert_close(hidden[b:b + 1], torch.cat([h1, h2], dim=-1))
        torch.testing.assert_close(pooled[b:b + 1], te2(c2[0][None]).text_embeds)  # the first chunk's EOS


@pytest.mark.filterwarnings("ignore::trainers.data.prompt_chunks.PromptTruncated")
def test_a_150_token_caption_is_not_cut_in_training(models: dict[str, LoadedModel]) -> None:
    from trainers.train.diffusion import NoisePredictor

    model = models["sd1"]
    predictor = NoisePredictor(model, None, 1, train_text_encoder=False)
    captured = []
    handle = model.unet.register_forward_pre_hook(lambda module, args: captured.append(args[2]))
    try:
        for fmt in (PromptFormat(), PromptFormat(150)):
            for text in (TAIL_A, TAIL_B):
                ids = with_format(model, fmt).tokenize([text])
                with torch.no_grad():
                    predictor(torch.zeros(1, 4, 8, 8), torch.tensor([10]), ids, None)
    finally:
        handle.remove()
    short_a, short_b, long_a, long_b = captured
    assert short_a.shape[1] == 77 and long_a.shape[1] == 152
    assert torch.equal(short_a, short_b)  # cut at 75 tokens: the endings are lost
    assert not torch.allclose(long_a, long_b)  # 150 tokens: the endings count
    torch.testing.assert_close(long_a[:, :70], long_b[:, :70])  # causal attention: the start is the same


# ---- weighted prompts -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [None, 150])
@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_weights_scale_the_right_tokens_and_the_syntax_is_removed(models: dict[str, LoadedModel], family: str,
                                                                   length: int | None) -> None:
    model = models[family]
    pad = "z" * 80 + " " if length else ""  # with 150, the weighted words sit in the second chunk
    weighted = f"{pad}a (dog:1.5) and [cat]"
    plain = f"{pad}a dog and cat"
    fmt = PromptFormat(length)
    ids, weights = model.family.tokenize_weighted(model.tokenizers, [weighted], fmt)
    plain_ids = model.family.tokenize(model.tokenizers, [plain], fmt)
    assert all(torch.equal(a, b) for a, b in zip(ids, plain_ids))  # the brackets are not tokens
    letters = len(pad.replace(" ", ""))
    row = weights[0][0]
    chunk_start = 77 if length else 0
    dog = [chunk_start + 1 + (letters - 75 if length else 0) + 1 + k for k in range(3)]  # after BOS and 'a'
    cat = [dog[-1] + 4 + k for k in range(3)]  # after 'and'
    assert row[dog].tolist() == [1.5] * 3 and row[cat].tolist() == pytest.approx([SQUARE] * 3)
    assert sorted(set(row.tolist())) == pytest.approx([SQUARE, 1.0, 1.5])
    hidden, pooled = model.family.encode_prompts(model.text_encoders, ids, 1, weights)
    unweighted, plain_pooled = model.family.encode_prompts(model.text_encoders, plain_ids, 1)
    merged = merge_chunks(weights[0].reshape(1, -1), fmt.chunks)[0]
    scale = torch.ones_like(merged)
    scale[merged == 1.5] = 1.5
    scale[(merged - SQUARE).abs() < 1e-6] = SQUARE
    torch.testing.assert_close(hidden, unweighted * scale[None, :, None])
    if pooled is not None:
        torch.testing.assert_close(pooled, plain_pooled)  # the pooled embedding is never weighted


def test_weighted_tokens_travel_through_the_batch(models: dict[str, LoadedModel]) -> None:
    from trainers.data.dataset import collate
    from trainers.train.diffusion import NoisePredictor

    model = with_format(models["sdxl"], PromptFormat(150, weighted=True))
    per_sample = [model.tokenize([text]) for text in ("(red:1.2) fox", "[blue] dog")]
    assert all(isinstance(t, WeightedIds) for t in per_sample[0])
    items = [{"input_ids": [t[0] for t in ids], "key": torch.tensor([0, k]), "loss_weight": torch.tensor(1.0),
              "problems": []} for k, ids in enumerate(per_sample)]
    batch = collate(items)
    assert isinstance(batch["input_ids"][0], WeightedIds) and batch["input_ids"][0].ids.shape == (2, 154)
    moved = [ids.to("cpu") for ids in batch["input_ids"]]
    captured = []
    handle = model.unet.register_forward_pre_hook(lambda module, args: captured.append(args[2]))
    try:
        with torch.no_grad():
            sizes = SizeConditioning(*[torch.full((2, 2), 64.0)] * 3)
            NoisePredictor(model, None, 1, False)(torch.zeros(2, 4, 8, 8), torch.tensor([5, 5]), moved, sizes)
    finally:
        handle.remove()
    expected, _ = model.encode_texts(["(red:1.2) fox", "[blue] dog"], 1)
    torch.testing.assert_close(captured[0], expected)


def test_emphasis_weights_are_sd_scripts() -> None:
    from trainers.data.prompt_weights import parse_weights, strip_weights

    assert parse_weights("an (important) word") == [("an ", 1.0), ("important", ROUND), (" word", 1.0)]
    assert parse_weights("(unbalanced") == [("unbalanced", ROUND)]
    assert parse_weights(r"\(literal\]") == [("(literal]", 1.0)]
    assert parse_weights("(unnecessary)(parens)") == [("unnecessaryparens", ROUND)]
    got = parse_weights("a (((house:1.3)) [on] a (hill:0.5), sun, (((sky))).")
    expected = [("a ", 1.0), ("house", 1.3 * 1.1 * 1.1), (" ", 1.1), ("on", 1.0), (" a ", 1.1), ("hill", 0.55),
                (", sun, ", 1.1), ("sky", 1.1 ** 4), (".", 1.1)]
    assert [t for t, _ in got] == [t for t, _ in expected]
    assert [w for _, w in got] == pytest.approx([w for _, w in expected])
    assert parse_weights("") == [("", 1.0)] and parse_weights("ratio 1:2 ]") == [("ratio 1:2 ]", 1.0)]
    assert strip_weights("(masterpiece:1.2), [blurry], sks dog") == "masterpiece, blurry, sks dog"


# ---- text-encoder cache, sample images and generation ----------------------------------------------------------

def test_text_encoder_cache_with_max_token_length_150(models: dict[str, LoadedModel]) -> None:
    model = with_format(models["sdxl"], PromptFormat(150))
    cache = build_text_cache([TAIL_A, TAIL_B, TAIL_A], lambda caps: model.encode_texts(caps, 1), batch_size=2)
    assert len(cache.embeds) == 2
    hidden, pooled = cache.get(TAIL_A)
    assert hidden.shape == (152, 64) and pooled.shape == (32,)
    fresh, fresh_pooled = model.encode_texts([TAIL_A], 1)
    torch.testing.assert_close(hidden, fresh[0])
    torch.testing.assert_close(pooled, fresh_pooled[0])
    assert not torch.allclose(hidden, cache.get(TAIL_B)[0])


@pytest.mark.parametrize("family", ["sd1", "sdxl"])
def test_sample_images_use_the_whole_long_prompt(models: dict[str, LoadedModel], tmp_path: Path, family: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import trainers.sampling.pipeline as sampling
    from trainers.core.prompts import parse_prompt_lines

    model = with_format(models[family], PromptFormat(150, weighted=True))
    seen: list[dict] = []
    real = sampling.build_pipeline

    class Spy:
        def __init__(self, pipe) -> None:
            self.pipe = pipe

        def __call__(self, **kwargs):
            seen.append(kwargs)
            return self.pipe(**kwargs)

        def __getattr__(self, name: str):
            return getattr(self.pipe, name)

    monkeypatch.setattr(sampling, "build_pipeline", lambda m, s: Spy(real(m, s)))
    prompts = parse_prompt_lines([f"{TAIL_A} --n blurry", f"{TAIL_B} --n blurry"])
    paths = sampling.generate_samples(model, prompts, tmp_path, "s", default_size=(32, 32), default_steps=2)
    assert [p.name for p in paths] == ["s_00.png", "s_01.png"]
    first, second = seen
    assert first["prompt_embeds"].shape[1] == 152 and first["negative_prompt_embeds"].shape[1] == 152
    assert not torch.allclose(first["prompt_embeds"], second["prompt_embeds"])  # the endings differ
    expected = sampling.encode_for_pipeline(model, [TAIL_A, "blurry"], 1, torch.device("cpu"))
    for name, tensor in expected.items():
        torch.testing.assert_close(first[name], tensor)
    assert ("pooled_prompt_embeds" in first) == (family == "sdxl")


def test_generation_jobs_fit_chunks_to_the_prompt(models: dict[str, LoadedModel]) -> None:
    from trainers.generate.renderer import PROMPTS
    from trainers.sampling.pipeline import encode_for_pipeline

    model = with_format(models["sdxl"], PROMPTS)
    cpu = torch.device("cpu")
    short = encode_for_pipeline(model, ["sks dog", "blurry"], 1, cpu)
    assert short["prompt_embeds"].shape[1] == 77  # a short prompt encodes exactly as it always did
    plain = model.family.encode_prompts(model.text_encoders, model.family.tokenize(model.tokenizers, ["sks dog"]), 1)
    torch.testing.assert_close(short["prompt_embeds"], plain[0])
    long = encode_for_pipeline(model, [TAIL_A, "blurry"], 1, cpu)
    assert long["prompt_embeds"].shape[1] == long["negative_prompt_embeds"].shape[1] == 152
    assert not torch.allclose(long["prompt_embeds"], encode_for_pipeline(model, [TAIL_B, "blurry"], 1,
                                                                         cpu)["prompt_embeds"])
