"""A transport the provider was given, lent to its httpx clients without being closed by them.

Imported only when ``OpenAIProvider(transport=...)`` is used: it imports httpx.
"""

from __future__ import annotations

import httpx

__all__ = ["Borrowed"]


class Borrowed(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """``transport`` for one client, whose ``close`` leaves it open.

    The async path opens a client per call (an ``httpx.AsyncClient`` is bound to one event
    loop) and closing that client would close the transport under the next call; whoever
    made the transport closes it.
    """

    def __init__(self, transport: httpx.BaseTransport | httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """The request, through the lent transport (``complete`` needs a sync one)."""
        if not isinstance(self.transport, httpx.BaseTransport):
            raise TypeError(f"transport= is {type(self.transport).__name__}, an async "
                            "transport: complete() needs an httpx.BaseTransport "
                            "(use acomplete(), or pass one that is both)")
        return self.transport.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The request, through the lent transport (``acomplete`` needs an async one)."""
        if not isinstance(self.transport, httpx.AsyncBaseTransport):
            raise TypeError(f"transport= is {type(self.transport).__name__}, a sync "
                            "transport: acomplete() needs an httpx.AsyncBaseTransport "
                            "(use complete(), or pass one that is both)")
        return await self.transport.handle_async_request(request)

    def close(self) -> None:
        """Nothing: the transport stays open for the provider's next client."""

    async def aclose(self) -> None:
        """Nothing, as :meth:`close`."""
