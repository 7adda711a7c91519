"""The plots of ``bench_resume.py``: load time and bytes at rest against session length.

Each figure has two panels: the figures themselves (log-log), and each side as a ratio to the
baseline measured in the same run (the JSONL file read with msgspec; the JSONL file's bytes),
with the targets drawn in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# (key, label, colour, marker, line style): sesstree in solid lines, the baselines dashed.
LOAD_SIDES = [
    ("sqlite_ms", "sesstree, SQLite", "tab:blue", "o", "-"),
    ("pg_ms", "sesstree, PostgreSQL", "tab:purple", "s", "-"),
    ("msgspec_ms", "JSONL + msgspec (the floor)", "black", "^", "--"),
    ("json_ms", "JSONL + json.loads (the seed)", "tab:gray", "v", "--"),
    ("agents_ms", "Agents SDK SQLiteSession", "tab:orange", "D", ":"),
]
NICE = [0.1, 0.2, 0.3, 0.5, 0.8, 1, 1.2, 1.5, 2, 3, 5, 8, 10, 20, 30, 50, 100, 200]
BYTES_SIDES = [
    ("sqlite_bytes", "sesstree, SQLite", "tab:blue", "o", "-"),
    ("pg_bytes", "sesstree, PostgreSQL (after VACUUM)", "tab:purple", "s", "-"),
    ("jsonl_bytes", "JSONL file (the seed)", "black", "^", "--"),
    ("compact_bytes", "compact JSON of the messages", "tab:gray", "v", "--"),
    ("agents_bytes", "Agents SDK SQLiteSession", "tab:orange", "D", ":"),
]


def _panels(rows: list[dict[str, Any]], sides: list[tuple[str, str, str, str, str]],
            base: str, ylabel: str, ratio_label: str, title: str,
            targets: list[tuple[list[float], list[float], str]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = [r["n"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2))
    for key, label, colour, marker, style in sides:
        if key not in rows[0]:
            continue
        ys = [r[key] for r in rows]
        left.plot(ns, ys, marker=marker, linestyle=style, color=colour, label=label)
        right.plot(ns, [y / r[base] for y, r in zip(ys, rows, strict=True)], marker=marker,
                   linestyle=style, color=colour, label=label)
    for xs, ys, label in targets:
        if xs[0] == xs[-1]:  # a target at one length: a bar across that point
            right.plot(xs[:1], ys[:1], color="tab:red", marker="_", markersize=28,
                       markeredgewidth=2, linestyle="none", alpha=0.7, label=label)
        else:
            right.plot(xs, ys, color="tab:red", linestyle="-." if "aim" in label else "-",
                       linewidth=1.2, alpha=0.7, label=label)
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_ylabel(ylabel)
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_ylabel(ratio_label)
    # Ratios read best at round values: label those in range, and only those.
    low, high = right.get_ylim()
    ticks = [t for t in NICE if low <= t <= high]
    right.yaxis.set_major_locator(matplotlib.ticker.FixedLocator(ticks))
    right.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
    right.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for ax in (left, right):
        ax.set_xlabel("session length (messages, appended one at a time)")
        ax.set_xticks(ns)
        ax.set_xticklabels([f"{n:,}" for n in ns])
        ax.grid(True, which="major", alpha=0.4)
        ax.grid(True, which="minor", alpha=0.15)
    left.legend(fontsize=8.5, loc="upper left")
    right.legend(fontsize=8.5, loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(results: dict[str, Any], folder: Path) -> list[Path]:
    """Draw ``load-vs-length.png`` and ``bytes-vs-length.png`` into ``folder``; their paths."""
    rows = results["lengths"]
    ns = [r["n"] for r in rows]
    big = [n for n in ns if n >= 10_000]
    load_targets: list[tuple[list[float], list[float], str]] = [
        ([1_000, 1_000], [1.2, 1.2], "target: 1.2x at 1,000"),
    ]
    if big:
        load_targets.append(([min(big), max(big)], [1.0, 1.0], "target: 1.0x from 10,000"))
        load_targets.append(([min(big), max(big)], [0.8, 0.8], "aim: 0.8x"))
    where = "quick sizes" if results.get("quick") else "full sizes"
    return [
        _panels(rows, LOAD_SIDES, "msgspec_ms", "load from a fresh handle (ms)",
                "time / the JSONL + msgspec floor",
                f"Resuming a session: load time against length ({where}, one run)",
                load_targets, folder / "load-vs-length.png"),
        _panels(rows, BYTES_SIDES, "jsonl_bytes", "bytes at rest",
                "bytes / the JSONL file's",
                f"One session at rest: bytes against length ({where}, one run)",
                [([min(ns), max(ns)], [0.5, 0.5], "target: 0.5x")],
                folder / "bytes-vs-length.png"),
    ]
