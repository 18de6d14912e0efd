"""The hub step, while this agent holds the hub: for every policy any member holds, read
the fleet (fleet_reading.py), decide (`plan`, then the optional model advice), act in
`auto` mode (the `Actor` writes intents and route weights under this hub's term), and
write the hub's memory (`status.fleet`) together with the step's decision-log lines.

What the step keeps between steps, and why:
- the `Actor`, for as long as this agent is the same hub (a new term is a new actor);
- per policy, the replicas its floors wait for on each member, so two policies on one
  member never count the same free room;
- per policy, the `status.fleet` (time, hub) it last wrote: its log's memory matches the
  status only while the freshest status is that one, else it adopts what it reads;
- per policy, when it last renewed the intents, and the parsed policy (parsing a spec
  again hashes every member's spec, the costliest part of a step).
"""

import json
import logging

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from functions.runtime.agent.fleet_reading import FleetReader
from functions.runtime.agent.model_advice import ModelAdvice
from functions.runtime.agent.role import HubRole
from functions.runtime.hub.acting import Actor, NotHub
from functions.runtime.hub.decision import Decision, HubState, reservations
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.fleet import PHASE_ESCALATED
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.hub.plan import plan
from functions.runtime.shared.policy import INTENT_RENEW_SECONDS, MODE_AUTO, MODE_OFF, Policy

log = logging.getLogger(__name__)


class HubStep:
    def __init__(
        self,
        members: dict[str, ApiClient],
        cluster: str,
        role: HubRole,
        metrics: HubMetrics,
        decision_log: DecisionLog,
    ):
        self.members = members
        self.cluster = cluster
        self.role = role
        self.metrics = metrics
        self.decision_log = decision_log
        self.reader = FleetReader(members, cluster, metrics)
        self.advice = ModelAdvice(members[cluster], metrics)
        self._actor: Actor | None = None
        self._last_renew: dict[str, float] = {}
        self._written: dict[str, tuple[float | None, str]] = {}
        self._reserved: dict[str, dict[str, int]] = {}
        self._policies: dict[tuple[str, str], tuple[str, Policy]] = {}

    def step(self, now: float) -> None:
        if not self.role.leading():
            self.metrics.not_hub()
            self._actor = None
            return
        if self._actor is None or self._actor.hub != self.role.identity:
            self._actor = Actor(self.members, self.cluster, self.role.identity, self.role.term)
        stepped: set[str] = set()
        for anchor, obj in self.reader.copies():
            try:
                policy = self._parsed(obj)
            except ValidationError:
                continue  # its Ready condition says why
            if policy.spec.mode == MODE_OFF:
                continue
            stepped.add(policy.key)
            self.metrics.serve_policy(policy.key)
            try:
                self._policy_step(policy, anchor, now)
            except ApiException as err:
                self.metrics.step_error(policy.key)
                log.warning("hub step for %s failed: %s %s", policy.key, err.status, err.reason)
        for gone in set(self._reserved) - stepped:  # deleted or off: reserves nothing
            del self._reserved[gone]
        for gone in [k for k in self._policies if f"{k[0]}/{k[1]}" not in stepped]:
            del self._policies[gone]

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

    def _reserved_by_others(self, policy: Policy) -> dict[str, int]:
        """Per member, the replicas the other policies' floors still wait for there."""
        total: dict[str, int] = {}
        for key, per_member in self._reserved.items():
            if key == policy.key:
                continue
            for member, replicas in per_member.items():
                total[member] = total.get(member, 0) + replicas
        return total

    def _policy_step(self, policy: Policy, anchor: str, now: float) -> None:
        reports, fleet, fleet_raw = self.reader.fleet(policy, anchor)
        if self._written.get(policy.key) != (fleet.time, fleet.hub):
            # Not the memory this agent last wrote (a failover, or its write failed):
            # continue the decisions that memory was following.
            self.decision_log.adopt(policy.key, fleet_raw)
        route_weights = None
        remembered = {c.name for c in fleet.clusters if c.weight is not None}
        if policy.spec.manages_traffic and not remembered >= set(policy.spec.cluster_names):
            route_weights = self.reader.route_weights(policy)
        state = HubState(
            self.role.identity,
            reports,
            fleet,
            route_weights,
            self._reserved_by_others(policy),
            ranker=self.advice.ranker(policy),
        )
        decision = plan(state, policy.spec, now)
        decision = self.advice.adaptive(policy, state, decision, now).stamped(policy.key)
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
        for proposal in self.advice.take_proposals():
            self.decision_log.proposal(*proposal)
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
