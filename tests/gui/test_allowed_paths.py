"""--allowed-root holds for every path a form or job takes, and for the paths named inside the files a form names;
a model is a hub id only when it cannot be a local path, and while paths are confined only with --allow-hub-models.

The escapes found from outside are kept as one table: each row is an attack that once got through."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest

from gui.allowed_paths import HUB_FLAG, AllowedRoots, TypedPath, paths_outside
from gui.checks import check_form
from trainers.core.errors import ConfigIssue
from trainers.core.paths import is_hub_id

OUTSIDE = "is outside the folders this GUI may use"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """root/ (the one allowed folder, also the working folder: data/10_dog, model/, out/) and elsewhere/ beside it
    (model/, images/a.png, lora.safetensors, run-state/)."""
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    for folder in (root / "data" / "10_dog", root / "model", root / "out", elsewhere / "model",
                   elsewhere / "images", elsewhere / "run-state"):
        folder.mkdir(parents=True)
    (elsewhere / "images" / "a.png").write_bytes(b"")
    (elsewhere / "lora.safetensors").write_bytes(b"")
    monkeypatch.chdir(root)
    return SimpleNamespace(root=root.resolve(), elsewhere=elsewhere.resolve(), roots=AllowedRoots([root.resolve()]))


def _training(method: str, **values: object) -> Callable[[SimpleNamespace], list[ConfigIssue]]:
    def check(site: SimpleNamespace) -> list[ConfigIssue]:
        given = {"pretrained_model_name_or_path": str(site.root / "model"), "train_data_dir": str(site.root / "data"),
                 "output_dir": str(site.root / "out"), "max_train_epochs": 1}
        given.update({k: v(site) if callable(v) else v for k, v in values.items()})
        return check_form(method, given, site.roots).issues
    return check


def _job(verb: str, **values: object) -> Callable[[SimpleNamespace], list[ConfigIssue]]:
    def check(site: SimpleNamespace) -> list[ConfigIssue]:
        from gui.caption_tab import _outside_roots
        from trainers.caption.options import config_from_values

        given = {"images": str(site.root / "data" / "10_dog"), **({"prompt": "a dog"} if verb == "masks" else {})}
        cfg = config_from_values(verb, {**given, **values})
        return _outside_roots(cfg, site.roots)
    return check


def _generate(model: str) -> Callable[[SimpleNamespace], list[ConfigIssue]]:
    def check(site: SimpleNamespace) -> list[ConfigIssue]:
        from gui.generate_tab import _outside_roots
        from trainers.generate.options import config_from_values

        return _outside_roots(config_from_values({"model": model, "prompts": "a dog"}), site.roots)
    return check


def _dataset_toml(site: SimpleNamespace) -> str:
    toml = site.root / "dataset.toml"
    toml.write_text(f'[[datasets]]\n[[datasets.subsets]]\nimage_dir = "{site.elsewhere / "images"}"\n',
                    encoding="utf-8")
    return str(toml)


def _in_json(site: SimpleNamespace) -> str:
    meta = site.root / "meta.json"
    meta.write_text(json.dumps({str(site.elsewhere / "images" / "a.png"): {"caption": "a dog"}}), encoding="utf-8")
    return str(meta)


def _metadata_dir(site: SimpleNamespace) -> str:
    (site.root / "meta").mkdir()
    record = {"path": str(site.elsewhere / "images" / "a.png"), "tags": ["dog"], "score": 1}
    (site.root / "meta" / "a.json").write_text(json.dumps(record), encoding="utf-8")
    return str(site.root / "meta")


CLIMBS_OUT = "data/../../elsewhere/model"  # no leading / or .: it was taken for a hub id
ESCAPES = {  # what got through -> (the check the page runs, the field it must name, what the message says)
    "a model path climbing out": (_training("lora", pretrained_model_name_or_path=CLIMBS_OUT),
                                  "pretrained_model_name_or_path", OUTSIDE),
    "base_weights": (_training("lora", base_weights=["/etc/passwd"]), "base_weights", OUTSIDE),
    "base_weights outside": (_training("lora", base_weights=lambda s: [str(s.elsewhere / "lora.safetensors")]),
                             "base_weights", OUTSIDE),
    "resume": (_training("lora", resume=lambda s: str(s.elsewhere / "run-state")), "resume", OUTSIDE),
    "ControlNet's model": (_training("controlnet", controlnet_model_name_or_path=lambda s: str(s.elsewhere / "model"),
                                     conditioning_data_dir=lambda s: str(s.root / "data")),
                           "controlnet_model_name_or_path", OUTSIDE),
    "a dataset_config naming an image_dir outside": (_training("lora", dataset_config=_dataset_toml),
                                                     "dataset_config", OUTSIDE),
    "an in_json naming images outside": (_training("finetune", in_json=_in_json,
                                                   train_data_dir=lambda s: str(s.root / "data" / "10_dog")),
                                         "in_json", OUTSIDE),
    "a metadata_dir naming images outside": (_training("lora", metadata_dir=_metadata_dir, train_data_dir=""),
                                              "metadata_dir", OUTSIDE),
    "a hub id with a login": (_training("lora", pretrained_model_name_or_path="org/model"),
                              "pretrained_model_name_or_path", HUB_FLAG),
    "the caption job's model": (_job("caption", model=CLIMBS_OUT), "model", OUTSIDE),
    "the mask job's hub model running its code": (_job("masks", method="background", model="org/birefnet",
                                                       trust_remote_code=True), "model", HUB_FLAG),
    "the mask job's model": (_job("masks", model=CLIMBS_OUT), "model", OUTSIDE),
    "Generate's model": (_generate(CLIMBS_OUT), "model", OUTSIDE),
}


@pytest.mark.parametrize("escape", list(ESCAPES))
def test_every_known_escape_is_refused_by_name(site: SimpleNamespace, escape: str) -> None:
    check, field, said = ESCAPES[escape]
    refused = [issue for issue in check(site) if issue.field == field and said in issue.message]
    assert refused, f"{escape} got through"


def test_what_lies_inside_passes_and_a_hub_id_passes_once_allowed(site: SimpleNamespace) -> None:
    (site.root / "data" / "10_dog" / "a.png").write_bytes(b"")
    meta = site.root / "meta.json"
    meta.write_text(json.dumps({"a": {"caption": "a dog"}}), encoding="utf-8")  # relative to train_data_dir
    values = {"pretrained_model_name_or_path": "org/model", "train_data_dir": str(site.root / "data" / "10_dog"),
              "in_json": str(meta), "output_dir": str(site.root / "out"), "resume": "latest",
              "base_weights": [], "max_train_epochs": 1}
    with_hub = AllowedRoots(site.roots, hub_models=True)
    toml = site.root / "dataset.toml"
    toml.write_text('[[datasets]]\n[[datasets.subsets]]\nimage_dir = "data/10_dog"\n', encoding="utf-8")
    for method, given in (("finetune", values), ("lora", {**values, "in_json": "", "dataset_config": str(toml)})):
        assert not [i for i in check_form(method, given, with_hub).issues if OUTSIDE in i.message
                    or HUB_FLAG in i.message]


def test_a_hub_id_is_only_what_cannot_be_a_local_path(site: SimpleNamespace) -> None:
    assert is_hub_id("org/model") and is_hub_id("black-forest-labs/FLUX.1-dev")
    for local in (CLIMBS_OUT, "data/10_dog", "./org/model", "/org/model", "~/org/model", "org/..", "a/b/c", "a\0/b"):
        assert not is_hub_id(local), local


def test_the_trainer_refuses_to_fetch_what_the_page_takes_for_a_path(site: SimpleNamespace) -> None:
    from trainers.caption.options import config_from_values
    from trainers.models.base import ModelLoadError
    from trainers.models.loading import resolve_model_folder

    with pytest.raises(ModelLoadError, match="neither a local folder nor a hub id"):
        resolve_model_folder("data/../../nowhere/model")  # not on disk: once sent to the hub as an id
    cfg = config_from_values("caption", {"images": str(site.root / "data"), "model": "data/../../nowhere/model"})
    from trainers.caption.options import check_config

    assert any(i.field == "model" and "neither a folder here nor a hub id" in i.message for i in check_config(cfg))


@pytest.mark.parametrize("text, said", [("data/a\0b", "NUL"), ("/" + "x" * 6000, "6001 bytes long")])
def test_an_odd_path_is_refused_by_name_in_every_check(site: SimpleNamespace, text: str, said: str) -> None:
    refused = paths_outside([TypedPath("train_data_dir", text, "dataset")], site.roots)
    assert len(refused) == 1 and said in refused[0].message and len(refused[0].message) < 300
    for roots in (site.roots, None):  # the page's Validate, confined or not
        report = check_form("lora", {"pretrained_model_name_or_path": str(site.root / "model"), "train_data_dir": text,
                                     "output_dir": str(site.root / "out")}, roots)
        assert any(i.field == "train_data_dir" and said in i.message for i in report.issues)
    for roots in (site.roots, None):  # the caption, mask and generate jobs: refused before their checks raised
        for check in (_generate(text), _job("caption", model=text), _job("masks", model=text)):
            refused = check(SimpleNamespace(**{**vars(site), "roots": roots}))
            assert [i.field for i in refused] == ["model"] and said in refused[0].message


@pytest.mark.parametrize("text, said", [("data/a\0b", "NUL"), ("/" + "x" * 6000, "6001 bytes long")])
def test_the_dataset_tab_refuses_an_odd_path_by_name(site: SimpleNamespace, text: str, said: str) -> None:
    from gui.dataset_tab import build_dataset_tab

    for roots in (site.roots, None):
        with gr.Blocks() as blocks:
            build_dataset_tab(SimpleNamespace(allowed_roots=roots))
        on_pairs = next(f.fn for f in blocks.fns.values() if f.name == "on_pairs")
        text_shown, _ = on_pairs(text, ".txt", "")
        assert said in text_shown and len(text_shown) < 1000
