"""Which DeviceClasses a cluster's pools need, and whether the member has them.

An engine pod's ResourceClaimTemplate names a DeviceClass per device request: the pool's
driver for its accelerators, an `additionalDevices` driver for a NIC beside them
(compose-model-replica, pods.py). A class the member does not have leaves every such pod
pending for ever, with nothing in our status. So each class a pool names is read back
from the member through an Observe-only Object: provider-kubernetes shows the object in
`status.atProvider.manifest` when it exists, and an Observe-only Object whose object is
not there fails to sync with "external resource does not exist". The InferenceCluster's
`status.deviceClasses` says which it is (`Present`, `Missing`, or `Unknown` before the
first observation), and compose-model-deployment places nothing that would claim a
missing class there, naming it in the deployment's unplaceable reason.

The Objects report no readiness of their own: a missing class is a fact to report, not
a stack that is still starting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from functions.common.naming import resource_key
from functions.compose_serving_stack.envelope import Composed, Target, object_

DEVICE_CLASS_API_VERSION: Final = "resource.k8s.io/v1"
KEY_PREFIX: Final = "deviceclass"
OBSERVE_ONLY: Final = ("Observe",)
STATE_PRESENT: Final = "Present"
STATE_MISSING: Final = "Missing"
STATE_UNKNOWN: Final = "Unknown"
# crossplane-runtime's message for an Observe-only resource whose object is not there.
_NOT_THERE: Final = "does not exist"


def needed(pools: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The DeviceClasses the pools' devices are claimed by (their drivers), sorted. A
    shape that names no driver names no class: the reader reports bad shapes, not this."""
    names: set[str] = set()
    for pool in pools:
        if not isinstance(pool, Mapping):
            continue
        devices = pool.get("devices")
        driver = devices.get("driver") if isinstance(devices, Mapping) else None
        if isinstance(driver, str) and driver:
            names.add(driver)
        extras = pool.get("additionalDevices")
        for extra in extras if isinstance(extras, list) else []:
            driver = extra.get("driver") if isinstance(extra, Mapping) else None
            if isinstance(driver, str) and driver:
                names.add(driver)
    return tuple(sorted(names))


def key(name: str) -> str:
    """The Object's resource key (a class name has dots: the key keeps a hash of it)."""
    return resource_key(KEY_PREFIX, name)


def observers(target: Target, names: Iterable[str]) -> list[Composed]:
    """One Observe-only Object per DeviceClass."""
    return [
        object_(
            target,
            key(name),
            {
                "apiVersion": DEVICE_CLASS_API_VERSION,
                "kind": "DeviceClass",
                "metadata": {"name": name},
                # Never applied (Observe only); present so the manifest is a valid one.
                "spec": {},
            },
            management_policies=OBSERVE_ONLY,
        )
        for name in names
    ]


def observed_state(observed_object: Mapping[str, Any] | None) -> str:
    """Present, Missing, or Unknown (not observed yet, or a failure that says nothing
    about the object's existence)."""
    if not observed_object:
        return STATE_UNKNOWN
    status = observed_object.get("status") or {}
    if (status.get("atProvider") or {}).get("manifest"):
        return STATE_PRESENT
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "Synced"
            and condition.get("status") == "False"
            and _NOT_THERE in str(condition.get("message") or "")
        ):
            return STATE_MISSING
    return STATE_UNKNOWN


def report(names: Iterable[str], observed: Mapping[str, Any]) -> list[dict[str, str]]:
    """status.deviceClasses: each class the pools name, and whether the member has it."""
    return [{"name": n, "state": observed_state(observed.get(key(n)))} for n in names]


def missing(reported: Iterable[Mapping[str, str]]) -> list[str]:
    return [r["name"] for r in reported if r.get("state") == STATE_MISSING]
