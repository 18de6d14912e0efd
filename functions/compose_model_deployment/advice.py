"""What a person should fix in a ModelDeployment's spec, said as warnings.

Nothing here changes what is composed: a served-model name other than the deployment's
(clients must then send that name, and requests for the deployment's name 404), a
replica placed where its ModelCache failed to download, a template whose own model flag
keeps the engine from reading the cache, a vLLM template that names its model with the
`--model` option vLLM 0.32 deprecates. Each is a message the shell emits, in order,
prefixed with the deployment's name.
"""

from __future__ import annotations

from typing import Final

from functions.common import contracts
from functions.common.modelcache import user_model_flag
from functions.common.served_name import served_name_mismatch
from functions.compose_model_deployment import modelcache
from functions.compose_model_deployment.model import Deployment
from functions.compose_model_deployment.placement import PlacementPlan

# The members whose engine answers requests (its name is the one clients send).
SERVING_ROLES: Final = (contracts.ROLE_STANDALONE, contracts.ROLE_LEADER, contracts.ROLE_DECODE)


def served_name_warnings(deployment: Deployment) -> list[str]:
    """A user's --served-model-name other than the deployment's name changes the name
    clients must send; say so rather than let requests for the deployment's name 404."""
    found = []
    for engine in deployment.engines:
        for member in engine.members:
            if member.role not in SERVING_ROLES:
                continue
            mismatch = served_name_mismatch(engine.type, member.template, deployment.name)
            if mismatch:
                found.append(f"{member.path}: {mismatch}")
    return found


def model_option_warnings(deployment: Deployment) -> list[str]:
    """vLLM 0.32 warns that `--model` will be removed in favour of the positional model
    (`vllm serve MODEL`): the template still works today, and stops working on the release
    that removes it. Compose keeps the user's flag, so say it before that release does."""
    found = []
    for engine in deployment.engines:
        if engine.type != "vllm":
            continue
        for member in engine.members:
            flag = user_model_flag(engine.type, member.template)
            if flag.startswith("--model"):
                found.append(
                    f"{member.path}: the template passes the model as `--model`, which "
                    "vLLM 0.32 deprecates and will remove; put the model first in args "
                    "(vllm serve MODEL), or leave it out and let spec.source name it"
                )
    return found


def cache_warnings(
    deployment: Deployment, cache: modelcache.CacheView | None, plan: PlacementPlan
) -> list[str]:
    """Where replicas wait on weights that are not there, and where the user's own
    model flag keeps the engine from reading the cache at all."""
    if cache is None:
        return []
    found = []
    for p in plan.placements:
        if cache.phase(p.cluster) == modelcache.PHASE_FAILED:
            found.append(
                f"{p.replicas} replicas on {p.cluster}, where ModelCache {cache.name} "
                "failed to download; they cannot load the model until it is Ready there"
            )
    for engine in deployment.engines:
        for member in engine.members:
            flag = user_model_flag(engine.type, member.template)
            if flag:
                found.append(
                    f"{member.path}: the template sets {flag}, so the engine does not "
                    f"load ModelCache {cache.name} from {modelcache.mount_path(cache.name)}"
                )
    return found


def spec_warnings(
    deployment: Deployment, cache: modelcache.CacheView | None, plan: PlacementPlan
) -> list[str]:
    """Every warning about the spec, served-name first, then the cache's."""
    return [
        *served_name_warnings(deployment),
        *model_option_warnings(deployment),
        *cache_warnings(deployment, cache, plan),
    ]
