"""The embedded server run on a background thread, for a synchronous caller.

Owns :class:`ServerThread`, a context manager serving one :class:`~queryloop.mockapi.server.MockServer`, for tests
and benchmarks that wait on a subprocess.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self

from .scenario import Scenario
from .server import DEFAULT_MAX_RECORDED, MockServer

__all__ = ["ServerThread"]

_WAIT_S = 10.0
"""How long starting or stopping the server may take before the caller gets a TimeoutError."""


class ServerThread:
    """A :class:`MockServer` for ``scenario`` on its own event loop in a daemon thread.

    ``with ServerThread(scenario) as running:`` starts it on a free loopback port
    (``running.url``) and stops it, its loop and its thread on the way out.
    """

    def __init__(self, scenario: Scenario, *, max_recorded: int = DEFAULT_MAX_RECORDED) -> None:
        self.server = MockServer(scenario, max_recorded=max_recorded)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mockapi", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self._loop).result(_WAIT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(_WAIT_S)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_WAIT_S)
            self._loop.close()

    @property
    def url(self) -> str:
        """The server's base URL, for ``ANTHROPIC_BASE_URL``."""
        return str(self.server.url)
