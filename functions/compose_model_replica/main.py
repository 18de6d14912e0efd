"""Console entry point: serve the function with the SDK."""

from functions.common.contracts import FUNCTION_MODEL_REPLICA
from functions.common.sdk import make_cli
from functions.compose_model_replica.fn import FunctionRunner

cli = make_cli(FUNCTION_MODEL_REPLICA, FunctionRunner)

if __name__ == "__main__":
    cli()
