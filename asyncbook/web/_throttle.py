"""``FailureThrottle``: failed sign-ins and bearer tokens, counted per client address.

The right token is checked first and always gets in: the throttle only answers a wrong
one with 429 (``Retry-After``) instead of 401 once an address has failed too often. The
address is the ASGI client's: the peer, or the forwarded client when uvicorn trusts the
proxy (``--proxy-headers`` with ``--forwarded-allow-ips``). Behind a proxy that is not
trusted every client shares the proxy's address, so they share its count, but the right
token is never refused.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from starlette.types import Scope

__all__ = ["FailureThrottle", "client_address"]


def client_address(scope: Scope) -> str:
    """The request's client address as the throttle counts it ("" when unknown)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


class FailureThrottle:
    """At most ``failures`` failed attempts per address per ``window`` seconds answered
    as failures (401); past that, 429 until the oldest one leaves the window.

    Memory is bounded: ``clients`` addresses at most (the one that failed longest ago is
    forgotten first), each with at most ``failures`` times.
    """

    def __init__(
        self,
        failures: int = 10,
        window: float = 60.0,
        clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failures = failures
        self.window = window
        self.clients = clients
        self.clock = clock
        self._times: OrderedDict[str, deque[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._times)

    def retry_after(self, client: str) -> int:
        """Seconds until a failure of ``client`` is answered 401 again; 0 when it is now."""
        times = self._times.get(client)
        if times is None:
            return 0
        now = self.clock()
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._times[client]
            return 0
        if len(times) < self.failures:
            return 0
        return max(1, math.ceil(times[0] + self.window - now))

    def attempt(self, client: str) -> None:
        """Count a failed attempt of ``client``."""
        times = self._times.setdefault(client, deque(maxlen=self.failures))
        times.append(self.clock())
        self._times.move_to_end(client)
        while len(self._times) > self.clients:
            self._times.popitem(last=False)

    def failed(self, client: str) -> int:
        """Count a failure of ``client``; the seconds of ``Retry-After`` to answer it
        with (429), or 0 when it is still answered as a plain failure."""
        wait = self.retry_after(client)
        self.attempt(client)
        return wait

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s failures: it signed in."""
        self._times.pop(client, None)
