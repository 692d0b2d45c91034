"""Edit-pair datasets: controls found by stem as musubi-tuner finds them, and the checks named before training."""
from __future__ import annotations

from pathlib import Path

from PIL import Image

from trainers.data.edit_pairs import EditPair, match_pairs, pair_issues, skipped_warnings


def _image(path: Path, color: tuple[int, int, int] = (200, 10, 10)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), color).save(path)
    return path


def _layout(tmp_path: Path, targets: list[str], controls: list[str]) -> tuple[list[Path], Path]:
    made = [_image(tmp_path / "images" / name) for name in targets]
    for name in controls:
        _image(tmp_path / "controls" / name, (10, 10, 200))
    (tmp_path / "controls").mkdir(exist_ok=True)
    return made, tmp_path / "controls"


def test_one_control_per_target_by_stem_with_its_caption(tmp_path):
    targets, controls = _layout(tmp_path, ["cat.jpg", "dog.png"], ["cat.png", "dog.webp"])
    (tmp_path / "images" / "cat.txt").write_text("make the cat blue\n", encoding="utf-8")
    report = match_pairs(targets, controls, max_controls=1)
    assert report.pairs == [EditPair(targets[0], (controls / "cat.png",), "make the cat blue"),
                            EditPair(targets[1], (controls / "dog.webp",), "")]
    assert report.missing == [] and report.unreadable == [] and report.unused_controls == []
    assert pair_issues(report) == []


def test_numbered_references_in_number_order_and_longer_names_claim_their_own(tmp_path):
    targets, controls = _layout(tmp_path, ["cat.png", "cat_1.png"],
                                ["cat_10.png", "cat_0000.png", "cat_2.png", "cat_1.png"])
    report = match_pairs(targets, controls, max_controls=3)
    by_target = {pair.target.name: [c.name for c in pair.controls] for pair in report.pairs}
    # cat_1.png is target cat_1's own control, not cat's second reference
    assert by_target == {"cat.png": ["cat_0000.png", "cat_2.png", "cat_10.png"], "cat_1.png": ["cat_1.png"]}


def test_targets_without_controls_are_listed_with_the_fix(tmp_path):
    targets, controls = _layout(tmp_path, ["a.png", "b.png", "c.png"], ["b.png", "zebra.png"])
    report = match_pairs(targets, controls, max_controls=1)
    assert [p.name for p in report.missing] == ["a.png", "c.png"]
    assert report.unused_controls == [controls / "zebra.png"]
    [issue] = pair_issues(report, field="control_directory")
    assert issue.field == "control_directory"
    assert "2 target image(s) have no control image" in issue.message and "a.png, c.png" in issue.message
    assert any("zebra.png" in note and "not used" in note for note in skipped_warnings(report))


def test_a_control_folder_that_does_not_exist_is_named(tmp_path):
    targets, _ = _layout(tmp_path, ["a.png"], [])
    report = match_pairs(targets, tmp_path / "nope", max_controls=1)
    [issue] = pair_issues(report)
    assert issue.field == "conditioning_data_dir" and "nope does not exist" in issue.message


def test_more_references_than_the_model_takes(tmp_path):
    targets, controls = _layout(tmp_path, ["a.png"], ["a_0.png", "a_1.png"])
    report = match_pairs(targets, controls, max_controls=1)
    [issue] = pair_issues(report)
    assert "more control images than the model takes (1): a.png" in issue.message
    assert pair_issues(match_pairs(targets, controls, max_controls=3)) == []


def test_an_unreadable_image_skips_its_pair_and_is_named(tmp_path):
    targets, controls = _layout(tmp_path, ["a.png", "b.png"], ["a.png", "b.png"])
    (controls / "b.png").write_bytes(b"not a png")
    report = match_pairs(targets, controls, max_controls=1)
    assert [p.target.name for p in report.pairs] == ["a.png"]
    assert [path for path, _ in report.unreadable] == [controls / "b.png"]
    assert pair_issues(report) == []  # skipped, not fatal
    assert any("b.png" in note and "skipped" in note for note in skipped_warnings(report))
