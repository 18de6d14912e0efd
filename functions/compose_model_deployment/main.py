"""Console entry point: serve the function with the SDK.

compose-model-deployment composes three kinds, each through its own shell: a
ModelDeployment (fn.py), a ModelCache (cache_fn.py) and a ModelAdapter (adapter_fn.py).
The observed XR's kind picks the shell here, and only here.
"""

from functions.common.adapters import KIND_MODEL_ADAPTER
from functions.common.contracts import FUNCTION_MODEL_DEPLOYMENT, KIND_MODEL_CACHE
from functions.common.sdk import ByKind, make_cli
from functions.compose_model_deployment.adapter_fn import ModelAdapterRunner
from functions.compose_model_deployment.cache_fn import ModelCacheRunner
from functions.compose_model_deployment.fn import FunctionRunner


def runner() -> ByKind:
    """The ModelDeployment shell, and the ModelCache and ModelAdapter shells."""
    return ByKind(
        FunctionRunner(),
        {KIND_MODEL_CACHE: ModelCacheRunner(), KIND_MODEL_ADAPTER: ModelAdapterRunner()},
    )


cli = make_cli(FUNCTION_MODEL_DEPLOYMENT, runner)

if __name__ == "__main__":
    cli()
