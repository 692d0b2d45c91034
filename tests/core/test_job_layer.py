"""The one job layer (trainers/core/options/jobs.py) as the jobs and training use it: a job's TOML carries
schema_version and is read back, a newer one is refused by name, older ones are migrated; every job's flags come from
one builder; training's per-option flags are read as `--set` in command-line order. In process, no model."""
from __future__ import annotations

from pathlib import Path

import pytest

from trainers.__main__ import _parser
from trainers.caption.options import config_from_values as caption_config
from trainers.caption.options import load_job_config
from trainers.core.options import jobs
from trainers.core.options.loading import load_config
from trainers.core.options.schema import ConfigError
from trainers.core.options.verbs import VerbConfig
from trainers.generate.options import config_from_values as generate_config
from trainers.generate.options import load_generate_config
from trainers.tools.options import config_from_values as tool_config
from trainers.tools.options import load_tool_config


def test_every_job_file_carries_schema_version_and_reads_back(tmp_path: Path) -> None:
    cases = [
        (generate_config({"model": "m", "steps": 7}), lambda p: load_generate_config(p)),
        (tool_config("resize", {"lora": "a.safetensors", "new_rank": 8}), lambda p: load_tool_config("resize", p)),
        (caption_config("masks", {"images": str(tmp_path), "threshold": 0.4}), lambda p: load_job_config("masks", p)),
    ]
    for cfg, load in cases:
        text = cfg.to_toml()
        assert f"\nschema_version = {jobs.JOB_SCHEMA_VERSION}\n" in text
        path = tmp_path / "job.toml"
        path.write_text(text, encoding="utf-8")
        assert load(path).values == cfg.values


def test_a_job_file_from_a_newer_atelier_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(f'schema_version = {jobs.JOB_SCHEMA_VERSION + 1}\nmodel = "m"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_generate_config(path)
    assert "schema_version" in str(err.value) and "newer Atelier" in str(err.value)
    path.write_text('schema_version = "one"\nverb = "inspect"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a whole number"):
        load_tool_config("inspect", path)


def test_a_job_file_without_schema_version_is_version_0_and_migrated(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "job.toml"
    path.write_text('verb = "inspect"\nold_file = "x.safetensors"\n', encoding="utf-8")

    class Renamed(VerbConfig):
        """A job whose `file` was `old_file` before schema_version 1."""

        migrations = {0: lambda flat: {("file" if k == "old_file" else k): v for k, v in flat.items()}}

        @classmethod
        def options_for(cls, verb: str) -> tuple:
            from trainers.tools.options import options_for

            return options_for(verb)

    assert Renamed.load("inspect", path).values["file"] == "x.safetensors"
    path.write_text(f'schema_version = {jobs.JOB_SCHEMA_VERSION}\nverb = "inspect"\nold_file = "x"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="old_file"):
        Renamed.load("inspect", path)


def test_generate_tools_and_caption_flags_come_from_one_builder() -> None:
    parser = _parser("")
    generate = parser.parse_args(["generate", "--model", "m", "--prompt", "a", "--prompt", "b", "--no-random-init"])
    assert jobs.flag_values(generate) == {"model": "m", "prompts": ["a", "b"], "random_init": False}
    merge = parser.parse_args(["tools", "merge", "--lora", "a.safetensors", "--lora", "b.safetensors:0.5"])
    assert jobs.flag_values(merge) == {"loras": ["a.safetensors", "b.safetensors:0.5"]}
    masks = parser.parse_args(["masks", "--images", "data", "--threshold", "0.5"])
    assert jobs.flag_values(masks) == {"images": "data", "threshold": 0.5}


def test_training_flags_are_read_as_set_in_command_line_order(tmp_path: Path) -> None:
    args = _parser("lora").parse_args([
        "lora", "--set", "learning_rate=1e-3", "--learning-rate", "2e-4", "--no-gradient-checkpointing",
        "--output-dir", str(tmp_path / "out dir"), "--metadata-blacklist-tags", "a", "--metadata-blacklist-tags", "b",
        "--unset", "seed"])
    assert args.overrides[:4] == ["learning_rate=1e-3", "learning_rate=2e-4", "gradient_checkpointing=false",
                                  f'output_dir="{tmp_path / "out dir"}"']
    cfg = load_config("lora", None, args.overrides)
    assert cfg.learning_rate == 2e-4 and cfg.gradient_checkpointing is False
    assert cfg.output_dir == str(tmp_path / "out dir")
    assert cfg.metadata_blacklist_tags == ["a", "b"]
    last = _parser("lora").parse_args(["lora", "--learning-rate", "2e-4", "--set", "learning_rate=5e-5"])
    assert load_config("lora", None, last.overrides).learning_rate == 5e-5


def test_the_job_docs_tables_come_from_one_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training's docs/options.md and the three jobs' tables are all written by jobs.options_markdown: with it
    replaced, each document's tables are the replacement's."""
    from trainers.caption import options as caption
    from trainers.core.options import docs
    from trainers.generate import options as generate
    from trainers.tools import options as tools

    real = jobs.options_markdown
    calls: list[tuple[list[str], bool]] = []

    def spy(sections: list[jobs.Section], methods: bool = False) -> str:
        sections = [(heading, list(options)) for heading, options in sections]
        calls.append(([heading for heading, _ in sections], methods))
        return real(sections, methods)

    for module in (jobs, caption, generate, tools):
        monkeypatch.setattr(module, "job_docs" if module is not jobs else "options_markdown", spy)
    training = docs.options_markdown()
    assert calls.pop() == ([f"## [{g}] {t}" for g, t in docs.GROUPS.items()], True)
    assert "| option | default | accepts | methods | what |" in training
    assert "| `output_name` | `\"lora\"; dreambooth: \"dreambooth\"" in training  # a method's own default
    assert generate.options_markdown().startswith("**[model]** ") and calls.pop()[1] is False
    assert tools.options_markdown().startswith("**tools inspect**") and calls.pop()[1] is False
    masks = caption.options_markdown("masks")
    assert calls.pop() == ([""], False)
    assert masks == "\n".join(jobs.options_table(caption.options_for("masks"))) + "\n"
    assert "separated by `\\|`" in masks  # a | in help is escaped, not cut into a cell
