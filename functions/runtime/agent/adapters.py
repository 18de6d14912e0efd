"""Loading LoRA adapters into a member's running engines, before they take traffic.

What each base should hold on this member is what its ModelAdapters composed here: one
ConfigMap per adapter, written only once the adapter's files are complete in the base's
volume (compose-model-deployment, adapters.py), labelled with the adapter and the base.
Every engine pod of a base that accepts adapters carries the readiness gate
`modelplane.ai/adapters-loaded` (compose-model-replica): it does not count ready — for
the Service, the picker, the route — until this step has loaded every staged adapter
into it and set the gate's condition True. A new pod (scale-up, restart, rollout) so
never answers for the base while an adapter request could reach it without the adapter.

Each turn, per engine pod of such a base (running, with an address):
- ask the engine what it holds (vLLM: `GET /v1/models`, an adapter is an entry with a
  `parent`);
- load what is staged and missing (vLLM: `POST /v1/load_lora_adapter {lora_name,
  lora_path}`; SGLang: `POST /load_lora_adapter`), unload what it holds and no ConfigMap
  names any more (`/v1/unload_lora_adapter`, `/unload_lora_adapter`);
- set the gate's condition: True with what is loaded, or False with the engine's own
  error (cut to LAST_ERROR_MAX, control characters escaped);
and per base it applies one record (`lora-loaded-<base>`, beside the base's pods): per
staged served name, on how many of the base's engine pods it is loaded, of how many, and
the first engine error — each ModelAdapter observes it for its status per cluster.
The engine process is never restarted: loading and unloading are the engine's own
runtime interface.

The decisions (what to load and unload, the condition) are pure; the shell only reads
the API server and talks to the engines.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes.client import ApiClient, CoreV1Api

from functions.common import adapters as contract
from functions.common.contracts import LABEL_DEPLOYMENT, LABEL_ENGINE, PORT_NAME_HTTP
from functions.runtime.kube.rest import APPLY_PATCH, kube_request
from functions.runtime.shared.control_chars import escape

log = logging.getLogger(__name__)

LAST_ERROR_MAX: Final = 1024
FIELD_MANAGER: Final = "modelplane-agent-adapters"
# Short: the agent's loop runs its steps in turn, and an engine that does not answer
# must not hold up the hub's step behind it (it is asked again next turn).
ENGINE_TIMEOUT_SECONDS: Final = 3.0
REASON_LOADED: Final = "AdaptersLoaded"
REASON_LOAD_FAILED: Final = "AdapterLoadFailed"
# The engines' own endpoints (vLLM 0.32 with VLLM_ALLOW_RUNTIME_LORA_UPDATING; SGLang 0.5).
LOAD_PATH: Final = {"vllm": "/v1/load_lora_adapter", "sglang": "/load_lora_adapter"}
UNLOAD_PATH: Final = {"vllm": "/v1/unload_lora_adapter", "sglang": "/unload_lora_adapter"}
MODELS_PATH: Final = "/v1/models"
# vLLM's answer (400) to loading a name it holds: already what we want.
ALREADY_LOADED: Final = "has already been loaded"


@dataclass(frozen=True)
class Staged:
    """One adapter whose files are complete on this member."""

    served_name: str
    path: str


def staged_by_base(configmaps: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict]:
    """(namespace, base) -> {served name: Staged}, from the loader ConfigMaps; one whose
    shape or name cannot be read is left out (never loaded under a name we did not
    check)."""
    found: dict[tuple[str, str], dict] = {}
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        data = cm.get("data") or {}
        base = (meta.get("labels") or {}).get(LABEL_DEPLOYMENT)
        name, path = data.get(contract.CONFIG_SERVED_NAME), data.get(contract.CONFIG_PATH)
        if not (
            isinstance(base, str)
            and contract.is_served_name(name)
            and isinstance(path, str)
            and path.startswith(contract.MOUNT_ROOT + "/")
            and ".." not in path
        ):
            continue
        found.setdefault((str(meta.get("namespace") or ""), base), {})[name] = Staged(name, path)
    return found


@dataclass(frozen=True)
class PodPlan:
    load: tuple[Staged, ...]
    unload: tuple[str, ...]


def plan_pod(staged: Mapping[str, Staged], loaded: Iterable[str]) -> PodPlan:
    """What one engine must load and unload to hold exactly the staged adapters."""
    held = set(loaded)
    return PodPlan(
        load=tuple(staged[n] for n in sorted(staged) if n not in held),
        unload=tuple(sorted(held - set(staged))),
    )


def gate_condition(loaded: int, wanted: int, error: str, now: str) -> dict:
    """The pod condition the readiness gate reads."""
    if error:
        text = _cut(error)
        return {
            "type": contract.ADAPTERS_GATE,
            "status": "False",
            "reason": REASON_LOAD_FAILED,
            "message": f"loaded {loaded} of {wanted} adapters: {text}",
            "lastTransitionTime": now,
        }
    return {
        "type": contract.ADAPTERS_GATE,
        "status": "True",
        "reason": REASON_LOADED,
        "message": f"loaded {loaded} of {wanted} adapters",
        "lastTransitionTime": now,
    }


# --- Talking to an engine ---------------------------------------------------------------


class EngineError(Exception):
    """The engine's own answer to a request it refused, or why it could not be asked."""


Post = Callable[[str, dict], None]
Get = Callable[[str], dict]


def _http_get(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=ENGINE_TIMEOUT_SECONDS) as rsp:
            return json.loads(rsp.read().decode("utf-8") or "{}")
    except urllib.error.HTTPError as err:
        raise EngineError(
            f"GET {url}: {err.code} {err.read().decode('utf-8', 'replace')}"
        ) from None
    except (OSError, ValueError) as err:
        raise EngineError(f"GET {url}: {err}") from None


def _http_post(url: str, body: dict) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=ENGINE_TIMEOUT_SECONDS) as rsp:
            rsp.read()
    except urllib.error.HTTPError as err:
        raise EngineError(f"{err.code} {err.read().decode('utf-8', 'replace')}") from None
    except OSError as err:
        raise EngineError(str(err)) from None


@dataclass
class Engine:
    """One engine process's LoRA interface, at `base_url`."""

    base_url: str
    engine_type: str
    get: Get = _http_get
    post: Post = _http_post

    def loaded(self) -> set[str]:
        listed = self.get(self.base_url + MODELS_PATH)
        return {
            str(m.get("id"))
            for m in listed.get("data") or []
            if isinstance(m, dict) and m.get("parent")
        }

    def load(self, adapter: Staged) -> None:
        try:
            self.post(
                self.base_url + LOAD_PATH[self.engine_type],
                {"lora_name": adapter.served_name, "lora_path": adapter.path},
            )
        except EngineError as err:
            raise EngineError(f"loading {adapter.served_name}: {err}") from None

    def unload(self, served_name: str) -> None:
        try:
            self.post(self.base_url + UNLOAD_PATH[self.engine_type], {"lora_name": served_name})
        except EngineError as err:
            raise EngineError(f"unloading {served_name}: {err}") from None


def sync_engine(engine: Engine, staged: Mapping[str, Staged]) -> tuple[frozenset[str], str]:
    """Bring one engine to hold exactly the staged adapters: (the staged served names it
    holds now, the first error in the engine's words or "")."""
    try:
        held = engine.loaded()
    except EngineError as err:
        return frozenset(), str(err)
    plan = plan_pod(staged, held)
    error = ""
    for name in plan.unload:
        try:
            engine.unload(name)
        except EngineError as err:
            error = error or str(err)
    holding = set(held) & set(staged)
    for adapter in plan.load:
        try:
            engine.load(adapter)
        except EngineError as err:
            # "Already loaded" (the other agent replica, or a listing a moment old) is
            # held; anything else is the engine's own refusal.
            if ALREADY_LOADED not in str(err):
                error = error or str(err)
                continue
        holding.add(adapter.served_name)
    return frozenset(holding), error


def loaded_record(
    namespace: str, base: str, staged: Mapping[str, Staged], pods: list[tuple[frozenset, str]]
) -> dict:
    """The ConfigMap for one base: per staged served name, on how many of its engine
    pods it is loaded, of how many, and the first error an engine gave."""
    data = {}
    for name in sorted(staged):
        errors = [e for held, e in pods if name not in held and e]
        data[name] = json.dumps(
            {
                "loaded": sum(1 for held, _ in pods if name in held),
                "replicas": len(pods),
                "error": _cut(errors[0]) if errors else "",
            },
            sort_keys=True,
        )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": contract.loaded_record_name(base),
            "namespace": namespace,
            "labels": {LABEL_DEPLOYMENT: base},
        },
        "data": data,
    }


def _cut(error: str) -> str:
    text = escape(error)
    return text if len(text) <= LAST_ERROR_MAX else text[: LAST_ERROR_MAX - 1] + "…"


# --- The step ------------------------------------------------------------------------------


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    return any(g.get("conditionType") == contract.ADAPTERS_GATE for g in gates)


def _engine_port(pod: Mapping[str, Any]) -> int | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == PORT_NAME_HTTP:
                return int(port["containerPort"])
    return None


def _engine_running(pod: Mapping[str, Any]) -> bool:
    """The engine container runs and is ready (its own probe: the API answers)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s.get("name") == "engine" and s.get("ready") for s in statuses) or (
        bool(statuses) and all(s.get("ready") for s in statuses)
    )


def _current(pod: Mapping[str, Any]) -> dict | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == contract.ADAPTERS_GATE:
            return c
    return None


@dataclass
class AdapterStep:
    """The agent's adapter step, over every namespace of its member."""

    api: ApiClient
    engine_for: Callable[[str, str], Engine] = field(default=Engine)
    # (namespace, base) -> (engine pods holding every staged adapter, engine pods).
    last: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    # The loaded record last applied per base (applied again only when it changes).
    written: dict[tuple[str, str], dict] = field(default_factory=dict)

    def step(self, now_rfc3339: str) -> None:
        core = CoreV1Api(self.api)
        sanitize = self.api.sanitize_for_serialization
        configmaps = core.list_config_map_for_all_namespaces(label_selector=contract.LABEL_ADAPTER)
        staged = staged_by_base(sanitize(cm) for cm in configmaps.items)
        pods = core.list_pod_for_all_namespaces(label_selector=LABEL_DEPLOYMENT)
        held_by_base: dict[tuple[str, str], list[tuple[frozenset, str]]] = {}
        for pod in (sanitize(p) for p in pods.items):
            if not _gated(pod):
                continue
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            namespace, base = meta.get("namespace", ""), labels.get(LABEL_DEPLOYMENT, "")
            engine_type = labels.get(LABEL_ENGINE, "")
            ip, port = (pod.get("status") or {}).get("podIP"), _engine_port(pod)
            if engine_type not in LOAD_PATH or not ip or port is None:
                continue
            held = held_by_base.setdefault((namespace, base), [])
            if not _engine_running(pod) or meta.get("deletionTimestamp"):
                held.append((frozenset(), ""))  # a replica that holds nothing yet
                continue  # not answering yet: the gate stays as it is (unset: not ready)
            wanted = staged.get((namespace, base), {})
            engine = self.engine_for(f"http://{ip}:{port}", engine_type)
            holding, error = sync_engine(engine, wanted)
            held.append((holding, error))
            self._set_gate(pod, gate_condition(len(holding), len(wanted), error, now_rfc3339))
        for (namespace, base), held in held_by_base.items():
            record = loaded_record(namespace, base, staged.get((namespace, base), {}), held)
            if self.written.get((namespace, base)) == record["data"]:
                continue
            kube_request(
                self.api,
                "PATCH",
                f"/api/v1/namespaces/{namespace}/configmaps/{record['metadata']['name']}",
                query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                body=record,
                content_type=APPLY_PATCH,
            )
            self.written[(namespace, base)] = record["data"]
        self.last = {k: (sum(1 for h, e in v if not e), len(v)) for k, v in held_by_base.items()}

    def _set_gate(self, pod: Mapping[str, Any], condition: dict) -> None:
        meta = pod.get("metadata") or {}
        current = _current(pod)
        if current is not None and all(
            current.get(k) == condition[k] for k in ("status", "reason", "message")
        ):
            return
        if current is not None and current.get("status") == condition["status"]:
            condition["lastTransitionTime"] = current.get(
                "lastTransitionTime", condition["lastTransitionTime"]
            )
        kube_request(
            self.api,
            "PATCH",
            f"/api/v1/namespaces/{meta.get('namespace', '')}/pods/{meta['name']}/status",
            body={"status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json",
        )
