"""The one process helper: how the fleet box, and the tests that run real binaries
beside it, start, stop and restart a long-running process.

Each process gets its own process group (so a stop reaches whatever it forked) and
SIGKILL when the process that started it dies (PR_SET_PDEATHSIG, set before exec by
the runtime tier's `_die_with_parent`, which its API servers use too): a killed test
run or supervisor leaves nothing behind. The death signal follows the *thread* that
started the process, so start processes from the main thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tests.runtime.cluster import _die_with_parent


@dataclass
class Process:
    """One long-running process, restartable with the same arguments; its output is
    appended to `log`."""

    name: str
    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        environment = {**os.environ, **self.env}
        self.popen = subprocess.Popen(
            self.args,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=self.cwd,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - sets a signal and a group only
        )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM to the process group, SIGKILL after `grace` seconds."""
        if not self.running():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


__all__ = ["Process"]
