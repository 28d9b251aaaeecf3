"""A real Holdfast for these tests: ``holdfast-test-stack`` (tests/src/bin)
starts a fresh database, the fake model, and real ``holdfast server api``,
``worker`` and ``maintenance`` processes, and takes commands on stdin
(restart the API, SIGKILL a worker)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
# The examples' tests import them as their users would run them.
sys.path.insert(0, str(ROOT / "examples" / "python"))


class Stack:
    def __init__(self) -> None:
        target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        binary = target / "debug" / "holdfast-test-stack"
        if not binary.exists():
            raise RuntimeError(f"{binary} is missing: run `cargo build --workspace --bins` in {ROOT} first")
        self._process = subprocess.Popen(
            [str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        self._lock = threading.Lock()
        first = self._process.stdout.readline()  # type: ignore[union-attr]
        if not first:
            raise RuntimeError("holdfast-test-stack exited before it was ready")
        info = json.loads(first)
        self.url: str = info["url"]
        self.key: str = info["key"]

    def command(self, line: str) -> Dict[str, Any]:
        """Send one command and wait for its answer (one at a time, from any thread)."""
        with self._lock:
            self._process.stdin.write(line + "\n")  # type: ignore[union-attr]
            self._process.stdin.flush()  # type: ignore[union-attr]
            reply = json.loads(self._process.stdout.readline())  # type: ignore[union-attr]
        if not reply["ok"]:
            raise RuntimeError(reply["error"])
        return reply

    def stop(self) -> None:
        """Close stdin: the stack stops its processes and drops its database."""
        self._process.stdin.close()  # type: ignore[union-attr]
        self._process.wait(timeout=60)


@pytest.fixture(scope="session")
def stack():
    stack = Stack()
    yield stack
    stack.stop()


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``check`` every 50 ms until it holds (fails after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.05)
