"""Wrong tokens, counted per client address, and the wait they earn.

A served store takes its token on ``/login``, in ``Authorization: Bearer`` on the web view's
JSON writes and on ``/api/v1/push``. Each wrong one counts against the address it came from
(an IPv6 client by its /64, which one machine usually holds whole; every loopback address,
all of 127.0.0.0/8 and ``::1``, as one). After :data:`FREE` wrong tokens the address must
wait before its next attempt: 1 s, then twice as long after each further wrong one, up to
:data:`MOST_WAIT`. An attempt during the wait is answered
``429`` with ``Retry-After`` and its token is not even compared, so waiting is the only way
on. A right token clears the address's count, and so does :data:`FORGET` without a wrong one.

The wait is capped so a guesser sharing the user's address (every local program is
loopback) can hold back the user's writes by a minute at most, never their reads. At the cap
a guesser gets one attempt a minute, 1,440 a day: nothing against a 16-character token.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.exceptions import HTTPException
from starlette.requests import Request

__all__ = ["FORGET", "FREE", "LOOPBACK", "MOST_WAIT", "Throttle", "Throttled", "client_key"]

#: Wrong tokens an address may send before it must wait.
FREE = 10
#: The first wait, in seconds; each further wrong token doubles it.
FIRST_WAIT = 1.0
#: The longest wait, in seconds.
MOST_WAIT = 60.0
#: Seconds after its last wrong token that an address's count is forgotten.
FORGET = 900.0
#: Addresses remembered at most (the oldest are forgotten first), so that many addresses
#: cannot fill the server's memory.
MAX_CLIENTS = 4096


class Throttled(HTTPException):
    """A token attempt refused unseen: the client must wait ``retry_after`` seconds first
    (``429`` with ``Retry-After``; the app's error handler writes the body)."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(429, f"too many wrong tokens from this address: try again in "
                              f"{self.retry_after} s", headers={"Retry-After": str(self.retry_after)})


@dataclass
class _Record:
    failures: int = 0
    until: float = 0.0  # no attempt before this time
    last: float = 0.0  # the last wrong token


#: The one client every loopback address is counted as.
LOOPBACK = "loopback"


def client_key(request: Request) -> str:
    """Whom a request's guesses count against: its client's address (an IPv6 one by /64),
    and :data:`LOOPBACK` for any address of this machine's loopback."""
    host = request.client.host if request.client else ""
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    # Any local program may connect from any of 127.0.0.0/8 (it needs no privilege to pick
    # 127.0.0.2): counted apart, each of those addresses would bring its own free guesses.
    if address.is_loopback:
        return LOOPBACK
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class Throttle:
    """Counts wrong tokens per client and makes each client wait after too many (see the
    module's docstring). ``clock`` (seconds, monotonic) is there for tests."""

    def __init__(self, *, free: int = FREE, first_wait: float = FIRST_WAIT,
                 most_wait: float = MOST_WAIT, forget: float = FORGET,
                 max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.free, self.first_wait, self.most_wait = free, first_wait, most_wait
        self.forget, self.max_clients, self.clock = forget, max_clients, clock
        self._records: OrderedDict[str, _Record] = OrderedDict()
        # One app may run in several threads (and the check is quick): one lock for all.
        self._lock = threading.Lock()

    def attempt(self, client: str, check: Callable[[], bool]) -> bool:
        """``check()`` (does the token match?) as an attempt by ``client``; raises
        :class:`Throttled` instead while ``client`` must wait.

        The wait is decided and the result counted under one lock, so concurrent guesses
        cannot slip in between: past :data:`FREE`, one attempt per wait, however many are
        sent at once."""
        with self._lock:
            now = self.clock()
            record = self._records.get(client)
            if record is not None and now - record.last > self.forget and now >= record.until:
                del self._records[client]
                record = None
            if record is not None and now < record.until:
                raise Throttled(record.until - now)
            if check():
                self._records.pop(client, None)
                return True
            if record is None:
                record = self._records[client] = _Record()
            record.failures += 1
            record.last = now
            over = record.failures - self.free
            if over >= 0:
                record.until = now + min(self.first_wait * 2.0 ** min(over, 40), self.most_wait)
            self._records.move_to_end(client)
            while len(self._records) > self.max_clients:
                self._records.popitem(last=False)
            return False
