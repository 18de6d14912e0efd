"""The member agent's loop: report every 30 s, hub step every 10 s while this agent is the
hub, model health and the fleet inventory (inventory.py) every 30 s. The election (who is
hub, and the term it stamps into intents) is the election module's; this loop only asks
it through `HubRole`.

Every step is per policy and independent: a policy whose workload cannot be read gets
`Ready=False/ObservationFailed` and the others carry on; a member that cannot be read is
a missing report for the hub (and a step error), never a crash of the loop.
"""

import base64
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Final, Protocol

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from functions.common.conditions import Condition, is_ready
from functions.common.contracts import (
    API_VERSION,
    AUTOSCALING_GROUP,
    COLLECTOR_SIGNALS_URL,
    LABEL_SERVING,
)
from functions.common.cost import PoolPrice
from functions.common.inventory import IDLE_AFTER_SECONDS, FabricLabel
from functions.runtime.agent.collect import read_collector_page, read_member_inputs
from functions.runtime.agent.cost import CostMetrics
from functions.runtime.agent.health import HealthAgent, group_by_replica
from functions.runtime.agent.idle import counters_from_prometheus, counters_from_signals
from functions.runtime.agent.inventory_record import InventoryAgent
from functions.runtime.agent.signals import SignalHistory
from functions.runtime.hub import planner
from functions.runtime.hub.acting import Actor, NotHub, is_own_pool, policy_path, route_path
from functions.runtime.hub.advisor import ChatAdvisor
from functions.runtime.hub.decision import Decision, HubState, Ranking, reservations
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.fleet import PHASE_ESCALATED, PHASE_STEADY, FleetStatus
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.hub.plan import plan
from functions.runtime.kube.rest import kube_request
from functions.runtime.shared.policy import (
    DEFAULT_SIGNAL_WINDOW_SECONDS,
    HUB_STEP_SECONDS,
    INTENT_RENEW_SECONDS,
    MODE_AUTO,
    MODE_OFF,
    REPORT_INTERVAL_SECONDS,
    Policy,
    rfc3339,
)
from functions.runtime.shared.report import (
    CONDITION_READY,
    REASON_OBSERVATION_FAILED,
    REPORT_OPTIONAL_KEYS,
    Report,
    compute_report,
)

HEALTH_INTERVAL_SECONDS: Final = 30.0
# The collector's page is read this often: twice per collector interval, so a window
# holds every point the collector produced.
SIGNAL_SAMPLE_SECONDS: Final = 15.0
COLLECTOR_INTERVAL_SECONDS: Final = 30.0
REASON_INVALID_SPEC: Final = "InvalidSpec"

log = logging.getLogger(__name__)


class HubRole(Protocol):
    """What the loop needs from the election."""

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
    """The election agent (functions/runtime/election/elector.py) as the loop's `HubRole`: hub
    while `hub_term()` says so, and its fencing token is the term stamped into intents."""

    def __init__(self, election):
        self.election = election
        self.identity = election.identity

    def leading(self) -> bool:
        return self.election.hub_term() is not None

    def term(self) -> str:
        current = self.election.hub_term()
        return current.fencing_token if current else ""


def _call(api: ApiClient, path: str, method: str, *, body=None, content_type=None):
    return kube_request(api, method, path, body=body, content_type=content_type)


def validation_message(err: ValidationError) -> str:
    """The first problem of an invalid spec, as `field.path: what is wrong`."""
    first = err.errors()[0]
    where = ".".join(str(part) for part in first.get("loc") or ())
    return f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg"))


def merged_conditions(existing: list[dict], condition: Condition, now: float, generation) -> list:
    """Set one condition, keeping its transition time when its status did not change."""
    out = [c for c in existing or [] if c.get("type") != condition.type]
    previous = next((c for c in existing or [] if c.get("type") == condition.type), None)
    since = (
        previous.get("lastTransitionTime")
        if previous and previous.get("status") == condition.status
        else rfc3339(now)
    )
    entry = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": since,
    }
    if generation is not None:
        entry["observedGeneration"] = int(generation)
    return sorted([*out, entry], key=lambda c: c["type"])


@dataclass
class AgentConfig:
    cluster: str
    prometheus_url: str | None = None
    # The cluster collector's page of merged vocabulary series (None: no vocabulary signals).
    signals_url: str | None = COLLECTOR_SIGNALS_URL
    signal_interval: float = SIGNAL_SAMPLE_SECONDS
    collector_interval: float = COLLECTOR_INTERVAL_SECONDS
    report_interval: float = REPORT_INTERVAL_SECONDS
    hub_interval: float = HUB_STEP_SECONDS
    health_interval: float = HEALTH_INTERVAL_SECONDS
    inventory_interval: float = REPORT_INTERVAL_SECONDS
    # Which node label names each pool's fabric (the InferenceCluster's pools).
    fabric_labels: tuple[FabricLabel, ...] = ()
    # The priced pools (spec.nodePools[].pricePerGPUHour): what each model's devices cost.
    pool_prices: tuple[PoolPrice, ...] = ()
    # Seconds a serving replica's request counter must stand still to be named idle.
    idle_after: float = IDLE_AFTER_SECONDS


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        members: dict[str, ApiClient],
        role: HubRole,
        metrics: HubMetrics,
        decision_log: DecisionLog,
        *,
        clock: Callable[[], float] = time.time,
        costs: CostMetrics | None = None,
    ):
        if config.cluster not in members:
            raise ValueError(f"the members must include this cluster ({config.cluster!r})")
        self.config = config
        self.members = members
        self.local = members[config.cluster]
        self.role = role
        self.metrics = metrics
        self.decision_log = decision_log
        self.clock = clock
        self._last_renew: dict[str, float] = {}
        # Per policy, the status.fleet (time, hub) this agent last wrote: its log's memory
        # matches the status only while the freshest status is that one.
        self._written: dict[str, tuple[float | None, str]] = {}
        # Per policy, the replicas its floors wait for on each member (auto mode only):
        # two policies on one member never count the same free room.
        self._reserved: dict[str, dict[str, int]] = {}
        self._policies: dict[tuple[str, str], tuple[str, Policy]] = {}
        self._advisors: dict[str, tuple[object, ChatAdvisor]] = {}
        self._planners: dict[str, tuple[object, ChatAdvisor]] = {}
        self._planned_at: dict[str, float] = {}
        self._proposals: list[tuple] = []  # written with the step's lines
        # For the probes: the loop's last turn, and the last time it read its own member.
        self.ticked_at: float | None = None
        self.reported_at: float | None = None
        self._actor: Actor | None = None
        # The collector page's recent points, kept for the longest window a policy names.
        self.history = SignalHistory(DEFAULT_SIGNAL_WINDOW_SECONDS)
        # Idle replicas: request counters from the collector's page this agent reads, else
        # from the operator's Prometheus.
        self.inventory = InventoryAgent(
            self.local,
            (lambda: counters_from_signals(self.history))
            if config.signals_url
            else (lambda: counters_from_prometheus(config.prometheus_url)),
            config.fabric_labels,
            config.idle_after,
            pool_prices=config.pool_prices,
            on_costs=costs.update if costs is not None else None,
        )

    # --- reading -----------------------------------------------------------------------

    def policies(self) -> list[dict]:
        listed = _call(
            self.local, f"/apis/{AUTOSCALING_GROUP}/{API_VERSION}/adaptivepolicies", "GET"
        )
        return sorted(
            listed.get("items") or [],
            key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]),
        )

    def _patch_status(self, api: ApiClient, path: str, status: dict) -> None:
        _call(
            api,
            path + "/status",
            "PATCH",
            body={"status": status},
            content_type="application/merge-patch+json",
        )

    # --- signals -----------------------------------------------------------------------

    def signal_step(self, now: float) -> None:
        if self.config.signals_url:
            read_collector_page(self.config.signals_url, self.history, now)

    # --- the member report -------------------------------------------------------------

    def report_step(self, now: float) -> None:
        policies = self.policies()
        self.reported_at = now
        windows = [DEFAULT_SIGNAL_WINDOW_SECONDS]
        for obj in policies:
            meta, status = obj["metadata"], obj.get("status") or {}
            path = (
                f"/apis/{AUTOSCALING_GROUP}/{API_VERSION}/namespaces/{meta['namespace']}"
                f"/adaptivepolicies/{meta['name']}"
            )
            report_status = None
            try:
                policy = Policy.from_object(obj)
            except ValidationError as err:
                condition = Condition(
                    CONDITION_READY, "False", REASON_INVALID_SPEC, validation_message(err)
                )
            else:
                self.metrics.serve_policy(policy.key)
                windows.append(policy.spec.signal_window)
                previous_safe = (status.get("report") or {}).get("safePressure")
                try:
                    inputs = read_member_inputs(
                        self.local,
                        policy.spec,
                        policy.namespace,
                        self.config.prometheus_url,
                        now,
                        history=self.history if self.config.signals_url else None,
                        interval=self.config.collector_interval,
                        cluster=self.config.cluster,
                    )
                except ApiException as err:
                    condition = Condition(
                        CONDITION_READY,
                        "False",
                        REASON_OBSERVATION_FAILED,
                        f"workload {policy.spec.workload.kind}/{policy.spec.workload.name}:"
                        f" {err.status} {err.reason}",
                    )
                else:
                    result = compute_report(
                        inputs, policy.spec, self.config.cluster, previous_safe, now
                    )
                    condition = result.condition
                    if result.report is not None:
                        report_status = result.report.to_status()
                        self.metrics.member_report(
                            policy.key, result.report.needed, result.report.static_room
                        )
                    if result.static is not None:
                        log.debug(
                            "static diagnostics %s: %d registered nodes, %d filtered, %d pods fit",
                            policy.key,
                            result.static.registered_nodes,
                            result.static.filtered_nodes,
                            result.static.pods_fitting,
                        )
            new_status: dict = {
                "conditions": merged_conditions(
                    status.get("conditions") or [], condition, now, meta.get("generation")
                )
            }
            if report_status is not None:
                # A merge patch keeps what it does not name: a signal this report left
                # out (it failed) must go, not stay at its last value for the hub.
                cleared = {k: None for k in REPORT_OPTIONAL_KEYS if k not in report_status}
                new_status["report"] = {**report_status, **cleared}
            try:
                self._patch_status(self.local, path, new_status)
            except ApiException as err:
                log.warning(
                    "report for %s not written: %s %s", meta["name"], err.status, err.reason
                )
        # Keep points for the longest window (plus one read, so a window is full).
        self.history.keep_seconds = max(windows) + self.config.signal_interval

    # --- the hub step ------------------------------------------------------------------

    def _member_copy(self, member: str, policy: Policy) -> dict | None:
        api = self.members.get(member)
        return None if api is None else _call(api, policy_path(policy), "GET")

    def _copies(self) -> list[tuple[str, dict]]:
        """Every policy any member holds, once, with the member whose copy anchors it:
        this member's own when it has one, else the first member (by name) that does —
        the hub need not run the model itself."""
        found: dict[tuple[str, str], tuple[str, dict]] = {}
        others = sorted(m for m in self.members if m != self.config.cluster)
        for member in [self.config.cluster, *others]:
            try:
                listed = _call(
                    self.members[member],
                    f"/apis/{AUTOSCALING_GROUP}/{API_VERSION}/adaptivepolicies",
                    "GET",
                )
            except ApiException as err:
                log.info("policies on %s not listed: %s", member, err.reason)
                continue
            for obj in listed.get("items") or []:
                key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                found.setdefault(key, (member, obj))
        return [found[k] for k in sorted(found)]

    def _route_weights(self, policy: Policy) -> dict[str, int] | None:
        """The live weights on this member's route, by member (reading is not acting)."""
        route = policy.spec.routes[0]  # every route carries the same weights
        try:
            obj = _call(
                self.local, route_path(route.namespace or policy.namespace, route.name), "GET"
            )
        except ApiException:
            return None
        by_backend = {c.backend_name: c.name for c in policy.spec.clusters}
        weights: dict[str, int] = {}
        for rule in (obj.get("spec") or {}).get("rules") or []:
            for ref in rule.get("backendRefs") or []:
                member = by_backend.get(ref.get("name"))
                own = policy.spec.cluster(self.config.cluster) is not None
                if member is None and own and is_own_pool(ref, by_backend):
                    member = self.config.cluster  # this member's own pods (see acting)
                if member is not None:
                    weights[member] = weights.get(member, 0) + int(ref.get("weight", 1))
        total = sum(weights.values())
        if not total:
            return None
        # As shares of 100, the unit the hub steps in.
        shares = {m: w * 100 // total for m, w in weights.items()}
        leftover = 100 - sum(shares.values())
        for m in sorted(shares, key=lambda m: -weights[m])[:leftover]:
            shares[m] += 1
        return shares

    def hub_step(self, now: float) -> None:
        if not self.role.leading():
            self.metrics.not_hub()
            self._actor = None
            return
        if self._actor is None or self._actor.hub != self.role.identity:
            self._actor = Actor(
                self.members, self.config.cluster, self.role.identity, self.role.term
            )
        stepped: set[str] = set()
        for anchor, obj in self._copies():
            try:
                policy = self._parsed(obj)
            except ValidationError:
                continue  # its Ready condition says why
            if policy.spec.mode == MODE_OFF:
                continue
            stepped.add(policy.key)
            self.metrics.serve_policy(policy.key)
            try:
                self._hub_policy(policy, anchor, now)
            except ApiException as err:
                self.metrics.step_error(policy.key)
                log.warning("hub step for %s failed: %s %s", policy.key, err.status, err.reason)
        for gone in set(self._reserved) - stepped:  # deleted or off: reserves nothing
            del self._reserved[gone]
        for gone in [k for k in self._policies if f"{k[0]}/{k[1]}" not in stepped]:
            del self._policies[gone]

    def _read_fleet(
        self, policy: Policy, anchor: str
    ) -> tuple[dict[str, Report | None], FleetStatus, dict]:
        """Every member's report, and the hub's memory (typed and as written)."""
        reports: dict[str, Report | None] = {}
        # The hub's memory is the freshest status.fleet any copy holds: after a failover
        # the new hub continues from what the old one wrote on its own copy.
        fleets: list[tuple[FleetStatus, dict]] = []
        for member in sorted(set(policy.spec.cluster_names) | {anchor}):
            try:
                copy = self._member_copy(member, policy)
            except ApiException as err:
                copy = None
                self.metrics.step_error(policy.key)
                log.info("copy on %s of %s not read: %s", member, policy.key, err.reason)
            status = (copy or {}).get("status") or {}
            if status.get("fleet"):
                fleets.append((FleetStatus.from_status(status["fleet"]), status["fleet"]))
            if member in policy.spec.cluster_names:
                report = status.get("report")
                reports[member] = (
                    Report.from_status(report) if report and report.get("time") else None
                )
        fleet, fleet_raw = max(fleets, key=lambda f: f[0].time or 0.0, default=(FleetStatus(), {}))
        return reports, fleet, fleet_raw

    def _parsed(self, obj: dict) -> Policy:
        """The policy, parsed again only when its object changed: a parsed spec keeps its
        members' spec hashes (`PolicySpec.member_hash`), the costliest part of a step."""
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        text = json.dumps(obj.get("spec") or {}, sort_keys=True)
        cached = self._policies.get(key)
        if cached is None or cached[0] != text:
            cached = self._policies[key] = (text, Policy.from_object(obj))
        return cached[1]

    def _ranker(self, policy: Policy):
        """experimental.model's ranking for this policy, or None (off by default). One
        client per policy and configuration, so its breaker outlives the step."""
        config = policy.spec.experimental.model
        if config is None:
            self._advisors.pop(policy.key, None)
            return None
        cached = self._advisors.get(policy.key)
        if cached is None or cached[0] != config:
            try:
                key = self._secret(policy.namespace, config.api_key_secret_ref)
            except (ApiException, KeyError, ValueError) as err:
                reason = f"API key Secret not read: {getattr(err, 'reason', err)}"
                return lambda names, context: Ranking({}, reason)
            cached = (config, ChatAdvisor(config, key, self.metrics.model_request))
            self._advisors[policy.key] = cached
        return cached[1].rank

    def _adaptive(self, policy: Policy, state: HubState, rules: Decision, now: float) -> Decision:
        """experimental.adaptive: ask the planner (when the rules changed something, or
        once per cooldown while not Steady), check its plans, choose; the proposal line
        waits with the step's other lines."""
        config = policy.spec.experimental.adaptive
        if config is None:
            self._planners.pop(policy.key, None)
            return rules
        last = self._planned_at.get(policy.key, -1e18)
        due = rules.changed or (
            rules.fleet.phase != PHASE_STEADY and now - last >= policy.spec.escalation.cooldown
        )
        if not due:
            return rules
        cached = self._planners.get(policy.key)
        if cached is None or cached[0] != config:
            try:
                key = self._secret(policy.namespace, config.planner.api_key_secret_ref)
            except (ApiException, KeyError, ValueError) as err:
                log.warning("planner for %s: API key Secret not read: %s", policy.key, err)
                return rules
            cached = (config, ChatAdvisor(config.planner, key, self.metrics.planner_request))
            self._planners[policy.key] = cached
        self._planned_at[policy.key] = now
        plans, error, seconds = cached[1].propose(
            planner.PLANNER_PROMPT, planner.context(state, policy.spec, rules), planner.PLAN_SCHEMA
        )
        self._proposals.append((now, policy.key, seconds, plans, error))
        decision, adaptive = planner.choose(
            plans, state, policy.spec, rules, apply=config.mode == "apply"
        )
        return replace(decision, adaptive=adaptive)

    def _secret(self, namespace: str, ref) -> str | None:
        """The API key from a Secret on this member (never from the policy itself)."""
        if ref is None:
            return None
        secret = CoreV1Api(self.local).read_namespaced_secret(ref.name, namespace)
        return base64.b64decode((secret.data or {})[ref.key]).decode()

    def _reserved_by_others(self, policy: Policy) -> dict[str, int]:
        """Per member, the replicas the other policies' floors still wait for there."""
        total: dict[str, int] = {}
        for key, per_member in self._reserved.items():
            if key == policy.key:
                continue
            for member, replicas in per_member.items():
                total[member] = total.get(member, 0) + replicas
        return total

    def _hub_policy(self, policy: Policy, anchor: str, now: float) -> None:
        reports, fleet, fleet_raw = self._read_fleet(policy, anchor)
        if self._written.get(policy.key) != (fleet.time, fleet.hub):
            # Not the memory this agent last wrote (a failover, or its write failed):
            # continue the decisions that memory was following.
            self.decision_log.adopt(policy.key, fleet_raw)
        route_weights = None
        remembered = {c.name for c in fleet.clusters if c.weight is not None}
        if policy.spec.manages_traffic and not remembered >= set(policy.spec.cluster_names):
            route_weights = self._route_weights(policy)
        state = HubState(
            self.role.identity,
            reports,
            fleet,
            route_weights,
            self._reserved_by_others(policy),
            ranker=self._ranker(policy),
        )
        decision = plan(state, policy.spec, now)
        decision = self._adaptive(policy, state, decision, now).stamped(policy.key)
        self._reserved[policy.key] = reservations(decision) if policy.spec.mode == MODE_AUTO else {}

        applied, error = False, None
        if policy.spec.mode == MODE_AUTO:
            renew = now - self._last_renew.get(policy.key, -1e18) >= INTENT_RENEW_SECONDS
            if decision.changed or renew or decision.events:
                result = self._actor.act(decision, policy, now, renew=renew, anchor=anchor)
                applied, error = result.applied, result.error
                for _ in result.errors:
                    self.metrics.step_error(policy.key)
                if renew:
                    self._last_renew[policy.key] = now
        self._remember(policy, anchor, decision, now, applied=applied, error=error)

    def _remember(
        self,
        policy: Policy,
        anchor: str,
        decision: Decision,
        now: float,
        *,
        applied: bool,
        error: str | None,
    ) -> None:
        """The decision line, its predecessors' outcome lines and status.fleet."""
        # The step's lines wait for the memory that records them (status.fleet): written
        # together, or the lines are left to whichever hub continues from that memory.
        self.decision_log.hold()
        for proposal in self._proposals:
            self.decision_log.proposal(*proposal)
        self._proposals.clear()
        if decision.changed:
            self.decision_log.record(decision, policy.key, policy.spec.mode, applied, error)
        seen = self.decision_log.observe(policy.key, now, decision.reports, decision.fleet)
        memory = decision.fleet.to_status() | self.decision_log.memory(policy.key)
        try:
            self._actor.write_fleet(policy, memory, anchor)
        except (NotHub, ApiException) as err:
            # Deposed between deciding and writing its memory (or the anchor is gone): the
            # memory stays what it was, and so does who follows its decisions.
            self.decision_log.drop()
            self._written.pop(policy.key, None)
            self.metrics.step_error(policy.key)
            why = str(err) if isinstance(err, NotHub) else f"status.fleet not written: {err.reason}"
            log.warning("hub step for %s: %s", policy.key, why)
            if decision.changed:
                error = "; ".join(e for e in (error, why) if e)
                self.decision_log.record(
                    decision, policy.key, policy.spec.mode, False, error, follow=False
                )
                self.metrics.decision(policy.key, decision.action, decision.source, False)
            return
        self._written[policy.key] = (decision.fleet.time, decision.fleet.hub)
        self.decision_log.flush()
        if decision.changed:
            self.metrics.decision(policy.key, decision.action, decision.source, applied)
        for observation in seen:
            self.metrics.time_to_ready(observation.policy, observation.seconds)
        self.metrics.hub_view(
            policy.key, decision.fleet.phase == PHASE_ESCALATED, len(decision.fleet.out_of_sync)
        )

    # --- model health ------------------------------------------------------------------

    def health_step(self, now: float) -> None:
        core = CoreV1Api(self.local)
        records = HealthAgent(core).sync(now)
        pods = core.list_pod_for_all_namespaces(label_selector=LABEL_SERVING)
        plain = [self.local.sanitize_for_serialization(p) for p in pods.items]
        ready = {
            key: sum(1 for p in group if is_ready(p))
            for key, group in group_by_replica(plain).items()
        }
        self.metrics.model_health(
            {key: (r.consecutive_start_failures, ready.get(key, 0)) for key, r in records.items()}
        )

    # --- probes ------------------------------------------------------------------------

    def live(self, now: float) -> tuple[bool, str]:
        """Live while the loop turns (a step hung for minutes is not alive)."""
        limit = max(120.0, 4 * self.config.report_interval)
        if self.ticked_at is None or now - self.ticked_at > limit:
            return False, f"the loop has not turned for over {limit:.0f}s"
        return True, "ok"

    def ready(self, now: float) -> tuple[bool, str]:
        """Ready while it can read its own member (its last report step listed policies)."""
        limit = 3 * self.config.report_interval
        if self.reported_at is None or now - self.reported_at > limit:
            return False, f"its own API server has not answered for over {limit:.0f}s"
        return self.live(now)

    # --- the loop ----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        due = {"signals": 0.0, "report": 0.0, "hub": 0.0, "health": 0.0, "inventory": 0.0}
        steps = {
            "signals": (self.signal_step, self.config.signal_interval),
            "report": (self.report_step, self.config.report_interval),
            "hub": (self.hub_step, self.config.hub_interval),
            "health": (self.health_step, self.config.health_interval),
            "inventory": (self.inventory.sync, self.config.inventory_interval),
        }
        while not stop.is_set():
            now = self.clock()
            self.ticked_at = now
            for name, (step, every) in steps.items():
                if now < due.get(name, 0.0):  # a step not run yet is due now
                    continue
                due[name] = now + every
                try:
                    step(now)
                except Exception:  # one failing step must not stop the others
                    log.exception("%s step failed", name)
            stop.wait(max(0.05, min(due.values()) - self.clock()))


class RunningLoop:
    """The loop on its own thread; `stop()` returns once the current step is done."""

    def __init__(self, agent: Agent, log_file=None):
        self.agent = agent
        self._log_file = log_file
        self._stop = threading.Event()
        self._thread = threading.Thread(target=agent.run, args=(self._stop,), daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._log_file is not None:
            self._log_file.close()


def start_loop(
    election,
    members: dict[str, ApiClient],
    prometheus_url: str | None,
    decision_log: str,
    runtime_metrics=None,
    *,
    signals_url: str | None = COLLECTOR_SIGNALS_URL,
    fabric_labels: tuple[FabricLabel, ...] = (),
    pool_prices: tuple[PoolPrice, ...] = (),
    intervals: dict[str, float] | None = None,
    idle_after: float = IDLE_AFTER_SECONDS,
) -> RunningLoop:
    """The agent's reports, hub steps and health records beside a running election agent
    (functions/runtime/election/elector.py), on the runtime's metrics when they are served."""
    import sys  # noqa: PLC0415

    from opentelemetry.metrics import NoOpMeterProvider  # noqa: PLC0415

    from functions.runtime.shared.metrics import METER_NAME  # noqa: PLC0415

    provider = runtime_metrics.provider if runtime_metrics is not None else NoOpMeterProvider()
    log_file = None if decision_log == "-" else open(decision_log, "a", encoding="utf-8")  # noqa: SIM115
    agent = Agent(
        AgentConfig(
            cluster=election.cluster,
            prometheus_url=prometheus_url,
            signals_url=signals_url,
            fabric_labels=fabric_labels,
            pool_prices=pool_prices,
            idle_after=idle_after,
            **(intervals or {}),
        ),
        members,
        ElectionRole(election),
        HubMetrics(provider.get_meter(METER_NAME)),
        DecisionLog(log_file or sys.stdout),
        # Exported by the member's active replica only (both replicas run the inventory).
        costs=CostMetrics(provider.get_meter(METER_NAME), election.replica.leading),
    )
    return RunningLoop(agent, log_file)
