"""Caption edits from two browser sessions (or a session and a caption job) on one dataset: none is lost. Edits are
written one at a time (a lock per dataset), never over a caption written since they read it; Undo undoes the
session's own newest edit and never a newer caption; a crash's leftovers go the next time the dataset is opened."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import trainers.dataset_edit.lock as lock
from image_files import captioned_images
from trainers.dataset_edit.backups import MANIFEST, list_backups, undo_last
from trainers.dataset_edit.edits import caption_edit, preview, write_changes
from trainers.dataset_edit.folders import DatasetEditError, file_fingerprint, open_dataset
from trainers.dataset_edit.leftovers import clean_leftovers
from trainers.dataset_edit.tags import BulkOp

DEAD_PID = 999_999_999  # above any pid_max: no process has it


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return captioned_images(tmp_path / "data" / "5_fox")


def caption(root: Path, name: str) -> str:
    return (root / "5_fox" / f"{name}.txt").read_text(encoding="utf-8")


def test_a_bulk_edit_made_from_captions_written_since_is_refused_whole(data: Path) -> None:
    """Two sessions open the dataset; the second applies first. The first's edit would have erased it: refused,
    naming the caption, nothing written; applied again (read anew) both edits are there."""
    first, second = open_dataset(data), open_dataset(data)
    trigger = preview(first, BulkOp("trigger", "sks"))
    write_changes(second, preview(second, BulkOp("suffix", ", red")), "add red", session="B")
    with pytest.raises(DatasetEditError, match=r"a\.txt and 1 more changed since this edit read it .*'fox a, red'"):
        write_changes(first, trigger, "trigger", session="A")
    assert [caption(data, n) for n in "ab"] == ["fox a, red", "fox b, red"]
    assert [b.what for b in list_backups(open_dataset(data))] == ["add red"]
    again = open_dataset(data)
    write_changes(again, preview(again, BulkOp("trigger", "sks")), "trigger", session="A")
    assert [caption(data, n) for n in "ab"] == ["sks, fox a, red", "sks, fox b, red"]


def test_a_stale_caption_box_does_not_save_over_a_newer_caption(data: Path) -> None:
    image = data / "5_fox" / "a.png"
    loaded = file_fingerprint(image.with_suffix(".txt"))  # the box is filled
    (data / "5_fox" / "a.txt").write_text("fox a, by a caption job", encoding="utf-8")
    dataset = open_dataset(data)  # every save opens the dataset again: the box's text is older than the file
    with pytest.raises(DatasetEditError, match="a.txt changed since .*'fox a, by a caption job'.*pick the image"):
        write_changes(dataset, caption_edit(dataset, image, "fox a, typed", loaded), "edit a.png")
    assert caption(data, "a") == "fox a, by a caption job" and list_backups(dataset) == []
    reloaded = file_fingerprint(image.with_suffix(".txt"))
    write_changes(dataset, caption_edit(dataset, image, "fox a, typed", reloaded), "edit a.png")
    assert caption(data, "a") == "fox a, typed"


def test_a_second_edit_waits_for_the_first_then_is_refused_naming_the_dataset(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lock, "LOCK_WAIT_S", 0.3)
    dataset = open_dataset(data)
    held, release = threading.Event(), threading.Event()

    def first_edit() -> None:  # another session's edit, in another thread as gradio runs them
        with lock.edit_lock(open_dataset(data)):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=first_edit)
    thread.start()
    held.wait(5)
    changes = preview(dataset, BulkOp("trigger", "sks"))
    started = time.monotonic()
    with pytest.raises(DatasetEditError, match=f"another edit of {data} is being written.*nothing was changed"):
        write_changes(dataset, changes, "trigger")
    assert time.monotonic() - started >= 0.3
    assert caption(data, "a") == "fox a"
    threading.Timer(0.1, release.set).start()  # it ends while the next one waits: that one is written
    write_changes(dataset, changes, "trigger")
    thread.join()
    assert caption(data, "a") == "sks, fox a"


def test_undo_undoes_the_sessions_own_newest_edit_and_says_whose_the_newest_is(data: Path) -> None:
    dataset = open_dataset(data)
    write_changes(dataset, caption_edit(dataset, data / "5_fox" / "a.png", "fox a, A's"), "edit a.png", "A")
    write_changes(dataset, caption_edit(dataset, data / "5_fox" / "b.png", "fox b, B's"), "edit b.png", "B")
    with pytest.raises(DatasetEditError, match=r"nothing of yours to undo: the newest edit \(edit b.png, at .*\) "
                                               "was made in another browser session"):
        undo_last(open_dataset(data), "C")
    assert undo_last(open_dataset(data), "A").what == "edit a.png"  # B's newer edit stays
    assert [caption(data, n) for n in "ab"] == ["fox a", "fox b, B's"]
    assert [b.what for b in list_backups(dataset)] == ["edit b.png"]


def test_undo_never_removes_a_newer_caption(data: Path) -> None:
    dataset = open_dataset(data)
    image = data / "5_fox" / "a.png"
    write_changes(dataset, caption_edit(dataset, image, "fox a, A's"), "edit a.png", "A")
    write_changes(dataset, caption_edit(dataset, image, "fox a, B's"), "B's edit of a.png", "B")
    with pytest.raises(DatasetEditError, match="cannot undo edit a.png: 5_fox/a.txt was changed since "
                                               r"\(by the edit B's edit of a.png at .*nothing was undone"):
        undo_last(open_dataset(data), "A")
    assert caption(data, "a") == "fox a, B's"
    (data / "5_fox" / "a.txt").write_text("by an editor", encoding="utf-8")
    with pytest.raises(DatasetEditError, match=r"changed since \(by a caption job, an editor"):
        undo_last(open_dataset(data), "B")
    assert caption(data, "a") == "by an editor" and len(list_backups(dataset)) == 2


def test_a_crashs_temp_files_and_half_made_backups_go_when_the_dataset_is_opened_again(data: Path) -> None:
    dataset = open_dataset(data)
    write_changes(dataset, caption_edit(dataset, data / "5_fox" / "a.png", "kept"), "edit a.png")
    folder = data / "5_fox"
    dead = folder / f".a.txt.tmp-{DEAD_PID}-0123abcd"
    live = folder / f".b.txt.tmp-{os.getppid()}-0123abcd"  # a live process is writing it
    for temp in (dead, live):
        temp.write_text("half a caption", encoding="utf-8")
    half_made = dataset.backups / "20261202-010203-000000"  # killed while copying: no manifest yet
    half_made.mkdir()
    (half_made / "000000.txt").write_text("fox b", encoding="utf-8")
    removed = clean_leftovers(open_dataset(data))
    assert sorted(removed) == sorted([dead, half_made])
    assert live.exists() and not dead.exists() and not half_made.exists()
    assert [b.what for b in list_backups(dataset)] == ["edit a.png"]
    assert (list_backups(dataset)[0].folder / MANIFEST).is_file()
    untouched = open_dataset(data)
    assert [e.caption for e in untouched.entries] == ["kept", "fox b"]
