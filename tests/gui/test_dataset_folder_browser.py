"""The server-side folder browser: it lists folders and model files (by kind) under the allowed roots and nothing
else: `..`, links out of a root and values it never listed are refused."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from gui.folder_browser import OPEN, USE, BrowseError, browse_roots, list_folder, pick, start_listing
from trainers.models.file_kind import model_kind
from trainers.models.rules import UNET_PREFIX
from trainers.models.sd.rules import SD1
from trainers.models.sdxl.rules import TE2_PREFIX



def header_only(path: Path, shapes: dict[str, tuple[int, ...]], metadata: dict[str, str] | None = None) -> Path:
    """A .safetensors file with tensor names and shapes and no data: all the browser reads."""
    header = {k: {"dtype": "F16", "shape": list(s), "data_offsets": [0, 0]} for k, s in shapes.items()}
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    return path


UNET_SD1 = {UNET_PREFIX + "input_blocks.0.0.weight": (320, 4, 3, 3),
            UNET_PREFIX + "input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight": (320, 768)}
KINDS = {  # file -> (tensor shapes, metadata, the kind listed)
    "sd15.safetensors": ({**UNET_SD1, SD1.single_file_text_encoders[0].prefix + "x": (1,)}, None,
                         "SD1.x checkpoint"),
    "xl.safetensors": ({UNET_PREFIX + "label_emb.0.0.weight": (1,), TE2_PREFIX + "x": (1,)}, None, "SDXL checkpoint"),
    "xl_lora.safetensors": ({"lora_unet_input_blocks_4_1_transformer_blocks_0_attn2_to_k.lora_down.weight": (4, 2048)},
                            None, "SDXL LoRA"),
    "v2_lora.safetensors": ({"lora_unet_a.lora_down.weight": (4, 8)}, {"ss_base_model_version": "sd_v2"},
                            "SD2.x LoRA"),  # told by its metadata
    "flux_lora.safetensors": ({"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": (4, 8)}, None,
                              "FLUX.1 LoRA"),
    "sd1_lora.safetensors": ({"lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight":
                              (4, 768)}, None, "SD1.x LoRA"),
    "vae.safetensors": ({"encoder.conv_in.weight": (128, 3, 3, 3), "decoder.conv_in.weight": (512, 4, 3, 3)}, None,
                        "VAE"),
    "ae.safetensors": ({"encoder.conv_in.weight": (128, 3, 3, 3), "decoder.conv_in.weight": (512, 16, 3, 3)}, None,
                       "16-channel autoencoder (FLUX.1 ae, SD3 VAE)"),
    "clip_l.safetensors": ({"text_model.embeddings.token_embedding.weight": (49408, 768),
                            "text_model.encoder.layers.0.mlp.fc1.weight": (1,)}, None, "CLIP-L text encoder"),
    "t5xxl.safetensors": ({"shared.weight": (1,), "encoder.block.0.layer.0.SelfAttention.relative_attention_bias"
                           ".weight": (1,)}, None, "T5 text encoder"),
    "other.safetensors": ({"weight": (1,)}, None, "safetensors (not a model file Atelier knows)"),
}


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """root/models/* (every kind), root/data/10_dog, root/.hidden, root/escape -> secret; secret/ outside."""
    root, secret = tmp_path / "root", tmp_path / "secret"
    (root / "models").mkdir(parents=True)
    (root / "data" / "10_dog").mkdir(parents=True)
    (root / ".hidden").mkdir()
    secret.mkdir()
    (secret / "key.safetensors").write_bytes(b"")
    (root / "escape").symlink_to(secret)
    (root / "models" / "leak.safetensors").symlink_to(secret / "key.safetensors")
    for name, (shapes, metadata, _) in KINDS.items():
        header_only(root / "models" / name, shapes, metadata)
    (root / "models" / "old.ckpt").write_bytes(b"x")
    (root / "models" / "notes.md").write_text("not listed")
    return {"root": root.resolve(), "secret": secret.resolve()}


def test_model_files_are_listed_by_kind(tree: dict[str, Path], built_demo: Path) -> None:
    listing = list_folder(str(tree["root"] / "models"), [tree["root"]], "file")
    labels = [label for label, _ in listing.choices]
    for name, (_, _, kind) in KINDS.items():
        assert f"📄 {name} · {kind}" in labels
    assert any(label.startswith("📄 old.ckpt · pickle checkpoint") for label in labels)
    assert not any("notes.md" in label or "leak" in label for label in labels)  # not a model; a link out
    assert model_kind(built_demo / "tiny-sd1") == "SD1.x diffusers model"
    assert model_kind(built_demo / "tiny-sd1" / "vae") == "VAE (diffusers folder)"


def test_folder_fields_list_folders_and_offer_the_folder_itself(tree: dict[str, Path]) -> None:
    root = tree["root"]
    listing = list_folder(str(root), [root], "dir")
    assert listing.choices[0] == (f"✓ use this folder: {root}", USE + str(root))
    # no .hidden folder, no link out of the root
    assert [label for label, _ in listing.choices[1:]] == ["⬆ up", "📁 data/", "📁 models/"]
    assert dict((v, k) for k, v in listing.choices)[OPEN + ""] == "⬆ up"  # up from a root: the list of roots
    assert list_folder("", [root], "dir").choices == [(f"📁 {root}", OPEN + str(root))]
    folder, path = pick(OPEN + str(root / "data"), [root], "dir")
    assert path is None and folder.folder == root / "data"
    assert pick(USE + str(root / "data" / "10_dog"), [root], "dir") == (None, str(root / "data" / "10_dog"))


@pytest.mark.parametrize("outside", [
    "{secret}", "{root}/..", "{root}/data/../../secret", "{root}/escape", "/", "{root}/models/leak.safetensors",
])
def test_nothing_outside_the_roots_is_listed_or_picked(tree: dict[str, Path], outside: str) -> None:
    text = outside.format(**{k: str(v) for k, v in tree.items()})
    roots = [tree["root"]]
    with pytest.raises(BrowseError, match="outside the folders this GUI may list.*--allowed-root"):
        list_folder(text, roots, "any")
    with pytest.raises(BrowseError, match="outside"):
        pick(USE + text, roots, "any")
    with pytest.raises(BrowseError):
        pick(OPEN + text, roots, "any")
    assert start_listing(text, roots, "any").folder is None  # Browse on a field holding it starts at the roots


def test_browse_roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs, data, work = tmp_path / "runs", tmp_path / "data", tmp_path / "work"
    runs.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    assert browse_roots([data, runs, runs], runs, data, tmp_path / "models") == [runs]  # missing ones left out
    assert browse_roots(None, runs, data, tmp_path / "m") == [work.resolve(), runs, Path.home().resolve()]


def test_browse_reaches_the_working_folders_datasets_and_models(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo dataset (demo/data, in the repository the GUI runs in) had to be typed: only runs/ and the home
    folder were listed."""
    (tmp_path / "demo" / "data" / "25_sks shape").mkdir(parents=True)
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    roots = browse_roots(None, tmp_path / "runs", tmp_path / "datasets", tmp_path / "models")
    assert (f"📁 {tmp_path.resolve()}", OPEN + str(tmp_path.resolve())) in list_folder("", roots, "dir").choices
    labels = [label for label, _ in list_folder(str(tmp_path), roots, "dir").choices]
    assert "📁 demo/" in labels and "📁 models/" in labels
    assert any(v == USE + str((tmp_path / "demo" / "data").resolve())
               for _, v in list_folder(str(tmp_path / "demo" / "data"), roots, "dir").choices)


def test_picking_a_listed_folder_never_raises(tmp_path: Path) -> None:
    """Picking runs/ raised "Value: open:... is not in the list of choices" as a red toast: Gradio checked the pick
    against the choices the list was built with."""
    import gradio as gr

    from gui.folder_browser import browsable_textbox, browse_panel

    runs = tmp_path / "runs"
    runs.mkdir()
    with gr.Blocks() as blocks:
        with browse_panel(lambda: [tmp_path.resolve()]):
            field = browsable_textbox("dir", label="output_dir")
    listing = next(b for b in blocks.blocks.values() if isinstance(b, gr.Dropdown))
    picked = OPEN + str(runs.resolve())
    assert listing.preprocess(picked) == picked
    on_pick = next(f.fn for f in blocks.fns.values() if f.name == "on_pick")
    _panel, shown, _filled = on_pick(picked, 0)
    assert shown.choices[0] == (f"✓ use this folder: {runs.resolve()}", USE + str(runs.resolve()))
    assert on_pick(USE + str(runs.resolve()), 0)[2] == str(runs.resolve()) and field is not None


@pytest.mark.parametrize("odd, said", [("/data/a\0b", "NUL"), ("/" + "x" * 6000, "6001 bytes long")])
def test_an_odd_path_is_refused_by_name(tree: dict[str, Path], odd: str, said: str) -> None:
    roots = [tree["root"]]
    for attempt in (lambda: list_folder(odd, roots, "any"), lambda: pick(OPEN + odd, roots, "any"),
                    lambda: pick(USE + odd, roots, "any")):
        with pytest.raises(BrowseError) as refused:
            attempt()
        assert len(str(refused.value)) < 400
    with pytest.raises(BrowseError, match=said):
        list_folder(odd, roots, "any")
    start = start_listing(odd, roots, "any")  # Browse on a field holding it: the roots, and why
    assert start.folder is None and said in start.note
