"""A real S3-compatible server for the tests: moto in server mode on a free 127.0.0.1 port.

``s3_server`` (session) starts ``python -m moto.server``, waits until it answers, sets the standard AWS
settings in ``os.environ`` (endpoint, dummy credentials, region; restored after) and stops it at the end.
``s3_url`` (function) makes a fresh bucket and returns ``s3://<bucket>/store``. Registered for every
test through ``pytest_plugins`` in ``tests/conftest.py``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

SERVER_START_S = 30.0
"""Seconds the server may take to answer its first request."""

AWS_SETTINGS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint URL and process."""

    endpoint: str
    process: subprocess.Popen[bytes]

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def new_bucket(self) -> str:
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=bucket)
        return bucket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server() -> S3Server:
    """Start moto's server on a free port and wait until it answers (a clear failure if it does not).
    Its log (a line per request) goes to a temporary file: a pipe nobody reads would fill and stop it."""
    port = free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115 (open while the server runs; closed when collected)
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while True:
        try:
            with urllib.request.urlopen(endpoint + "/moto-api/", timeout=1):
                return S3Server(endpoint, process)
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait()
                log.seek(0)
                err = log.read().decode(errors="replace")
                raise RuntimeError(f"moto server on port {port} did not start: {err[-2000:]}") from None
            time.sleep(0.1)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    server = start_server()
    env = pytest.MonkeyPatch()  # session-wide: undone after the last test
    for key, value in {**AWS_SETTINGS, "AWS_ENDPOINT_URL": server.endpoint}.items():
        env.setenv(key, value)
    env.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    try:
        yield server
    finally:
        env.undo()
        server.process.terminate()
        try:
            server.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@pytest.fixture
def s3_url(s3_server: S3Server) -> str:
    """A fresh bucket on the session's server: ``s3://<bucket>/store``."""
    return f"s3://{s3_server.new_bucket()}/store"
