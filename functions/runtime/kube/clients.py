"""Kubernetes clients for the runtime: a member by token, by kubeconfig, or in cluster.

Which credentials reach which API server is decided by the caller; this module only
builds the client, so every wing talks to Kubernetes the same way.
"""

from __future__ import annotations

from kubernetes import client, config


def token_client(server: str, token: str, ca_file: str | None = None) -> client.ApiClient:
    """A client for `server` (https://host:port) with a bearer token.

    Without `ca_file` the server's certificate is not verified: only for API servers
    on loopback in tests.
    """
    configuration = client.Configuration()
    configuration.host = server
    configuration.api_key = {"authorization": token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    if ca_file:
        configuration.ssl_ca_cert = ca_file
    else:
        configuration.verify_ssl = False
    return client.ApiClient(configuration)


def kubeconfig_client(path: str, context: str | None = None) -> client.ApiClient:
    """A client from a kubeconfig file (a member's access, e.g. from its ClusterProfile)."""
    return config.new_client_from_config(config_file=path, context=context)


def in_cluster_client() -> client.ApiClient:
    """A client for the cluster this pod runs in, with its service account."""
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
