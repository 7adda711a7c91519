"""Fixtures for the proxy tests: a fake provider and the real proxy, both on loopback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_upstream import FakeUpstream
from proxy_server import OPENED, RunningProxy

from sesstree import Store, open_store


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1, and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return str(cert), str(key)


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "s"


@pytest.fixture
def store(store_path: Path) -> Iterator[Store]:
    with open_store(store_path) as s:
        yield s


@pytest.fixture
def proxy(store: Store, upstream: FakeUpstream) -> Iterator[RunningProxy]:
    with RunningProxy(store, upstream.url) as running:
        yield running


@pytest.fixture(autouse=True)
def close_clients() -> Iterator[None]:
    """SDK clients a test made (``track``) are closed after it: an open socket left to the
    garbage collector is a ResourceWarning, an error here."""
    yield
    while OPENED:
        OPENED.pop().close()
