"""Console entry point: serve the function with the SDK.

compose-model-deployment composes two kinds, each through its own shell: a
ModelDeployment (fn.py) and a ModelCache (cache_fn.py). The observed XR's kind picks
the shell here, and only here.
"""

from functions.common.contracts import FUNCTION_MODEL_DEPLOYMENT, KIND_MODEL_CACHE
from functions.common.sdk import ByKind, make_cli
from functions.compose_model_deployment.cache_fn import ModelCacheRunner
from functions.compose_model_deployment.fn import FunctionRunner


def runner() -> ByKind:
    """The ModelDeployment shell, and the ModelCache shell for a ModelCache."""
    return ByKind(FunctionRunner(), {KIND_MODEL_CACHE: ModelCacheRunner()})


cli = make_cli(FUNCTION_MODEL_DEPLOYMENT, runner)

if __name__ == "__main__":
    cli()
