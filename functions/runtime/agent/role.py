"""Who this agent is in the fleet, as the agent's steps ask it: hub or not, and the term
it stamps into intents. The election (functions/runtime/election/) decides; the agent
only reads it through `HubRole`, so a test can hold a role fixed or pause it.
"""

from dataclasses import dataclass
from typing import Protocol


class HubRole(Protocol):
    """What the agent needs from the election."""

    identity: str  # <cluster>/<pod>

    def leading(self) -> bool: ...

    def term(self) -> str: ...


@dataclass
class FixedRole:
    """A role that does not change (tests)."""

    identity: str
    is_hub: bool
    token: str = "fixed"

    def leading(self) -> bool:
        return self.is_hub

    def term(self) -> str:
        return self.token


class ElectionRole:
    """The election agent (functions/runtime/election/elector.py) as the agent's `HubRole`:
    hub while `hub_term()` says so, and its fencing token is the term stamped into intents."""

    def __init__(self, election):
        self.election = election
        self.identity = election.identity

    def leading(self) -> bool:
        return self.election.hub_term() is not None

    def term(self) -> str:
        current = self.election.hub_term()
        return current.fencing_token if current else ""
