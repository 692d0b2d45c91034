"""Captioning with a WD14-family tagger (a tiny ONNX model of the real format): captions written beside each image,
thresholds, filters, trigger word, existing captions, an unreadable image, resume after a stop."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.caption.conftest import image_folder
from trainers.caption.cli import _run
from trainers.caption.job import ImageJob, read_done
from trainers.caption.options import check_config, config_from_values
from trainers.caption.tagger import read_tags
from trainers.core.errors import ToolError
from trainers.core.job import JobStopped
from trainers.core.rundir import Request, request


def caption_cfg(images: Path, tagger: Path, **values: object):
    return config_from_values("caption", {"images": str(images), "model": str(tagger), "captioner": "wd14",
                                          "device": "cpu", **values})


def captions(images: Path, ext: str = ".txt") -> dict[str, str]:
    return {p.stem: p.read_text(encoding="utf-8").strip() for p in sorted(images.rglob(f"*{ext}"))}


def test_tags_follow_the_image_with_trigger_first_and_underscores_replaced(images: Path, tiny_tagger: Path,
                                                                          tmp_path: Path) -> None:
    _run(caption_cfg(images, tiny_tagger, trigger_word="sks"), tmp_path / "job", None)
    written = captions(images)
    assert written["00_red"] == "sks, red background, ^_^"
    assert written["01_blue"] == "sks, blue sky"
    assert written["02_green"] == "sks, hatsune miku, green theme"  # character tags first
    assert written["03_dark"] == "sks"  # nothing is confident on a dark image: the trigger alone


def test_thresholds_blacklist_rating_and_order(images: Path, tiny_tagger: Path, tmp_path: Path) -> None:
    cfg = caption_cfg(images, tiny_tagger, tag_blacklist=["^_^"], replace_underscores=False, include_rating=True,
                      character_tags_first=False, character_threshold=1.0, caption_extension=".caption")
    _run(cfg, tmp_path / "job", None)
    written = captions(images, ".caption")
    assert written["00_red"] == "sensitive, red_background"
    assert written["02_green"] == "general, green_theme"  # the character tag is below its threshold of 1
    assert not list(images.rglob("*.txt"))


def test_existing_captions_skipped_overwritten_or_appended(images: Path, tiny_tagger: Path, tmp_path: Path) -> None:
    red = images / "10_sks" / "00_red.txt"
    red.write_text("my caption, red background", encoding="utf-8")
    _run(caption_cfg(images, tiny_tagger), tmp_path / "skip", None)
    assert red.read_text(encoding="utf-8") == "my caption, red background"
    assert json.loads((tmp_path / "skip" / "report.json").read_text())["skipped_existing"] == 1
    _run(caption_cfg(images, tiny_tagger, existing="append"), tmp_path / "append", None)
    assert red.read_text(encoding="utf-8").strip() == "my caption, red background, ^_^"  # no tag twice
    _run(caption_cfg(images, tiny_tagger, existing="overwrite"), tmp_path / "overwrite", None)
    assert red.read_text(encoding="utf-8").strip() == "red background, ^_^"


def test_an_unreadable_image_is_listed_and_skipped(tmp_path: Path, tiny_tagger: Path) -> None:
    images = image_folder(tmp_path / "data", count=2, broken=True)
    _run(caption_cfg(images, tiny_tagger), tmp_path / "job", None)
    assert set(captions(images)) == {"00_red", "01_blue"}
    report = json.loads((tmp_path / "job" / "report.json").read_text())
    assert report["written"] == 2 and len(report["unreadable"]) == 1 and "99_broken.png" in report["unreadable"][0]
    assert "99_broken.png" in (tmp_path / "job" / "report.md").read_text()


def test_a_stopped_job_keeps_its_captions_and_a_resume_does_only_the_rest(tmp_path: Path, tiny_tagger: Path) -> None:
    images = image_folder(tmp_path / "data", count=6)
    job_dir = tmp_path / "job"
    cfg = caption_cfg(images, tiny_tagger, existing="overwrite", batch_size=2)
    job = ImageJob(cfg, job_dir)
    stop_after = {"calls": 0}
    from trainers.caption import run as caption_run

    real = caption_run.load_captioner

    def stopping_captioner(j: ImageJob):  # the user presses Stop while the second batch is being tagged
        tagger = real(j)

        def tag(batch):
            stop_after["calls"] += 1
            if stop_after["calls"] == 2:
                request(job_dir, Request.STOP)
            return tagger(batch)
        return tag

    caption_run.load_captioner = stopping_captioner
    try:
        with pytest.raises(JobStopped, match="stopped after 4 of 6 images"):
            caption_run.run(cfg, job)
    finally:
        caption_run.load_captioner = real
    assert len(captions(images)) == 4 and len(read_done(job_dir)) == 4
    first = {p: p.stat().st_mtime_ns for p in images.rglob("*.txt")}
    _run(cfg.replace(resume=str(job_dir)), tmp_path / "resumed", None)
    assert len(captions(images)) == 6
    assert all(p.stat().st_mtime_ns == t for p, t in first.items())  # existing = overwrite, yet not redone
    assert json.loads((tmp_path / "resumed" / "report.json").read_text())["skipped_done"] == 4


def test_bad_input_is_named(tmp_path: Path, tiny_tagger: Path) -> None:
    issues = check_config(config_from_values("caption", {"images": str(tmp_path / "nope"), "resume": str(tmp_path),
                                                         "model": "not a model"}))
    named = {i.field: i.message for i in issues}
    assert "is not a folder" in named["images"] and "done.txt" in named["resume"] and "hub id" in named["model"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ToolError, match="holds no images"):
        _run(caption_cfg(empty, tiny_tagger), tmp_path / "job", None)
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ToolError, match="columns name and category"):
        read_tags(tmp_path / "bad.csv")


def test_docs_list_every_option_as_declared() -> None:
    from trainers.caption.options import options_markdown

    docs = (Path(__file__).resolve().parents[2] / "docs" / "captioning.md").read_text(encoding="utf-8")
    for verb in ("caption", "masks"):
        assert options_markdown(verb) in docs, f"docs/captioning.md: paste `options_markdown({verb!r})` again"


def test_a_hub_model_not_downloaded_while_offline_is_named(images: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ToolError, match="not downloaded and the hub cannot be reached"):
        _run(caption_cfg(images, "atelier-tests/no-such-tagger"), tmp_path / "job", None)  # type: ignore[arg-type]
    assert not list(images.rglob("*.txt"))


def test_mask_options_are_checked_before_a_model_loads(images: Path, tmp_path: Path) -> None:
    cfg = config_from_values("masks", {"images": str(images), "method": "clipseg", "prompt": " ", "existing": "append",
                                       "masks_dir": str(images / "masks")})
    named = {i.field: i.message for i in check_config(cfg)}
    assert set(named) == {"prompt", "existing", "masks_dir"}
    assert "inside the images' folder" in named["masks_dir"]
    background = check_config(cfg.replace(method="background", prompt="x", existing="skip", masks_dir=""))
    assert [i.field for i in background] == ["trust_remote_code"]


def test_append_reads_the_old_caption_as_the_trainer_does_and_writes_utf8(images: Path, tiny_tagger: Path,
                                                                          tmp_path: Path) -> None:
    """Notepad's "Unicode" (UTF-16 LE with a mark) and a Windows-1252 file keep their text, now in UTF-8; a file the
    trainer cannot read as a caption is left as it is and named."""
    import codecs

    from trainers.data.text_files import decode_caption

    red, blue, green = (images / "10_sks" / f"{name}.txt" for name in ("00_red", "01_blue", "02_green"))
    red.write_bytes(codecs.BOM_UTF16_LE + "my café caption".encode("utf-16-le"))
    blue.write_bytes("naïve sky".encode("cp1252"))
    green.write_bytes("no mark".encode("utf-16-le"))  # NUL characters: no caption to the trainer
    _run(caption_cfg(images, tiny_tagger, existing="append"), tmp_path / "append", None)
    assert red.read_text(encoding="utf-8").strip() == "my café caption, red background, ^_^"
    assert blue.read_text(encoding="utf-8").strip() == "naïve sky, blue sky"
    assert decode_caption(red.read_bytes()).problem == ""  # plain UTF-8 now
    assert green.read_bytes() == "no mark".encode("utf-16-le")
    report = json.loads((tmp_path / "append" / "report.json").read_text())
    assert report["written"] == 3 and "02_green.png" in report["unreadable"][0]
    assert "02_green.txt" in report["unreadable"][0] and "UTF-8" in report["unreadable"][0]
