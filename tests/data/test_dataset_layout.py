"""Tests for the kohya folder scanner (trainers/data/kohya_folders.py) and image loading (trainers/data/images.py)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from trainers.data.images import ImageLoadError, PreparedImage, load_image_rgb, prepare_image, to_rgb
from trainers.data.kohya_folders import (
    DatasetLayoutError,
    DatasetScan,
    ImageItem,
    Subset,
    normalize_caption_extension,
    parse_folder_name,
    scan_kohya_folders,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- helpers


def make_png(path: Path, size: tuple[int, int] = (8, 8), color=(200, 30, 30), mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color).save(path)
    return path


def write_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode(encoding))
    return path


@pytest.fixture
def good_layout(tmp_path: Path) -> Path:
    root = tmp_path / "train"
    # subset 1: 10 repeats, two images with captions, one without
    make_png(root / "10_sks dog" / "a.png")
    write_text(root / "10_sks dog" / "a.txt", "sks dog, Sitting , grass\n")
    make_png(root / "10_sks dog" / "b.png")
    write_text(root / "10_sks dog" / "b.txt", "\ufeffsks dog, running")  # BOM tolerated
    make_png(root / "10_sks dog" / "c.PNG")  # upper-case extension, no caption -> tokens
    # subset 2: unicode + quotes + underscores in tokens, no caption files, one empty caption file
    sub2 = root / "3_ñandú \"quoted\" it's_x"
    make_png(sub2 / "z.png")
    make_png(sub2 / "y.png")
    write_text(sub2 / "y.txt", "   \n")  # empty -> tokens
    # noise that must be ignored
    write_text(root / ".DS_Store", "junk")
    make_png(root / ".hidden_folder" / "secret.png")
    make_png(root / "10_sks dog" / ".hidden.png")
    write_text(root / "10_sks dog" / "notes.md", "not an image")
    make_png(root / "10_sks dog" / "nested" / "deep.png")  # not recursive, like kohya
    return root


# --------------------------------------------------------------------------- good layout


def test_good_layout_scan(good_layout: Path):
    scan = scan_kohya_folders(good_layout)
    assert isinstance(scan, DatasetScan)
    assert scan.root == good_layout
    names = [s.folder.name for s in scan.subsets]
    assert names == sorted(names) == ["10_sks dog", "3_ñandú \"quoted\" it's_x"]

    dog, other = scan.subsets
    assert isinstance(dog, Subset) and dog.repeats == 10 and dog.tokens == "sks dog"
    assert [i.path.name for i in dog.images] == ["a.png", "b.png", "c.PNG"]
    assert all(isinstance(i, ImageItem) for i in dog.images)
    a, b, c = dog.images
    assert (a.caption, a.caption_from_file) == ("sks dog, Sitting , grass", True)
    assert (b.caption, b.caption_from_file) == ("sks dog, running", True)
    assert (c.caption, c.caption_from_file) == ("sks dog", False)
    assert dog.num_captions_found == 2 and dog.num_missing_captions == 1

    assert other.repeats == 3 and other.tokens == "ñandú \"quoted\" it's_x"
    assert [i.path.name for i in other.images] == ["y.png", "z.png"]
    assert all(i.caption == other.tokens and not i.caption_from_file for i in other.images)
    assert other.num_captions_found == 0 and other.num_missing_captions == 2

    assert scan.num_images == 5
    assert scan.num_repeated_images == 3 * 10 + 2 * 3
    assert scan.warnings == []


def test_dataset_dirs_summary_and_tag_frequency(good_layout: Path):
    scan = scan_kohya_folders(good_layout)
    assert scan.dataset_dirs_summary() == {
        "10_sks dog": {"n_repeats": 10, "img_count": 3},
        "3_ñandú \"quoted\" it's_x": {"n_repeats": 3, "img_count": 2},
    }
    freq = scan.tag_frequency()
    # per image (not per repeat), split on commas, stripped, lower-cased like kohya; fallback tokens count too
    assert freq["10_sks dog"] == {"sks dog": 3, "sitting": 1, "grass": 1, "running": 1}
    assert freq["3_ñandú \"quoted\" it's_x"] == {"ñandú \"quoted\" it's_x": 2}


def test_report_mentions_counts(good_layout: Path):
    text = scan_kohya_folders(good_layout).report()
    assert "10_sks dog: 3 images, 2 captions found, 1 missing" in text
    assert "x10 repeats" in text and "x3 repeats" in text
    assert "total: 5 images, 36 per epoch" in text


@pytest.mark.parametrize("ext", [".caption", "caption", " .caption "])
def test_caption_extension_with_or_without_dot(tmp_path: Path, ext: str):
    root = tmp_path / "d"
    make_png(root / "2_cat" / "one.png")
    write_text(root / "2_cat" / "one.caption", "a cat on a mat")
    write_text(root / "2_cat" / "one.txt", "WRONG FILE")
    make_png(root / "2_cat" / "two.png")
    write_text(root / "2_cat" / "two.txt", "ignored because the extension is .caption")
    scan = scan_kohya_folders(root, caption_extension=ext)
    one, two = scan.subsets[0].images
    assert (one.caption, one.caption_from_file) == ("a cat on a mat", True)
    assert (two.caption, two.caption_from_file) == ("cat", False)
    assert scan.caption_extension == ".caption"
    assert normalize_caption_extension(ext) == ".caption"


def test_caption_multiline_uses_first_line_and_warns(tmp_path: Path):
    root = tmp_path / "d"
    make_png(root / "1_cat" / "one.png")
    write_text(root / "1_cat" / "one.txt", "\n first line \nsecond line\n")
    scan = scan_kohya_folders(root)
    assert scan.subsets[0].images[0].caption == "first line"
    assert any("one.txt" in w and "first" in w for w in scan.warnings)


def test_folder_name_parsing():
    assert parse_folder_name("10_sks dog") == (10, "sks dog")
    assert parse_folder_name("1_a_b_c") == (1, "a_b_c")
    assert parse_folder_name("5_") == (5, "")
    assert parse_folder_name("0_x") == (0, "x")
    assert parse_folder_name("sks dog") is None
    assert parse_folder_name("x_10") is None
    assert parse_folder_name("１０_fullwidth") is None  # non-ASCII digits are not repeats


def test_hidden_files_and_folders_ignored(tmp_path: Path):
    root = tmp_path / "d"
    make_png(root / "4_dog" / "img.png")
    make_png(root / ".cache" / "img.png")
    make_png(root / ".thumbs.png")
    make_png(root / "4_dog" / "._img.png")  # macOS resource fork
    scan = scan_kohya_folders(root)
    assert [s.folder.name for s in scan.subsets] == ["4_dog"]
    assert [i.path.name for i in scan.subsets[0].images] == ["img.png"]
    assert scan.warnings == []


def test_empty_subfolder_is_warning_when_others_have_images(tmp_path: Path):
    root = tmp_path / "d"
    make_png(root / "4_dog" / "img.png")
    (root / "2_empty").mkdir()
    (root / "notes").mkdir()  # no prefix but no images: ignored with a warning
    make_png(root / "loose.png")  # root image next to valid subfolders: ignored with a warning
    scan = scan_kohya_folders(root)
    assert [s.folder.name for s in scan.subsets] == ["4_dog"]
    assert scan.dataset_dirs_summary() == {"4_dog": {"n_repeats": 4, "img_count": 1}}
    joined = "\n".join(scan.warnings)
    assert "2_empty" in joined and "no images" in joined
    assert '"notes"' in joined
    assert "loose.png" in joined


# --------------------------------------------------------------------------- errors


def _assert_expected_layout_shown(msg: str, root: Path):
    assert "Expected:" in msg
    assert f"{root}/" in msg
    assert "10_sks dog/" in msg
    assert "(caption, optional)" in msg


def test_error_root_missing(tmp_path: Path):
    root = tmp_path / "nope"
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert msg.startswith(f'train_data_dir = "{root}"')
    assert "does not exist" in msg
    _assert_expected_layout_shown(msg, root)
    assert isinstance(ei.value, ValueError)
    assert ei.value.field == "train_data_dir" and ei.value.path == root


def test_error_root_is_a_file_uses_custom_field(tmp_path: Path):
    root = make_png(tmp_path / "photo.png")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root, field="reg_data_dir")
    msg = str(ei.value)
    assert msg.startswith(f'reg_data_dir = "{root}"')
    assert "not a folder" in msg
    _assert_expected_layout_shown(msg, root)
    assert ei.value.field == "reg_data_dir"


def test_error_root_empty(tmp_path: Path):
    root = tmp_path / "empty"
    root.mkdir()
    write_text(root / ".DS_Store", "hidden files do not count")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert f'train_data_dir = "{root}"' in msg
    assert "empty" in msg
    _assert_expected_layout_shown(msg, root)


def test_error_only_non_image_files(tmp_path: Path):
    root = tmp_path / "d"
    write_text(root / "readme.txt", "hi")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert "readme.txt" in msg and "no image subfolders" in msg
    _assert_expected_layout_shown(msg, root)


def test_error_images_directly_in_root(tmp_path: Path):
    root = tmp_path / "x"
    for name in ("a.png", "b.png", "c.jpg"):
        make_png(root / name)
    write_text(root / "a.txt", "caption")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert msg.startswith(f'train_data_dir = "{root}": images were found directly in this folder (3 files: a.png, b.png, c.jpg)')
    assert "<repeats>_<tokens>" in msg
    _assert_expected_layout_shown(msg, root)
    assert "a.png" in msg.split("Expected:")[1]  # example uses the user's own file name
    assert f'Fix: move the images into a folder such as "{root / "10_sks dog"}"' in msg


def test_error_images_in_root_lists_at_most_a_few(tmp_path: Path):
    root = tmp_path / "x"
    for i in range(12):
        make_png(root / f"img{i:02d}.png", size=(2, 2))
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert "12 files" in msg and "img00.png" in msg and "img11.png" not in msg and "+7 more" in msg


def test_error_subfolders_without_prefix(tmp_path: Path):
    root = tmp_path / "d"
    make_png(root / "sks dog" / "a.png")
    make_png(root / "cat_photos" / "a.png")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert f'train_data_dir = "{root}"' in msg
    assert '"sks dog" has no <repeats>_ prefix: rename it to "10_sks dog"' in msg
    assert '"cat_photos" has no <repeats>_ prefix: rename it to "10_cat_photos"' in msg
    _assert_expected_layout_shown(msg, root)


def test_error_unprefixed_folder_with_images_next_to_valid_one(tmp_path: Path):
    root = tmp_path / "d"
    make_png(root / "5_good" / "a.png")
    make_png(root / "forgot prefix" / "b.png")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert '"forgot prefix" has no <repeats>_ prefix: rename it to "10_forgot prefix"' in msg
    assert "would be ignored" in msg
    assert "5_good" not in msg.split("Expected:")[0]


@pytest.mark.parametrize(
    "folder, expected",
    [
        ("0_sks dog", '"0_sks dog" has 0 repeats'),
        ("1.5_sks dog", '"1.5_sks dog" has repeats "1.5", which is not a whole number'),
        ("-2_sks dog", '"-2_sks dog" has repeats "-2", which is not a whole number'),
    ],
)
def test_error_bad_repeats(tmp_path: Path, folder: str, expected: str):
    root = tmp_path / "d"
    make_png(root / folder / "a.png")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert f'train_data_dir = "{root}"' in msg
    assert expected in msg
    assert 'rename it to "10_sks dog"' in msg
    _assert_expected_layout_shown(msg, root)


def test_error_valid_subfolders_but_no_images(tmp_path: Path):
    root = tmp_path / "d"
    (root / "10_dog").mkdir(parents=True)
    write_text(root / "10_dog" / "a.txt", "caption without image")
    make_png(root / "5_cat" / "nested" / "deep.png")  # not searched recursively
    write_text(root / "5_cat" / "photo.gif", "gif is not supported")
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root)
    msg = str(ei.value)
    assert f'train_data_dir = "{root}"' in msg
    assert "no images found in any subfolder" in msg
    assert '"10_dog": contains only a.txt' in msg
    assert '"5_cat": contains only nested/, photo.gif' in msg
    assert "not searched recursively" in msg
    _assert_expected_layout_shown(msg, root)


def test_error_undecodable_caption_names_file_when_strict(tmp_path: Path):
    root = tmp_path / "d"
    make_png(root / "1_dog" / "a.png")
    bad = root / "1_dog" / "a.txt"
    bad.write_bytes(b"caf\xe9 \xff\xfe")  # latin-1, not UTF-8
    assert any(str(bad) in w for w in scan_kohya_folders(root).warnings)  # read anyway, and named
    with pytest.raises(DatasetLayoutError) as ei:
        scan_kohya_folders(root, strict=True)
    msg = str(ei.value)
    assert str(bad) in msg and "UTF-8" in msg
    assert ei.value.path == bad


def test_invalid_caption_extension():
    with pytest.raises(ValueError):
        normalize_caption_extension("")
    with pytest.raises(ValueError):
        normalize_caption_extension(".")


def test_scanner_does_not_import_torch_or_pil():
    code = (
        "import sys; import trainers.data.kohya_folders; "
        "bad = [m for m in ('torch', 'PIL', 'numpy') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


def test_scan_is_fast(tmp_path: Path):
    import time

    root = tmp_path / "d"
    for s in range(4):
        folder = root / f"{s + 1}_set{s}"
        folder.mkdir(parents=True)
        for i in range(250):
            (folder / f"{i:04d}.png").write_bytes(b"")  # the scanner never opens images
            if i % 2:
                (folder / f"{i:04d}.txt").write_text(f"tag{i % 7}, common")
    t0 = time.perf_counter()
    scan = scan_kohya_folders(root)
    assert time.perf_counter() - t0 < 1.0
    assert scan.num_images == 1000
    assert scan.num_repeated_images == 250 * (1 + 2 + 3 + 4)


# --------------------------------------------------------------------------- image loading


def _png_bytes(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG", **kw)
    return buf.getvalue()


def test_exif_rotated_image_comes_out_upright(tmp_path: Path):
    # stored 4 wide x 2 high; left column red, rest blue; orientation 6 = "rotate 90 CW to display"
    img = Image.new("RGB", (4, 2), (0, 0, 255))
    for y in range(2):
        img.putpixel((0, y), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rot.png"
    path.write_bytes(_png_bytes(img, exif=exif))

    out = load_image_rgb(path)
    assert out.mode == "RGB"
    assert out.size == (2, 4)  # now 2 wide x 4 high
    arr = np.asarray(out)
    assert (arr[0] == [255, 0, 0]).all()  # stored left column became the top row
    assert (arr[1:] == [0, 0, 255]).all()


def test_exif_rotated_jpeg(tmp_path: Path):
    img = Image.new("RGB", (32, 16), (128, 128, 128))
    exif = Image.Exif()
    exif[0x0112] = 8
    path = tmp_path / "rot.jpg"
    img.save(path, exif=exif)
    assert load_image_rgb(path).size == (16, 32)


def test_rgba_composited_on_white(tmp_path: Path):
    img = Image.new("RGBA", (2, 1), (0, 0, 0, 0))
    img.putpixel((1, 0), (10, 20, 30, 255))
    path = tmp_path / "alpha.png"
    img.save(path)
    out = load_image_rgb(path)
    assert out.mode == "RGB"
    assert out.getpixel((0, 0)) == (255, 255, 255)  # fully transparent -> white, not black
    assert out.getpixel((1, 0)) == (10, 20, 30)


def test_other_modes_convert(tmp_path: Path):
    la = Image.new("LA", (1, 1), (0, 0))
    assert to_rgb(la).getpixel((0, 0)) == (255, 255, 255)
    p = Image.new("P", (2, 1), 0)
    p.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    p.putpixel((1, 0), 1)
    p.info["transparency"] = 0
    path = tmp_path / "p.png"
    p.save(path, transparency=0)
    out = load_image_rgb(path)
    assert out.getpixel((0, 0)) == (255, 255, 255) and out.getpixel((1, 0)) == (255, 0, 0)
    assert to_rgb(Image.new("L", (1, 1), 7)).getpixel((0, 0)) == (7, 7, 7)
    assert to_rgb(Image.new("CMYK", (1, 1), (0, 0, 0, 0))).mode == "RGB"
    g16 = Image.new("I;16", (1, 1), 65535)
    assert to_rgb(g16).getpixel((0, 0)) == (255, 255, 255)


def test_corrupt_image_raises_image_load_error(tmp_path: Path):
    bad = tmp_path / "10_dog" / "broken.png"
    bad.parent.mkdir()
    bad.write_bytes(b"this is not a png")
    with pytest.raises(ImageLoadError) as ei:
        load_image_rgb(bad)
    assert str(bad) in str(ei.value)
    assert ei.value.path == bad
    assert isinstance(ei.value, ValueError)


def test_truncated_image_raises_image_load_error(tmp_path: Path):
    data = _png_bytes(Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)))
    path = tmp_path / "trunc.png"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageLoadError) as ei:
        load_image_rgb(path)
    assert str(path) in str(ei.value) and "trunc" in str(ei.value).lower()


def test_missing_image_raises_image_load_error(tmp_path: Path):
    with pytest.raises(ImageLoadError, match="not found"):
        load_image_rgb(tmp_path / "nope.png")


# --------------------------------------------------------------------------- prepare_image


def _three_band_image(w: int = 300, h: int = 200) -> Image.Image:
    arr = np.zeros((h, w, 3), dtype=np.uint8)
    arr[:, : w // 3] = (255, 0, 0)
    arr[:, w // 3 : 2 * w // 3] = (0, 255, 0)
    arr[:, 2 * w // 3 :] = (0, 0, 255)
    return Image.fromarray(arr)


def test_prepare_image_center_crop_landscape():
    out = prepare_image(_three_band_image(300, 200), width=128, height=128)
    assert isinstance(out, PreparedImage)
    assert out.pixels.shape == (3, 128, 128) and out.pixels.dtype == torch.float32
    assert out.pixels.min() >= -1.0 and out.pixels.max() <= 1.0
    assert out.original_size == (200, 300)
    assert out.target_size == (128, 128)
    # resized to 192x128, centered crop starts at x = (192 - 128) // 2
    assert out.crop_top_left == (0, 32)
    px = out.pixels
    assert torch.allclose(px[:, 64, 0], torch.tensor([1.0, -1.0, -1.0]), atol=0.05)  # red
    assert torch.allclose(px[:, 64, 64], torch.tensor([-1.0, 1.0, -1.0]), atol=0.05)  # green
    assert torch.allclose(px[:, 64, 127], torch.tensor([-1.0, -1.0, 1.0]), atol=0.05)  # blue


def test_prepare_image_portrait_non_square_target():
    out = prepare_image(Image.new("RGB", (100, 400), (255, 255, 255)), width=64, height=96)
    assert out.pixels.shape == (3, 96, 64)
    assert out.original_size == (400, 100) and out.target_size == (96, 64)
    assert out.crop_top_left == ((256 - 96) // 2, 0)  # resized to 64x256
    assert torch.allclose(out.pixels, torch.ones_like(out.pixels))


def test_prepare_image_upscale_and_exact_size():
    out = prepare_image(Image.new("RGB", (50, 30), (0, 0, 0)), width=64, height=64)
    assert out.pixels.shape == (3, 64, 64)
    assert out.crop_top_left == (0, (107 - 64) // 2)  # 50x30 * 64/30 -> 107x64
    assert torch.allclose(out.pixels, -torch.ones_like(out.pixels))
    same = prepare_image(Image.new("RGB", (64, 48)), width=64, height=48)
    assert same.crop_top_left == (0, 0) and same.pixels.shape == (3, 48, 64)


def test_prepare_image_flip_and_crop_coords_match_pixels():
    rng = np.random.default_rng(1)
    src = Image.fromarray(rng.integers(0, 256, (90, 160, 3), dtype=np.uint8))  # 160x90 covers 96x90: no resize
    ref = np.asarray(src).astype(np.float32) / 127.5 - 1.0

    plain = prepare_image(src, width=96, height=90, random_crop=True, generator=torch.Generator().manual_seed(3))
    top, left = plain.crop_top_left
    assert top == 0 and 0 < left <= 64
    np.testing.assert_allclose(plain.pixels.permute(1, 2, 0).numpy(), ref[:, left : left + 96], atol=1e-6)

    # same seed -> same crop; flipped pixels are the mirror, coords are in the flipped image's frame
    flipped = prepare_image(
        src, width=96, height=90, random_crop=True, generator=torch.Generator().manual_seed(3), flip=True
    )
    assert flipped.flipped and not plain.flipped
    assert torch.equal(flipped.pixels, plain.pixels.flip(-1))
    ftop, fleft = flipped.crop_top_left
    assert ftop == top and fleft == 160 - left - 96
    ref_flipped = ref[:, ::-1]
    np.testing.assert_allclose(
        flipped.pixels.permute(1, 2, 0).numpy(), ref_flipped[:, fleft : fleft + 96], atol=1e-6
    )


def test_prepare_image_random_crop_is_seeded():
    img = _three_band_image(300, 200)
    crops = {
        prepare_image(img, 64, 64, random_crop=True, generator=torch.Generator().manual_seed(s)).crop_top_left
        for s in range(8)
    }
    assert len(crops) > 1
    a = prepare_image(img, 64, 64, random_crop=True, generator=torch.Generator().manual_seed(5))
    b = prepare_image(img, 64, 64, random_crop=True, generator=torch.Generator().manual_seed(5))
    assert a.crop_top_left == b.crop_top_left and torch.equal(a.pixels, b.pixels)


def test_prepare_image_converts_non_rgb_and_validates_size():
    out = prepare_image(Image.new("RGBA", (10, 10), (0, 0, 0, 0)), 8, 8)
    assert torch.allclose(out.pixels, torch.ones_like(out.pixels))  # transparent -> white
    with pytest.raises(ValueError):
        prepare_image(Image.new("RGB", (10, 10)), 0, 8)


def test_prepare_image_crop_coords_are_in_resized_pixel_space():
    rng = np.random.default_rng(2)
    src = Image.fromarray(rng.integers(0, 256, (200, 300, 3), dtype=np.uint8))
    out = prepare_image(src, 64, 64, random_crop=True, generator=torch.Generator().manual_seed(0))
    resized = np.asarray(src.resize((96, 64), Image.Resampling.LANCZOS)).astype(np.float32) / 127.5 - 1.0
    top, left = out.crop_top_left
    assert top == 0 and 0 <= left <= 32
    assert out.original_size == (200, 300)
    np.testing.assert_allclose(out.pixels.permute(1, 2, 0).numpy(), resized[:, left : left + 64], atol=1e-6)
