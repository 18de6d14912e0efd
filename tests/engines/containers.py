"""Every engine container the suite can compose, as the engine process would see it.

The inputs are what the suite already composes: the examples' ModelDeployments on every
example InferenceCluster with a pool that fits them, the render fixtures' ModelDeployments
on the fixtures' clusters, and the unit fixtures' ModelReplicas. Each goes through the pure
code the functions run (compose-model-deployment's ModelReplica, compose-model-replica's
plan), never a gRPC request.

A container's argv is what the kubelet would start: `command` (or the image's entrypoint
when there is none) then `args`, with `$(VAR)` expanded by the kubelet's rules against the
container's environment as it stands after the workload controller mutated the pod:
LeaderWorkerSet v0.8.0 puts `LWS_*` first (pkg/utils/pod/pod_utils.go), Grove appends its
`GROVE_*` after the template's (../shared/TOOLS.md). An env value may refer only to
variables before it; a reference to anything else stays literal text. Each controller
also labels its pods (LWS: the group and worker index; Grove: the PodCliqueSet replica
index), and a downward-API variable reads those labels as the kubelet does (a label the
pod lacks reads as empty).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from functions.common.contracts import LABEL_ENGINE, LABEL_ROLE
from functions.common.served_name import engine_container_index
from functions.compose_model_deployment.devices import match_pool
from functions.compose_model_deployment.manifests import model_replica
from functions.compose_model_deployment.model import read_cluster, read_deployment
from functions.compose_model_deployment.modelcache import read_cache_view, replica_mount
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
RENDER_FIXTURES = REPO / "tests" / "render" / "testdata" / "model_deployment"
REPLICA_FIXTURES = REPO / "tests" / "unit" / "testdata" / "model_replica" / "inputs"

# What an image runs when the container sets no command (its ENTRYPOINT; none of these
# images sets a CMD). The vLLM OpenAI image's entrypoint is `vllm serve`.
IMAGE_ENTRYPOINTS = {
    "vllm/vllm-openai": ("vllm", "serve"),
    "vllm/vllm-openai-cpu": ("vllm", "serve"),
}

# Values the downward API and references would give; any stable text will do.
POD_IP = "10.0.0.10"


@dataclass
class EngineContainer:
    """One engine container, as its process starts."""

    case: str  # where it came from: SOURCE:INPUT[@CLUSTER]/ROLE[-N]
    engine: str  # engines[].type: vllm, sglang, ...
    workload: str  # the kind that makes the pod: Deployment, LeaderWorkerSet, PodCliqueSet
    role: str
    image: str
    argv: tuple[str, ...]
    # The unexpanded references left in argv (the kubelet passes them on as text).
    unexpanded: tuple[str, ...] = ()
    also: list[str] = field(default_factory=list)  # other inputs that compose the same argv


# --- The kubelet's $(VAR) expansion (k8s.io/kubernetes third_party/forked/golang/expansion)


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """`$(NAME)` → its value when known, else left as written; `$$` → `$`."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2 : close]
                    value = lookup(name)
                    out.append(f"$({name})" if value is None else value)
                    i = close + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _references(text: str) -> list[str]:
    refs, i = [], 0
    while i < len(text) - 1:
        if text[i] == "$" and text[i + 1] == "$":
            i += 2
        elif text[i] == "$" and text[i + 1] == "(" and (close := text.find(")", i + 2)) != -1:
            refs.append(text[i + 2 : close])
            i = close + 1
        else:
            i += 1
    return refs


def resolve_env(
    env: list[dict], pod_name: str, namespace: str, labels: dict[str, str] | None = None
) -> dict[str, str]:
    """The container's environment as the kubelet builds it, in list order; `labels`:
    the pod's, as its controller made it."""
    resolved: dict[str, str] = {}
    for entry in env:
        name = entry["name"]
        if "valueFrom" in entry:
            resolved[name] = _value_from(entry["valueFrom"], pod_name, namespace, labels or {})
        else:
            resolved[name] = expand(str(entry.get("value", "")), resolved.get)
    return resolved


_LABEL_PATH = re.compile(r"^metadata\.labels\['(?P<key>.*)'\]$")


def _value_from(source: dict, pod_name: str, namespace: str, labels: dict[str, str]) -> str:
    field_path = (source.get("fieldRef") or {}).get("fieldPath", "")
    by_field = {
        "metadata.name": pod_name,
        "metadata.namespace": namespace,
        "status.podIP": POD_IP,
        "status.podIPs": POD_IP,
    }
    if label := _LABEL_PATH.match(field_path):
        return labels.get(label["key"], "")
    if field_path:
        return by_field.get(field_path, f"<{field_path}>")
    for kind in ("secretKeyRef", "configMapKeyRef"):
        if kind in source:
            return f"<{kind} {source[kind].get('name')}/{source[kind].get('key')}>"
    return "<resource>"


# --- What the workload controllers add to each pod --------------------------------------


@dataclass(frozen=True)
class PodSpot:
    """One pod of a workload: its template, name, and the env and labels its controller
    adds."""

    template: dict
    pod_name: str
    before: tuple[dict, ...] = ()  # put ahead of the template's env (LeaderWorkerSet)
    after: tuple[dict, ...] = ()  # appended after it (Grove)
    labels: tuple[tuple[str, str], ...] = ()  # beside the template's

    @property
    def pod_labels(self) -> dict[str, str]:
        return {**(self.template.get("metadata", {}).get("labels") or {}), **dict(self.labels)}


def _env(**values: str) -> tuple[dict, ...]:
    return tuple({"name": k, "value": v} for k, v in values.items())


def pods_of(manifest: dict) -> list[PodSpot]:
    """The distinct pods a workload manifest makes in its first replica or group."""
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    namespace = manifest["metadata"].get("namespace", "default")
    spec = manifest.get("spec", {})
    if kind == "Deployment":
        return [PodSpot(spec["template"], f"{name}-0")]
    if kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        size = str(lwt.get("size", 1))

        def lws(index: int) -> tuple[dict, ...]:
            return _env(
                LWS_LEADER_ADDRESS=f"{name}-0.{name}.{namespace}",
                LWS_GROUP_SIZE=size,
                LWS_WORKER_INDEX=str(index),
            )

        def lws_labels(index: int) -> tuple[tuple[str, str], ...]:
            # api/leaderworkerset/v1: GroupIndexLabelKey, WorkerIndexLabelKey.
            return (
                ("leaderworkerset.sigs.k8s.io/group-index", "0"),
                ("leaderworkerset.sigs.k8s.io/worker-index", str(index)),
            )

        spots = [
            PodSpot(
                lwt.get("leaderTemplate") or lwt["workerTemplate"],
                f"{name}-0",
                lws(0),
                labels=lws_labels(0),
            )
        ]
        if int(size) > 1:
            spots.append(
                PodSpot(lwt["workerTemplate"], f"{name}-0-1", lws(1), labels=lws_labels(1))
            )
        return spots
    if kind == "PodCliqueSet":
        groups = {
            clique: group["name"]
            for group in spec["template"].get("podCliqueScalingGroups") or []
            for clique in group.get("cliqueNames") or []
        }
        spots = []
        for clique in spec["template"]["cliques"]:
            template = {
                "metadata": {"labels": clique.get("labels", {})},
                "spec": clique["spec"]["podSpec"],
            }
            group = groups.get(clique["name"])
            owner = f"{name}-0-{group}-0" if group else f"{name}-0"
            grove = {
                "GROVE_PCS_NAME": name,
                "GROVE_PCS_INDEX": "0",
                "GROVE_PCLQ_NAME": f"{owner}-{clique['name']}",
                "GROVE_HEADLESS_SERVICE": f"{name}-0.{namespace}",
                "GROVE_PCLQ_POD_INDEX": "0",
            }
            if group:
                grove |= {
                    "GROVE_PCSG_NAME": f"{name}-0-{group}",
                    "GROVE_PCSG_INDEX": "0",
                    "GROVE_PCSG_TEMPLATE_NUM_PODS": str(len(groups)),
                }
            spots.append(
                PodSpot(
                    template,
                    f"{owner}-{clique['name']}-0",
                    after=_env(**grove),
                    labels=(("grove.io/podcliqueset-replica-index", "0"),),
                )
            )
        return spots
    return []


def launch_argv(container: dict, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """The expanded argv and the references left unexpanded in it."""
    command = list(container.get("command") or [])
    if not command:
        image = container.get("image", "").rsplit(":", 1)[0]
        command = list(IMAGE_ENTRYPOINTS.get(image, ()))
    raw = [*command, *(container.get("args") or [])]
    argv = [expand(a, env.get) for a in raw]
    # Expansion is one pass: a value that still holds `$(X)` (an env entry that referred
    # to a variable defined after it) reaches the process as that text.
    left = [ref for a in argv for ref in _references(a)]
    return argv, left


# --- The inputs ------------------------------------------------------------------------


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _placed(xr: dict, clusters: list[dict], caches: dict[str, dict]) -> Iterator[tuple[str, dict]]:
    """The deployment's ModelReplica on each cluster with a pool that fits its devices."""
    deployment = read_deployment(xr)
    for raw in clusters:
        cluster = read_cluster(raw)
        pool = next((p for p in cluster.pools if match_pool(deployment, p).matched), None)
        if pool is None:
            continue
        cache = caches.get(deployment.model_cache)
        mount = {**replica_mount(read_cache_view(cache)), "ready": True} if cache else None
        body = model_replica(deployment, cluster, pool, 1, autoscaling=None, model_cache=mount)
        body["metadata"]["namespace"] = deployment.namespace
        yield cluster.name, body


def replicas() -> Iterator[tuple[str, dict]]:
    """(source, ModelReplica) for every input the suite composes."""
    clusters = [
        d for f in sorted((EXAMPLES / "inferenceclusters").glob("*.yaml")) for d in _docs(f)
    ]
    caches = {
        d["metadata"]["name"]: d
        for f in sorted((EXAMPLES / "modelcaches").glob("*.yaml"))
        for d in _docs(f)
    }
    for f in sorted((EXAMPLES / "modeldeployments").glob("*.yaml")):
        for cluster, body in _placed(_docs(f)[0], clusters, caches):
            yield f"example:{f.stem}@{cluster}", body

    fixture_clusters = _docs(RENDER_FIXTURES / "clusters.yaml")
    for folder in sorted(p for p in RENDER_FIXTURES.iterdir() if p.is_dir()):
        docs = [d for f in sorted(folder.glob("*.yaml")) for d in _docs(f)]
        xr = next((d for d in _docs(folder / "xr.yaml") if d["kind"] == "ModelDeployment"), None)
        if xr is None:
            continue
        local = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ModelCache"}
        for cluster, body in _placed(xr, fixture_clusters, {**caches, **local}):
            yield f"render:{folder.name}@{cluster}", body

    for f in sorted(REPLICA_FIXTURES.glob("*.yaml")):
        yield f"replica:{f.stem}", yaml.safe_load(f.read_text())


def engine_containers() -> list[EngineContainer]:
    """Every distinct engine container: one entry per engine, workload kind, role and argv,
    naming every input behind it."""
    by_argv: dict[tuple, EngineContainer] = {}
    for source, xr in replicas():
        plan = compose(parse(xr))
        namespace = xr["metadata"].get("namespace", "default")
        seen_roles: dict[str, int] = {}
        for composed in plan.composed:
            manifest = composed.manifest
            if not composed.key.startswith("workload"):
                continue
            for spot in pods_of(manifest):
                labels = spot.template.get("metadata", {}).get("labels", {})
                if LABEL_ENGINE not in labels:
                    continue
                containers = spot.template["spec"]["containers"]
                container = containers[engine_container_index(containers)]
                env_list = [*spot.before, *(container.get("env") or []), *spot.after]
                env = resolve_env(env_list, spot.pod_name, namespace, spot.pod_labels)
                argv, left = launch_argv(container, env)
                role = labels[LABEL_ROLE]
                seen_roles[role] = seen_roles.get(role, 0) + 1
                suffix = f"-{seen_roles[role]}" if seen_roles[role] > 1 else ""
                case = f"{source}/{role}{suffix}"
                key = (labels[LABEL_ENGINE], manifest["kind"], role, tuple(argv))
                if key in by_argv:
                    by_argv[key].also.append(case)
                    continue
                by_argv[key] = EngineContainer(
                    case=case,
                    engine=labels[LABEL_ENGINE],
                    workload=manifest["kind"],
                    role=role,
                    image=container.get("image", ""),
                    argv=tuple(argv),
                    unexpanded=tuple(dict.fromkeys(left)),
                )
    return sorted(by_argv.values(), key=lambda c: c.case)
