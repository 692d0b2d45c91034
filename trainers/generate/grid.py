"""The compare grid: rows are saves (epochs or steps), columns are prompts (and LoRA weights), labelled. An edit
model's grid starts with a row of each column's input image ("input image", or "input 1", "input 2", ... for prompts
with several), fitted into the cell, so every edit is seen beside the image it started from.

A video model's grid shows each cell's clip by its poster frame (the clip's middle frame: an image-to-video clip
starts on its input image in every save) and lists the clips (`clips`, row by column) in the layout; the copy
beside a compared run has its clips beside it (`grid-<stamp>/`), and the page plays them in the gallery under it.

The layout is also written into the PNG ("atelier-grid": rows, columns, cell size) so tools and tests
can read it back.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from trainers.core.events import EventWriter, Grid
from trainers.core.fsio import atomic_path
from trainers.core.rundir import read_scores
from trainers.generate.options import GenerateConfig
from trainers.generate.plan import Plan, input_images
from trainers.generate.video import CLIP_SUFFIX

PAD = 8
MAX_HEADER_LINES = 4


@dataclass
class GridLayout:
    rows: list[str]  # row labels, top to bottom
    columns: list[str]  # column labels, left to right ("prompt", "prompt\nseed 5", "prompt\nweight 0.5")
    cells: list[list[str]]  # image path of each (row, column)
    cell_size: tuple[int, int]  # (width, height) of a cell
    clips: list[list[str]] = field(default_factory=list)  # a video grid's clip of each cell (cells: their posters)


def layout(plan: Plan, cfg: GenerateConfig) -> GridLayout:
    """Rows: the input images' (edit models), then the variants' saves in order; columns: prompts x weights; every
    cell one image.

    A column names its seed when the prompts' seeds differ (a prompt's --d): the title names a seed only when
    every image used it (see `_seed_label`).
    """
    rows = list(dict.fromkeys(v.save or v.label or "base" for v in plan.variants))
    weights = list(dict.fromkeys(v.weight_label for v in plan.variants))
    seeds = column_seeds(plan)
    per_column = len(set(seeds.values())) > 1
    columns = [p.prompt + (f"\nseed {seeds[p.index]}" if per_column else "") + (f"\n{w}" if w else "")
               for p in plan.prompts for w in weights]
    cells = [["" for _ in columns] for _ in rows]
    for item in plan.items:
        v = plan.variants[item.variant]
        row = rows.index(v.save or v.label or "base")
        col = [p.index for p in plan.prompts].index(item.prompt.index) * len(weights) + weights.index(v.weight_label)
        cells[row][col] = item.images[0].path
    clips = [line[:] for line in cells] if any(_is_clip(p) for line in cells for p in line) else []
    cells = [[poster_frame(Path(p)) if _is_clip(p) else p for p in line] for line in cells]
    from PIL import Image

    sizes = []
    for path in (p for line in cells for p in line if p):
        with Image.open(path) as im:
            sizes.append(im.size)
    cell = (max(w for w, _ in sizes), max(h for _, h in sizes)) if sizes else (64, 64)
    inputs = [input_images(cfg, p) for p in plan.prompts for _ in weights]
    count = max(map(len, inputs), default=0)
    labels = ["input image"] if count == 1 else [f"input {n + 1}" for n in range(count)]
    input_rows = [[images[n] if n < len(images) else "" for images in inputs] for n in range(count)]
    if cfg.compare_order != "save" and cfg.compare_run.strip():
        order = by_score(rows, list(range(len(rows))), _row_saves(plan),
                         read_scores(Path(cfg.compare_run).expanduser()), cfg.compare_order)
        rows, cells, clips = order[0], [cells[i] for i in order[1]], [clips[i] for i in order[1]] if clips else []
    no_clips = [["" for _ in line] for line in input_rows]
    return GridLayout(labels + rows, columns, input_rows + cells, cell, no_clips + clips if clips else [])


def _is_clip(path: str) -> bool:
    return Path(path).suffix.lower() == CLIP_SUFFIX


def poster_frame(clip: Path) -> str:
    """A clip's middle frame as a PNG beside it (`<clip>.poster.png`): what its grid cell shows."""
    from PIL import Image

    from trainers.data.clips import probe_clip, read_frames

    frame = read_frames(clip, [probe_clip(clip).frames // 2])[0]
    poster = clip.with_name(clip.stem + ".poster.png")
    with atomic_path(poster) as tmp:
        Image.fromarray(frame).save(tmp, format="PNG")
    return str(poster)


def _row_saves(plan: Plan) -> dict[str, str]:
    """Each save row's file: the full-model save it rendered with, or the save's LoRA (the variant's last)."""
    out: dict[str, str] = {}
    for v in plan.variants:
        if v.save:
            out.setdefault(v.save, v.model or (v.loras[-1].path if v.loras else ""))
    return out


def by_score(rows: list[str], cells: list[list[str]], files: dict[str, str], scores: dict[str, Any],
             key: str) -> tuple[list[str], list[list[str]]]:
    """The save rows ordered by their run's `key` score ("likeness" or "fidelity"), highest first (rows without a
    score keep their order after them), each label given its scores and the run's best save marked."""
    by_file = {_same(r["save"]): r for r in scores.get("records", []) if isinstance(r, dict) and r.get("save")}
    best = scores.get("best") or {}
    best_file = _same(best["save"]) if best.get("save") else None

    def record(row: str) -> dict[str, Any] | None:
        return by_file.get(_same(files[row])) if files.get(row) else None

    def label(row: str) -> str:
        found = record(row)
        if found is None:
            return row
        text = f"{row}  L {found['likeness']:.3f}  F {found['fidelity']:.3f}" if found.get("likeness") is not None \
            else f"{row}  F {found['fidelity']:.3f}"
        return text + ("  (best)" if best_file is not None and _same(files[row]) == best_file else "")

    def rank(i: int) -> tuple[bool, float, int]:
        found = record(rows[i])
        value = found.get(key) if found else None
        return value is None, -(value or 0.0), i

    order = sorted(range(len(rows)), key=rank)
    return [label(rows[i]) for i in order], [cells[i] for i in order]


def _same(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _wrap(draw: Any, text: str, font: Any, width: int) -> list[str]:
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split():
            candidate = f"{line} {word}".strip()
            if draw.textlength(candidate, font=font) <= width or not line:
                line = candidate
            else:
                lines.append(line)
                line = word
        lines.append(line)
    if len(lines) > MAX_HEADER_LINES:
        lines = lines[:MAX_HEADER_LINES - 1] + [lines[MAX_HEADER_LINES - 1] + " …"]
    return lines


def render_grid(grid: GridLayout, title: str = "") -> Any:
    """The labelled grid as a PIL image."""
    from PIL import Image, ImageDraw, ImageOps

    cw, ch = grid.cell_size
    font = _font(max(12, min(32, ch // 12)))
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    line_h = int(font.size * 1.25) if hasattr(font, "size") else 14
    left = int(max([probe.textlength(r, font=font) for r in grid.rows] + [0])) + 2 * PAD
    headers = [_wrap(probe, c, font, cw - PAD) for c in grid.columns]
    title_h = line_h + PAD if title else 0
    top = title_h + max(len(h) for h in headers) * line_h + 2 * PAD
    width = max(left + len(grid.columns) * cw, int(probe.textlength(title, font=font)) + 2 * PAD if title else 0)
    canvas = Image.new("RGB", (width, top + len(grid.rows) * ch), "white")
    draw = ImageDraw.Draw(canvas)
    if title:
        draw.text((PAD, PAD // 2), title, fill="black", font=font)
    for c, lines in enumerate(headers):
        for n, line in enumerate(lines):
            draw.text((left + c * cw + PAD // 2, title_h + PAD + n * line_h), line, fill="black", font=font)
    for r, label in enumerate(grid.rows):
        draw.text((PAD, top + r * ch + ch // 2 - line_h // 2), label, fill="black", font=font)
        for c, path in enumerate(grid.cells[r]):
            if not path:
                continue
            with Image.open(Path(path).expanduser()) as opened:
                im = ImageOps.contain(opened.convert("RGB"), (cw, ch)) if opened.width > cw or opened.height > ch \
                    else opened.convert("RGB")
            canvas.paste(im, (left + c * cw + (cw - im.width) // 2, top + r * ch + (ch - im.height) // 2))
    return canvas


def save_grid(image: Any, path: Path, grid: GridLayout, extra: dict[str, Any] | None = None) -> Path:
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("atelier-grid", json.dumps({**asdict(grid), **(extra or {})}, ensure_ascii=False))
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", pnginfo=info)
    return path


def read_grid_layout(path: Path) -> dict[str, Any]:
    """The layout written into a grid PNG (rows, columns, cells, cell_size, seed, ...)."""
    from PIL import Image

    with Image.open(path) as im:
        return json.loads(im.text["atelier-grid"])  # type: ignore[attr-defined]


def _copied(clip: str, folder: Path) -> str:
    if not clip:
        return ""
    target = folder / Path(clip).name
    folder.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        shutil.copyfile(clip, tmp)
    return str(target)


def column_seeds(plan: Plan) -> dict[int, int]:
    """The seed each prompt's grid cells were made with (one image per cell: the prompt's --d or the job seed)."""
    return {item.prompt.index: item.images[0].seed for item in plan.items}


def _seed_label(plan: Plan) -> str:
    """The seed the title names: the one every image used, else that each column names its own."""
    used = sorted(set(column_seeds(plan).values())) or [plan.seed]
    return f"seed {used[0]}" if len(used) == 1 else "seed per column"


def _steps_label(plan: Plan) -> str:
    """The steps the images used (a prompt's --s wins over the steps option), as the header says them."""
    used = sorted({item.steps for item in plan.items})
    return f"{used[0]} steps" if len(used) == 1 else f"{'/'.join(map(str, used))} steps (per prompt)"


def save_compare_grid(cfg: GenerateConfig, plan: Plan, job_dir: Path, events: EventWriter) -> Path:
    """Assemble the grid into the job folder and, for a training run, into `<run>/compare/grid-<stamp>.png`."""
    grid = layout(plan, cfg)
    run = Path(cfg.compare_run).expanduser() if cfg.compare_run.strip() else None
    title = f"{run.name if run else 'LoRA files'} · {_seed_label(plan)} · {cfg.sampler} · {_steps_label(plan)}"
    path = save_grid(render_grid(grid, title), Path(job_dir) / "grid.png", grid, {"seed": plan.seed, "title": title})
    copy = None
    if run is not None and run.is_dir():
        copy = run / "compare" / f"grid-{time.strftime('%Y%m%d-%H%M%S')}.png"
        if grid.clips:  # the clips beside the copy, which lists them there
            grid = replace(grid, clips=[[_copied(p, copy.with_suffix("")) for p in line] for line in grid.clips])
            save_grid(render_grid(grid, title), copy, grid, {"seed": plan.seed, "title": title})
        else:
            with atomic_path(copy) as tmp:
                shutil.copyfile(path, tmp)
    events.emit(Grid(path=str(path), copy=str(copy) if copy else None, rows=grid.rows, columns=grid.columns))
    return copy or path
