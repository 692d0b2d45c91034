"""What each module kept of its weight change (resize, merge by SVD, extract), as a report: a summary, the modules
that kept least, and a row per module for report.md."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from trainers.tools.lowrank import Factors

LEAST_SHOWN = 10


@dataclass(frozen=True)
class KeptRow:
    module: str
    rank: int
    alpha: float
    fro: float  # share of the change's Frobenius norm kept
    sum: float  # share of the sum of its singular values kept
    max_ratio: float  # largest / smallest kept singular value
    was: int | None = None  # the rank before (resize)

    @classmethod
    def of(cls, module: str, factors: Factors, alpha: float, was: int | None = None) -> "KeptRow":
        kept = factors.kept()
        return cls(module, factors.rank, alpha, kept["fro"], kept["sum"], kept["max_ratio"], was)


def _row(row: KeptRow) -> str:
    was = f"{row.was} → " if row.was is not None else ""
    return (f"| `{row.module}` | {was}{row.rank} | {row.alpha:g} | {row.fro:.2%} | {row.sum:.2%} | "
            f"{row.max_ratio:.1f} |")


HEADER = ["| module | rank | alpha | Frobenius norm kept | sum(S) kept | max(S) ratio |", "|---|---|---|---|---|---|"]


def kept_report(rows: list[KeptRow]) -> tuple[str, str, dict[str, Any]]:
    """(summary markdown, details markdown, data) of the rows."""
    if not rows:
        return "No module was written.", "", {"modules": []}
    ranks = sorted({r.rank for r in rows})
    mean = sum(r.fro for r in rows) / len(rows)
    least = sorted(rows, key=lambda r: r.fro)[:LEAST_SHOWN]
    shown = ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]}-{ranks[-1]}"
    summary = [f"**{len(rows)} modules** at rank {shown}"
               f" · Frobenius norm kept: mean **{mean:.2%}**, lowest **{least[0].fro:.2%}** (`{least[0].module}`)", "",
               f"The {len(least)} modules that kept least:", "", *HEADER, *map(_row, least)]
    details = "\n".join(["## Every module", "", *HEADER, *map(_row, rows)])
    data = {"mean_fro_kept": mean, "modules": [asdict(r) for r in rows]}
    return "\n".join(summary), details, data
