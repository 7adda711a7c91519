"""``sess`` commands that move whole sessions in and out, and look after the store:
import, export, stats, fsck, gc, repack."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
import msgspec

from ..fmt import plural
from .core import StoreLocator, cli, complete_rev, emit_json, events, fail, one_line, pass_store

if TYPE_CHECKING:
    from ..repo.store import Store
    from ..store.base import PackCounts

__all__ = ["export", "fsck", "gc", "import_", "repack", "stats"]

@cli.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--as", "name", metavar="NAME", help="Session name (default: from the source).")
@click.option("--format", "fmt", default="auto", show_default=True, help="Input format.")
@click.option("-r", "--recursive", is_flag=True, help="Import every file under a folder.")
@click.option("--force", is_flag=True,
              help="With --as: replace a session of another history (its head stays in the reflog).")
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def import_(locator: StoreLocator, files: tuple[Path, ...], name: str | None, fmt: str,
            recursive: bool, force: bool, as_json: bool) -> None:
    """Import transcripts (seed JSONL: one message per line, optional NAME.meta.json).

    A re-import lands where the earlier import of the same file is, even renamed.
    """
    from ..interop import import_files
    from .progress import progress_line

    store = locator.open()
    # Only for many files (a folder, several names): one file's import says its result.
    many = recursive or len(files) > 1
    with progress_line("importing files", show=many) as progress:
        results = import_files(store, list(files), name=name, format=fmt,
                               recursive=recursive, force=force, progress=progress)
    if as_json:
        # Ids a file quotes may hold lone surrogates ("\ud800"), which UTF-8 cannot carry.
        def safe(text: str) -> str:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")

        emit_json([{**msgspec.to_builtins(r), "source": safe(r.source),
                     "problems": [safe(p) for p in r.problems]} for r in results])
        return
    failed = 0
    for r in results:
        # A problem quotes the file (ids, keys): one printable line each, never raw escapes.
        for problem in r.problems:
            click.echo(one_line(f"warning: {problem}"), err=True)
        if r.outcome == "failed":
            failed += 1
            click.echo(one_line(f"{r.source}: failed"), err=True)
            continue
        if r.outcome == "skipped":
            continue  # its warning said why
        click.echo(one_line(f"{r.session}: {r.outcome}, {events(r.events)} "
                             f"({r.new_nodes} new) from {r.source}"))
    if failed:
        fail(f"{failed} of {plural(len(results), 'file')} could not be imported")


@cli.command()
@click.argument("rev", default="HEAD", required=False, shell_complete=complete_rev)
@click.option("-o", "out", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              help="Output file (default: NAME.jsonl here); - for standard output.")
@click.option("--format", "fmt", default="seed", show_default=True, help="Output format.")
@click.option("--force", is_flag=True, help="Replace files that already exist.")
@pass_store
def export(locator: StoreLocator, rev: str, out: Path | None, fmt: str, force: bool) -> None:
    """Write a session back out (seed format: NAME.jsonl + NAME.meta.json).

    Files are replaced atomically and never written through a symbolic link.
    """
    from ..interop import export_session, render_export

    store = locator.open()
    if out is not None and str(out) == "-":
        # The main file only: seed's NAME.meta.json has no place on a stream.
        data = render_export(store, rev, format=fmt)[0][1]
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    for path in export_session(store, rev, out=out, format=fmt, force=force):
        click.echo(f"wrote {path}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine output.")
@pass_store
def stats(locator: StoreLocator, as_json: bool) -> None:
    """Nodes, refs, and bytes: as separate JSONL files (logical) against on disk (physical)."""
    from .progress import progress_line

    store = locator.open()
    with progress_line("sizing paths") as progress:
        s = store.stats(progress=progress)
    if as_json:
        emit_json({**msgspec.to_builtins(s), "ratio": round(s.ratio, 3)})
        return
    click.echo(f"nodes           {s.nodes}")
    click.echo(f"sessions        {s.sessions}")
    click.echo(f"tags            {s.tags}")
    click.echo(f"reflog entries  {s.reflog_entries}")
    click.echo(f"logical bytes   {s.logical_bytes}  (as one JSONL file per session)")
    click.echo(f"physical bytes  {s.physical_bytes}  (on disk)")
    click.echo(f"ratio           {_ratio(s.logical_bytes, s.physical_bytes)}")
    if s.packs is not None:
        click.echo(f"packed nodes    {s.packs.packed_nodes}  (in {plural(s.packs.packs, 'pack')})")
        click.echo(f"loose nodes     {s.packs.loose_nodes}")
        click.echo(f"packs           {_packs_line(s.packs)}")


def _packs_line(p: PackCounts) -> str:
    """What the packs take, and how much compression saved."""
    if not p.packs:
        return "none yet (a session's history is packed as it grows, or by 'sess repack')"
    return (f"{p.stored_bytes} bytes stored, {p.raw_bytes} before compression "
            f"({p.raw_bytes / max(p.stored_bytes, 1):.1f}x)")


def _ratio(logical: int, physical: int) -> str:
    """The ratio line of ``sess stats``, saying which way round it is: logical / physical,
    so above 1 the store is smaller than the JSONL files it holds."""
    if not logical or not physical:
        return "-  (nothing stored yet)" if not logical else "-"
    r = logical / physical
    # Two significant digits below 0.1: a small store is mostly its fixed pages, "0.0x" is
    # no ratio.
    shown = f"{r:.1f}x" if r >= 0.1 else f"{r:.2g}x"
    if 0.95 <= r < 1.05:
        return f"{shown}  (JSONL bytes per byte on disk: the store is about their size)"
    if r >= 1:
        return f"{shown}  (JSONL bytes per byte on disk: the store is {r:.1f}x smaller)"
    return f"{shown}  (JSONL bytes per byte on disk: the store is {1 / r:.1f}x larger)"


@cli.command()
@click.option("--accept-wal-loss", is_flag=True,
              help="Open a store whose write-ahead log is damaged without the commits the "
                   "damage hides (a copy of the log stays), then check it.")
@click.option("--rebuild-index", is_flag=True,
              help="Build the text index (sess grep's) again from the nodes first: what a "
                   "damaged index is restored with. Safe to stop: it goes on where it stopped.")
@pass_store
def fsck(locator: StoreLocator, accept_wal_loss: bool, rebuild_index: bool) -> None:
    """Re-hash every node and check parents, refs, reflog and indexes; exit 1 on any fault."""
    from ..errors import WalDamagedError
    from ..repo.maintenance import fsck as check
    from ..repo.maintenance import rebuild_index as rebuild
    from .progress import progress_line

    if accept_wal_loss:
        _accept_wal_loss(locator)
    try:
        store = locator.open()
    except WalDamagedError as exc:
        # Found on open (this one or an earlier one): the store is not opened until accepted.
        click.echo(one_line(f"fault: {exc}"))
        fail("1 fault found: the write-ahead log is damaged (see above)")
    if rebuild_index:
        with progress_line("indexing nodes") as progress:
            counts = rebuild(store, progress=progress)
        if counts is not None:
            click.echo(f"text index rebuilt: {plural(counts.entries, 'node')} indexed")
    with progress_line("checking nodes") as progress:
        faults = check(store, progress=progress)
    for fault in faults:
        click.echo(f"fault: {fault}")
    if faults:
        fail(f"{plural(len(faults), 'fault')} found")
    click.echo(f"ok: {store.count_nodes()} nodes, every id, parent and ref checked")


def _accept_wal_loss(locator: StoreLocator) -> None:
    """Open the store as SQLite recovers its damaged write-ahead log (sqlite_walguard)."""
    from ..repo.store import STORE_FILE
    from ..store.sqlite.walguard import accept_wal_loss

    if locator.url() is not None:
        fail("--accept-wal-loss is for SQLite stores: a PostgreSQL store has no such log")
    found = locator.find()
    accepted = accept_wal_loss(found if found.is_file() else found / STORE_FILE)
    if accepted is None:
        click.echo("the write-ahead log is not damaged: nothing to accept")
    else:
        click.echo(one_line(f"accepted: {accepted.split('. The log is kept')[0]}; the damaged "
                            "log stays beside the store"))


@cli.command()
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
@click.option("--aggressive", is_flag=True,
              help="Then pack every loose tail, whatever its length (as 'sess repack').")
@pass_store
def gc(locator: StoreLocator, dry_run: bool, aggressive: bool) -> None:
    """Remove nodes that no session, tag, HEAD or reflog entry reaches."""
    from ..repo.maintenance import gc as collect
    from .progress import progress_line

    store = locator.open()
    with progress_line("removing unreachable nodes") as progress:
        result = collect(store, dry_run=dry_run, progress=progress)
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {plural(len(result.unreachable), 'unreachable node')}; {result.kept} kept")
    if aggressive and not dry_run:
        _repack(store)


@cli.command()
@pass_store
def repack(locator: StoreLocator) -> None:
    """Pack every session's loose tail, whatever its length, and finish packing a store
    written before packs (reads then cost a few rows per session). Safe to stop at any time."""
    _repack(locator.open())


def _repack(store: Store) -> None:
    from .progress import progress_line

    with progress_line("packing sessions") as progress:
        counts = store.repack(progress=progress)
    if counts is None:
        click.echo("this store keeps no packs: nothing to do")
        return
    click.echo(f"packed: {plural(counts.packed_nodes, 'node')} in {plural(counts.packs, 'pack')}, "
               f"{plural(counts.loose_nodes, 'loose node')} left")

