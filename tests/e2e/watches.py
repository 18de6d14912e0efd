"""Waiting on a cluster's objects by watching them: a check runs on the listed objects,
then again on every event the API server sends, so a wait ends when the change
arrives, not at the next poll."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.rest import ApiException

from fleetbox.wait import FleetBoxError

GONE = 410
# A watch is re-opened at least this often (the API server may end one sooner).
WATCH_SECONDS = 60


def watch_until(
    what: str,
    list_call: Callable[..., Any],
    check: Callable[[list[dict]], Any],
    timeout: float,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Until `check(objects)` returns something truthy (an AssertionError is a "not
    yet" that says why), `objects` being what `list_call(*args, **kwargs)` lists, kept
    current by a watch. FleetBoxError with the last answer when `timeout` runs out."""
    deadline = time.monotonic() + timeout
    objects: dict[str, dict] = {}
    version: str | None = None
    last: Any = None

    def evaluate() -> Any:
        nonlocal last
        try:
            result = check(list(objects.values()))
        except AssertionError as error:
            last = error
            return None
        last = result
        return result

    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FleetBoxError(f"{what}: not within {timeout:.0f}s (last: {last!r})")
        if version is None:
            listed = json.loads(list_call(*args, _preload_content=False, **kwargs).data)
            objects = {o["metadata"]["uid"]: o for o in listed["items"]}
            version = listed["metadata"]["resourceVersion"]
            result = evaluate()
            if result:
                return result
        stream = watch.Watch().stream(
            list_call,
            *args,
            resource_version=version,
            timeout_seconds=max(1, int(min(remaining, WATCH_SECONDS))),
            deserialize=False,
            **kwargs,
        )
        try:
            for event in stream:
                obj = event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] == "DELETED":
                    objects.pop(obj["metadata"]["uid"], None)
                elif event["type"] in ("ADDED", "MODIFIED"):
                    objects[obj["metadata"]["uid"]] = obj
                else:
                    continue
                result = evaluate()
                if result:
                    return result
        except ApiException as error:
            if error.status != GONE:
                raise
            version = None  # the version is too old: list again


__all__ = ["watch_until"]
