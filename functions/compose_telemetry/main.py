"""Console entry point: serve the function with the SDK.

compose-telemetry serves two kinds, each through its own shell: a TelemetryDestination
(fn.py) and a MetricMapping (mapping_fn.py). The observed XR's kind picks the shell
here, and only here.
"""

from functions.common.contracts import FUNCTION_TELEMETRY, KIND_METRIC_MAPPING
from functions.common.sdk import ByKind, make_cli
from functions.compose_telemetry.fn import FunctionRunner
from functions.compose_telemetry.mapping_fn import MetricMappingRunner


def runner() -> ByKind:
    """The TelemetryDestination shell, and the MetricMapping shell for a MetricMapping."""
    return ByKind(FunctionRunner(), {KIND_METRIC_MAPPING: MetricMappingRunner()})


cli = make_cli(FUNCTION_TELEMETRY, runner)

if __name__ == "__main__":
    cli()
