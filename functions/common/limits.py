"""The API server's size limits, checked before an object is composed.

An object over a limit is refused with an error naming the input to shrink, never
composed to fail on apply (where the error reaches only the provider's Object, and the
previous version silently stays).

- A ConfigMap's data and binaryData together hold at most 1 MiB (keys and values, as
  the API server counts them: `validation.ValidateConfigMap`).
- A composed object travels inside a provider-kubernetes Object, which carries the
  manifest in `spec.forProvider.manifest` and the observed object again in
  `status.atProvider.manifest`; etcd accepts at most 1.5 MiB per request by default.
  So a manifest is held to COMPOSED_MANIFEST_MAX, under half of that.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

CONFIG_MAP_DATA_MAX: Final = 1024 * 1024
COMPOSED_MANIFEST_MAX: Final = 700 * 1024


class TooLarge(ValueError):
    """`what` would be `size` bytes, over `limit`; `shrink` names the input to shrink."""

    def __init__(self, what: str, size: int, limit: int, why: str, shrink: str) -> None:
        super().__init__(
            f"{what} would be {size:,} bytes, over the limit of {limit:,} ({why}); shrink {shrink}"
        )
        self.what = what
        self.size = size
        self.limit = limit
        self.shrink = shrink


def config_map_data_size(data: Mapping[str, str]) -> int:
    return sum(len(key) + len(value.encode()) for key, value in data.items())


def manifest_size(manifest: Mapping[str, Any]) -> int:
    return len(json.dumps(manifest, separators=(",", ":"), ensure_ascii=False).encode())


def check_config_map(what: str, manifest: Mapping[str, Any], shrink: str) -> None:
    """Raise TooLarge when a ConfigMap manifest is over either limit."""
    data = config_map_data_size(manifest.get("data") or {})
    if data > CONFIG_MAP_DATA_MAX:
        raise TooLarge(what, data, CONFIG_MAP_DATA_MAX, "a ConfigMap's data", shrink)
    whole = manifest_size(manifest)
    if whole > COMPOSED_MANIFEST_MAX:
        raise TooLarge(
            what, whole, COMPOSED_MANIFEST_MAX, "a manifest composed through an Object", shrink
        )
