"""The rule of trainers/train (docs/architecture.md, "Typed option reads"): a consumer reads its options through a
typed slice built once (trainers/core/options/typed.py), never as `cfg.<option>` (Any)."""
from __future__ import annotations

import ast
from pathlib import Path

from trainers.core.options import BY_NAME

TRAIN = Path(__file__).resolve().parents[2] / "trainers" / "train"


def untyped_reads(source: str) -> list[str]:
    """`<...>cfg.<option>` attribute reads of an option in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in BY_NAME:
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
            if name == "cfg":
                found.append(f"{node.lineno}: cfg.{node.attr}")
    return found


def test_train_reads_options_through_typed_slices() -> None:
    offenders = [f"{path.name}:{read}" for path in sorted(TRAIN.glob("*.py"))
                 for read in untyped_reads(path.read_text(encoding="utf-8"))]
    assert not offenders, "read these through a slice of trainers/core/options/typed.py:\n" + "\n".join(offenders)


def test_the_check_sees_a_planted_read() -> None:
    assert untyped_reads("def f(session):\n    return session.cfg.learning_rate, cfg.values, opts.seed\n") == [
        "2: cfg.learning_rate"]
