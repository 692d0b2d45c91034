"""Remote users' files: uploads land whole in a new dataset folder or not at all; downloads hold what the run made."""
from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from gui import transfers
from gui.transfers import TransferError, UploadLimits, download_model, download_zip, result_files, save_upload
from trainers.data.kohya_folders import scan_kohya_folders


def _png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (200, 10, 10)).save(path)
    return path


def _png_bytes() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="PNG")
    return buffer.getvalue()


def _zip(path: Path, members: dict[str, bytes], links: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, "/etc/passwd")
    return path


def test_loose_images_and_captions_become_a_trainable_folder(tmp_path: Path) -> None:
    uploads = tmp_path / "gradio tmp"
    files = [_png(uploads / "a fox.png"), _png(uploads / "b.jpg"), uploads / "a fox.txt", uploads / "notes.exe"]
    files[2].write_text("a red fox", encoding="utf-8")
    files[3].write_bytes(b"MZ")
    upload = save_upload(files, "my foxes ü", tmp_path / "datasets", repeats=3)
    assert upload.folder == tmp_path / "datasets" / "my foxes ü"
    assert (upload.images, upload.captions) == (2, 1)
    assert sorted(p.name for p in (upload.folder / "3_my foxes ü").iterdir()) == ["a fox.png", "a fox.txt", "b.jpg"]
    assert any("notes.exe" in n for n in upload.notes) and any("3_my foxes ü" in n for n in upload.notes)
    scan = scan_kohya_folders(upload.folder)  # what train_data_dir = upload.folder trains on
    assert scan.num_images == 2 and scan.subsets[0].repeats == 3 and scan.subsets[0].num_captions_found == 1


def test_a_file_named_as_an_image_is_checked_by_its_content(tmp_path: Path) -> None:
    uploads = tmp_path / "gradio tmp"
    fake = uploads / "fake.png"
    fake.parent.mkdir(parents=True)
    fake.write_text("I am a text file, not a picture", encoding="utf-8")
    truncated = uploads / "cut.jpg"
    buffer = io.BytesIO()
    Image.new("RGB", (64, 64), (9, 90, 200)).save(buffer, format="JPEG")
    truncated.write_bytes(buffer.getvalue()[:200])
    upload = save_upload([_png(uploads / "real.png"), fake, truncated], "shapes", tmp_path / "datasets")
    assert upload.images == 1
    assert [p.name for p in upload.folder.rglob("*") if p.is_file()] == ["real.png"]
    said = " | ".join(upload.notes)
    assert "skipped fake.png: named as an image, but not an image" in said and "skipped cut.jpg" in said

    archive = _zip(tmp_path / "fakes.zip", {"1_x/a.png": b"hello", "1_x/a.txt": b"a caption"})
    with pytest.raises(TransferError, match=r"no images[\s\S]*a\.png': named as an image"):
        save_upload([archive], "only fakes", tmp_path / "datasets")
    assert not (tmp_path / "datasets" / "only fakes").exists()


def test_a_zip_keeps_its_kohya_folders_and_nothing_escapes(tmp_path: Path) -> None:
    png = _png_bytes()
    archive = _zip(tmp_path / "data.zip", {
        "my data/10_sks dog/1.png": png, "my data/10_sks dog/1.txt": b"sks dog", "my data/1_dog/2.png": png,
        "my data/../../escape.png": png, "/abs.png": png, "__MACOSX/my data/._1.png": b"x",
        "my data/.hidden.png": png}, links=("my data/10_sks dog/link.png",))
    upload = save_upload([archive], "dogs", tmp_path / "datasets")
    assert sorted(str(p.relative_to(upload.folder)) for p in upload.folder.rglob("*") if p.is_file()) == [
        "10_sks dog/1.png", "10_sks dog/1.txt", "1_dog/2.png"]
    assert not (tmp_path / "escape.png").exists() and not list(tmp_path.parent.glob("escape.png"))
    assert upload.images == 2


def test_refused_uploads_leave_nothing_and_never_touch_an_existing_folder(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = tmp_path / "datasets"
    (datasets / "taken").mkdir(parents=True)
    (datasets / "taken" / "keep.txt").write_text("mine", encoding="utf-8")
    image = _png(tmp_path / "in" / "x.png")
    with pytest.raises(TransferError, match="exists already"):
        save_upload([image], "taken", datasets)
    assert [p.name for p in (datasets / "taken").iterdir()] == ["keep.txt"]
    caption = tmp_path / "in" / "x.txt"
    caption.write_text("a caption", encoding="utf-8")
    with pytest.raises(TransferError, match="no images"):
        save_upload([caption], "empty", datasets)
    with pytest.raises(TransferError, match="plain file name"):
        save_upload([image], "../outside", datasets)
    monkeypatch.setattr(transfers, "LIMITS", UploadLimits(max_unpacked_bytes=10))
    big = _zip(tmp_path / "big.zip", {"1_x/a.png": _png_bytes()})
    with pytest.raises(TransferError, match="--max-unpacked-size"):
        save_upload([big], "big", datasets)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(TransferError, match="not a readable zip"):
        save_upload([bad], "bad", datasets)
    assert sorted(p.name for p in datasets.iterdir()) == ["taken"]  # no half-written or hidden temp folders


def test_downloads_hold_the_runs_files_and_are_served_from_its_folder(tmp_path: Path) -> None:
    run, out = tmp_path / "runs" / "20260101-lora-fox", tmp_path / "out put"
    (run / "samples").mkdir(parents=True)
    (run / "config.toml").write_text('method = "lora"\n', encoding="utf-8")
    sample = _png(run / "samples" / "fox_000010.png")
    lora, save = out / "fox.safetensors", out / "fox-000001.safetensors"
    out.mkdir()
    lora.write_bytes(b"final")
    save.write_bytes(b"epoch 1")
    (run / "scores.json").write_text('{"records": []}', encoding="utf-8")  # a scored run's scores (docs/scores.md)
    (run / "health").mkdir()
    (run / "health" / "fox.safetensors.json").write_text('{"verdict": "healthy"}', encoding="utf-8")  # docs/health.md
    model = download_model(run, str(lora))
    assert model.parent == run / "downloads" and model.read_bytes() == b"final"
    files = result_files(run, str(lora), [str(save), str(tmp_path / "deleted.safetensors")], [str(sample)])
    archive = download_zip(run, files)
    assert archive.is_relative_to(run)
    with zipfile.ZipFile(archive) as z:
        assert sorted(z.namelist()) == ["config.toml", "fox-000001.safetensors", "fox.safetensors",
                                        "health/fox.safetensors.json", "samples/fox_000010.png", "scores.json"]
        assert z.read("fox.safetensors") == b"final"
    with pytest.raises(TransferError, match="no output"):
        download_model(run, "")


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


ESCAPES = {  # zip member names that try to land outside the new dataset folder; {out} is an absolute folder
    "double slash": "/{out}/a.png",
    "single slash": "{out}/a.png",
    "dot dot": "../escaped/a.png",
    "dot dot inside": "1_x/../../escaped/a.png",
    "backslash dot dot": "..\\escaped\\a.png",
    "backslash absolute": "\\{outb}\\a.png",
    "drive letter": "C:escaped/a.png",
    "drive letter backslash": "C:\\escaped\\a.png",
    "drive letter slash": "c:/escaped/a.png",
    "unc": "\\\\server\\share\\escaped\\a.png",
    "division slash": "\u2215{outu}\u2215a.png",
    "fullwidth dots": "\uff0e\uff0e/escaped/a.png",
    "one dot leaders": "\u2024\u2024/escaped/a.png",
    "fullwidth solidus": "..\uff0fescaped\uff0fa.png",
    "nul byte": "1_x/a.png\0/../../../escaped.png",
    "name over NAME_MAX": "1_x/" + "n" * 300 + ".png",
    "path over PATH_MAX": "/".join(["d" * 250] * 20) + "/a.png",
    "right-to-left override": "1_x/a\u202egnp.exe",
}


@pytest.mark.parametrize("trick", ESCAPES, ids=list(ESCAPES))
def test_no_zip_member_is_written_outside_the_new_folder(trick: str, tmp_path: Path) -> None:
    out = tmp_path / "escaped"
    name = ESCAPES[trick].format(out=out, outb=str(out).replace("/", "\\"), outu=str(out).replace("/", "\u2215"))
    png = _png_bytes()
    datasets = tmp_path / "datasets"
    accepted = _zip(tmp_path / "with a good image.zip", {name: png, "1_x/good.png": png})
    refused = _zip(tmp_path / "only the trick.zip", {name: png})
    before = _tree(tmp_path)

    upload = save_upload([accepted], "new", datasets)
    created = _tree(tmp_path) - before
    assert created and all(p == datasets or p.is_relative_to(upload.folder) for p in created), sorted(created)
    assert not out.exists()
    written = sorted(str(p.relative_to(upload.folder)) for p in upload.folder.rglob("*") if p.is_file())
    assert written in (["1_x/good.png"], ["1_x/a.png", "1_x/good.png"]), written  # the NUL cut the name short
    assert written == ["1_x/good.png"] or trick == "nul byte"
    assert written == ["1_x/a.png", "1_x/good.png"] or any("skipped" in n for n in upload.notes), upload.notes

    before = _tree(tmp_path)
    try:  # alone, the member is refused, or (a name that is safe as loose file) lands inside the new folder
        alone = save_upload([refused], "alone", datasets).folder
    except TransferError as err:
        assert "no images" in str(err)
        assert _tree(tmp_path) == before  # a refused upload creates nothing, not even a staging folder
    else:
        assert all(p.is_relative_to(alone) for p in _tree(tmp_path) - before)
    assert not out.exists()


def test_symlink_members_are_never_followed_or_created(tmp_path: Path) -> None:
    png = _png_bytes()
    archive = tmp_path / "links.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name, points_to in (("1_x", str(tmp_path)), ("2_y", "../../.."), ("1_x/c.png", "/etc/passwd")):
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, points_to)
        z.writestr("1_x/b.png", png)  # through the links' names: plain folders of the upload, never the links
        z.writestr("2_y/c.png", png)
    upload = save_upload([archive], "links", tmp_path / "datasets")
    files = sorted(p for p in upload.folder.rglob("*"))
    assert not any(p.is_symlink() for p in files)
    assert sorted(str(p.relative_to(upload.folder)) for p in files if p.is_file()) == ["1_x/b.png", "2_y/c.png"]
    assert sum("symbolic link" in n for n in upload.notes) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["datasets", "links.zip"]


def test_names_that_differ_only_by_case_or_unicode_form_are_one_file(tmp_path: Path) -> None:
    png = _png_bytes()
    archive = _zip(tmp_path / "case.zip", {"1_x/Fox.png": png, "1_x/fox.PNG": png, "1_x/caf\u00e9.png": png,
                                           "1_x/cafe\u0301.png": png, "1_X/other.png": png, "1_x/other.png": png})
    upload = save_upload([archive], "case", tmp_path / "datasets")
    assert sorted(str(p.relative_to(upload.folder)) for p in upload.folder.rglob("*.*")) == [
        "1_x/Fox.png", "1_x/caf\u00e9.png", "1_x/other.png"] or upload.images == 3
    assert upload.images == 3 and sum("came twice" in n for n in upload.notes) == 3


def _bomb(path: Path, members: dict[str, int]) -> Path:
    """A zip of members made of zeros (`name: unpacked bytes`), deflated to about a thousandth."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, size in members.items():
            archive.writestr(name, bytes(size))
    return path


@pytest.mark.parametrize(("members", "limits", "hint"), [
    ({"1_x/bomb.png": 64 << 20}, UploadLimits(), "--max-unzip-ratio"),  # one member: 64 MB from 64 KB
    ({f"1_x/{i}.png": 1 << 20 for i in range(20)}, UploadLimits(), "--max-unzip-ratio"),  # small ones, in sum
    ({"1_x/a.png": 3000}, UploadLimits(max_unpacked_bytes=2000), "--max-unpacked-size"),
    ({"1_x/a.png": 10, "1_x/b.png": 10, "1_x/c.png": 10}, UploadLimits(max_files=2), "--max-upload-files"),
], ids=["member ratio", "archive ratio", "unpacked size", "file count"])
def test_each_upload_limit_says_which_flag_raises_it(members: dict[str, int], limits: UploadLimits, hint: str,
                                                     tmp_path: Path) -> None:
    archive = _bomb(tmp_path / "upload.zip", members)
    with pytest.raises(TransferError, match=hint):
        save_upload([archive], "limited", tmp_path / "datasets", limits=limits)
    assert not (tmp_path / "datasets").exists() or not list((tmp_path / "datasets").iterdir())


def test_the_free_disk_space_is_checked_before_unpacking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _zip(tmp_path / "data.zip", {"1_x/a.png": _png_bytes()})
    real = transfers.shutil.disk_usage
    monkeypatch.setattr(transfers.shutil, "disk_usage", lambda p: real(p)._replace(free=100 << 20))  # a full disk
    with pytest.raises(TransferError, match="not enough free disk space.*--datasets-dir"):
        save_upload([archive], "full", tmp_path / "datasets")
    assert not (tmp_path / "datasets").exists()


def test_a_member_that_holds_more_than_it_declares_is_refused_while_unpacking(tmp_path: Path) -> None:
    png = _png_bytes()
    archive = _zip(tmp_path / "lies.zip", {"1_x/a.png": png, "1_x/b.png": png + b"\0" * 4000})
    raw = archive.read_bytes()
    with zipfile.ZipFile(archive) as z:
        liar = z.getinfo("1_x/b.png")
    size = (liar.file_size).to_bytes(4, "little")
    raw = raw.replace(size, (len(png)).to_bytes(4, "little"))  # its headers now say it is as small as a.png
    archive.write_bytes(raw)
    with pytest.raises(TransferError, match="1_x/b.png.*cannot be unpacked"):
        save_upload([archive], "lies", tmp_path / "datasets")
    assert not list((tmp_path / "datasets").iterdir())
