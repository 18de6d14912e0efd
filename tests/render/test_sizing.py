"""Every container the suite composes on a member has CPU and memory requests and limits.

Read from the composed outputs: the render golden files (each compared with the real
`crossplane render` by the tests beside this one) and compose-model-replica's unit
goldens (every serving shape; tests/render/test_compose_model_replica.py proves the shell
writes exactly those) and compose-telemetry's gateway goldens. Containers inside a
provider-kubernetes Object's manifest, a workload's pod template, an LWS or Grove
template: wherever a pod spec is.

The engine containers are exempt on purpose (functions/common/sizing.py): they are the
user's template, and what a GPU engine needs is the model's, not ours to invent. Every
container we add to an engine pod (the routing sidecar) is held to the rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from functions.common import sizing
from functions.common.contracts import LABEL_ENGINE
from functions.common.quantity import parse_quantity
from functions.compose_model_replica.backends.prefill_decode import ROUTING_SIDECAR_NAME

REPO = Path(__file__).resolve().parents[2]
GOLDENS = [
    *sorted((REPO / "tests" / "render" / "testdata").rglob("*.yaml")),
    *sorted((REPO / "tests" / "unit" / "testdata" / "model_replica" / "golden").glob("*.yaml")),
    # compose-telemetry's gateway collector (tests/unit/test_gateway.py's goldens).
    *sorted((REPO / "tests" / "unit" / "testdata" / "gateway").glob("*.yaml")),
]
COMPOSED = "crossplane.io/composition-resource-name"
# Containers we add to a pod whose other containers are the user's engine.
OURS_IN_ENGINE_PODS = {ROUTING_SIDECAR_NAME}


def _composed(path: Path) -> Iterator[dict]:
    unit_golden = "golden" in path.parts or "gateway" in path.parts
    for doc in yaml.safe_load_all(path.read_text()):
        if not isinstance(doc, dict):
            continue
        annotations = (doc.get("metadata") or {}).get("annotations") or {}
        if not unit_golden and COMPOSED not in annotations:
            continue
        if doc.get("kind") == "Object":
            manifest = (doc.get("spec") or {}).get("forProvider", {}).get("manifest")
            if manifest:
                yield manifest
        elif doc.get("apiVersion", "").startswith("modelplane.ai/"):
            continue  # a composed XR (ModelReplica): its own function composes its pods
        else:
            yield doc


def _pods(node: object, labels: dict) -> Iterator[tuple[dict, dict]]:
    """(pod spec, the pod's labels) for every pod spec inside `node`."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield node, labels
            return
        here = labels
        if isinstance(node.get("metadata"), dict) and isinstance(node.get("spec"), dict):
            here = node["metadata"].get("labels") or labels
        elif isinstance(node.get("labels"), dict) and isinstance(node.get("spec"), dict):
            here = node["labels"]  # a Grove clique: its pods' labels sit beside its spec
        for value in node.values():
            yield from _pods(value, here)
    elif isinstance(node, list):
        for value in node:
            yield from _pods(value, labels)


def composed_containers() -> list[tuple[str, str, dict, bool]]:
    """(golden, where, container, is the user's engine) for every composed container."""
    out = []
    for path in GOLDENS:
        for manifest in _composed(path):
            where = f"{manifest.get('kind')} {(manifest.get('metadata') or {}).get('name')}"
            for pod, labels in _pods(manifest, {}):
                engine_pod = LABEL_ENGINE in labels
                for key in ("initContainers", "containers"):
                    for container in pod.get(key) or []:
                        users = engine_pod and container["name"] not in OURS_IN_ENGINE_PODS
                        out.append((str(path.relative_to(REPO)), where, container, users))
    return out


def test_the_goldens_hold_the_containers_we_compose():
    """Non-vacuous: the runtime, the collectors, the picker, the routing sidecar, the
    CRD apply and download Jobs are all among what is checked."""
    found = composed_containers()
    names = {c["name"] for _, _, c, users in found if not users}
    assert {"agent", "scaler", "activator", "otelcol", "epp", "routing-sidecar"} <= names
    assert any("gateway" in golden for golden, _, _, _ in found)
    assert {"apply", "download"} <= names


def test_every_composed_container_has_cpu_and_memory_requests_and_limits():
    missing = []
    for golden, where, container, users in composed_containers():
        if users:
            continue
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            for resource in ("cpu", "memory"):
                if resource not in (resources.get(kind) or {}):
                    missing.append(
                        f"{golden}: {where} container {container['name']}: {kind}.{resource}"
                    )
    assert not missing, "containers without requests/limits:\n  " + "\n  ".join(
        sorted(set(missing))
    )


def test_requests_never_exceed_limits():
    for component, resources in sizing.SIZES.items():
        for resource in ("cpu", "memory"):
            request = parse_quantity(resources["requests"][resource])
            limit = parse_quantity(resources["limits"][resource])
            assert request <= limit, (component, resource)
