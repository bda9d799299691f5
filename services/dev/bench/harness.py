"""What every benchmark returns, and how a set of them is printed.

A benchmark module exposes `async def run(quick: bool) -> Section`. The runner prints
one JSON document (every section) and a readable table, so a person and a machine
read the same numbers.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Metric:
    name: str
    value: float
    unit: str
    # A human-readable target ("<= 50 ms", ">= 100 runs/s") and whether it was met.
    target: str | None = None
    ok: bool | None = None


@dataclass
class Section:
    name: str
    metrics: list[Metric]
    notes: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(m.ok is not False for m in self.metrics)


def percentile(values: list[float], q: float) -> float:
    """q in [0, 100]; linear interpolation between closest ranks (as
    statistics.quantiles' inclusive method, which has no 0th or 100th cut point)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * min(100.0, max(0.0, q)) / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# How every quoted quartile is computed (the sections' and the README's alike).
QUARTILE_METHOD = "statistics.quantiles(values, n=4, method='exclusive')"


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """Q1, median, Q3 by QUARTILE_METHOD."""
    if len(values) < 2:
        only = values[0] if values else float("nan")
        return only, only, only
    q1, q2, q3 = statistics.quantiles(values, n=4, method="exclusive")
    return q1, q2, q3


def _proc_field(path: str, key: str) -> str | None:
    """One `key: value` line of a /proc file (Linux); None elsewhere."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def _commit() -> str | None:
    """The code measured: HEAD, marked dirty when the tree has uncommitted changes, so
    a committed result says which commit produced it. None for an installed package: its
    site-packages may sit inside some other git checkout (a venv in a project), whose
    HEAD says nothing about the code that ran."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def machine() -> dict[str, Any]:
    memory = _proc_field("/proc/meminfo", "MemTotal")  # "8148352 kB"
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu_model": _proc_field("/proc/cpuinfo", "model name") or platform.processor() or None,
        "memory_gb": round(int(memory.split()[0]) / 1024**2, 1) if memory else None,
        "commit": _commit(),
    }


# `--quick` is CI's smoke mode and must finish within this (about 45 s on an idle
# 2-core machine). Reported, not asserted by a test: a busy machine is slower.
QUICK_TARGET_S = 120.0


def within_quick_target(duration_s: float, quick: bool) -> bool | None:
    return duration_s < QUICK_TARGET_S if quick else None


def _strict(value: Any) -> Any:
    """`value` with every NaN or infinity as None: JSON has no such numbers, and a strict
    reader (jq, JSON.parse) refuses the whole document for one bare `NaN`."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(item) for item in value]
    return value


def to_json(sections: list[Section], duration_s: float, quick: bool) -> str:
    """The document; a metric that could not be measured (no replay broke, so no heal
    rate) has the value null."""
    document = _strict(
        {
            "machine": machine(),
            "quick": quick,
            "duration_s": round(duration_s, 2),
            "duration_target_s": QUICK_TARGET_S if quick else None,
            "duration_ok": within_quick_target(duration_s, quick),
            "ok": all(s.ok for s in sections),
            "sections": {s.name: asdict(s) | {"ok": s.ok} for s in sections},
        }
    )
    return json.dumps(document, indent=2, allow_nan=False)


def _nan_if_none(value: float | None) -> float:
    return float("nan") if value is None else value


def section_from_json(data: dict[str, Any]) -> Section:
    """A section as to_json wrote it (its derived `ok` is recomputed, not read)."""
    return Section(
        name=data["name"],
        metrics=[
            Metric(**(metric | {"value": _nan_if_none(metric["value"])}))
            for metric in data["metrics"]
        ],
        notes=data.get("notes", ""),
        details=data.get("details", {}),
    )


def render_table(sections: list[Section]) -> str:
    rows = [("section", "metric", "value", "target", "ok")]
    for section in sections:
        for m in section.metrics:
            value = f"{m.value:.4g} {m.unit}".strip()
            ok = "" if m.ok is None else ("yes" if m.ok else "NO")
            rows.append((section.name, m.name, value, m.target or "", ok))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [f"{s.name}: {s.notes}" for s in sections if s.notes]
    return "\n".join(lines + (["", *notes] if notes else []))
