"""Reading and changing claims on the fleet box the way a user and an operator do: with
the real kubectl against the control plane, and against each member for what
provider-kubernetes put there."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from fleetbox.box import FleetBox
from fleetbox.wait import FleetBoxError, wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
CONTROL = "control-plane"
# Long enough for a claim to go through core, our functions and provider-kubernetes
# (poll 5 s) on a loaded 2-core machine.
CONVERGE_SECONDS = 180.0


def get(
    box: FleetBox,
    resource: str,
    name: str,
    namespace: str | None = None,
    cluster: str = CONTROL,
) -> dict | None:
    args = ["get", resource, name, "-o", "json"]
    if namespace:
        args += ["-n", namespace]
    done = box.kubectl(cluster, *args, check=False)
    if done.returncode != 0:
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return None
        raise FleetBoxError(done.stderr)
    return json.loads(done.stdout)


def apply_document(box: FleetBox, document: dict, cluster: str = CONTROL) -> None:
    box.kubectl(cluster, "apply", "-f", "-", stdin=yaml.safe_dump(document))


def delete(box: FleetBox, resource: str, name: str, namespace: str | None = None) -> None:
    args = ["delete", resource, name, "--ignore-not-found", "--wait=false"]
    if namespace:
        args += ["-n", namespace]
    box.kubectl(CONTROL, *args)


def example(relative: str) -> dict:
    return yaml.safe_load((EXAMPLES / relative).read_text())


def renamed(document: dict, name: str) -> dict:
    """A copy of an example claim under another name (tests never share claims)."""
    copied = copy.deepcopy(document)
    copied["metadata"]["name"] = name
    return copied


def composed_objects(box: FleetBox, root: str, namespace: str | None = None) -> list[dict]:
    """The provider-kubernetes Objects composed under a root XR: Crossplane labels every
    composed resource, however deep, with the name of the XR at the root (a
    ModelDeployment's go through its ModelReplicas)."""
    args = [
        "get",
        "objects.kubernetes.m.crossplane.io",
        "-l",
        f"crossplane.io/composite={root}",
        "-o",
        "json",
    ]
    args += ["-n", namespace] if namespace else ["-A"]
    return json.loads(box.kubectl(CONTROL, *args).stdout)["items"]


def remote_identity(obj: dict) -> tuple[str, dict]:
    """Where an Object's manifest lives: (member, {apiVersion, kind, metadata})."""
    manifest = obj["spec"]["forProvider"]["manifest"]
    metadata = {"name": manifest["metadata"]["name"]}
    if manifest["metadata"].get("namespace"):
        metadata["namespace"] = manifest["metadata"]["namespace"]
    stub = {"apiVersion": manifest["apiVersion"], "kind": manifest["kind"], "metadata": metadata}
    return obj["spec"]["providerConfigRef"]["name"], stub


def remote_get(box: FleetBox, member: str, stub: dict) -> dict | None:
    done = box.kubectl(
        member, "get", "-f", "-", "-o", "json", stdin=yaml.safe_dump(stub), check=False
    )
    if done.returncode != 0:
        if "NotFound" in done.stderr or "not found" in done.stderr:
            return None
        raise FleetBoxError(f"{member}: {done.stderr}")
    found = json.loads(done.stdout)
    if found.get("kind") == "List":  # `kubectl get -f` answers some kinds with a List
        return found["items"][0] if found.get("items") else None
    return found


def describe(stub: dict) -> str:
    meta = stub["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{stub['kind']} {where}{meta['name']}"


def replicas_of(box: FleetBox, deployment: str, namespace: str) -> list[dict]:
    done = box.kubectl(
        CONTROL, "get", "modelreplicas", "-n", namespace, "-l",
        f"modelplane.ai/deployment={deployment}", "-o", "json",
    )  # fmt: skip
    return json.loads(done.stdout)["items"]


def everything_composed_for(
    box: FleetBox, deployment: str, namespace: str, *, deleted_with_it: bool = False
) -> list[tuple[str, dict]]:
    """Every member object a deployment composed (through its ModelReplicas) for the
    member to hold: (member, stub). Observe-only Objects (the health record the member's
    agent writes) are left out: nothing here creates them."""
    return member_stubs(composed_objects(box, deployment, namespace), deleted_with_it)


def member_stubs(objects: list[dict], deleted_with_it: bool = False) -> list[tuple[str, dict]]:
    """The (member, stub) pairs of one listing of Objects (see everything_composed_for)."""
    return [
        remote_identity(o)
        for o in objects
        if not observe_only(o) and (deletes(o) or not deleted_with_it)
    ]


def whole_composition(box: FleetBox, deployment: str, namespace: str) -> list[dict]:
    """The deployment's Objects, once every one of its ModelReplicas has been composed and
    every Object a replica references is there. Core creates a replica's Objects one at a
    time, so a listing taken as soon as the workloads appear can lack the rest; raises
    AssertionError (for wait_for) until the listing is whole."""
    replicas = replicas_of(box, deployment, namespace)
    assert replicas, f"{deployment} has no ModelReplicas yet"
    objects = composed_objects(box, deployment, namespace)
    listed = {o["metadata"]["name"] for o in objects}
    for replica in replicas:
        if replica["metadata"].get("deletionTimestamp"):
            continue  # going: its Objects go with it
        refs = (replica["spec"].get("crossplane") or {}).get("resourceRefs") or []
        name = replica["metadata"]["name"]
        assert refs, f"ModelReplica {name} has composed nothing yet"
        missing = [r["name"] for r in refs if r["kind"] == "Object" and r["name"] not in listed]
        assert not missing, f"ModelReplica {name}'s Objects {missing} are not there yet"
    return objects


def deletes(obj: dict) -> bool:
    """Whether deleting the Object deletes what it manages (a tenant's Namespace, shared
    by every deployment there, is kept on purpose)."""
    policies = obj["spec"].get("managementPolicies") or ["*"]
    return "*" in policies or "Delete" in policies


def observe_only(obj: dict) -> bool:
    return obj["spec"].get("managementPolicies") == ["Observe"]


def wait_gone(box: FleetBox, remote: list[tuple[str, dict]]) -> None:
    """Wait until none of the (member, stub) objects exists on its member any more."""

    def gone():
        left = [f"{describe(s)} on {m}" for m, s in remote if remote_get(box, m, s) is not None]
        assert not left, left
        return True

    wait_for("composed resources gone from the members", gone, CONVERGE_SECONDS)
