"""Console entry point: serve the function with the SDK."""

from functions.common.contracts import FUNCTION_MODEL_DEPLOYMENT
from functions.common.sdk import make_cli
from functions.compose_model_deployment.fn import FunctionRunner

cli = make_cli(FUNCTION_MODEL_DEPLOYMENT, FunctionRunner)

if __name__ == "__main__":
    cli()
