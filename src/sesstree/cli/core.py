"""The ``sess`` command line: git-shaped, thin over the Python API.

This module holds what every command shares: the group and its store option (the store is
found by :mod:`.locate`), turning errors into one line, and the entry point. The commands
live beside it, one module per kind of work.

Output is for people by default; ``--json`` gives stable machine output. A user error prints
one line (``Error: ...``) and exits 1; it never shows a traceback.
"""

from __future__ import annotations

import importlib
import io
import os
import sys
from typing import Any, ClassVar, NoReturn

import click

from ..errors import SesstreeError
from .locate import STORE_DIR, StoreLocator
from .term import install, terminal

# What every command shares is imported here; the store modules, msgspec and the commands
# themselves load only when a command needs them, so that `sess --help` and a command that
# opens no store start as fast as Python can.

__all__ = ["CONTEXT_SETTINGS", "STORE_DIR", "CountCommand", "StoreLocator", "cli", "complete_rev",
           "completion", "emit_json", "events", "fail", "main", "one_line", "page", "pass_store"]

class _OneLineUsage(click.ClickException):
    exit_code = 2


class _Group(click.Group):
    """Turns sesstree's own errors into one line and exit code 1, and loads each command only
    when it is used: ``sess log`` does not wait for the HTTP client ``run`` needs, nor
    ``sess --help`` for any command's module."""

    #: Where each command is defined ("module:attribute").
    lazy: ClassVar[dict[str, str]] = {
        "append": "sesstree.cli.refs:append", "reflog": "sesstree.cli.refs:reflog",
        "tag": "sesstree.cli.refs:tag",
        "branch": "sesstree.cli.sessions:branch", "checkout": "sesstree.cli.sessions:checkout",
        "init": "sesstree.cli.sessions:init", "reset": "sesstree.cli.sessions:reset",
        "status": "sesstree.cli.sessions:status",
        "diff": "sesstree.cli.reading:diff", "log": "sesstree.cli.reading:log",
        "grep": "sesstree.cli.grep:grep",
        "messages": "sesstree.cli.viewing:messages", "show": "sesstree.cli.viewing:show",
        "export": "sesstree.cli.storage:export", "fsck": "sesstree.cli.storage:fsck",
        "gc": "sesstree.cli.storage:gc", "import": "sesstree.cli.storage:import_",
        "stats": "sesstree.cli.storage:stats", "repack": "sesstree.cli.storage:repack",
        "run": "sesstree.agent.command:run",
        "serve": "sesstree.cli.remote:serve", "remote": "sesstree.cli.remote:remote",
        "clone": "sesstree.cli.remote:clone", "fetch": "sesstree.cli.remote:fetch",
        "pull": "sesstree.cli.remote:pull", "push": "sesstree.cli.remote:push",
        "proxy": "sesstree.cli.proxy:proxy", "watch": "sesstree.cli.watch:watch",
    }
    #: The first paragraph of each command's help, which ``sess --help`` shortens to fit, as
    #: click would from the command itself (a test checks they agree). A command missing
    #: here is loaded to list it.
    summaries: ClassVar[dict[str, str]] = {
        "append": "Append events: `append [SESSION] TYPE [JSON|-]` (JSON from stdin if absent "
                  "or -).",
        "branch": "List sessions, or fork one: `branch [SOURCE] NEW` forks SOURCE (default "
                  "HEAD) into NEW.",
        "checkout": "Switch HEAD to a session, or (detached) to any other revision; `-` is the "
                    "one before.",
        "clone": "Copy every session and tag of the store at URL into a new store in "
                 "PATH/.sess (or at a postgresql:// URL); URL becomes remote `origin`.",
        "diff": "Show the common ancestor of A and B (default HEAD) and what each added after "
                "it.",
        "export": "Write a session back out (seed format: NAME.jsonl + NAME.meta.json).",
        "fetch": "Bring what REMOTE (default origin) has; its sessions become readable as "
                 "REMOTE/NAME.",
        "fsck": "Re-hash every node and check parents, refs, reflog and indexes; exit 1 on any "
                "fault.",
        "gc": "Remove nodes that no session, tag, HEAD or reflog entry reaches.",
        "grep": "Find PATTERN in every session (or in each REV), newest first: one line per "
                "matching event, shown once however many sessions share it.",
        "import": "Import transcripts (seed JSONL: one message per line, optional "
                  "NAME.meta.json).",
        "init": "Create a store in PATH/.sess (default: this folder), or at --store / "
                "SESS_STORE. PATH may be a postgresql:// URL.",
        "log": "The conversation at REV (default HEAD), newest first: its messages, and one "
               "line per agent turn with what its bookkeeping says (steps, tokens, duration, "
               "how it ended).",
        "messages": "Print the chat messages of REV as they were stored (--sending: as sent): "
                    "in full for reading, one line each with --oneline, or JSON.",
        "proxy": "Record every conversation that passes through, untouched, into the store.",
        "pull": "Fetch, then fast-forward SESSIONs (default: the current one) to REMOTE's; "
                "never merges: a divergence is refused, naming the node where the two sides "
                "part.",
        "push": "Send SESSIONs (default: the current one) to REMOTE (default origin), with "
                "only the nodes it lacks. Refused unless each fast-forwards the remote's, or "
                "--force.",
        "repack": "Pack every session's loose tail, whatever its length, and finish packing a "
                  "store written before packs (reads then cost a few rows per session). Safe "
                  "to stop at any time.",
        "reflog": "Every move of a session's ref (default and HEAD: the HEAD session's), "
                  "newest first.",
        "remote": "Name other stores: folders, postgresql:// URLs, or http(s):// URLs of "
                  "`sess serve`.",
        "reset": "Move SESSION (default: the HEAD session) to REV: rewind, fast-forward or "
                 "jump; logged, so `sess reflog` can undo it.",
        "run": "Send PROMPT to the model on SESSION (default: the HEAD session) and print the "
               "answer.",
        "serve": "Serve the store over HTTP for clone, fetch, pull and push (see docs/sync.md).",
        "show": "Show each REV: a session by name as its conversation, any other revision "
                "(an id, a tag, HEAD, name~2) as one node in full.",
        "stats": "Nodes, refs, and bytes: as separate JSONL files (logical) against on disk "
                 "(physical).",
        "status": "Show the current session (HEAD), its head id and length.",
        "tag": "Name the node at REV (default HEAD), or list tags (-l PATTERN: those "
               "matching).",
        "watch": "Record the sessions of Claude Code, Codex, pi and Gemini CLI as they are "
                 "written.",
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            module, attr = self.lazy[cmd_name].split(":")
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:
            # Bytes that are not UTF-8 arrive as lone surrogates (Python's surrogateescape):
            # no store holds such text, so say so here, before any command looks a name up
            # (and finds nothing, or a confusing "no session named '\udcff'").
            if not arg.isascii():
                try:
                    arg.encode()
                except UnicodeEncodeError:
                    raise click.ClickException(
                        f"argument {arg[:80]!a} is not valid UTF-8 text") from None
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:  # `sess --bogus`: one line, as every usage error
            message = " ".join(exc.format_message().split())
            raise _OneLineUsage(one_line(f"{message} (see 'sess --help')")) from None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if (name and not name.startswith("-") and not ctx.resilient_parsing
                and self.get_command(ctx, name) is None):
            # Click suggests among the commands loaded so far: here, every command is one.
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx))
            hint = ("" if not close else f" Did you mean {close[0]!r}?" if len(close) == 1
                    else f" (Possible commands: {', '.join(close)})")
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of commands, as click draws it, without loading a command to list it."""
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            if name in self.summaries and name not in self.commands:
                # A stand-in with the same help: click shortens it as it would the command's.
                rows.append((name, click.Command(name, help=self.summaries[name])))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd))
        if not rows:
            return
        limit = formatter.width - 6 - max(len(name) for name, _ in rows)
        lines = [(name, cmd.get_short_help_str(limit)) for name, cmd in rows]
        with formatter.section("Commands"):
            formatter.write_dl(lines)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
            # Flushed here, inside the handlers, so a full disk or closed pipe is reported as
            # one line, not by the interpreter at exit.
            sys.stdout.flush()
            return result
        except click.UsageError as exc:
            # One line, as for every other user error (click's own form takes three).
            # (The path below the group: the program is `sess` however it was started.)
            below = exc.ctx.command_path.partition(" ")[2] if exc.ctx else ""
            command = f"sess {below} --help" if below else "sess --help"
            # click's own line breaks ("Choose from:\n\tbash,...") are layout, not content.
            message = " ".join(exc.format_message().split())
            raise _OneLineUsage(one_line(f"{message} (see '{command}')")) from None
        except click.ClickException as exc:
            if exc.message.isprintable():
                raise
            raise click.ClickException(one_line(exc.message)) from None
        except SesstreeError as exc:
            raise click.ClickException(one_line(str(exc))) from None
        except BrokenPipeError:  # `sess log | head`
            _silence_stdout()
            sys.stderr.close()
            ctx.exit(0)
        except OSError as exc:
            # A file the user named, or the output itself (a full disk, `> /dev/full`), cannot
            # be read or written: say which and why, in one line.
            if exc.filename is not None:
                raise click.ClickException(f"{exc.filename}: {exc.strerror}") from None
            writing = _raised_by_echo(exc) or _stdout_failed()
            if writing:
                _silence_stdout()
            what = "cannot write the output" if writing else "input/output error"
            raise click.ClickException(f"{what}: {exc.strerror or exc}") from None
        except UnicodeEncodeError as exc:
            # Only input that was not UTF-8 (an argument, stdin) gets here: the stores hold text.
            raise click.ClickException(f"{exc.object[:80]!a} is not valid UTF-8 text") from None
        except (RecursionError, MemoryError) as exc:
            raise click.ClickException(f"input too large or too deeply nested ({type(exc).__name__})"
                                       ) from None
        finally:
            if isinstance(ctx.obj, StoreLocator):
                ctx.obj.close()
            terminal(ctx).close()


def one_line(text: str) -> str:
    """An error message as one printable line: a name or revision it quotes may hold line
    breaks (U+2028 too) or control characters, which are shown escaped."""
    from ..fmt import printable

    return printable(text)


def _raised_by_echo(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is click.echo.__code__:
            return True
        tb = tb.tb_next
    return False


def _stdout_failed() -> bool:
    """True if what is buffered for stdout cannot be written."""
    try:
        sys.stdout.flush()
        return False
    except OSError:
        return True


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit adds no second
    report of an output that cannot be written."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a real file (a test's capture): nothing will be flushed at exit


#: ``-h`` is ``--help`` everywhere, as a git user types it.
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


@click.group(cls=_Group, context_settings=CONTEXT_SETTINGS)
@click.option("--store", "store_path", metavar="PATH", help="Store folder (default: SESS_STORE, "
              "then .sess/ here or in a parent).")
@click.option("--color", "--colour", "color", type=click.Choice(["auto", "always", "never"]),
              default="auto", show_default=True,
              help="Colour the output: on a terminal only (auto; NO_COLOR turns it off), "
                   "always, or never.")
@click.option("--no-pager", is_flag=True,
              help="Do not send long output through a pager (SESS_PAGER, PAGER, else less).")
@click.version_option(package_name="sesstree")
@click.pass_context
def cli(ctx: click.Context, store_path: str | None, color: str, no_pager: bool) -> None:
    """Store agent sessions the way git stores commits."""
    ctx.obj = StoreLocator(store_path)
    install(ctx, color, not no_pager)


class CountCommand(click.Command):
    """A command that takes ``-N`` for ``-n N``, as ``git log -3`` does."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        out: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                out.extend(args[i:])
                break
            # (`-n -1`: the -1 is -n's value, refused by its own check, not a second count.)
            after_n = i > 0 and args[i - 1] in ("-n", "--max-count")
            if len(arg) > 1 and arg[0] == "-" and arg[1:].isdigit() and not after_n:
                out.extend(["-n", arg[1:]])
            else:
                out.append(arg)
        return super().parse_args(ctx, out)


def page() -> None:
    """Send the rest of this command's output through the pager (on a terminal only)."""
    terminal().page()


pass_store = click.make_pass_decorator(StoreLocator)


def events(n: int) -> str:
    """``n`` events, in words."""
    from ..fmt import plural

    return plural(n, "event")


def emit_json(value: Any) -> None:
    """Print ``value`` as one line of JSON."""
    import msgspec

    click.echo(msgspec.json.encode(value).decode())


def fail(message: str) -> NoReturn:
    raise click.ClickException(message)


def usage(message: str) -> NoReturn:
    """A command called the wrong way (missing or contradictory arguments): one line, exit 2,
    as every usage error click itself finds."""
    raise click.UsageError(message, click.get_current_context(silent=True))


# -- setup and status ------------------------------------------------------------------------



def main() -> None:
    """Entry point of the ``sess`` console script.

    Every error a user can cause is turned into one line inside the commands. Anything else is
    a bug in sesstree: it too is one line (with ``SESS_DEBUG=1`` for the traceback), exit 70,
    because a user should never have to read Python. Tests run ``cli`` itself, so a bug still
    fails them loudly.
    """
    try:
        cli(prog_name="sess")
    except Exception as exc:  # the last line of defence, see above
        if os.environ.get("SESS_DEBUG"):
            raise
        message = one_line(f"{type(exc).__name__}: {exc}")[:300]
        click.echo(f"Error: internal error ({message}); please report it "
                   "(SESS_DEBUG=1 shows the traceback)", err=True)
        sys.exit(70)


# -- shell completion ------------------------------------------------------------------------


def complete_rev(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """Shell completion of a revision: HEAD, the sessions and the tags of the store the
    command line names (nothing when there is none: completion never prints an error)."""
    from click.shell_completion import CompletionItem

    store_path = ctx.find_root().params.get("store_path")
    locator = StoreLocator(store_path if isinstance(store_path, str) else None)
    try:
        store = locator.open()
        try:
            names = ["HEAD", *(i.name for i in store.sessions()), *(t.name for t in store.tags())]
        finally:
            locator.close()
    except Exception:  # a missing or damaged store: offer nothing, say nothing
        return []
    return [CompletionItem(n) for n in dict.fromkeys(names) if n.startswith(incomplete)]


_INSTALL = {
    "bash": "eval \"$(sess completion bash)\"        # in ~/.bashrc",
    "zsh": "eval \"$(sess completion zsh)\"         # in ~/.zshrc",
    "fish": "sess completion fish | source          # in ~/.config/fish/config.fish",
}


@cli.command()
@click.argument("shell", type=click.Choice(sorted(_INSTALL)))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (commands, options, sessions and tags).

    \b
    bash:  eval "$(sess completion bash)"    in ~/.bashrc
    zsh:   eval "$(sess completion zsh)"     in ~/.zshrc
    fish:  sess completion fish | source     in ~/.config/fish/config.fish
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    assert cls is not None  # the choice lists only shells click completes
    click.echo(cls(cli, {}, "sess", "_SESS_COMPLETE").source())
