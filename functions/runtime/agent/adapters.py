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
  error (cut to LAST_ERROR_MAX, control characters escaped).
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
from functions.runtime.kube.rest import kube_request
from functions.runtime.shared.control_chars import escape

log = logging.getLogger(__name__)

LAST_ERROR_MAX: Final = 1024
ENGINE_TIMEOUT_SECONDS: Final = 10.0
REASON_LOADED: Final = "AdaptersLoaded"
REASON_LOAD_FAILED: Final = "AdapterLoadFailed"
REASON_UNREACHABLE: Final = "EngineUnreachable"
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
        name, path = data.get("servedName"), data.get("path")
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
        text = escape(error)
        if len(text) > LAST_ERROR_MAX:
            text = text[: LAST_ERROR_MAX - 1] + "…"
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


def sync_engine(engine: Engine, staged: Mapping[str, Staged]) -> tuple[int, str]:
    """Bring one engine to hold exactly the staged adapters: (how many it holds of
    them, the first error in the engine's words or "")."""
    try:
        plan = plan_pod(staged, engine.loaded())
    except EngineError as err:
        return 0, str(err)
    error = ""
    for name in plan.unload:
        try:
            engine.unload(name)
        except EngineError as err:
            error = error or str(err)
    failed = 0
    for adapter in plan.load:
        try:
            engine.load(adapter)
        except EngineError as err:
            if ALREADY_LOADED in str(err):
                continue  # the other agent replica, or a listing a moment old

            failed += 1
            error = error or str(err)
    return len(staged) - failed, error


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

    def step(self, now_rfc3339: str) -> None:
        core = CoreV1Api(self.api)
        sanitize = self.api.sanitize_for_serialization
        configmaps = core.list_config_map_for_all_namespaces(label_selector=contract.LABEL_ADAPTER)
        staged = staged_by_base(sanitize(cm) for cm in configmaps.items)
        pods = core.list_pod_for_all_namespaces(label_selector=LABEL_DEPLOYMENT)
        counts: dict[tuple[str, str], list[int]] = {}
        for pod in (sanitize(p) for p in pods.items):
            if not _gated(pod):
                continue
            meta = pod.get("metadata") or {}
            namespace, base = (
                meta.get("namespace", ""),
                (meta.get("labels") or {}).get(LABEL_DEPLOYMENT, ""),
            )
            engine_type = (meta.get("labels") or {}).get(LABEL_ENGINE, "")
            ip, port = (pod.get("status") or {}).get("podIP"), _engine_port(pod)
            if engine_type not in LOAD_PATH or not ip or port is None:
                continue
            tally = counts.setdefault((namespace, base), [0, 0])
            tally[1] += 1
            if not _engine_running(pod):
                continue  # not answering yet: the gate stays as it is (unset: not ready)
            wanted = staged.get((namespace, base), {})
            engine = self.engine_for(f"http://{ip}:{port}", engine_type)
            held, error = sync_engine(engine, wanted)
            if not error:
                tally[0] += 1
            condition = gate_condition(held, len(wanted), error, now_rfc3339)
            current = _current(pod)
            if current is not None and all(
                current.get(k) == condition[k] for k in ("status", "reason", "message")
            ):
                continue
            if current is not None and current.get("status") == condition["status"]:
                condition["lastTransitionTime"] = current.get(
                    "lastTransitionTime", condition["lastTransitionTime"]
                )
            kube_request(
                self.api,
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{meta['name']}/status",
                body={"status": {"conditions": [condition]}},
                content_type="application/strategic-merge-patch+json",
            )
        self.last = {k: (v[0], v[1]) for k, v in counts.items()}
