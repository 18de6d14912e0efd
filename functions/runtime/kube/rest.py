"""One raw request to a Kubernetes API server as a plain dict, for the paths the typed
client has no method for (custom resources by path, status subresources, server-side
apply with a field manager). Failures raise the client's own `ApiException`, with
`status`, `reason` and `body` as the typed methods raise it.
"""

import json

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"


def kube_request(
    api: ApiClient,
    method: str,
    path: str,
    *,
    query: list[tuple[str, str]] | None = None,
    body: dict | None = None,
    content_type: str | None = None,
    timeout: float | None = None,
) -> dict:
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type or "application/json"
    method, url, headers, serialized, _ = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(
        method, url, header_params=headers, body=serialized, _request_timeout=timeout
    )
    response.read()
    text = response.data.decode("utf-8") if response.data else ""
    if not 200 <= response.status <= 299:
        raise ApiException.from_response(http_resp=response, body=text, data=None)
    return json.loads(text) if text else {}
