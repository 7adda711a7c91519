"""The report of ``bench_resume.py``: a table of every length, then one line per figure with
its target (``ok`` or ``MISSED``; no mark for a figure shown for reference)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["report", "table"]

NAME = "quest"

Row = tuple[str, str, bool | None]


def _x(a: float, b: float) -> float:
    return a / b if b else math.inf


def _ms(v: float) -> str:
    return f"{v:.2f} ms" if v < 10 else f"{v:.1f} ms"


def _mb(v: float) -> str:
    return f"{v / 1e6:.2f} MB"


def table(rows: list[dict[str, Any]]) -> list[str]:
    """Load time and bytes at rest for each length, every side, as an aligned table."""
    cols = [("sqlite", "sesstree"), ("sqlite_warm", "warm"), ("pg", "sesstree PG"),
            ("pg_warm", "PG warm"), ("msgspec", "JSONL msgspec"), ("json", "JSONL json"),
            ("agents", "Agents SDK")]
    cols = [c for c in cols if f"{c[0]}_ms" in rows[0]]
    head = f"{'load, fresh handle':<20}" + "".join(f"{t:>15}" for _, t in cols)
    out = [head] + [f"{r['n']:>10,} messages".ljust(20)
                    + "".join(f"{_ms(r[f'{k}_ms']):>15}" for k, _ in cols) for r in rows]
    sizes = [("sqlite_bytes", "sesstree"), ("pg_bytes", "sesstree PG"), ("jsonl_bytes", "JSONL"),
             ("compact_bytes", "compact JSON"), ("agents_bytes", "Agents SDK")]
    sizes = [c for c in sizes if c[0] in rows[0]]
    out.append(f"{'bytes at rest':<20}" + "".join(f"{t:>15}" for _, t in sizes))
    out += [f"{r['n']:>10,} messages".ljust(20) + "".join(f"{r[k]:>15,}" for k, _ in sizes)
            for r in rows]
    return out


def report(r: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    by_n = {row["n"]: row for row in r["lengths"]}
    for n, target in ((1_000, 1.2), (10_000, 1.0), (100_000, 1.0)):
        if n not in by_n:
            continue
        x = by_n[n]
        ratio = _x(x["sqlite_ms"], x["msgspec_ms"])
        rows.append((f"load {n:,}, fresh handle, vs the JSONL+msgspec floor (target <= {target}x, "
                     f"aim 0.8x)", f"{ratio:.2f}x ({_ms(x['sqlite_ms'])} vs "
                     f"{_ms(x['msgspec_ms'])})", ratio <= target))
        rows.append(("  ... vs the seed's json.loads per line",
                     f"{_x(x['sqlite_ms'], x['json_ms']):.2f}x ({_ms(x['json_ms'])})", None))
        if "agents_ms" in x:
            rows.append(("  ... vs the Agents SDK SQLiteSession",
                         f"{_x(x['sqlite_ms'], x['agents_ms']):.2f}x ({_ms(x['agents_ms'])}; "
                         f"it is {_x(x['agents_ms'], x['msgspec_ms']):.2f}x the floor)", None))
        rows.append(("  ... warm (the same open store) vs the floor",
                     f"{_x(x['sqlite_warm_ms'], x['msgspec_ms']):.2f}x "
                     f"({_ms(x['sqlite_warm_ms'])}; open + close alone {_ms(x['sqlite_open_ms'])})",
                     None))
        if "pg_ms" in x:
            ratio = _x(x["pg_ms"], x["sqlite_ms"])
            rows.append(("  ... on PostgreSQL vs on SQLite" + (" (target <= 1.2x)" if n == 10_000
                                                                  else ""),
                         f"{ratio:.2f}x ({_ms(x['pg_ms'])}; warm {_ms(x['pg_warm_ms'])}; "
                         f"{_x(x['pg_ms'], x['msgspec_ms']):.2f}x the floor)",
                         ratio <= 1.2 if n == 10_000 else None))
    f = r["forest"]
    what = f"forest ({f['base']:,} base, {f['forks']} forks x {f['extra']})"
    ratio = _x(f["sqlite"], f["unique_compact"])
    rows.append((f"{what} vs unique compact JSON (target <= 0.5x)",
                 f"{ratio:.2f}x ({_mb(f['sqlite'])} vs {_mb(f['unique_compact'])})", ratio <= 0.5))
    if "pg" in f:
        ratio = _x(f["pg"], f["unique_compact"])
        rows.append(("  ... on PostgreSQL, after VACUUM (target <= 0.5x)",
                     f"{ratio:.2f}x ({_mb(f['pg'])}; after VACUUM FULL "
                     f"{_x(f['pg_full'], f['unique_compact']):.2f}x)", ratio <= 0.5))
    rows.append(("  ... the seed's JSONL copies (each fork a full file)",
                 f"{_x(f['seed_copies'], f['unique_compact']):.1f}x ({_mb(f['seed_copies'])})", None))
    if 10_000 in by_n:
        x = by_n[10_000]
        ratio = _x(x["sqlite_bytes"], x["jsonl_bytes"])
        rows.append(("one 10,000-message session vs its JSONL file (target <= 0.5x)",
                     f"{ratio:.2f}x ({_mb(x['sqlite_bytes'])} vs {_mb(x['jsonl_bytes'])})",
                     ratio <= 0.5))
        if "pg_bytes" in x:
            ratio = _x(x["pg_bytes"], x["jsonl_bytes"])
            rows.append(("  ... on PostgreSQL, after VACUUM (target <= 0.5x)",
                         f"{ratio:.2f}x ({_mb(x['pg_bytes'])})", ratio <= 0.5))
    t = r["traffic"]
    rows.append((f"  (the traffic: zstd -3 of the whole {t['n']:,}-message JSONL file)",
                 f"{t['zstd3_ratio']:.2f}x, {t['mean_bytes']:.0f} bytes a message", None))
    a = r["append"]
    rows.append(("append, SQLite default: messages/s vs the seed's JSONL append (compare with main)",
                 f"{a['sqlite_per_s']:,.0f}/s = {_x(a['sqlite_per_s'], a['jsonl_per_s']):.2f}x "
                 f"({a['jsonl_per_s']:,.0f}/s)", None))
    rows.append(("append, SQLite durable: vs JSONL append + fsync (compare with main)",
                 f"{a['sqlite_durable_per_s']:,.0f}/s = "
                 f"{_x(a['sqlite_durable_per_s'], a['jsonl_fsync_per_s']):.2f}x "
                 f"({a['jsonl_fsync_per_s']:,.0f}/s)", None))
    if "pg_per_s" in a:
        rows.append(("append, PostgreSQL (compare with main)", f"{a['pg_per_s']:,.0f}/s", None))
    x = r["lengths"][-1]
    fills = [f"SQLite {x['sqlite_fill_per_s']:,.0f}/s"]
    fills += [f"PostgreSQL {x['pg_fill_per_s']:,.0f}/s"] if "pg_fill_per_s" in x else []
    fills += [f"Agents SDK {x['agents_fill_per_s']:,.0f}/s"] if "agents_fill_per_s" in x else []
    rows.append((f"  ... appends while filling the {x['n']:,}-message session", ", ".join(fills),
                 None))
    fk = r["fork"]
    ratio = _x(fk["big_us"], fk["small_us"])
    rows.append((f"fork of a {fk['n']:,}-message session vs a {fk['small_n']}-message one "
                 "(target <= 1.5x)", f"{ratio:.2f}x ({fk['big_us']:.0f} us vs "
                 f"{fk['small_us']:.0f} us)", ratio <= 1.5))
    ratio = _x(fk["inside_at_us"], fk["small_at_us"])
    rows.append((f"  ... at a point inside it ({NAME}~300) vs at the small one's head "
                 "(target <= 1.5x)", f"{ratio:.2f}x ({fk['inside_at_us']:.0f} us vs "
                 f"{fk['small_at_us']:.0f} us)", ratio <= 1.5))
    rows.append((f"  ... by revision '{NAME}~300', resolving it included",
                 f"{fk['inside_rev_us']:.0f} us", None))
    m = r["memory"]
    ratio = _x(m["sqlite_peak"], m["decoded"])
    rows.append((f"peak memory of a {m['n']:,}-message load vs the decoded messages "
                 "(target <= 2x)", f"{ratio:.2f}x ({_mb(m['sqlite_peak'])} vs "
                 f"{_mb(m['decoded'])}; the msgspec floor peaks at "
                 f"{_x(m['msgspec_peak'], m['decoded']):.2f}x)", ratio <= 2))
    return rows
