"""The host names a local server answers to, shared by ``sess serve`` (:mod:`sesstree.web.guard`)
and ``sess proxy`` (:mod:`sesstree.proxy.guard`): both refuse a ``Host`` that is not one of
their names, against DNS rebinding. Standard library only, so that the proxy does not load the
web application to check a header.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable

__all__ = ["HOSTS_ENV", "LOOPBACK_NAMES", "WILDCARDS", "header_host", "host_name", "local_name",
           "served_names"]

#: The environment variable naming more host names to answer (comma- or space-separated), for
#: a server behind a reverse proxy (which cannot pass options).
HOSTS_ENV = "SESS_ALLOWED_HOSTS"
#: Names a server answers to wherever it is bound.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
#: Addresses that bind every interface: not a name a request is sent to.
WILDCARDS = ("0.0.0.0", "::", "")


def host_name(host: str) -> str:
    """``host`` as it appears in a ``Host`` header without the port: lowercase, no trailing
    dot, an IP address in its shortest form (an IPv6 one in brackets, an IPv4-mapped one as
    the IPv4 address it is)."""
    host = host.strip().lower().rstrip(".")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        # A dual-stack socket (--host ::) sees an IPv4 client's connection arrive on
        # ::ffff:A.B.C.D, while the client's Host says A.B.C.D.
        if address.ipv4_mapped is None:
            return f"[{address}]"
        address = address.ipv4_mapped
    return str(address)


def local_name(server: object) -> str | None:
    """The name, as :func:`host_name` writes it, of the local address a connection came in
    on (an ASGI scope's ``server``: ``(host, port)``, or None). A server bound to ``::``
    takes IPv4 connections too, and sees their address mapped (``::ffff:192.168.1.5``);
    the client sent ``Host: 192.168.1.5``, so the address is unmapped."""
    if not isinstance(server, (tuple, list)) or not server:
        return None
    address = str(server[0])
    try:
        mapped = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return host_name(address)
    if isinstance(mapped, ipaddress.IPv6Address) and mapped.ipv4_mapped is not None:
        return str(mapped.ipv4_mapped)
    return host_name(address)


def header_host(value: str) -> str:
    """The host name of a ``Host`` header's ``value``, without its port, as :func:`host_name`
    writes it (``[::1]:8787`` gives ``[::1]``, ``Localhost.:80`` gives ``localhost``)."""
    value = value.strip().lower()
    if value.startswith("["):  # [::1]:8787
        end = value.find("]")
        return host_name(value[:end + 1] if end > 0 else value)
    if value.count(":") > 1:
        return value.rstrip(".")  # an IPv6 address without brackets is no Host: never a name
    return host_name(value.rsplit(":", 1)[0] if value.count(":") == 1 else value)


def served_names(host: str, allowed: Iterable[str] = ()) -> frozenset[str]:
    """The names (as :func:`host_name` writes them) of a server bound to ``host``: the
    loopback names, ``host`` unless it is a wildcard, ``allowed``, and the names in
    ``$SESS_ALLOWED_HOSTS``."""
    extra = [h for h in os.environ.get(HOSTS_ENV, "").replace(",", " ").split() if h]
    names = [*LOOPBACK_NAMES, *allowed, *extra]
    if host not in WILDCARDS:
        names.append(host)
    return frozenset(host_name(h) for h in names)
