"""Console entry point: serve the function with the SDK."""

from functions.common.contracts import FUNCTION_TELEMETRY
from functions.common.sdk import make_cli
from functions.compose_telemetry.fn import FunctionRunner

cli = make_cli(FUNCTION_TELEMETRY, FunctionRunner)

if __name__ == "__main__":
    cli()
