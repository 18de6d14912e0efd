"""What the hub step reads before it decides: every policy any member holds (and which
member's copy anchors it), every member's report on it, the hub's memory (the freshest
`status.fleet` any copy holds), and the weights this member's route carries now.

Reading is not acting: nothing here writes, and a member that cannot be read is a
missing report (and a step error), never a failed step.
"""

import logging

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from functions.runtime.agent.member_report import POLICIES_PATH
from functions.runtime.hub.acting import is_own_pool, policy_path, route_path
from functions.runtime.hub.fleet import FleetStatus
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.kube.rest import kube_request
from functions.runtime.shared.policy import Policy
from functions.runtime.shared.report import Report

log = logging.getLogger(__name__)


class FleetReader:
    """Reads the members (`members` maps member name -> an API client) for the hub on
    `cluster`."""

    def __init__(self, members: dict[str, ApiClient], cluster: str, metrics: HubMetrics):
        self.members = members
        self.cluster = cluster
        self.local = members[cluster]
        self.metrics = metrics

    def copies(self) -> list[tuple[str, dict]]:
        """Every policy any member holds, once, with the member whose copy anchors it:
        this member's own when it has one, else the first member (by name) that does —
        the hub need not run the model itself."""
        found: dict[tuple[str, str], tuple[str, dict]] = {}
        others = sorted(m for m in self.members if m != self.cluster)
        for member in [self.cluster, *others]:
            try:
                listed = kube_request(self.members[member], "GET", POLICIES_PATH)
            except ApiException as err:
                log.info("policies on %s not listed: %s", member, err.reason)
                continue
            for obj in listed.get("items") or []:
                key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
                found.setdefault(key, (member, obj))
        return [found[k] for k in sorted(found)]

    def _member_copy(self, member: str, policy: Policy) -> dict | None:
        api = self.members.get(member)
        return None if api is None else kube_request(api, "GET", policy_path(policy))

    def fleet(
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

    def route_weights(self, policy: Policy) -> dict[str, int] | None:
        """The live weights on this member's route, by member, as shares of 100."""
        route = policy.spec.routes[0]  # every route carries the same weights
        try:
            obj = kube_request(
                self.local, "GET", route_path(route.namespace or policy.namespace, route.name)
            )
        except ApiException:
            return None
        by_backend = {c.backend_name: c.name for c in policy.spec.clusters}
        weights: dict[str, int] = {}
        for rule in (obj.get("spec") or {}).get("rules") or []:
            for ref in rule.get("backendRefs") or []:
                member = by_backend.get(ref.get("name"))
                own = policy.spec.cluster(self.cluster) is not None
                if member is None and own and is_own_pool(ref, by_backend):
                    member = self.cluster  # this member's own pods (see acting)
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
