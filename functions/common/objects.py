"""The provider-kubernetes Object envelope: how a manifest reaches a member cluster.

Every function that composes into a member (the serving stack, a model replica, the
telemetry gateway) wraps its manifests the same way; this is the one writer of that
envelope, so a readiness policy or a field provider-kubernetes adds is one edit.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Final

from functions.common.contracts import OBJECT_API_VERSION, OBJECT_KIND

# The management policies of an Object that only reads its remote object.
OBSERVE: Final = ("Observe",)


def provider_object(
    *,
    name: str,
    namespace: str,
    manifest: dict[str, Any],
    provider_config_ref: Mapping[str, str],
    labels: Mapping[str, str] | None = None,
    ready_cel: str = "",
    derive_readiness: bool = False,
    references: Sequence[dict[str, Any]] | None = None,
    management_policies: Sequence[str] = (),
    watch: bool = False,
) -> dict[str, Any]:
    """A namespaced `Object` carrying `manifest` to the cluster the provider config reaches.

    Readiness: a CEL query over the remote object when given, else (when asked) derived
    from the remote object's own conditions, else provider-kubernetes' default.
    `watch`: provider-kubernetes watches the remote object and reconciles the Object as
    it changes, instead of at its next poll (`spec.watch`; honoured when the provider
    runs with `--enable-watches`, ignored otherwise). Every Object whose remote state a
    function reads must be watched: one whose readiness comes from the remote object and
    an Observe-only one are, whatever `watch` says; any other whose `status.atProvider`
    a function reads passes `watch=True` (an AdaptivePolicy copy's report, a cache's
    volume). The
    provider's poll is then only drift detection, and can be as slow as its default
    (10 minutes) without a cluster's readiness, inventory or gateway address waiting for
    it (docs/operating.md, "Reconciles that follow changes").
    """
    watch = watch or bool(ready_cel) or derive_readiness or tuple(management_policies) == OBSERVE
    spec: dict[str, Any] = {
        "forProvider": {"manifest": manifest},
        "providerConfigRef": dict(provider_config_ref),
    }
    if management_policies:
        spec["managementPolicies"] = list(management_policies)
    if ready_cel:
        spec["readiness"] = {"policy": "DeriveFromCelQuery", "celQuery": ready_cel}
    elif derive_readiness:
        spec["readiness"] = {"policy": "DeriveFromObject"}
    if references:
        spec["references"] = list(references)
    if watch:
        spec["watch"] = True
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": OBJECT_API_VERSION,
        "kind": OBJECT_KIND,
        "metadata": metadata,
        "spec": spec,
    }
