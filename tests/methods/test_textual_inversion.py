"""Textual inversion: a new word's vectors trained on tiny SD1.x and SDXL models, saved as files diffusers'
load_textual_inversion (and A1111/ComfyUI) read; a word the tokenizer knows is refused before training."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from trainers.core.errors import ConfigError
from trainers.core.options import load_config
from trainers.adapters.kohya.page_import import import_kohya_file
from trainers.demo import build_dataset
from trainers.preflight.validate import validate

from helpers import FAST, events, run_trainer, sets

CORPUS_TI = Path(__file__).resolve().parents[1] / "adapters" / "kohya_corpus" / "kohya_ss" / "test" / "config"
TI_FAST = [kv for kv in FAST if not kv.startswith("network_")] + ["learning_rate=0.05"]


def ti_args(model: Path, dataset: Path, out: Path, **values: object) -> list[str]:
    return [*sets(pretrained_model_name_or_path=str(model), train_data_dir=str(dataset), output_dir=str(out),
                  token_string="sks", **values), *[a for kv in TI_FAST for a in ("--set", kv)]]


@pytest.fixture()
def fake_ti_model(fake_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake family's model folder, taking new words in this process: its tokenizer is the tiny models' CLIP one,
    its text encoder an embedding with transformers' resize_token_embeddings (tests/fake_family/)."""
    from trainers.methods.textual_inversion import rules

    monkeypatch.setattr(rules, "FAMILIES", (*rules.FAMILIES, "fake"))
    return fake_model_dir


def issues_of(model: Path, **values: object) -> dict[str, str]:
    cfg = load_config("textual_inversion", overrides=[f"{k}={v!r}".replace("'", '"') for k, v in
                                                      {"pretrained_model_name_or_path": str(model), **values}.items()])
    return {i.field: i.message for i in validate(cfg, check_paths=False)}


def test_a_word_the_tokenizer_knows_or_a_missing_word_is_named_before_training(tiny_sd1_dir: Path) -> None:
    # The tiny tokenizer reads characters: "a" is a word of it already.
    known = issues_of(tiny_sd1_dir, token_string="a")
    assert "'a' is already a word of the model's tokenizer (tokenizer)" in known["token_string"]
    assert "is needed: the new word to learn" in issues_of(tiny_sd1_dir, token_string="")["token_string"]
    assert "must be one word" in issues_of(tiny_sd1_dir, token_string="my word")["token_string"]
    assert "write it as 'mychar'" in issues_of(tiny_sd1_dir, token_string="MyChar")["token_string"]
    assert "token_string" not in issues_of(tiny_sd1_dir, token_string="sks")


@pytest.mark.slow
def test_sd1_embedding_changes_only_prompts_with_its_word(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from diffusers import StableDiffusionPipeline

    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    out, run_dir = tmp_path / "out", tmp_path / "run"
    result = run_trainer(ti_args(tiny_sd1_dir, dataset, out, init_word="o", num_vectors_per_token=2,
                                 max_train_steps=3, sample_prompt_lines=["sks shape --s 2"], sample_every_n_steps=3),
                         run_dir, method="textual_inversion")
    assert result.returncode == 0, result.stderr[-3000:]
    evs = events(run_dir)
    assert evs[-1]["type"] == "done" and [e["step"] for e in evs if e["type"] == "sample"] == [3]
    file = out / "textual_inversion.safetensors"
    with safe_open(str(file), "pt") as handle:
        assert list(handle.keys()) == ["emb_params"] and handle.get_tensor("emb_params").shape == (2, 32)
        assert handle.metadata()["ss_token_string"] == "sks"

    pipe = StableDiffusionPipeline.from_pretrained(str(tiny_sd1_dir), safety_checker=None)

    def encoded(prompt: str) -> torch.Tensor:
        ids = pipe.tokenizer(pipe.maybe_convert_prompt(prompt, pipe.tokenizer), padding="max_length",
                             max_length=77, return_tensors="pt").input_ids
        with torch.no_grad():
            return pipe.text_encoder(ids)[0]

    prompts = ["a red circle", "o o shape"]
    before = [encoded(p) for p in prompts]
    pipe.load_textual_inversion(str(file), token="sks")
    assert all(torch.equal(b, encoded(p)) for b, p in zip(before, prompts))  # prompts without the word: the same
    # The word started as its init word's vectors ("o", twice); training moved them.
    assert not torch.allclose(encoded("sks shape"), before[1], atol=1e-4)


@pytest.mark.slow
def test_sdxl_embedding_holds_both_text_encoders_vectors(tiny_sdxl_dir: Path, tmp_path: Path) -> None:
    from diffusers import StableDiffusionXLPipeline

    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    out = tmp_path / "out"
    result = run_trainer(ti_args(tiny_sdxl_dir, dataset, out, init_word="o", max_train_steps=1,
                                 output_name="sks"), tmp_path / "run", method="textual_inversion")
    assert result.returncode == 0, result.stderr[-3000:]
    with safe_open(str(out / "sks.safetensors"), "pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
    pipe = StableDiffusionXLPipeline.from_pretrained(str(tiny_sdxl_dir))
    assert {k: v.shape[0] for k, v in tensors.items()} == {"clip_l": 1, "clip_g": 1}
    assert tensors["clip_l"].shape[1] == pipe.text_encoder.config.hidden_size
    assert tensors["clip_g"].shape[1] == pipe.text_encoder_2.config.hidden_size
    # As diffusers documents SDXL embeddings: each encoder's vectors into its own tokenizer and encoder.
    pipe.load_textual_inversion(tensors["clip_l"], token="sks", text_encoder=pipe.text_encoder,
                                tokenizer=pipe.tokenizer)
    pipe.load_textual_inversion(tensors["clip_g"], token="sks", text_encoder=pipe.text_encoder_2,
                                tokenizer=pipe.tokenizer_2)
    with torch.no_grad():
        with_word = pipe.encode_prompt("sks shape", do_classifier_free_guidance=False)[0]
        init_word = pipe.encode_prompt("o shape", do_classifier_free_guidance=False)[0]
    assert not torch.allclose(with_word, init_word, atol=1e-4)  # both encoders' vectors trained away from "o"


def test_kohya_ss_textual_inversion_configs_import_into_the_textual_inversion_tab(tmp_path: Path) -> None:
    raw = json.loads((CORPUS_TI / "TI-AdamW8bit.json").read_text(encoding="utf-8"))
    (tmp_path / "styled.json").write_text(json.dumps(raw), encoding="utf-8")  # template = 'style template'
    method, values, _ = import_kohya_file(tmp_path / "styled.json")
    assert method == "textual_inversion"
    assert (values["token_string"], values["init_word"], values["num_vectors_per_token"]) == ("zxc", "*", 8)
    assert values["max_train_epochs"] == 8 and values["learning_rate"] == 1e-4
    assert values["use_style_template"] is True and values["use_object_template"] is False
    started = {**raw, "template": "object template", "weights": "/embeddings/zxc.safetensors"}
    (tmp_path / "object.json").write_text(json.dumps(started), encoding="utf-8")
    _, values, _ = import_kohya_file(tmp_path / "object.json")
    assert (values["use_object_template"], values["use_style_template"]) == (True, False)
    assert values["weights"] == "/embeddings/zxc.safetensors"
    (tmp_path / "captions.json").write_text(json.dumps({**raw, "template": "caption"}), encoding="utf-8")
    _, values, _ = import_kohya_file(tmp_path / "captions.json")
    assert not values["use_style_template"] and not values["use_object_template"] and values["weights"] == ""
    (tmp_path / "other.json").write_text(json.dumps({**raw, "template": "pose template"}), encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        import_kohya_file(tmp_path / "other.json")
    assert {i.field for i in refused.value.issues} == {"template"}
    assert "known: caption, object template" in str(refused.value)


def test_the_kohya_export_runs_sd_scripts_textual_inversion_script_and_says_a_lora_s_word_is_left_out() -> None:
    from trainers.adapters.kohya.export import sd_scripts_command

    argv, text, _ = sd_scripts_command(load_config("textual_inversion", overrides=[
        "token_string='zxc'", "num_vectors_per_token=4", "max_train_steps=5"]), family="sdxl")
    assert "sdxl_train_textual_inversion.py" in argv
    assert 'token_string = "zxc"' in text and "num_vectors_per_token = 4" in text
    _, text, notes = sd_scripts_command(load_config("lora", overrides=["token_string='zxc'", "max_train_steps=5"]),
                                        family="sd1")
    assert "token_string" not in text and any("learn no new word (pivotal tuning)" in n for n in notes)


@pytest.mark.slow
def test_pivotal_tuning_saves_the_word_inside_the_lora_and_on_its_own(tiny_sd1_dir: Path, tmp_path: Path) -> None:
    from diffusers import StableDiffusionPipeline
    from safetensors.torch import load_file

    dataset = build_dataset(tmp_path / "data", folder="1_sks shape")
    out = tmp_path / "out"
    args = [*sets(pretrained_model_name_or_path=str(tiny_sd1_dir), train_data_dir=str(dataset), output_dir=str(out),
                  output_name="pivotal", token_string="sks", init_word="o", embedding_lr=0.05, max_train_steps=2),
            *[a for kv in FAST for a in ("--set", kv)]]
    result = run_trainer(args, tmp_path / "run", method="lora")
    assert result.returncode == 0, result.stderr[-3000:]
    lora = load_file(out / "pivotal.safetensors")
    bundled = lora.pop("bundle_emb.sks.string_to_param.*")  # A1111/Forge read the word from the LoRA file
    alone = load_file(out / "pivotal_embeddings" / "sks.safetensors")
    assert torch.equal(bundled, alone["emb_params"]) and bundled.shape == (1, 32)
    assert any(k.startswith("lora_te_") for k in lora) and any(k.startswith("lora_unet_") for k in lora)

    pipe = StableDiffusionPipeline.from_pretrained(str(tiny_sd1_dir), safety_checker=None)
    pipe.load_lora_weights(lora)  # the LoRA's own weights, as diffusers reads them
    with torch.no_grad():
        init_word = pipe.encode_prompt("o shape", "cpu", 1, False)[0]
        pipe.load_textual_inversion(str(out / "pivotal_embeddings" / "sks.safetensors"), token="sks")
        with_word = pipe.encode_prompt("sks shape", "cpu", 1, False)[0]
    assert not torch.allclose(with_word, init_word, atol=1e-4)  # the word trained away from its init word


def test_a_word_s_files_name_each_text_encoder_s_vectors_as_a1111_comfyui_and_diffusers_read_them() -> None:
    from torch import nn

    from trainers.methods.textual_inversion.embeddings import NewWord, WordTokens

    one = NewWord("mychar", ["mychar", "mychar1"], [nn.Embedding(10, 4)], [8])
    assert {k: tuple(v.shape) for k, v in one.embedding_file(torch.float16).items()} == {"emb_params": (2, 4)}
    assert list(one.bundled(torch.float16)) == ["bundle_emb.mychar.string_to_param.*"]
    two = NewWord("mychar", ["mychar"], [nn.Embedding(10, 4), nn.Embedding(10, 6)], [9, 9])
    assert {k: tuple(v.shape) for k, v in two.embedding_file(torch.float16).items()} == {"clip_l": (1, 4),
                                                                                       "clip_g": (1, 6)}
    assert list(two.bundled(torch.float16)) == ["bundle_emb.mychar.clip_l", "bundle_emb.mychar.clip_g"]
    assert torch.equal(two.bundled(torch.float32)["bundle_emb.mychar.clip_g"], two.embeddings[1].weight[9:10])

    class Echo:  # a tokenizer that shows the text it was given
        def __call__(self, text: str | list[str], **kwargs: object) -> str | list[str]:
            return text

    tokens = WordTokens(Echo(), "mychar", ["mychar", "mychar1", "mychar2"])
    assert tokens("a photo of mychar, mychar1 mychars") == "a photo of mychar mychar1 mychar2, mychar1 mychars"
    assert tokens(["mychar", "x"]) == ["mychar mychar1 mychar2", "x"]


def test_an_sd_scripts_textual_inversion_toml_imports_with_its_prompt_templates_and_start_weights(
        tmp_path: Path) -> None:
    text = ('pretrained_model_name_or_path = "x"\ntoken_string = "zxc"\ninit_word = "painting"\n'
            'num_vectors_per_token = 4\nmax_train_steps = 100\n')
    (tmp_path / "ti.toml").write_text(text, encoding="utf-8")
    method, values, notes = import_kohya_file(tmp_path / "ti.toml")
    assert method == "textual_inversion" and values["num_vectors_per_token"] == 4
    assert any("train_textual_inversion.py" in n for n in notes)
    (tmp_path / "styled.toml").write_text(text + 'use_style_template = true\nweights = "/e/zxc.pt"\n', encoding="utf-8")
    _, values, _ = import_kohya_file(tmp_path / "styled.toml")
    assert values["use_style_template"] is True and values["weights"] == "/e/zxc.pt"


def test_an_embedding_to_start_from_is_read_from_each_format_we_and_others_save(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from trainers.methods.textual_inversion.embeddings import read_embedding_file

    vectors, wide = torch.randn(2, 32), torch.randn(2, 64)
    save_file({"emb_params": vectors}, str(tmp_path / "ours.safetensors"))  # ours, sd-scripts', ComfyUI's
    torch.save({"string_to_param": {"*": vectors}, "name": "zxc", "step": 3}, tmp_path / "a1111.pt")
    save_file({"zxc": vectors}, str(tmp_path / "learned_embeds.safetensors"))  # diffusers' save_textual_inversion
    save_file({"clip_l": vectors, "clip_g": wide}, str(tmp_path / "sdxl.safetensors"))
    for name in ("ours.safetensors", "a1111.pt", "learned_embeds.safetensors"):
        assert torch.equal(read_embedding_file(tmp_path / name, 1)[0], vectors), name
    clip_l, clip_g = read_embedding_file(tmp_path / "sdxl.safetensors", 2)
    assert torch.equal(clip_l, vectors) and torch.equal(clip_g, wide)
    with pytest.raises(ConfigError, match="an SDXL embedding has a clip_l and a clip_g"):
        read_embedding_file(tmp_path / "ours.safetensors", 2)
    with pytest.raises(ConfigError, match="is not a one-text-encoder"):
        read_embedding_file(tmp_path / "sdxl.safetensors", 1)
    (tmp_path / "broken.pt").write_bytes(b"not a file")
    with pytest.raises(ConfigError, match="cannot be read as an embedding file"):
        read_embedding_file(tmp_path / "broken.pt", 1)


def test_start_weights_of_another_length_and_both_templates_are_named_before_training(tiny_sd1_dir: Path,
                                                                                      tmp_path: Path) -> None:
    from safetensors.torch import save_file

    save_file({"emb_params": torch.randn(3, 32)}, str(tmp_path / "zxc.safetensors"))
    found = issues_of(tiny_sd1_dir, token_string="zxc", weights=str(tmp_path / "zxc.safetensors"))
    assert "has 3 vector(s) per text encoder: set it to 3" in found["num_vectors_per_token"]
    assert "num_vectors_per_token" not in issues_of(tiny_sd1_dir, token_string="zxc", num_vectors_per_token=3,
                                                    weights=str(tmp_path / "zxc.safetensors"))
    both = load_config("textual_inversion", overrides=[f'pretrained_model_name_or_path="{tiny_sd1_dir}"',
                                                       'token_string="zxc"', "use_object_template=true",
                                                       "use_style_template=true"])
    assert "choose one set of sentences" in {i.field: i.message for i in validate(both, check_paths=False)}[
        "use_style_template"]


@pytest.mark.slow
def test_an_embedding_starts_from_a_file_and_learns_from_templates_when_no_caption_holds_its_word(
        fake_ti_model: Path, tmp_path: Path) -> None:
    from tests.fake_family.family import WIDTH
    from safetensors.torch import load_file, save_file

    from helpers import train

    dataset = build_dataset(tmp_path / "data", folder="1_sks shape", size=64)  # captions: "sks shape, red circle"
    start = torch.randn(2, WIDTH, generator=torch.Generator().manual_seed(3))  # the fake text encoder's width
    save_file({"emb_params": start}, str(tmp_path / "start.safetensors"))
    out = tmp_path / "out"
    assert train("textual_inversion", tmp_path / "run", pretrained_model_name_or_path=str(fake_ti_model),
                 train_data_dir=str(dataset), output_dir=str(out), token_string="zxc", num_vectors_per_token=2,
                 weights=str(tmp_path / "start.safetensors"), use_object_template=True, max_train_steps=1,
                 resolution="64", train_batch_size=2, max_data_loader_n_workers=0, learning_rate=0.01,
                 save_precision="float") == 0
    trained = load_file(str(out / "textual_inversion.safetensors"))["emb_params"]
    moved = (trained - start).abs().max().item()
    # One AdamW step of 0.01 from the file's vectors: it learned (the captions alone never name the word, so
    # only the templates could teach it) and it started where the file says (far from any init word).
    assert 0.005 < moved <= 0.011  # (weight decay alone would move it by about 1e-4)


@pytest.mark.slow
def test_a_resumed_textual_inversion_run_saves_the_embedding_of_the_uninterrupted_one(fake_ti_model: Path,
                                                                                    tmp_path: Path) -> None:
    from helpers import resumed_saves

    dataset = build_dataset(tmp_path / "data", folder="1_sks shape", size=64)
    straight, resumed = resumed_saves("textual_inversion", tmp_path, pretrained_model_name_or_path=str(fake_ti_model),
                                      train_data_dir=str(dataset), token_string="zxc", num_vectors_per_token=2,
                                      init_word="o", use_style_template=True, resolution="64", train_batch_size=2,
                                      max_data_loader_n_workers=0, learning_rate=0.05)
    assert torch.equal(straight["emb_params"], resumed["emb_params"])
