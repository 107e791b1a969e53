"""A run's start-up, made to overlap and not to waste: the SDK loaded in the background, the cyclic GC paused.

Owns :class:`Startup`. Why and what it saves: docs/internals.md (start-up).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx2

__all__ = ["Startup"]


class Startup:
    """Starts at once; :meth:`http_client` waits for the SDK, :meth:`close` ends the pause on every other path."""

    def __init__(self) -> None:
        self._http: httpx2.AsyncClient | None = None
        self._error: BaseException | None = None
        self._paused = gc.isenabled()
        if self._paused:
            gc.disable()
        self._thread = threading.Thread(target=self._load, name="queryloop-sdk-startup", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            import anthropic

            # the SDK's own client with its aiohttp transport (its timeouts, limits and keep-alive, as it builds
            # one when given none): about 0.4 ms less CPU a request than its httpx one (docs/internals.md)
            self._http = anthropic.DefaultAioHttpClient()
        except BaseException as exc:  # handed to the main thread, which raises it where the SDK is first needed
            self._error = exc

    def http_client(self, *, also: Sequence[Callable[[], object]] = ()) -> httpx2.AsyncClient:
        """The SDK's HTTP client once the thread is done (re-raising what it raised); the caller closes it.

        ``also``: more imports the run needs at once (the MCP SDK, when servers are configured), made
        here after the thread, still in the pause: what they build is frozen with the SDK's, and they
        do not contend with the thread for the interpreter (which cost more CPU than it saved).
        """
        self._thread.join()
        for load in also:
            load()
        if self._paused:  # what start-up built stays: out of the collector's way from now on
            gc.freeze()
        self.close()
        if self._error is not None:
            raise self._error
        assert self._http is not None
        return self._http

    def close(self) -> None:
        """The collector runs again (it was paused here), once the thread is done loading.

        A run refused before its first request (a bad ``--resume`` id) waits for the thread here:
        a daemon thread still importing the SDK as the interpreter exits can abort the process.
        """
        self._thread.join()
        if self._paused:
            self._paused = False
            gc.enable()
