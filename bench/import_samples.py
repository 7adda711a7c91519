"""Import every interop sample into a fresh store and report what it cost.

    .venv/bin/python bench/import_samples.py [SAMPLES_DIR]

SAMPLES_DIR defaults to ``tests/interop/samples`` of the repository (real transcripts of other
tools, kept with their licences); a folder that does not exist is named in one line, exit 2.

Prints, per format folder and in total: files, sessions landed, events on those sessions'
paths, nodes stored, seconds, source bytes and store bytes, then the same for a second import
of everything (which must write nothing) and for a folder holding each file twice, as a
resumed or forked copy would (the copies must collapse onto the originals).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from sesstree import open_store
from sesstree.interop import import_files

HERE = Path(__file__).resolve().parent
DEFAULT = HERE.parent / "tests" / "interop" / "samples"


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".json", ".jsonl"))


def main(samples: Path) -> None:
    """Run the benchmark on the sample folder ``samples``."""
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(Path(tmp) / "s")
        print(f"{'folder':18} {'files':>5} {'sessions':>8} {'events':>7} {'nodes':>6} "
              f"{'seconds':>8} {'source B':>10}")
        total_src = total_files = 0
        start_all = time.perf_counter()
        for folder in sorted(p for p in samples.iterdir() if p.is_dir() and p.name != "format-docs"):
            files = _files(folder)
            src = sum(f.stat().st_size for f in files)
            before = store.backend.count_nodes()
            t = time.perf_counter()
            results = import_files(store, [folder], recursive=True)
            dt = time.perf_counter() - t
            events = sum(r.events for r in results)
            print(f"{folder.name:18} {len(files):>5} {len(results):>8} {events:>7} "
                  f"{store.backend.count_nodes() - before:>6} {dt:>8.3f} {src:>10}")
            total_src += src
            total_files += len(files)
        elapsed = time.perf_counter() - start_all
        checkpoint = getattr(store.backend, "checkpoint", None)
        if checkpoint is not None:
            checkpoint()
        size = store.backend.physical_bytes()
        print(f"total: {total_files} files, {store.backend.count_nodes()} nodes, "
              f"{elapsed:.3f} s, store {size} B vs source {total_src} B "
              f"({size / total_src:.2f}x)")
        t = time.perf_counter()
        again = import_files(store, [samples], recursive=True)
        print(f"re-import: {sum(r.new_nodes for r in again)} new nodes, "
              f"{time.perf_counter() - t:.3f} s")
        store.close()

        # every transcript twice (a resumed copy under another name): stored once
        twice = Path(tmp) / "twice"
        for f in _files(samples):
            if "format-docs" in f.parts:
                continue
            for copy in ("a", "b"):
                dest = twice / copy / f.parent.name / f.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dest)
        store = open_store(Path(tmp) / "s2")
        import_files(store, [twice / "a"], recursive=True)
        one = store.backend.count_nodes()
        results = import_files(store, [twice / "b"], recursive=True)
        print(f"copies: {len(results)} sessions from the second copy, "
              f"{store.backend.count_nodes() - one} new nodes (original: {one})")
        store.close()


def _samples(argv: list[str]) -> Path:
    """The samples folder to use, or exit 2 with one line saying what to pass."""
    folder = Path(argv[1]) if len(argv) > 1 else DEFAULT
    if not folder.is_dir() or not any(p.is_dir() for p in folder.iterdir()):
        given = "" if len(argv) > 1 else " (the default, beside the clone)"
        print(f"error: no interop samples at {folder}{given}; pass the folder holding one "
              "sub-folder per format: python bench/import_samples.py SAMPLES_DIR",
              file=sys.stderr)
        sys.exit(2)
    return folder


if __name__ == "__main__":
    main(_samples(sys.argv))
