"""What a client is told when a model cannot answer: the body of a 503 (or other refusal).

Two places answer for a model instead of its engine: the route's direct response
(compose-model-replica: parked, fits nowhere, waiting for its weights) and the member's
on-demand activator (runtime/activator). Both write the body here, in one JSON shape, so
clients parse one form:

    {"error": {"code": 503, "type": "model_unavailable", "reason": "Parked",
               "model": "llama-3-1-8b", "message": "..."}}

The body is for whoever sent the request, who is not the fleet's operator: it says what
the caller can do (retry later, or not until the model's owners act) and nothing about
the fleet behind it — no cluster names, no DeviceClasses, no spec paths, no engine logs.
Why exactly (which pools were short of what, the start failure's last lines) stays in
the ModelDeployment's status and conditions, where `modelplane explain` reads it.
`reason` is the stable word a client may switch on.
"""

from __future__ import annotations

import json
from typing import Final

UNAVAILABLE_STATUS: Final = 503
ANSWER_TYPE: Final = "model_unavailable"

REASON_PARKED: Final = "Parked"
REASON_UNPLACEABLE: Final = "Unplaceable"
REASON_WAITING_FOR_CACHE: Final = "WaitingForModelCache"

# What the caller can act on, by reason.
CALLER_MESSAGES: Final = {
    REASON_PARKED: (
        "the model is stopped after repeated start failures and does not start again on "
        "its own; retrying will not help until its owners fix or retry it"
    ),
    REASON_UNPLACEABLE: (
        "the model has no room to run right now; retry later (its owners can see why "
        "in the model's status)"
    ),
    REASON_WAITING_FOR_CACHE: (
        "the model's weights are still being copied to where it runs; it starts serving "
        "once they are there: retry in a few minutes"
    ),
}
RETRY_LATER: Final = "the model cannot answer right now; retry later"


def caller_message(reason: str) -> str:
    """The message a caller gets for a reason (any reason not listed: retry later)."""
    return CALLER_MESSAGES.get(reason, RETRY_LATER)


def body(status: int, reason: str, model: str, message: str) -> str:
    """The JSON body of a refusal (keys sorted: the same answer is the same bytes)."""
    return json.dumps(
        {
            "error": {
                "code": status,
                "type": ANSWER_TYPE,
                "reason": reason,
                "model": model,
                "message": message,
            }
        },
        sort_keys=True,
    )
