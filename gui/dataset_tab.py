"""The Dataset tab: open a dataset, see its images with their captions, edit a caption in place or many at once
(previewed, then written, undoable), read its statistics and arrange its concept folders.

The work is trainers.dataset_edit's (torch-free); this module only shows it. Every action opens the dataset again
from disk, so what the tab shows follows edits made elsewhere (a captioning job, an editor). Images are shown as
small thumbnails made in a temp folder (gui/thumbnails.py; the page serves files from the temp and runs folders
only).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from gui.dataset_checks import checks_text
from gui.dataset_pairs import pair_view
from gui.folder_browser import browsable_textbox, inside
from gui.text import plain
from gui.thumbnails import clip_thumbnail, prune_thumbnails, thumbnail
from trainers.core.paths import text_problem
from trainers.data.kohya_folders import match_masks
from trainers.dataset_edit.backups import list_backups, undo_last
from trainers.dataset_edit.checks import dataset_checks
from trainers.dataset_edit.clip_view import folder_spec, windows_line
from trainers.dataset_edit.concepts import create_concept, move_images
from trainers.dataset_edit.edits import Change, caption_edit, describe, preview, write_changes
from trainers.dataset_edit.fixes import SET_ASIDE_DIR, resave_utf8, set_aside_duplicates
from trainers.dataset_edit.folders import (
    Concept,
    Dataset,
    DatasetEditError,
    Entry,
    caption_extension_of,
    file_fingerprint,
    open_dataset,
    read_entry,
)
from trainers.dataset_edit.leftovers import clean_once
from trainers.dataset_edit.stats import (
    CLIP_LIMIT,
    DatasetStats,
    dataset_stats,
    tag_counts,
    token_counter,
    training_buckets,
)
from trainers.dataset_edit.tags import OPS, BulkOp

MAX_SHOWN = 400  # images in the gallery at once; a filter narrows a larger dataset
MAX_ROWS = 50  # rows of a preview or a list in the report
ALL = "all concepts"
TOKEN_LIMITS = (CLIP_LIMIT, 150, 225)  # sd-scripts' max_token_length: CLIP's 75 tokens in one to three chunks
GREY_MODES = ("1", "L", "LA", "I", "I;16", "F")  # one-channel images: how masks are saved (sd-scripts reads them as L)


def masks_of(dataset: Dataset, entries: Iterable[Entry]) -> dict[Path, Path]:
    """The mask of each of `entries`' images that has one: in its subset's masks folder (a dataset TOML's
    conditioning_data_dir, the file with the image's stem, as training finds it; a colour file there is an edit
    model's control image, not a mask), else where trainers.caption.masks writes
    by default: `<dataset>_masks` (a job over the whole dataset) or `<concept folder>_masks` (a job over one
    folder), the image's relative path with .png."""
    entries = list(entries)
    found: dict[Path, Path] = {}
    for concept in {e.concept for e in entries if e.concept.masks is not None}:
        matched = match_masks(concept.masks, [e.image for e in entries if e.concept == concept])[0]
        found |= {image: mask for image, mask in matched.items() if is_grey(mask)}
    root = dataset.root
    for entry in (e for e in entries if e.concept.masks is None):
        image, folder = entry.image, entry.concept.folder
        candidates = [(folder.parent / f"{folder.name}_masks" / image.name).with_suffix(".png")]
        if image.is_relative_to(root):
            candidates.insert(0, (root.parent / f"{root.name}_masks" / image.relative_to(root)).with_suffix(".png"))
        if mask := next((m for m in candidates if m.is_file()), None):
            found[image] = mask
    return found


def is_grey(image: Path) -> bool:
    """Whether `image` is a one-channel image, as masks are saved (its header only is read)."""
    try:
        with Image.open(image) as im:
            return im.mode in GREY_MODES
    except (OSError, ValueError, Image.DecompressionBombError):
        return False


def shown_entries(dataset: Dataset, concept: str = ALL, text: str = "") -> list[Entry]:
    """The readable images the gallery shows: of one concept folder (or all), whose caption holds `text`."""
    wanted = text.strip().casefold()
    return [e for e in dataset.readable
            if (concept in ("", ALL) or e.concept.folder.name == concept) and wanted in e.caption.casefold()]


def gallery_rows(entries: Iterable[Entry], masks: dict[Path, Path] | None = None) -> list[tuple[str, str, str]]:
    """(thumbnail, caption shown under it, image path) of each image whose thumbnail could be made, with its mask
    from `masks` over it (see masks_of); a clip's thumbnail is its first frame, and under its caption what a video
    run takes of it."""
    rows = []
    for e in entries:
        mask = (masks or {}).get(e.image)
        shown = e.caption or f"(no caption: {e.concept.tokens!r})"
        if e.clip is not None:
            if thumb := clip_thumbnail(e.image):
                line = windows_line(e.clip, e.concept.video or folder_spec(e.concept.folder))
                rows.append((thumb, f"{shown} · clip: {line}", str(e.image)))
        elif thumb := thumbnail(e.image, mask):
            rows.append((thumb, f"{shown} · masked" if mask else shown, str(e.image)))
    return rows


def gallery_items(folder: str | Path, caption_extension: str = ".txt", concept: str = ALL,
                  text: str = "") -> list[tuple[str, str]]:
    """(thumbnail, caption) of each image the Dataset tab's gallery shows for the dataset at `folder`, masks over
    them: call it to refresh the gallery after captions or masks change on disk."""
    dataset = open_dataset(folder, caption_extension)
    shown = shown_entries(dataset, concept, text)[:MAX_SHOWN]
    rows = gallery_rows(shown, masks_of(dataset, shown))
    return [(thumb, shown) for thumb, shown, _ in rows]


def summary(dataset: Dataset, shown: int) -> str:
    clips = sum(e.clip is not None for e in dataset.readable)
    items = f"{len(dataset.readable) - clips} image(s)" + (f" and {clips} video clip(s)" if clips else "")
    lines = [f"**{plain(dataset.root)}** ({dataset.layout} layout): {items} in "
             f"{len(dataset.concepts)} concept folder(s); {shown} shown"]
    if clips:
        lines.append("Clips train with video families only (Wan, HunyuanVideo): under each, what a video run takes "
                     "of it (musubi-tuner's target_frames and frame_extraction: a video dataset .toml's, else one "
                     "frame from the start)")
    lines += [f"- {plain(c.folder.name)}: {sum(e.concept == c for e in dataset.entries)} image(s), x{c.repeats}"
              for c in dataset.concepts]
    unreadable = [e for e in dataset.entries if e.problem]
    if unreadable:
        lines.append(f"\n**{len(unreadable)} image(s) cannot be read and are skipped:**")
        lines += [f"- {plain(e.image.name)}: {plain(e.problem)}" for e in unreadable[:MAX_ROWS]]
    legacy = [e for e in dataset.entries if e.encoding]
    if legacy:
        lines.append(f"\n**{len(legacy)} caption file(s) are not plain UTF-8** (bulk edit *fix_encoding* rewrites "
                     "them):")
        lines += [f"- {plain(e.caption_file.name)}: {plain(e.encoding)}" for e in legacy[:MAX_ROWS]]
    lines += [f"\nNote: {plain(n)}" for n in dataset.notes[:MAX_ROWS]]
    backups = list_backups(dataset)
    if backups:
        lines.append(f"\nNewest edit: {plain(backups[0].what)} ({len(backups)} edit(s) kept in "
                     f"{plain(dataset.backups.name)}/; Undo undoes your own newest)")
    return "\n".join(lines)


def preview_text(changes: list[Change]) -> str:
    if not changes:
        return "Nothing would change."
    rows = [f"| {plain(c.entry.image.name)} | {plain(c.before) or '(none)'} | "
            f"{'(same text, rewritten as UTF-8)' if c.reencode_only else plain(c.after) or '(empty)'} |"
            for c in changes[:MAX_ROWS]]
    more = f"\n\n… and {len(changes) - MAX_ROWS} more." if len(changes) > MAX_ROWS else ""
    return (f"**{len(changes)} caption(s) would change** (nothing is written until you press Apply):\n\n"
            "| image | before | after |\n|---|---|---|\n" + "\n".join(rows) + more)


def stats_text(stats: DatasetStats) -> str:
    parts = ["**Buckets** (the trainer's own bucketing)\n\n| bucket | images | x repeats |\n|---|---|---|\n" +
             "\n".join(f"| {b} | {n} | {r} |" for b, n, r in stats.histogram())]
    if stats.no_bucket:
        parts.append(f"**{len(stats.no_bucket)} image(s) fit no bucket** (too small with bucket_no_upscale): " +
                     ", ".join(plain(e.image.name) for e in stats.no_bucket[:MAX_ROWS]))
    parts.append(f"**{len(stats.upscaled)} image(s) below the training resolution** (enlarged to their bucket)" +
                 "".join(f"\n- {plain(e.image.name)}: {e.size[0]}x{e.size[1]} -> {w}x{h}"
                         for e, (w, h) in stats.upscaled[:MAX_ROWS]))
    longest = max((n for _, n in stats.lengths), default=0)
    over = stats.over_limit
    parts.append(f"**Caption length**: up to {longest} tokens; {len(over)} caption(s) over the limit of "
                 f"{stats.limit} (counted with {plain(stats.tokenizer)})" +
                 "".join(f"\n- {plain(e.image.name)}: {n}" for e, n in over[:MAX_ROWS]))
    if stats.unreadable:
        parts.append(f"**{len(stats.unreadable)} unreadable image(s)** skipped.")
    return "\n\n".join(parts)


def session_of(request: gr.Request | None) -> str:
    """Whose edit it is: the browser session (a page load) that made it; "" when gradio gives none (an API call)."""
    return str(getattr(request, "session_hash", None) or "")


@dataclass
class DatasetTab:
    folder: gr.Textbox
    gallery: gr.Gallery
    status: gr.Markdown
    reload: gr.State  # a new value shows the open dataset again, read from disk (a finished caption or mask job)


def build_dataset_tab(services: Any) -> DatasetTab:
    """Render the tab inside the current gradio context (call within `gr.Tab`)."""
    roots: list[Path] | None = services.allowed_roots
    gr.Markdown("Open a dataset (a folder of `<repeats>_<name>` folders, a folder of images, or a dataset `.toml`). "
                "Every edit is previewed first and can be undone: the captions it replaces are kept in "
                "`.atelier_backup/` inside the dataset. See [docs/datasets.md](manual/docs/datasets.md).")
    with gr.Row():
        folder = browsable_textbox("any", label="Dataset folder or dataset .toml", scale=4, elem_id="dataset-folder")
        extension = gr.Textbox(".txt", label="Caption extension", scale=1, elem_id="dataset-ext")
        open_btn = gr.Button("Open", variant="primary", scale=1, elem_id="dataset-open")
    with gr.Row():
        concept = gr.Dropdown([ALL], value=ALL, label="Concept folder", scale=2, elem_id="dataset-concept")
        search = gr.Textbox(label="Show captions containing", scale=2, elem_id="dataset-search")
    status = gr.Markdown(elem_id="dataset-status")
    gallery = gr.Gallery(label="Images and clips", columns=6, height=440, object_fit="contain", allow_preview=False,
                         elem_id="dataset-gallery")
    with gr.Row():
        caption = gr.Textbox(label="Caption of the selected image", lines=2, scale=5, elem_id="dataset-caption")
        save = gr.Button("Save caption", scale=1, elem_id="dataset-save")
    with gr.Accordion("Bulk edit", open=True):
        with gr.Row():
            op = gr.Dropdown([(f"{kind}: {what}", kind) for kind, what in OPS.items()], value="trigger",
                             label="Operation", scale=3, elem_id="dataset-op")
            text = gr.Textbox(label="Text, tag or trigger word", scale=2, elem_id="dataset-op-text")
            replacement = gr.Textbox(label="Replace with / new tag", scale=2, elem_id="dataset-op-replacement")
        with gr.Row():
            preview_btn = gr.Button("Preview", elem_id="dataset-preview")
            apply_btn = gr.Button("Apply", variant="primary", elem_id="dataset-apply")
            undo_btn = gr.Button("Undo the last edit", elem_id="dataset-undo")
        report = gr.Markdown(elem_id="dataset-report")
    with gr.Accordion("Statistics", open=False):
        with gr.Row():
            resolution = gr.Textbox("512", label="Training resolution (N or W,H)", elem_id="dataset-resolution")
            buckets = gr.Checkbox(True, label="Aspect-ratio buckets (enable_bucket)")
            limit = gr.Dropdown(list(TOKEN_LIMITS), value=CLIP_LIMIT, label="Caption token limit")
            model = browsable_textbox("any", label="Model folder (its tokenizer counts tokens)",
                                      elem_id="dataset-model")
        stats_btn = gr.Button("Compute statistics", elem_id="dataset-stats")
        with gr.Row():
            near = gr.Checkbox(True, label="Near duplicates too (perceptual hash), not only exact copies",
                               elem_id="dataset-near")
            set_aside_btn = gr.Button("Move duplicates aside", elem_id="dataset-set-aside")
            resave_btn = gr.Button("Re-save captions as UTF-8", elem_id="dataset-resave")
        stats_md = gr.Markdown(elem_id="dataset-stats-report")
    with gr.Accordion("Edit pairs (control | target | caption)", open=False):
        gr.Markdown("For an edit model's dataset: a dataset `.toml` whose subsets name their control images "
                    "(`control_directory` or `conditioning_data_dir`), or the dataset opened above with its control "
                    "folder. Each target is shown after its control images, its caption (the edit instruction) "
                    "below; what does not pair up is listed first.")
        with gr.Row():
            pair_controls = browsable_textbox("dir", label="Control folder (control_directory) for a kohya or flat "
                                              "folder; empty: the dataset .toml's own", scale=4,
                                              elem_id="dataset-pairs-controls")
            pairs_btn = gr.Button("Check pairs", scale=1, elem_id="dataset-pairs")
        pairs_md = gr.Markdown(elem_id="dataset-pairs-report")
        pairs_gallery = gr.Gallery(label="Pairs: control(s) | target", columns=3, height=440, object_fit="contain",
                                   allow_preview=True, visible=False, elem_id="dataset-pairs-gallery")
    with gr.Accordion("Concept folders", open=False):
        with gr.Row():
            new_name = gr.Textbox(label="New concept (class tokens)", placeholder="sks dog")
            new_repeats = gr.Number(10, label="Repeats", precision=0, minimum=1)
            create = gr.Button("Create folder", elem_id="dataset-create")
        with gr.Row():
            target = gr.Dropdown([], label="Move the selected image to", elem_id="dataset-move-to")
            move = gr.Button("Move", elem_id="dataset-move")
    listed = gr.State([])  # the image paths the gallery shows, in its order
    selected = gr.State("")  # the picked image's path
    loaded = gr.State("")  # the fingerprint of its caption file when the caption box was filled from it
    reload = gr.State("")

    def allowed(path: str | Path) -> str:
        """`path` when the GUI may read it (under the allowed roots, symlinks resolved); else a refusal."""
        if unusable := text_problem(str(path).strip()):  # a NUL or an over-long path: the filesystem would raise
            raise DatasetEditError(f"the path {unusable}")
        if roots is not None and str(path).strip() and inside(Path(str(path).strip()), roots) is None:
            raise DatasetEditError(f"{path} is outside the folders this GUI may use "
                                   f"({', '.join(str(r) for r in roots)}); the admin can add one with --allowed-root")
        return str(path)

    def opened(path: str, ext: str) -> Dataset:
        dataset = open_dataset(allowed(path), ext or ".txt")
        for concept in dataset.concepts:  # a dataset .toml may name image, mask and control folders anywhere
            for shown in (concept.folder, concept.masks, concept.controls):
                if shown is not None:
                    allowed(shown)
        clean_once(dataset)
        return dataset

    def view(path: str, ext: str, wanted: str, filter_text: str, message: str = "") -> dict:
        """Everything the tab shows of the dataset, read again from disk."""
        try:
            dataset = opened(path, ext)
        except DatasetEditError as err:
            return {status: f"### Not opened\n{plain(err)}", gallery: [], listed: []}
        names = [c.folder.name for c in dataset.concepts]
        wanted = wanted if wanted in names else ALL
        shown = shown_entries(dataset, wanted, filter_text)[:MAX_SHOWN]
        rows = gallery_rows(shown, masks_of(dataset, shown))
        head = f"{message}\n\n" if message else ""
        return {status: head + summary(dataset, len(rows)), gallery: [(t, c) for t, c, _ in rows],
                listed: [path for _, _, path in rows],
                concept: gr.Dropdown(choices=[ALL, *names], value=wanted), target: gr.Dropdown(choices=names)}

    view_inputs = [folder, extension, concept, search]
    view_outputs = {status, gallery, listed, concept, target}

    def on_select(event: gr.SelectData, paths: list[str], ext: str) -> tuple[str, str, str]:
        """The picked image (from the paths this tab listed), its caption file's text, read now, and what the file
        held then (Save refuses to write over a caption changed since)."""
        if not 0 <= event.index < len(paths):
            return "", "", ""
        image = Path(paths[event.index])
        try:
            entry = read_entry(image, Concept(image.parent, 1, ""), caption_extension_of(ext))
        except DatasetEditError as err:
            gr.Warning(plain(err))
            return "", "", ""
        return str(image), entry.caption, entry.seen

    def act(message_of, path: str, ext: str, wanted: str, filter_text: str) -> dict:
        """Run an edit; show its message (or why it was refused) above the dataset, read again."""
        try:
            message = message_of(opened(path, ext))
        except (DatasetEditError, OSError) as err:
            return {report: f"### Not done\n{plain(err)}"}
        return {**view(path, ext, wanted, filter_text, message), report: message}

    def bulk(kind: str, find: str, replace: str, dataset: Dataset, wanted: str) -> tuple[BulkOp, list[Change]]:
        bulk_op = BulkOp(kind, find, replace)
        scope = None if wanted in ("", ALL) else [e.image for e in shown_entries(dataset, wanted)]
        return bulk_op, preview(dataset, bulk_op, scope)

    def on_preview(path: str, ext: str, wanted: str, kind: str, find: str, replace: str) -> str:
        try:
            return preview_text(bulk(kind, find, replace, opened(path, ext), wanted)[1])
        except DatasetEditError as err:
            return f"### Not previewed\n{plain(err)}"

    def on_apply(path: str, ext: str, wanted: str, filter_text: str, kind: str, find: str, replace: str,
                 request: gr.Request) -> dict:
        def apply(dataset: Dataset) -> str:
            bulk_op, changes = bulk(kind, find, replace, dataset, wanted)
            backup = write_changes(dataset, changes, describe(bulk_op, len(changes)), session_of(request))
            return f"Applied: {plain(backup.what)}." if backup else "Nothing to change."
        return act(apply, path, ext, wanted, filter_text)

    def on_undo(path: str, ext: str, wanted: str, filter_text: str, request: gr.Request) -> dict:
        return act(lambda dataset: f"Undid: {plain(undo_last(dataset, session_of(request)).what)}.", path, ext,
                   wanted, filter_text)

    def on_save(path: str, ext: str, wanted: str, filter_text: str, image: str, new_text: str, loaded_print: str,
                request: gr.Request) -> dict:
        def save_caption(dataset: Dataset) -> str:
            if not image:
                raise DatasetEditError("pick an image in the gallery first")
            changes = caption_edit(dataset, image, new_text, loaded_print)
            backup = write_changes(dataset, changes, f"edit {Path(image).name}", session_of(request))
            return f"Saved the caption of {plain(Path(image).name)}." if backup else "The caption is unchanged."
        shown = act(save_caption, path, ext, wanted, filter_text)
        if image and report in shown and not shown[report].startswith("### Not done"):
            shown[loaded] = file_fingerprint(Path(image).with_suffix(caption_extension_of(ext)))  # the box's text
        return shown

    def on_create(path: str, ext: str, wanted: str, filter_text: str, name: str, repeats: float | None) -> dict:
        def make(dataset: Dataset) -> str:
            made = create_concept(dataset, str(name or ""), int(repeats or 0))
            return f"Created {plain(made.folder.name)}."
        return act(make, path, ext, wanted, filter_text)

    def on_move(path: str, ext: str, wanted: str, filter_text: str, image: str, to: str, request: gr.Request) -> dict:
        def move_one(dataset: Dataset) -> str:
            goal = next((c for c in dataset.concepts if c.folder.name == to), None)
            if not image or goal is None:
                raise DatasetEditError("pick an image in the gallery and a concept folder to move it to first")
            backup = move_images(dataset, [image], goal, session_of(request))
            return f"Moved {plain(Path(image).name)} to {plain(to)}." if backup else "It is in that folder already."
        return act(move_one, path, ext, wanted, filter_text)

    def on_stats(path: str, ext: str, reso: str, enable: bool, token_limit: int, model_path: str) -> str:
        try:
            dataset = opened(path, ext)
            settings = training_buckets(reso, enable)
            counter = token_counter(allowed(model_path))
            stats = dataset_stats(dataset, settings, counter, int(token_limit))
        except (DatasetEditError, ValueError, OSError) as err:
            return f"### No statistics\n{plain(err)}"
        tags = ", ".join(f"{plain(t)} ({n})" for t, n in tag_counts(dataset).most_common(30))
        return (checks_text(dataset_checks(dataset, stats)) + "\n\n" + stats_text(stats) +
                (f"\n\n**Most common tags**: {tags}" if tags else ""))

    def fixed(message_of, path: str, ext: str, wanted: str, filter_text: str) -> dict:
        """A check's fix, run as an edit; its message also where the checks are shown."""
        shown = act(message_of, path, ext, wanted, filter_text)
        done = not shown[report].startswith("### Not done")
        return {**shown, stats_md: shown[report] + ("\n\nPress *Compute statistics* to check again." if done else "")}

    def on_set_aside(path: str, ext: str, wanted: str, filter_text: str, with_near: bool,
                     request: gr.Request) -> dict:
        def set_aside(dataset: Dataset) -> str:
            backup = set_aside_duplicates(dataset, bool(with_near), session_of(request))
            return (f"Moved aside: {plain(backup.what)}, with their captions, into "
                    f"{plain(SET_ASIDE_DIR)}/ (Undo moves them back)." if backup else "No duplicates to move.")
        return fixed(set_aside, path, ext, wanted, filter_text)

    def on_resave(path: str, ext: str, wanted: str, filter_text: str, request: gr.Request) -> dict:
        def resave(dataset: Dataset) -> str:
            backup = resave_utf8(dataset, session_of(request))
            return f"Done: {plain(backup.what)} (Undo puts back the old files)." if backup else \
                "Every caption file that reads as text is UTF-8 already."
        return fixed(resave, path, ext, wanted, filter_text)

    def on_pairs(path: str, ext: str, controls: str) -> tuple[str, Any]:
        try:
            given = Path(allowed(controls.strip())).expanduser() if controls.strip() else None
            checked = pair_view(opened(path, ext), given)
        except DatasetEditError as err:
            return f"### Not checked\n{plain(err)}", gr.Gallery(value=None, visible=False)
        return checked.text, gr.Gallery(value=checked.rows or None, visible=bool(checked.rows))

    edits = {report} | view_outputs
    def on_open(path: str, ext: str, wanted: str, filter_text: str) -> dict:
        prune_thumbnails()
        return view(path, ext, wanted, filter_text)

    def on_reload(path: str, ext: str, wanted: str, filter_text: str) -> dict:
        """A caption or mask job ended: the open dataset again (nothing open: the tab as it is; an empty dict
        would not be a value for each output, which gradio refuses with a ValueError)."""
        return view(path, ext, wanted, filter_text) if str(path or "").strip() else gr.skip()

    reload.change(on_reload, inputs=view_inputs, outputs=view_outputs, show_progress="hidden")
    open_btn.click(on_open, inputs=view_inputs, outputs=view_outputs)
    folder.submit(on_open, inputs=view_inputs, outputs=view_outputs)
    for control in (concept, search):
        control.input(view, inputs=view_inputs, outputs=view_outputs, show_progress="hidden")
    gallery.select(on_select, inputs=[listed, extension], outputs=[selected, caption, loaded])
    preview_btn.click(on_preview, inputs=[folder, extension, concept, op, text, replacement], outputs=report)
    apply_btn.click(on_apply, inputs=view_inputs + [op, text, replacement], outputs=edits)
    undo_btn.click(on_undo, inputs=view_inputs, outputs=edits)
    save.click(on_save, inputs=view_inputs + [selected, caption, loaded], outputs=edits | {loaded})
    create.click(on_create, inputs=view_inputs + [new_name, new_repeats], outputs=edits)
    move.click(on_move, inputs=view_inputs + [selected, target], outputs=edits)
    pairs_btn.click(on_pairs, inputs=[folder, extension, pair_controls], outputs=[pairs_md, pairs_gallery])
    set_aside_btn.click(on_set_aside, inputs=view_inputs + [near], outputs=edits | {stats_md})
    resave_btn.click(on_resave, inputs=view_inputs, outputs=edits | {stats_md})
    stats_btn.click(on_stats, inputs=[folder, extension, resolution, buckets, limit, model], outputs=stats_md)
    return DatasetTab(folder, gallery, status, reload)

