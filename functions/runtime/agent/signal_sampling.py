"""Signal sampling: the collector's page of merged vocabulary series, read on its own
cadence into the history the member report computes its signals over.

The sampler owns the history and how much of it to keep; the report step tells it the
windows its policies name (`keep_for`), so a window is full when it is evaluated. With no
page to read (`--signals-url ''`), there is no history and the report falls back to
PromQL.
"""

from collections.abc import Iterable

from functions.runtime.agent.collect import read_collector_page
from functions.runtime.agent.signals import SignalHistory
from functions.runtime.shared.policy import DEFAULT_SIGNAL_WINDOW_SECONDS


class SignalSampler:
    def __init__(self, url: str | None, every: float):
        self.url = url
        self.every = every
        # The collector page's recent points, kept for the longest window a policy names.
        self.history = SignalHistory(DEFAULT_SIGNAL_WINDOW_SECONDS)

    @property
    def sampling(self) -> SignalHistory | None:
        """The history signals are computed over, or None when no page is read."""
        return self.history if self.url else None

    def step(self, now: float) -> None:
        if self.url:
            read_collector_page(self.url, self.history, now)

    def keep_for(self, windows: Iterable[float]) -> None:
        """Keep points for the longest window (plus one read, so a window is full)."""
        self.history.keep_seconds = max(windows) + self.every
