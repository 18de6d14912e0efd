"""Stable names and hashes, always within the API server's limits.

A composed resource's key is its identity: Crossplane deletes and recreates the remote
object when the key changes. Every key and every generated name is built here, from
sorted, explicit parts, so the same input always yields the same name.

Every name and label value a function composes from user input goes through one of these
helpers, so it is valid for any valid input (a 253-character deployment name, a dotted
one) and shortened the same way everywhere: a readable prefix and a hash of the full
text. A reader that selects by a label (compose-serving-stack's ModelReplicas by
cluster) builds the value with the same helper.
"""

import hashlib
import json
import re
from typing import Any

from functions.common.contracts import LABEL_DEPLOYMENT

_DNS_LABEL_MAX = 63
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
LABEL_VALUE_MAX = 63
# Kubernetes' label value rule (apimachinery validation.IsValidLabelValue).
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
# An RFC 1123 label: what an InferenceCluster's name must be (see cluster_name_problem).
DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN_MAX = 253
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_object_name(name: object) -> bool:
    """Whether `name` can name a namespaced object (an RFC 1123 subdomain)."""
    return (
        isinstance(name, str)
        and len(name) <= DNS_SUBDOMAIN_MAX
        and _DNS_SUBDOMAIN.fullmatch(name) is not None
    )


def stable_hash(value: Any, length: int = 10) -> str:
    """A short hex digest of a JSON-able value, independent of dict ordering."""
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def dns_label(*parts: str, max_length: int = _DNS_LABEL_MAX) -> str:
    """Join parts into a valid DNS-1123 label; long names keep a hash of the full name."""
    joined = "-".join(p for p in parts if p)
    name = _NOT_DNS.sub("-", joined.lower()).strip("-")
    if len(name) <= max_length and name == joined:
        return name
    # Lossy or too long: keep a readable prefix and make it unique with a hash of the
    # original, so two different inputs never collapse onto one object.
    suffix = stable_hash(joined, 8)
    prefix = name[: max_length - len(suffix) - 1].rstrip("-")
    return f"{prefix}-{suffix}" if prefix else suffix


def resource_key(*parts: str) -> str:
    """The key of a composed resource in the desired state (its identity)."""
    return dns_label(*parts)


def is_label_value(value: object) -> bool:
    return (
        isinstance(value, str)
        and len(value) <= LABEL_VALUE_MAX
        and _LABEL_VALUE.fullmatch(value) is not None
    )


def label_value(value: str) -> str:
    """`value` as a label value: itself when valid, else shortened like `dns_label`."""
    return value if is_label_value(value) else dns_label(value)


def deployment_pod_selector(deployment: str) -> str:
    """The string-form label selector of a ModelDeployment's pods on every member: what
    its scale subresource reports (`status.labelSelector`), built from the same label
    value compose-model-replica stamps, so it matches them for any valid name."""
    return f"{LABEL_DEPLOYMENT}={label_value(deployment)}"


def service_name(*parts: str) -> str:
    """A Service's name: an RFC 1035 label, so it must also start with a letter."""
    name = dns_label(*parts)
    return name if name[:1].isalpha() else dns_label("svc", *parts)


SERVING_SERVICE_SUFFIX = "serving"


def serving_service_name(deployment: str) -> str:
    """The Service in front of a model's serving pods on a member (what the activator
    forwards to): `<deployment>-serving`, never the deployment's own name.

    The workload controllers name their headless Services after the workload, which is
    named after the deployment: the LeaderWorkerSet controller (subdomain policy
    `Shared`) gives every pod the subdomain `<lws>` and creates a headless Service of
    that name only when no Service of the name exists, never changing one that does;
    Grove names its headless Service `<podcliqueset>-<replica index>`, a name ending in
    a number, which `-serving` never does. A Service of ours under either name would
    leave the leader's address (`<lws>-0.<lws>.<ns>`, or Grove's) without DNS records."""
    return service_name(deployment, SERVING_SERVICE_SUFFIX)


def volume_name(*parts: str) -> str:
    """A pod volume's name (an RFC 1123 label), e.g. for a Secret whose name is longer."""
    return dns_label(*parts)


def cluster_name_problem(name: object) -> str | None:
    """Why `name` cannot be an InferenceCluster's name, or None when it can.

    One rule for every function that reads cluster names (compose-model-deployment
    places on them, compose-serving-stack installs them): an RFC 1123 label of at most
    63 characters, because the name is used whole as a label value, in the runtime's
    `--member NAME=PATH` flags, in AdaptivePolicy.spec.clusters and in the collector's
    resource attributes."""
    if not isinstance(name, str) or not name:
        return "is required"
    if len(name) > _DNS_LABEL_MAX or not DNS_LABEL_RE.fullmatch(name):
        # Not echoed: whatever was written there (a URL with a password) stays out of
        # conditions and events.
        return (
            f"must be a DNS label (lowercase letters, digits and '-', at most "
            f"{_DNS_LABEL_MAX} characters; no dots)"
        )
    return None
