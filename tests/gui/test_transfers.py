"""Remote users' files: uploads land whole in a new dataset folder or not at all; downloads hold what the run made."""
from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest
from PIL import Image

from gui import transfers
from gui.transfers import TransferError, download_model, download_zip, result_files, save_upload
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
    monkeypatch.setattr(transfers, "MAX_UPLOAD_BYTES", 10)
    bomb = _zip(tmp_path / "bomb.zip", {"1_x/a.png": _png_bytes()})
    with pytest.raises(TransferError, match="larger than"):
        save_upload([bomb], "bomb", datasets)
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
    model = download_model(run, str(lora))
    assert model.parent == run / "downloads" and model.read_bytes() == b"final"
    files = result_files(run, str(lora), [str(save), str(tmp_path / "deleted.safetensors")], [str(sample)])
    archive = download_zip(run, files)
    assert archive.is_relative_to(run)
    with zipfile.ZipFile(archive) as z:
        assert sorted(z.namelist()) == ["config.toml", "fox-000001.safetensors", "fox.safetensors",
                                        "samples/fox_000010.png"]
        assert z.read("fox.safetensors") == b"final"
    with pytest.raises(TransferError, match="no output"):
        download_model(run, "")
