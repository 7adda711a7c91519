"""Wrong tokens are counted per client address, on every route that takes one (``/login``,
the Bearer header of the web view's writes and of ``/api/v1/push``), until the client must
wait: a ``429`` with ``Retry-After``, whatever the token. The throttle's clock is moved by
hand, so no test depends on how fast the machine is."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from forest_kit import TOKEN, serve
from starlette.requests import Request

from sesstree import Store
from sesstree.server import create_app
from sesstree.web import create_web_app
from sesstree.web.throttle import FREE, MOST_WAIT, Throttle, Throttled, client_key


class Clock:
    """A clock the test moves by hand: the throttle's waits pass only when it says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def app_url(forest_store: Store, clock: Clock) -> Iterator[str]:
    """``sess serve``'s whole app (sync API and web view) with a token and a hand clock."""
    app = create_app(forest_store, token=TOKEN, throttle=Throttle(clock=clock))
    with serve(forest_store, app=app) as base:
        yield base


def test_wrong_logins_make_the_address_wait_then_it_may_try_again(app_url: str,
                                                                  clock: Clock) -> None:
    here = {"origin": app_url}
    with httpx.Client(base_url=app_url, timeout=30) as c:
        for _ in range(FREE):
            assert c.post("/login", data={"token": "0000"}, headers=here).status_code == 401
        # Now even the right token is not compared: the answer is the same 429 for any token.
        for token in ("0001", TOKEN):
            r = c.post("/login", data={"token": token}, headers=here)
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert "too many wrong tokens" in r.text and "set-cookie" not in r.headers
            assert r.headers["content-security-policy"]
        # Reading goes on; an empty token field is no guess and is not counted.
        assert c.get("/session/quest-1").status_code == 200
        assert c.post("/login", data={"token": ""}, headers=here).status_code == 401
        clock.now += 1
        assert c.post("/login", data={"token": "0002"}, headers=here).status_code == 401
        r = c.post("/login", data={"token": TOKEN}, headers=here)
        assert r.status_code == 429 and r.headers["retry-after"] == "2"  # twice as long
        clock.now += 2
        assert c.post("/login", data={"token": TOKEN}, headers=here).status_code == 303
        # The right token cleared the count: FREE more mistakes before the next wait.
        for _ in range(FREE):
            assert c.post("/login", data={"token": "0003"}, headers=here).status_code == 401
        assert c.post("/login", data={"token": "0004"}, headers=here).status_code == 429


def test_bearer_guesses_count_with_login_guesses_on_every_route(app_url: str,
                                                                clock: Clock) -> None:
    def rename(c: httpx.Client, token: str) -> httpx.Response:
        return c.post("/api/v1/web/rename", json={"session": "quest-1", "new": "q"},
                      headers={"authorization": f"Bearer {token}"})

    def push(c: httpx.Client, token: str) -> httpx.Response:
        return c.post("/api/v1/push", content=b"\x80", headers={"authorization": f"Bearer {token}"})

    def login(c: httpx.Client, token: str) -> httpx.Response:
        return c.post("/login", data={"token": token}, headers={"origin": app_url})

    with httpx.Client(base_url=app_url, timeout=30) as c:
        # No token at all is no guess: refused, never counted.
        for _ in range(FREE * 2):
            assert c.post("/api/v1/push", content=b"\x80").status_code == 401
        for i in range(FREE):
            assert (rename, push, login)[i % 3](c, f"guess-{i}").status_code == 401
        for route in (rename, push):
            r = route(c, TOKEN)
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert r.json() == {"error": "too many wrong tokens from this address: try again in 1 s"}
        assert login(c, TOKEN).status_code == 429
        clock.now += 1
        r = c.post("/api/v1/web/tag", json={"name": "t1", "rev": "quest-1"},
                   headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200


def test_every_loopback_address_is_one_client(app_url: str) -> None:
    # All of 127/8 reaches this machine, and any local program may connect from 127.0.0.2,
    # 127.0.0.3, ...: counted apart, each would get its own free guesses, without end.
    here = {"origin": app_url}
    for i in range(FREE):
        local = httpx.HTTPTransport(local_address=f"127.0.{i // 250}.{i % 250 + 2}")
        with httpx.Client(base_url=app_url, transport=local, timeout=30) as guesser:
            assert guesser.post("/login", data={"token": "1"}, headers=here).status_code == 401
    with httpx.Client(base_url=app_url, timeout=30) as user:
        assert user.post("/login", data={"token": TOKEN}, headers=here).status_code == 429


def test_concurrent_guesses_get_no_more_than_the_free_ones(app_url: str) -> None:
    here = {"origin": app_url}

    def guess(i: int) -> int:
        with httpx.Client(base_url=app_url, timeout=30) as c:
            return c.post("/login", data={"token": f"g{i}"}, headers=here).status_code

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(guess, range(FREE * 4)))
    # The clock stands still: every guess past the free ones is refused unseen, however many
    # arrive at once.
    assert sorted(codes) == [401] * FREE + [429] * (FREE * 3)


def _wrong() -> bool:
    return False


def test_the_wait_doubles_up_to_a_minute_and_is_forgotten(clock: Clock) -> None:
    throttle = Throttle(clock=clock)
    for _ in range(FREE):
        assert throttle.attempt("a", _wrong) is False
    waits = []
    for _ in range(10):  # a patient guesser, waiting out every wait
        with pytest.raises(Throttled) as caught:
            throttle.attempt("a", _wrong)
        waits.append(caught.value.retry_after)
        clock.now += caught.value.retry_after
        assert throttle.attempt("a", _wrong) is False
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60, 60] and MOST_WAIT == 60
    assert throttle.attempt("b", lambda: True) is True  # another client never waited
    clock.now += 3600  # an hour without a wrong token: forgotten, FREE mistakes again
    for _ in range(FREE):
        assert throttle.attempt("a", _wrong) is False
    with pytest.raises(Throttled):
        throttle.attempt("a", _wrong)


def test_many_addresses_cannot_fill_the_memory(clock: Clock) -> None:
    throttle = Throttle(clock=clock, free=1, max_clients=50)
    addresses = [f"10.0.{i // 250}.{i % 250}" for i in range(500)]
    for address in addresses:
        assert throttle.attempt(address, _wrong) is False
    # The newest 50 are remembered (and wait); the oldest were forgotten to make room.
    for address in addresses[-50:]:
        with pytest.raises(Throttled):
            throttle.attempt(address, _wrong)
    assert throttle.attempt(addresses[0], _wrong) is False


def test_an_ipv6_client_counts_by_its_slash_64() -> None:
    def key(host: str) -> str:
        return client_key(Request({"type": "http", "client": (host, 4321), "headers": []}))

    assert key("2001:db8:1:2:aaaa::1") == key("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert key("2001:db8:1:3::1") != key("2001:db8:1:2::1")
    assert key("::ffff:10.1.2.3") == "10.1.2.3" and key("10.1.2.4") == "10.1.2.4"
    # This machine is one client, whichever loopback address it comes from.
    assert key("127.0.0.1") == key("127.9.8.7") == key("::1") == key("::ffff:127.0.0.2")
    assert key("127.0.0.1") != key("10.1.2.3")


def test_the_web_view_alone_throttles_too(forest_store: Store, clock: Clock) -> None:
    app = create_web_app(forest_store, token=TOKEN, throttle=Throttle(clock=clock, free=2))
    with serve(forest_store, app=app) as base, httpx.Client(base_url=base, timeout=30) as c:
        auth = {"authorization": "Bearer nope"}
        codes = [c.post("/api/v1/web/untag", json={"name": "x"}, headers=auth).status_code
                 for _ in range(4)]
        assert codes == [401, 401, 429, 429]
