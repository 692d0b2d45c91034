"""The page's upload box (a dataset from this browser into a new folder); the run panel's downloads and TensorBoard."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from gui import transfers
from gui.run_files import Watchers
from gui.run_panel import view_for
from gui.tensorboard import TENSORBOARDS
from gui.text import plain
from gui.transfers import TransferError, download_model, download_zip, result_files, save_upload
from trainers.core.logdir import tensorboard_dir
from trainers.core.rundir import read_run_config


@dataclass
class UploadBox:
    datasets_dir: Path
    files: gr.File
    name: gr.Textbox
    repeats: gr.Textbox
    button: gr.Button

    def wire(self, target: gr.components.Component, report: gr.Markdown) -> None:
        """Upload into `datasets_dir/<name>`, then point `target` (train_data_dir) at the new folder."""
        files, datasets_dir = self.files, self.datasets_dir

        def on_upload(uploaded: list[Any] | None, folder_name: str, repeat_text: str) -> dict:
            paths = [Path(f if isinstance(f, str) else f.name) for f in uploaded or []]
            try:
                count = int(str(repeat_text).strip() or "1")
                if count < 1:
                    raise ValueError
            except ValueError:
                return {report: f"### Not uploaded\nrepeats: got {repeat_text!r}; use a whole number of at least 1"}
            try:
                done = save_upload(paths, str(folder_name or "").strip(), datasets_dir, repeats=count)
            except TransferError as err:
                return {report: f"### Not uploaded\n{plain(err)}"}
            notes = "".join(f"\n- {plain(n)}" for n in done.notes[:20])
            return {target: str(done.folder), files: None,
                    report: f"### Uploaded {done.images} image(s), {done.captions} caption(s)\n`train_data_dir` is "
                            f"now `{done.folder}`.{notes}"}

        self.button.click(on_upload, inputs=[files, self.name, self.repeats], outputs={target, files, report})


def build_upload(datasets_dir: Path, method: str) -> UploadBox:
    """A closed accordion with the upload box (wired to the form's train_data_dir once the form exists)."""
    with gr.Accordion("Upload a dataset from this browser", open=False, elem_id=f"upload-{method}"):
        limits = transfers.LIMITS
        gr.Markdown(f"Images with their .txt captions, or a .zip of them (kohya folders like `10_sks dog/` are "
                    f"kept). They go into a new folder under `{datasets_dir}`. At most "
                    f"{transfers.size_text(limits.max_upload_bytes)} a file and "
                    f"{transfers.size_text(limits.max_unpacked_bytes)} unpacked (app.py `--max-upload-size`, "
                    "`--max-unpacked-size`).")
        files = gr.File(file_count="multiple", label="Images, captions or a zip", elem_id=f"upload-files-{method}")
        with gr.Row():
            name = gr.Textbox(label="New dataset folder name", placeholder="my subject", elem_id=f"upload-name-{method}")
            repeats = gr.Textbox(value="10", label="Repeats of loose images (kohya's <repeats>_ prefix)")
            button = gr.Button("Upload into a new folder", elem_id=f"upload-go-{method}")
    return UploadBox(datasets_dir, files, name, repeats, button)


def build_downloads() -> tuple[gr.Button, gr.Button, gr.File]:
    with gr.Row():
        model = gr.Button("Download the model", size="sm", elem_id="download-model")
        everything = gr.Button("Download everything (zip)", size="sm", elem_id="download-all")
    file = gr.File(label="Download", visible=False, interactive=False, elem_id="download-file")
    return model, everything, file


def wire_downloads(buttons: tuple[gr.Button, gr.Button, gr.File], viewed: gr.BrowserState, watchers: Watchers,
                   runs_dir: Path) -> None:
    """Both buttons build the file in the viewed run's folder (the page serves files from there only)."""
    model, everything, file = buttons

    def make(run_id: str, whole: bool) -> Any:
        view = view_for(watchers, runs_dir, run_id)
        if view is None:
            gr.Warning("Pick a run first.")
            return gr.File(visible=False)
        run_dir = runs_dir / view.run_id
        try:
            if whole:
                path = download_zip(run_dir, result_files(run_dir, view.output, view.checkpoints, view.samples))
            else:
                path = download_model(run_dir, view.output or (view.checkpoints[-1] if view.checkpoints else ""))
        except (TransferError, OSError) as err:
            gr.Warning(f"Nothing to download: {plain(err)}")
            return gr.File(visible=False)
        return gr.File(value=str(path), visible=True)

    model.click(lambda run_id: make(run_id, False), inputs=viewed, outputs=file)
    everything.click(lambda run_id: make(run_id, True), inputs=viewed, outputs=file)


def build_tensorboard() -> tuple[gr.Button, gr.Markdown]:
    button = gr.Button("TensorBoard", size="sm", elem_id="run-tensorboard")
    link = gr.Markdown(elem_id="run-tensorboard-link")
    return button, link


def wire_tensorboard(parts: tuple[gr.Button, gr.Markdown], viewed: gr.BrowserState, runs_dir: Path) -> None:
    """Start (or find) the TensorBoard of the viewed run's logs (logging_dir, else its folder's logs/) and link it,
    under this page's address."""
    button, link = parts

    def on_click(run_id: str) -> str:
        config = read_run_config(runs_dir / run_id) if run_id and "/" not in run_id else None
        if config is None:
            return "Pick a run first."
        logdir = tensorboard_dir(config.get("logging_dir"), runs_dir / run_id)
        if logdir is None or not logdir.is_dir():
            return (f"No TensorBoard logs in `{logdir}` yet: a run writes them from its first step (runs of older "
                    "Atelier versions only when **logging_dir** was set).")
        key = TENSORBOARDS.ensure(logdir)
        return (f"[Open TensorBoard for `{logdir}`](tensorboard/{key}/) (it shows every run logged there; "
                "it may take a few seconds to start).")

    button.click(on_click, inputs=viewed, outputs=link, api_name="tensorboard")
