"""The hub step's optional model advice, both off by default:

- `experimental.model`: a chat model ranks the candidate members (`ranker`);
- `experimental.adaptive`: a planner model proposes plans, checked against the rules'
  decision before one is chosen (`adaptive`); each proposal is a decision-log line that
  waits for the step's other lines (`take_proposals`).

One client per policy and configuration, kept across steps so its circuit breaker
outlives a step; the API key is read from a Secret on this member, never from the policy.
"""

import base64
import logging
from dataclasses import replace

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException

from functions.runtime.hub import planner
from functions.runtime.hub.advisor import ChatAdvisor
from functions.runtime.hub.decision import Decision, HubState, Ranking
from functions.runtime.hub.fleet import PHASE_STEADY
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.shared.policy import Policy

log = logging.getLogger(__name__)


class ModelAdvice:
    def __init__(self, api: ApiClient, metrics: HubMetrics):
        self.api = api
        self.metrics = metrics
        self._advisors: dict[str, tuple[object, ChatAdvisor]] = {}
        self._planners: dict[str, tuple[object, ChatAdvisor]] = {}
        self._planned_at: dict[str, float] = {}
        self._proposals: list[tuple] = []  # written with the step's lines

    def ranker(self, policy: Policy):
        """experimental.model's ranking for this policy, or None (off by default)."""
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

    def adaptive(self, policy: Policy, state: HubState, rules: Decision, now: float) -> Decision:
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

    def take_proposals(self) -> list[tuple]:
        """The proposal lines not written yet (the decision log's `proposal` arguments)."""
        taken, self._proposals = self._proposals, []
        return taken

    def _secret(self, namespace: str, ref) -> str | None:
        """The API key from a Secret on this member (never from the policy itself)."""
        if ref is None:
            return None
        secret = CoreV1Api(self.api).read_namespaced_secret(ref.name, namespace)
        return base64.b64decode((secret.data or {})[ref.key]).decode()
