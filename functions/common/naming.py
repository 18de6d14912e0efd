"""Stable names and hashes.

A composed resource's key is its identity: Crossplane deletes and recreates the remote
object when the key changes. Every key and every generated name is built here, from
sorted, explicit parts, so the same input always yields the same name.
"""

import hashlib
import json
import re
from typing import Any

_DNS_LABEL_MAX = 63
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


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
