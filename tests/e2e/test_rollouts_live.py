"""Rollouts, live: a change to a model's engines reaches its clusters in waves, and a bad
one rolls itself back, as a user and their clients see it.

One deployment, one replica on each of two Standard-stack clusters:

- us-east-1, the example member that serves for real: its pod is a real vLLM process
  (the pod runner, serving.py). Its cluster is the first wave (a selector wave: the
  default would take the first cluster in name order);
- e2e-rollout, a copy of us-east-1's H100 pool on the spare member e2e-a, equipped here
  as a KWOK GPU member (controllers, scheduler, KWOK nodes) whose KWOK plays every pod,
  the real-run label included: the last wave.

From the first apply, a watch on each member records every change of the deployment's
workload (its generation and revision label) with the time it was seen, and a client
sends requests one after another to a Ready replica of the real engine (a pod Ready and
not being deleted, as a Service's endpoints would pick) throughout each change.

- A good change (one more engine flag) rolls wave by wave: us-east-1's workload changes
  when the rollout starts, e2e-rollout's only after us-east-1's new engine served
  Ready for the bake time; the rollout ends Complete and the client saw no failed
  request: the Deployment keeps the old engine until the new one is Ready
  (maxUnavailable 0), and the old one, once deleted, keeps serving through its preStop
  sleep while the client (as a route would) turns to the new one, then drains what it
  was given on SIGTERM (`--shutdown-timeout`); the pod runner runs the hook and the
  signals as the kubelet does.
- A bad change (`--max-num-seqz`, a flag vLLM rejects) rolls back after the first wave:
  the real process exits (start failures, counted by the member's agent) are what fail
  the wave, status.rollout says RolledBack with the engine's own words, e2e-rollout's
  workload is never touched, the previous engine serves throughout, the model is not
  parked.

The engine takes 1-2 minutes to start on 2 shared cores: the waits are watches with
generous timeouts, never fixed sleeps; the bake time is short (BAKE). The module runs on
the real-engine worker (tests/conftest.py: REAL_ENGINE_MODULES), on the fleet box and
real serving it shares with tests/e2e/test_serving_real.py. Measured (printed at the end of the
run): each member's change time, from the change's apply; the time from the first
wave's gates passing to the next wave's first change on its member.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from fleetbox import gpu
from fleetbox.clusters import component_flags
from fleetbox.podrunner import REAL_RUN_LABEL, REAL_RUN_VALUE
from fleetbox.process import Process
from fleetbox.serving import REQUIRED_TOOLS as REAL_TOOLS
from fleetbox.serving import TINY_MODEL_URI
from functions.common.contracts import (
    API_VERSION,
    AUTOSCALING_GROUP,
    LABEL_DEPLOYMENT,
    LABEL_REVISION,
)
from tests.conftest import require_tool
from tests.e2e import claims
from tests.e2e.conftest import measured
from tests.e2e.test_serving_real import ENGINE_ARGS, _chat, _http_address, _ready
from tests.e2e.watches import watch_until

NAMESPACE = "ml-team"
NAME = "e2e-rollout"
REAL = "us-east-1"  # the example member that serves for real; the first wave
SPARE = "e2e-a"  # the spare member made a KWOK GPU member here
SPARE_CLUSTER = "e2e-rollout"  # its InferenceCluster; the last wave
TIER = "fleet.example.com/tier"
# The label both clusters carry for this module only (the deployment's clusterSelector):
# no example deployment selects it, so the examples' replicas never move.
ROLLOUT_LABEL = "e2e.modelplane.ai/rollout"
GROUP, VERSION, PLURAL = "modelplane.ai", "v1alpha1", "modeldeployments"
AUTOSCALING_VERSION = API_VERSION
BAKE = 10.0  # seconds, spec.rollout.bakeTime
POLICY = {
    # us-east-1 is the example's production cluster; the spare's copy is not.
    "waves": [{"selector": {"matchLabels": {TIER: "production"}}}, {"clusters": "100%"}],
    "bakeTime": f"{BAKE:.0f}s",
    "progressDeadline": "10m",
    "onFailure": "Rollback",
}
GOOD_FLAG = ("--max-num-seqs", "4")
BAD_FLAG = ("--max-num-seqz", "4")
# Composition, scheduling, the engine's start (1-2 minutes on 2 busy cores), the
# startup probe's period, the bake: generous.
SERVE_SECONDS = 480.0
# A start failure counted by the agent (health records every 30 s), read back by
# provider-kubernetes, then two compositions: generous.
ROLLBACK_SECONDS = 480.0
REQUEST_TIMEOUT = 120.0
# Between two of the client's requests (it sends one at a time).
CLIENT_PACE = 0.5
# The bench's acceptance: a wave's gates passing to the next wave's first change.
NEXT_WAVE_SECONDS = 30.0
# From a cluster given a revision (its ModelReplica composed) to its member's workload
# changing: core's and provider-kubernetes' reconciles in between (watch events both;
# under CI's load it took 61 s once, issue #43's latency). What this
# module holds is that no member changes before its wave; the bound only catches a hang.
PROPAGATE_SECONDS = 180.0


# --- what the test watches and sends --------------------------------------------------


@dataclass
class Change:
    at: float  # wall clock (time.time()), as the function's timestamps
    member: str
    generation: int
    revision: str
    rolled: bool  # every replica updated, available, no old one left


@dataclass
class Recorder:
    """Every change of the deployment's engine workload on `member`: a watch in a thread,
    from the moment it starts (before the first apply)."""

    box: object
    member: str
    name: str = NAME  # the deployment's
    changes: list[Change] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> Recorder:
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"rec-{self.member}")
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        api = self.box.api(self.member)
        apps = client.AppsV1Api(api)
        version = None
        try:
            while not self.stop.is_set():
                try:
                    if version is None:
                        listed = apps.list_namespaced_deployment(
                            NAMESPACE, label_selector=f"{LABEL_DEPLOYMENT}={self.name}"
                        )
                        version = listed.metadata.resource_version
                        for item in listed.items:
                            self._seen(api.sanitize_for_serialization(item))
                    for event in watch.Watch().stream(
                        apps.list_namespaced_deployment,
                        NAMESPACE,
                        label_selector=f"{LABEL_DEPLOYMENT}={self.name}",
                        resource_version=version,
                        timeout_seconds=5,
                        deserialize=False,
                    ):
                        obj = event["object"]
                        version = obj["metadata"].get("resourceVersion", version)
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._seen(obj)
                        if self.stop.is_set():
                            break
                except ApiException as error:
                    if error.status != 410:
                        raise
                    version = None
        except BaseException as error:  # reported by the test
            with self.lock:
                self.errors.append(error)
                self.lock.notify_all()
        finally:
            api.close()

    def _seen(self, obj: dict) -> None:
        containers = obj["spec"]["template"]["spec"]["containers"]
        if not any(c["name"] == "engine" for c in containers):
            return  # not the engine's workload
        meta, status = obj["metadata"], obj.get("status") or {}
        replicas = obj["spec"].get("replicas", 1)
        rolled = (
            status.get("observedGeneration") == meta["generation"]
            and status.get("updatedReplicas", 0) == replicas
            and status.get("availableReplicas", 0) == replicas
            and status.get("replicas", 0) == replicas
        )
        change = Change(
            time.time(),
            self.member,
            meta["generation"],
            (meta.get("labels") or {}).get(LABEL_REVISION, ""),
            rolled,
        )
        with self.lock:
            last = self.changes[-1] if self.changes else None
            if last is None or (last.generation, last.revision, last.rolled) != (
                change.generation,
                change.revision,
                change.rolled,
            ):
                self.changes.append(change)
                self.lock.notify_all()

    def wait(self, what: str, check: Callable[[list[Change]], object], timeout: float):
        """Until `check(changes)` answers, woken by each change the watch records."""
        with self.lock:
            found = self.lock.wait_for(
                lambda: self.errors or check(list(self.changes)), timeout=timeout
            )
        assert not self.errors, self.errors
        assert found, f"{what} on {self.member}: not within {timeout:.0f}s: {self.changes[-3:]}"
        return found

    def snapshot(self) -> list[Change]:
        assert not self.errors, self.errors
        with self.lock:
            return list(self.changes)

    def changed_since(self, since: float) -> list[Change]:
        """The spec or revision changes seen after `since` (readiness aside)."""
        found, before = [], None
        for change in self.snapshot():
            key = (change.generation, change.revision)
            if change.at > since and before is not None and key != before:
                found.append(change)
            before = key
        return found


@dataclass
class Client:
    """Requests one after another to a Ready, not terminating real engine pod of the
    deployment on REAL, each to the pod the API server says serves at that moment."""

    box: object
    sent: list[tuple[float, str, str]] = field(default_factory=list)  # (at, pod, error)
    stop: threading.Event = field(default_factory=threading.Event)
    answered: threading.Condition = field(default_factory=threading.Condition)
    # Every container exit the engine pods showed: (pod, exit code, restarts, message).
    exits: set[tuple[str, int, int, str]] = field(default_factory=set)

    def start(self) -> Client:
        self.thread = threading.Thread(target=self._run, daemon=True, name="client")
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=REQUEST_TIMEOUT + 10)

    def _run(self) -> None:
        api = self.box.api(REAL)
        core = client.CoreV1Api(api)
        try:
            while not self.stop.is_set():
                at = time.time()
                pods = [
                    api.sanitize_for_serialization(p)
                    for p in core.list_namespaced_pod(
                        NAMESPACE, label_selector=f"{LABEL_DEPLOYMENT}={NAME}"
                    ).items
                ]
                for pod in pods:
                    for status in pod["status"].get("containerStatuses") or []:
                        ended = (status.get("lastState") or {}).get("terminated") or (
                            status.get("state") or {}
                        ).get("terminated")
                        if ended:
                            self.exits.add(
                                (
                                    pod["metadata"]["name"],
                                    ended.get("exitCode", 0),
                                    status.get("restartCount", 0),
                                    ended.get("message") or "",
                                )
                            )
                serving = [
                    p
                    for p in pods
                    if _ready(p)
                    and not p["metadata"].get("deletionTimestamp")
                    and p["status"].get("podIP")
                ]
                if not serving:
                    self.sent.append((at, "", "no Ready engine pod"))
                else:
                    pod = serving[0]
                    try:
                        answer = _chat(_http_address(pod), NAME, 4, REQUEST_TIMEOUT)
                        assert answer.usage.completion_tokens >= 1, answer
                        self.sent.append((at, pod["metadata"]["name"], ""))
                    except Exception as error:  # every failure is counted
                        self.sent.append((at, pod["metadata"]["name"], repr(error)))
                with self.answered:
                    self.answered.notify_all()
                self.stop.wait(CLIENT_PACE)
        finally:
            api.close()

    def wait_served(self, more: int, timeout: float = REQUEST_TIMEOUT * 2) -> None:
        """Until `more` requests from now have been answered."""
        with self.answered:
            wanted = len([s for s in self.sent if not s[2]]) + more
            done = self.answered.wait_for(
                lambda: (
                    len([s for s in self.sent if not s[2]]) >= wanted or not self.thread.is_alive()
                ),
                timeout=timeout,
            )
        assert self.thread.is_alive(), f"the client stopped: {self.sent[-3:]}"
        assert done, f"{more} answers: {self.sent[-3:]}"

    def failures(self) -> list[tuple[float, str, str]]:
        return [s for s in self.sent if s[2]]

    def pods(self) -> list[str]:
        return sorted({pod for _, pod, error in self.sent if not error})


# --- the fleet this module needs -------------------------------------------------------


def _spare_cluster() -> dict:
    """A copy of us-east-1's H100 pool, two nodes, on the spare member."""
    document = claims.renamed(claims.example("inferenceclusters/us-east-h100.yaml"), SPARE_CLUSTER)
    document["metadata"]["labels"] = {TIER: "e2e", ROLLOUT_LABEL: "true"}
    spec = document["spec"]
    spec["providerConfigRef"] = {"name": SPARE}
    (pool,) = [p for p in spec["nodePools"] if p["name"] == "h100"]
    pool["nodes"] = 2
    for key in ("fabrics", "fabricNodeLabel", "additionalDevices"):
        pool.pop(key, None)
    spec["nodePools"] = [pool]
    return document


def wait_ledger(box, cluster: str) -> None:
    """Until the InferenceCluster's capacity ledger has been written (placement counts
    a cluster's room from it)."""
    api = box.api()
    try:
        watch_until(
            f"{cluster}'s first ledger",
            client.CustomObjectsApi(api).list_cluster_custom_object,
            lambda found: found and (found[0].get("status") or {}).get("ledger") is not None,
            claims.CONVERGE_SECONDS,
            GROUP,
            VERSION,
            "inferenceclusters",
            field_selector=f"metadata.name={cluster}",
        )
    finally:
        api.close()


@pytest.fixture(scope="module")
def runner(box):
    """us-east-1 serving for real."""
    for tool in REAL_TOOLS:
        require_tool(tool)
    return box.serve_for_real(REAL)


@pytest.fixture(scope="module")
def fleet(box):
    """us-east-1 labelled for this module; the spare member made a KWOK GPU member with
    its InferenceCluster."""
    cluster = _spare_cluster()
    nodes = [n for pool in cluster["spec"]["nodePools"] for n in gpu.pool_nodes(cluster, pool)]
    member = box.members[SPARE]
    # The spare member's controller manager runs the garbage collector and namespace
    # controllers only; a second one runs the rest of a GPU member's.
    workloads = Process(
        f"kube-controller-manager-{SPARE}-workloads",
        [
            str(box.bin / "kube-controller-manager"),
            *component_flags(box.kubeconfigs[SPARE], member.workdir / "kcm-workloads-certs"),
            "--controllers="
            + ",".join(c for c in gpu.CONTROLLERS if c not in ("garbagecollector", "namespace")),
        ],
        member.workdir / "kube-controller-manager-workloads.log",
    )
    box.start_process(workloads)
    gpu.equip(box, SPARE, nodes, kwok_runs_real_pods=True)
    box.kubectl(
        claims.CONTROL, "label", "inferencecluster", REAL, f"{ROLLOUT_LABEL}=true", "--overwrite"
    )
    claims.apply_document(box, cluster)
    try:
        # Its first ledger (nothing held yet) before anything is placed: placed before,
        # both replicas would go to us-east-1.
        wait_ledger(box, SPARE_CLUSTER)
        yield
    finally:
        claims.delete(box, "inferencecluster", SPARE_CLUSTER)
        box.kubectl(claims.CONTROL, "label", "inferencecluster", REAL, f"{ROLLOUT_LABEL}-")
        for name in (workloads.name, f"kube-scheduler-{SPARE}", f"kwok-{SPARE}"):
            process = box.processes.pop(name, None)
            if process is not None:
                process.stop(grace=5)
        gpu.remove_nodes(box, SPARE, nodes)


def _document(extra_args: tuple[str, ...] = ()) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), NAME)
    spec = document["spec"]
    spec["replicas"] = 2  # spread: one on each cluster
    spec.pop("autoscaling", None)
    spec["source"] = {"uri": TINY_MODEL_URI}
    spec["rollout"] = copy.deepcopy(POLICY)
    template = document["spec"]["template"]
    template["spec"]["clusterSelector"] = {"matchLabels": {ROLLOUT_LABEL: "true"}}
    template["metadata"]["labels"][REAL_RUN_LABEL] = REAL_RUN_VALUE
    member = template["spec"]["engines"][0]["members"][0]
    member["template"]["spec"]["containers"][0]["args"] = [*ENGINE_ARGS, *extra_args]
    return document


def _deployment(box, check: Callable[[dict], object], what: str, timeout: float, name: str = NAME):
    api = box.api()
    try:
        return watch_until(
            what,
            client.CustomObjectsApi(api).list_namespaced_custom_object,
            lambda found: check(found[0] if found else {}),
            timeout,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            field_selector=f"metadata.name={name}",
        )
    finally:
        api.close()


def _rollout(md: dict) -> dict:
    return (md.get("status") or {}).get("rollout") or {}


def _seen_serving(box, name: str = NAME, replicas: int = 2) -> None:
    """Until the control plane has seen every replica Ready (status.readyReplicas): a
    change before that goes to every cluster at once, rightly (the planner protects a
    model it sees serving, and it sees nothing serving yet)."""
    _deployment(
        box,
        lambda md: (md.get("status") or {}).get("readyReplicas") == replicas,
        f"{name} seen serving ({replicas} Ready)",
        claims.CONVERGE_SECONDS,
        name,
    )


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _wait_rolled(recorder: Recorder, revision: str, timeout: float, since: float = 0.0) -> Change:
    """Until the member's engine workload has fully rolled to `revision` (after `since`:
    a rollback returns to a revision the workload rolled to before): the first change
    that saw it so."""
    return recorder.wait(
        f"rolled to {revision}",
        lambda changes: next(
            (c for c in changes if c.revision == revision and c.rolled and c.at > since), None
        ),
        timeout,
    )


@dataclass
class Serving:
    recorders: dict[str, Recorder]
    revision: str  # the revision serving everywhere now
    applied_at: float


@pytest.fixture(scope="module")
def serving(box, fleet, runner):
    """The deployment applied, watched on both members from before the apply, its real
    engine Ready and both clusters rolled to its first revision."""
    recorders = {m: Recorder(box, m).start() for m in (REAL, SPARE)}
    applied_at = time.time()
    claims.apply_document(box, _document())
    try:
        md = _deployment(
            box,
            lambda md: _rollout(md).get("phase") == "Complete" and md,
            f"{NAME}'s first revision Complete",
            SERVE_SECONDS,
        )
        revision = _rollout(md)["revision"]
        for recorder in recorders.values():
            _wait_rolled(recorder, revision, SERVE_SECONDS)
        _seen_serving(box)
        measured("rollout: apply → real engine and KWOK replica rolled", time.time() - applied_at)
        yield Serving(recorders, revision, applied_at)
    finally:
        for recorder in recorders.values():
            recorder.close()
        claims.delete(box, "modeldeployment", NAME, NAMESPACE)
        _deployment(box, lambda md: not md, f"{NAME} deleted", claims.CONVERGE_SECONDS)


def _print_timeline(title: str, since: float, recorders: dict[str, Recorder], sent) -> None:
    print(f"\n{title} (seconds after the apply):")
    for member, recorder in recorders.items():
        for change in recorder.snapshot():
            if change.at >= since:
                print(
                    f"  {member}: generation {change.generation} revision {change.revision}"
                    f" rolled={change.rolled} at +{change.at - since:.1f}"
                )
    failed = [s for s in sent if s[2]]
    print(f"  client: {len(sent)} requests, {len(failed)} failed")
    for at, pod, error in failed[:5]:
        print(f"    +{at - since:.1f} {pod}: {error[:300]}")


def test_a_good_change_rolls_wave_by_wave_while_the_real_engine_serves(box, serving):
    real, spare = serving.recorders[REAL], serving.recorders[SPARE]
    before = {m: r.snapshot()[-1] for m, r in serving.recorders.items()}
    sender = Client(box).start()
    try:
        # The client has been served before the change.
        sender.wait_served(1)
        began = time.time()
        claims.apply_document(box, _document(GOOD_FLAG))
        md = _deployment(
            box,
            lambda md: (
                _rollout(md).get("phase") == "Complete"
                and _rollout(md).get("revision") != serving.revision
                and md
            ),
            f"{NAME}'s good change Complete",
            2 * SERVE_SECONDS,
        )
        rollout = _rollout(md)
        new = rollout["revision"]
        assert rollout["previous"] == new, rollout
        rolled_real = _wait_rolled(real, new, SERVE_SECONDS)
        rolled_spare = _wait_rolled(spare, new, SERVE_SECONDS)
        sender.wait_served(3)  # a few requests after the rollout, to the new engine
    finally:
        sender.close()
    _print_timeline("good change", began, serving.recorders, sender.sent)

    real_changes, spare_changes = real.changed_since(began), spare.changed_since(began)
    assert real_changes, real.snapshot()
    assert spare_changes, spare.snapshot()
    # Each member changed once, to the new revision, and only then.
    assert {c.revision for c in real_changes} == {new}, real_changes
    assert {c.revision for c in spare_changes} == {new}, spare_changes
    assert real_changes[-1].generation == before[REAL].generation + 1, real_changes
    assert spare_changes[-1].generation == before[SPARE].generation + 1, spare_changes
    # The second wave started only once the first wave's real engine was Ready (rolled)
    # and baked: the spare's workload changed after that, not with the first.
    assert spare_changes[0].at >= rolled_real.at + BAKE - 1.5, (rolled_real, spare_changes)
    assert rolled_spare.at >= spare_changes[0].at
    measured("rollout good: apply → wave 1 member's workload changed", real_changes[0].at - began)
    measured("rollout good: apply → wave 2 member's workload changed", spare_changes[0].at - began)
    # Gates passed (the first wave rolled, then the bake) → the next wave's first change.
    measured(
        "rollout: wave 1 gates passed → wave 2's first change on its member",
        spare_changes[0].at - (rolled_real.at + BAKE),
    )
    assert spare_changes[0].at - (rolled_real.at + BAKE) <= NEXT_WAVE_SECONDS
    # The client was served throughout, by the old engine then the new one.
    assert not sender.failures(), sender.failures()
    assert len(sender.pods()) == 2, sender.pods()
    by_cluster = {c["cluster"]: c for c in rollout["clusters"]}
    assert by_cluster[REAL]["wave"] == 1, rollout
    assert by_cluster[SPARE_CLUSTER]["wave"] == 2, rollout
    # Each member's workload changed when the function gave its cluster the revision
    # (its `since`, whole seconds), not before (PROPAGATE_SECONDS: and not never).
    for cluster, changes in ((REAL, real_changes), (SPARE_CLUSTER, spare_changes)):
        given = _time(by_cluster[cluster]["since"])
        assert given - 1 <= changes[0].at <= given + PROPAGATE_SECONDS, (cluster, given, changes)
    serving.revision = new


def _engine_workload(box) -> dict:
    """The deployment's engine Deployment on REAL, as the API server returns it."""
    api = box.api(REAL)
    try:
        found = client.AppsV1Api(api).list_namespaced_deployment(
            NAMESPACE, label_selector=f"{LABEL_DEPLOYMENT}={NAME}"
        )
        (deployment,) = [
            d
            for d in found.items
            if any(c.name == "engine" for c in d.spec.template.spec.containers)
        ]
        return api.sanitize_for_serialization(deployment)
    finally:
        api.close()


def _pod_names(box) -> set[str]:
    api = box.api(REAL)
    try:
        found = client.CoreV1Api(api).list_namespaced_pod(
            NAMESPACE, label_selector=f"{LABEL_DEPLOYMENT}={NAME}"
        )
        return {p.metadata.name for p in found.items}
    finally:
        api.close()


def test_a_bad_flag_rolls_back_after_the_first_wave_while_the_old_engine_serves(
    box, serving, runtime
):
    real, spare = serving.recorders[REAL], serving.recorders[SPARE]
    good = serving.revision
    deployment = _engine_workload(box)
    # Kept while a new pod is not Ready: none unavailable, one more at a time.
    assert deployment["spec"]["replicas"] == 1
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert (strategy["maxUnavailable"], strategy["maxSurge"]) == (0, 1), deployment["spec"]
    good_template = deployment["spec"]["template"]
    old_pods = _pod_names(box)
    sender = Client(box).start()
    try:
        sender.wait_served(1)
        began = time.time()
        claims.apply_document(box, _document(BAD_FLAG))
        md = _deployment(
            box,
            lambda md: _rollout(md).get("phase") == "RolledBack" and md,
            f"{NAME}'s bad change RolledBack",
            ROLLBACK_SECONDS,
        )
        rolled_back = _wait_rolled(real, good, SERVE_SECONDS, since=began)
        rolled_back_seen = time.time()
        sender.wait_served(3)
    finally:
        sender.close()
    _print_timeline("bad change", began, serving.recorders, sender.sent)
    rollout, status = _rollout(md), md["status"]
    print(f"  status.rollout: {rollout.get('reason')}: {rollout.get('message')}")
    bad = rollout["revision"]
    assert bad != good, rollout
    assert rollout["previous"] == good, rollout
    # What failed the wave: the real engine's exits, in its own words.
    assert rollout["failedGate"]["name"] == "StartFailures", rollout
    assert "--max-num-seqz" in rollout["message"], rollout
    assert rollout["wave"] == 1, rollout
    # The evidence: the new revision's pod, run for real, exited (argparse's 2) and
    # was restarted, its message the engine's words.
    crashed = [e for e in sender.exits if e[0] not in old_pods and e[1] != 0]
    print(f"  exits of the bad revision's pods: {sorted(e[:3] for e in crashed)}")
    assert any(e[1] == 2 and "--max-num-seqz" in e[3] for e in crashed), sender.exits
    # The model still serves its previous revision: not parked.
    assert not status.get("parked"), status
    # us-east-1 was given the bad revision, then returned to the good one, its pod
    # template as before byte for byte; the spare cluster never saw a change.
    revisions = [c.revision for c in real.changed_since(began)]
    assert [r for i, r in enumerate(revisions) if not i or revisions[i - 1] != r] == [bad, good], (
        real.snapshot()
    )
    assert spare.changed_since(began) == [], spare.snapshot()
    assert _engine_workload(box)["spec"]["template"] == good_template
    # The previous pod served every request, none failed.
    assert not sender.failures(), sender.failures()
    assert set(sender.pods()) <= old_pods, (sender.pods(), old_pods)
    measured("rollout bad: apply → RolledBack seen", rolled_back_seen - began)
    measured("rollout bad: apply → wave 1 member back on the good revision", rolled_back.at - began)


SLO_NAME = "e2e-rollout-slo"
ERROR_RATE_MAX = 0.05
STAND_IN_ERROR_RATE = 0.25


def _slo_document(extra_args: tuple[str, ...] = ()) -> dict:
    """KWOK pods on both clusters (no real engine), autoscaled (shadow) so its members
    report signals, an error-rate gate; the spare cluster first, paused on a failure."""
    document = _document(extra_args)
    document["metadata"]["name"] = SLO_NAME
    spec = document["spec"]
    del spec["template"]["metadata"]["labels"][REAL_RUN_LABEL]
    autoscaling = claims.example("modeldeployments/llama-8b-vllm.yaml")["spec"]["autoscaling"]
    autoscaling["minReplicas"] = autoscaling["maxReplicas"] = 2
    spec["autoscaling"] = autoscaling
    spec["rollout"] = {
        **copy.deepcopy(POLICY),
        "waves": [{"selector": {"matchLabels": {TIER: "e2e"}}}, {"clusters": "100%"}],
        "onFailure": "Pause",
        "gates": {"errorRate": {"max": ERROR_RATE_MAX}},
    }
    return document


def _gate(md: dict, name: str) -> dict:
    return next((g for g in _rollout(md).get("gates") or [] if g["name"] == name), {})


def test_an_slo_gate_holds_a_wave_whose_error_rate_exceeds_its_threshold(box, fleet):
    """The spare cluster's agent is played by the test (a stand-in: no agent runs on
    that member): it writes the AdaptivePolicy copy's report as an agent does, with an
    error rate above the gate's threshold. Until then the gate cannot be measured and
    holds the wave, saying so; then it fails it, the status showing the numbers, and the
    next wave's cluster is never changed."""
    recorders = {m: Recorder(box, m, SLO_NAME).start() for m in (REAL, SPARE)}
    claims.apply_document(box, _slo_document())
    try:
        md = _deployment(
            box,
            lambda md: _rollout(md).get("phase") == "Complete" and md,
            f"{SLO_NAME}'s first revision Complete",
            claims.CONVERGE_SECONDS,
            SLO_NAME,
        )
        first = _rollout(md)["revision"]
        for recorder in recorders.values():
            _wait_rolled(recorder, first, claims.CONVERGE_SECONDS)
        _seen_serving(box, SLO_NAME)
        began = time.time()
        claims.apply_document(box, _slo_document(GOOD_FLAG))
        held = _deployment(
            box,
            lambda md: (
                _rollout(md).get("revision") != first
                and _gate(md, "ErrorRate").get("state") == "Unmeasured"
                and md
            ),
            f"{SLO_NAME}'s error-rate gate Unmeasured after the bake",
            claims.CONVERGE_SECONDS,
            SLO_NAME,
        )
        new = _rollout(held)["revision"]
        assert _rollout(held)["phase"] == "Progressing", _rollout(held)
        assert _rollout(held)["wave"] == 1, _rollout(held)
        assert "cannot be measured" in _rollout(held)["message"], _rollout(held)
        assert {c.revision for c in recorders[SPARE].changed_since(began)} == {new}
        # The stand-in agent's report on the spare member.
        api = box.api(SPARE)
        try:
            client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
                AUTOSCALING_GROUP,
                AUTOSCALING_VERSION,
                NAMESPACE,
                "adaptivepolicies",
                SLO_NAME,
                {
                    "status": {
                        "report": {
                            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                            "extra": {"rolloutErrorRate": STAND_IN_ERROR_RATE},
                        }
                    }
                },
            )
        finally:
            api.close()
        md = _deployment(
            box,
            lambda md: _rollout(md).get("phase") == "Paused" and md,
            f"{SLO_NAME} paused by its error-rate gate",
            claims.CONVERGE_SECONDS,
            SLO_NAME,
        )
        rollout = _rollout(md)
        print(f"\nSLO gate: {rollout.get('reason')}: {rollout.get('message')}")
        assert rollout["reason"] == "GateFailed", rollout
        assert rollout["failedGate"]["name"] == "ErrorRate", rollout
        assert float(rollout["failedGate"]["observed"]) == STAND_IN_ERROR_RATE, rollout
        assert float(rollout["failedGate"]["threshold"]) == ERROR_RATE_MAX, rollout
        # The next wave's cluster never saw the held revision.
        assert recorders[REAL].changed_since(began) == [], recorders[REAL].snapshot()
    finally:
        for recorder in recorders.values():
            recorder.close()
        claims.delete(box, "modeldeployment", SLO_NAME, NAMESPACE)
        _deployment(
            box, lambda md: not md, f"{SLO_NAME} deleted", claims.CONVERGE_SECONDS, SLO_NAME
        )
