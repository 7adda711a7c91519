"""``sess proxy``: record any agent's conversations by standing between it and its model
provider. Loaded lazily: the server stack is imported only when the command runs."""

from __future__ import annotations

import socket

import click

from ..fmt import printable
from .core import StoreLocator, fail, pass_store, usage

__all__ = ["proxy"]


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError) as exc:
        fail(printable(f"cannot listen on {host}:{port}: {exc}"))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(256)
    except OSError as exc:
        sock.close()
        fail(printable(f"cannot listen on {host}:{port}: {exc.strerror or exc}"))
    return sock


def _scrub(message: str, upstream: str) -> str:
    """``message`` (about the URL ``upstream``) without the URL's user name and password."""
    _, sep, rest = upstream.partition("://")
    rest = rest if sep else upstream
    userinfo = rest.split("/")[0].split("?")[0].split("#")[0].rpartition("@")[0]
    for secret in sorted({userinfo, *userinfo.split(":")}, key=len, reverse=True):
        if len(secret) >= 3:
            message = message.replace(secret, "[redacted]")
    return message


def _check_host(host: str, shown: str) -> None:
    """Refuse a host no request could reach: one that is no DNS name (an empty label, a label
    over 63 characters), which the resolver would refuse on every request."""
    if ":" in host:  # an IPv6 address: httpx has checked it
        return
    try:
        host.encode("idna")
    except UnicodeError as exc:
        fail(printable(f"--upstream {shown!r}: {host!r} is not a valid host name ({exc})"))


def _show_stats(host: str, port: int) -> None:
    """Print the counters of the proxy listening on ``host``:``port``, and per session how
    many re-sent messages matched the store."""
    import httpx

    where = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"http://{f'[{where}]' if ':' in where else where}:{port}/_sess/stats"
    try:
        # trust_env off: an HTTP_PROXY of the environment must not carry a loopback call
        stats = httpx.get(url, timeout=10, trust_env=False).raise_for_status().json()
    except (httpx.HTTPError, ValueError) as exc:
        fail(printable(f"no sess proxy answers at {url}: {exc}"))
    sessions = stats.pop("sessions", {}) if isinstance(stats, dict) else {}
    click.echo(", ".join(f"{k.replace('_', ' ')} {v}" for k, v in stats.items()))
    if not sessions:
        return
    width = max(7, *(len(name) for name in sessions))
    heads = ("calls", "re-sent", "matched", "unmatched", "diverged")
    click.echo(printable(f"{'session':<{width}}  " + "  ".join(f"{h:>9}" for h in heads)))
    for name, c in sessions.items():
        values = (c["calls"], c["resent"], c["matched"], c["unmatched"], c["divergences"])
        click.echo(printable(f"{name:<{width}}  " + "  ".join(f"{v:>9}" for v in values)))


@click.command("proxy")
@click.option("--upstream", metavar="URL",
              help="The model provider, e.g. https://api.openai.com, https://api.anthropic.com "
                   "or https://generativelanguage.googleapis.com (Gemini).")
@click.option("--port", type=click.IntRange(0, 65535), default=8787, show_default=True,
              help="Port to listen on (0: any free port).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True,
              help="Seconds to wait for the upstream (connect, and between two chunks).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="Also answer requests sent to this host name (repeatable); the loopback "
                   "names and the --host address are always answered.")
@click.option("--allow-origin", "allow_origins", multiple=True, metavar="ORIGIN",
              help="Serve browser requests from the web pages of this origin, e.g. "
                   "http://localhost:3000 (repeatable); none by default.")
@click.option("-q", "--quiet", is_flag=True, help="No line per request (counters still at exit).")
@click.option("--stats", "show_stats", is_flag=True,
              help="Print the counters of the proxy running on --host/--port, and per session "
                   "how many re-sent messages matched the store, then exit.")
@pass_store
def proxy(locator: StoreLocator, upstream: str | None, port: int, host: str, timeout: float,
          allow_hosts: tuple[str, ...], allow_origins: tuple[str, ...], quiet: bool,
          show_stats: bool) -> None:
    """Record every conversation that passes through, untouched, into the store.

    Point the agent at it: OPENAI_BASE_URL=http://127.0.0.1:8787/v1,
    ANTHROPIC_BASE_URL=http://127.0.0.1:8787, or GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787
    (Gemini CLI, google-genai). Requests are forwarded to UPSTREAM with the
    same path (after UPSTREAM's own path; the queries are merged). API keys pass through and
    are never stored; credentials in UPSTREAM (https://user:pw@host) are sent as Basic
    authorization when the client sends no Authorization header. GET /_sess/stats gives the
    counters. Requests sent to another host name than the proxy's, and requests from web
    pages of another origin (unless --allow-origin), are refused. Stop with Ctrl-C: the calls
    received are recorded first (for at most 30 s; any left are named), and a second Ctrl-C
    stops the calls still in flight. With --stats, ask the proxy running on --port instead.
    """
    if show_stats:
        _show_stats(host, port)
        return
    if upstream is None:
        usage("Missing option '--upstream' (the model provider to forward to).")
    import httpx
    import uvicorn

    from ..proxy.app import create_app, safe_url
    from ..proxy.guard import origin_of
    from ..proxy.relay import quiet_cut_logs
    from ..proxy.upstream import hide_userinfo

    # Credentials in the URL never reach the terminal, even in an error about the URL; nor
    # does its query (it may hold a key).
    shown = hide_userinfo(upstream)
    if "?" in shown:
        shown = shown.split("?")[0] + "?..."
    try:
        url = httpx.URL(upstream)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        fail(printable(f"--upstream {shown!r} is not a URL: {_scrub(str(exc), upstream)}"))
    if url.scheme not in ("http", "https") or not url.host:
        fail(printable(f"--upstream {safe_url(upstream) if url.host else repr(shown)} must be "
                       "an http:// or https:// URL with a host"))
    _check_host(url.host, shown)
    if url.port is not None and not 1 <= url.port <= 65535:
        # Refused, not left to the socket layer, which takes a port modulo 65536 and would
        # send the calls (and their keys) to another port.
        fail(printable(f"--upstream {safe_url(url)}: port {url.port} is not in 1..65535"))
    for origin in allow_origins:
        try:
            origin_of(origin)
        except ValueError as exc:
            fail(printable(f"--allow-origin: {exc}"))
    store = locator.open()

    def log(line: str) -> None:
        click.echo(line, err=True)

    app, running = create_app(store, str(url), timeout=timeout, log=log, quiet=quiet,
                              host=host, allowed_hosts=allow_hosts,
                              allowed_origins=allow_origins)
    sock = _listen(host, port)
    bound = sock.getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    click.echo(f"sess proxy: listening on http://{where}:{bound}, forwarding to "
               f"{safe_url(url)}", err=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(printable(f"sess proxy: warning: listening on {host}: anyone who can reach "
                             "this port can send calls through it and have them recorded"),
                   err=True)
    quiet_cut_logs()
    # No Server or Date header of the proxy's own: the upstream's pass through as they are.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=5, server_header=False,
                            date_header=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass  # the server re-raises the Ctrl-C it stopped for: stopping is what was asked
    finally:
        sock.close()
        # Whatever way the server ended, the calls received are recorded (or each named) and
        # the counters printed; a no-op when its shutdown or its loop's end already did.
        try:
            running.finish()
        except KeyboardInterrupt:
            pass
