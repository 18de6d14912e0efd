"""The member agent's loop: it composes the agent's jobs and runs each on its own
cadence — signal sampling every 15 s, the member report every 30 s, the hub step every
10 s while this agent is the hub, model health and the fleet inventory every 30 s — and
answers the process's probes.

Each job is its own module, named for what it does:
- signal_sampling.py: reads the collector's page into the signal history;
- member_report.py: reads the member and writes its report on every policy copy;
- hub_step.py: while hub, reads the fleet (fleet_reading.py), decides with the optional
  model advice (model_advice.py), acts, and writes the hub's memory;
- health.py: counts start failures into the model health records;
- inventory_record.py: the fleet inventory (inventory.py, idle.py) and the model costs.

The election (who is hub, and the term it stamps into intents) is the election wing's;
the agent only asks it through `HubRole` (role.py).

Every step is per policy and independent: a policy whose workload cannot be read gets
`Ready=False/ObservationFailed` and the others carry on; a member that cannot be read is
a missing report for the hub (and a step error), never a crash of the loop.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from kubernetes.client import ApiClient

from functions.common.contracts import COLLECTOR_SIGNALS_URL
from functions.common.cost import PoolPrice
from functions.common.inventory import IDLE_AFTER_SECONDS, CpuPool, FabricLabel
from functions.runtime.agent.adapters import AdapterStep
from functions.runtime.agent.cost import CostMetrics
from functions.runtime.agent.health import HealthStep
from functions.runtime.agent.hub_step import HubStep
from functions.runtime.agent.idle import request_counters
from functions.runtime.agent.inventory_record import InventoryAgent
from functions.runtime.agent.member_report import MemberReporter
from functions.runtime.agent.role import ElectionRole, HubRole
from functions.runtime.agent.signal_sampling import SignalSampler
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.shared.policy import HUB_STEP_SECONDS, REPORT_INTERVAL_SECONDS, rfc3339

HEALTH_INTERVAL_SECONDS: Final = 30.0
# LoRA adapters are loaded into engines this often: an adapter applied answers within
# seconds of its files being staged, and a new pod's readiness waits at most this long.
ADAPTER_INTERVAL_SECONDS: Final = 3.0
# The collector's page is read this often: twice per collector interval, so a window
# holds every point the collector produced.
SIGNAL_SAMPLE_SECONDS: Final = 15.0
COLLECTOR_INTERVAL_SECONDS: Final = 30.0

log = logging.getLogger(__name__)


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
    adapter_interval: float = ADAPTER_INTERVAL_SECONDS
    # Which node label names each pool's fabric (the InferenceCluster's pools).
    fabric_labels: tuple[FabricLabel, ...] = ()
    # The priced pools (spec.nodePools[].pricePerGPUHour): what each model's devices cost.
    pool_prices: tuple[PoolPrice, ...] = ()
    # The CPU-only pools (spec.nodePools[] with cpu and memory): their CPU and memory.
    cpu_pools: tuple[CpuPool, ...] = ()
    # Seconds a serving replica's request counter must stand still to be named idle.
    idle_after: float = IDLE_AFTER_SECONDS


class Agent:
    """One member's agent: its jobs, the cadence that runs them, and its probes."""

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
        self.clock = clock
        local = members[config.cluster]
        self.signals = SignalSampler(config.signals_url, config.signal_interval)
        self.reporter = MemberReporter(
            local,
            self.signals,
            metrics,
            cluster=config.cluster,
            prometheus_url=config.prometheus_url,
            collector_interval=config.collector_interval,
        )
        self.hub = HubStep(members, config.cluster, role, metrics, decision_log)
        self.health = HealthStep(local, metrics.model_health)
        # Idle replicas: request counters from the collector's page this agent reads, else
        # from the operator's Prometheus.
        self.inventory = InventoryAgent(
            local,
            request_counters(self.signals.sampling, config.prometheus_url),
            config.fabric_labels,
            config.idle_after,
            pool_prices=config.pool_prices,
            on_costs=costs.update if costs is not None else None,
            cpu_pools=config.cpu_pools,
        )
        self.adapters = AdapterStep(local)
        # For the liveness probe: the loop's last turn.
        self.ticked_at: float | None = None

    # The steps, each on its own cadence (`run`); callable one at a time by tests.

    def signal_step(self, now: float) -> None:
        self.signals.step(now)

    def report_step(self, now: float) -> None:
        self.reporter.step(now)

    def hub_step(self, now: float) -> None:
        self.hub.step(now)

    def health_step(self, now: float) -> None:
        self.health.step(now)

    def inventory_step(self, now: float) -> None:
        self.inventory.sync(now)

    def adapter_step(self, now: float) -> None:
        self.adapters.step(rfc3339(now))

    # --- probes ------------------------------------------------------------------------

    @property
    def reported_at(self) -> float | None:
        """The last time the agent read its own member (its report step listed policies)."""
        return self.reporter.reported_at

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
        due = {
            "signals": 0.0,
            "report": 0.0,
            "hub": 0.0,
            "health": 0.0,
            "inventory": 0.0,
            "adapters": 0.0,
        }
        steps = {
            "signals": (self.signal_step, self.config.signal_interval),
            "report": (self.report_step, self.config.report_interval),
            "hub": (self.hub_step, self.config.hub_interval),
            "health": (self.health_step, self.config.health_interval),
            "inventory": (self.inventory_step, self.config.inventory_interval),
            "adapters": (self.adapter_step, self.config.adapter_interval),
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
    cpu_pools: tuple[CpuPool, ...] = (),
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
            cpu_pools=cpu_pools,
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
