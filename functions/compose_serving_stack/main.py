"""Console entry point: serve the function with the SDK."""

from functions.common.contracts import FUNCTION_SERVING_STACK
from functions.common.sdk import make_cli
from functions.compose_serving_stack.fn import FunctionRunner

cli = make_cli(FUNCTION_SERVING_STACK, FunctionRunner)

if __name__ == "__main__":
    cli()
