"""Reading a TelemetryDestination: every user string that reaches the gateway config is
checked, errors name the field and the rule, and the oldest destination wins."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.common.telemetrydestination import (
    DestinationIdentity,
    ExporterType,
    InvalidDestination,
    active_destination,
    parse_destination,
)
from functions.compose_telemetry import gateway

TOKEN = {"name": "fleet-token", "namespace": "crossplane-system", "key": "token"}


def xr(exporter=None, gateway=None, **spec):
    return {
        "metadata": {"name": "fleet", "creationTimestamp": "2026-11-02T09:00:00Z"},
        "spec": {
            "gateway": gateway
            or {
                "providerConfigRef": {"name": "control-plane"},
                "endpoint": "telemetry.example.com:4317",
                "tokenSecretRef": TOKEN,
            },
            "exporter": exporter or {"type": "OTLPGRPC", "endpoint": "otlp.example.com:4317"},
            **spec,
        },
    }


def errors_of(resource) -> list[str]:
    with pytest.raises(InvalidDestination) as caught:
        parse_destination(resource)
    return caught.value.errors


def test_reads_a_complete_destination():
    parsed = parse_destination(
        xr(
            {
                "type": "PrometheusRemoteWrite",
                "endpoint": "https://prom.example.com/api/v1/write",
                "headers": [{"name": "Authorization", "secretKeyRef": TOKEN}],
            },
            slo={"timeToFirstToken": 0.5},
        )
    )
    assert parsed.exporter.type is ExporterType.PROMETHEUS_REMOTE_WRITE
    assert parsed.exporter.headers[0].name == "Authorization"
    assert parsed.gateway.replicas == 2
    assert parsed.slo.time_to_first_token == 0.5
    assert parsed.slo.time_per_output_token is None
    assert parsed.rollup_enabled


def test_replicas_arrive_as_floats_from_protobuf_and_read_as_integers():
    gateway = xr()["spec"]["gateway"] | {"replicas": 3.0}
    assert parse_destination(xr(gateway=gateway)).gateway.replicas == 3


@pytest.mark.parametrize(
    ("exporter", "field", "rule"),
    [
        (
            {"type": "OTLPGRPC", "endpoint": "https://otlp.example.com:4317"},
            "spec.exporter.endpoint",
            "is not host:port",
        ),
        (
            {"type": "OTLPHTTP", "endpoint": "otlp.example.com:4318"},
            "spec.exporter.endpoint",
            "is not an http:// or https:// URL",
        ),
        (
            {"type": "OTLPHTTP", "endpoint": "https://x.example.com/${env:SECRET}"},
            "spec.exporter.endpoint",
            "must not contain",
        ),
        (
            {"type": "OTLPHTTP", "endpoint": 'https://x.example.com/"\n  evil: 1'},
            "spec.exporter.endpoint",
            "must not contain",
        ),
        (
            {"type": "PrometheusRemoteWrite", "endpoint": "https://user:pw@x.example.com/write"},
            "spec.exporter.endpoint",
            "must not carry credentials",
        ),
        (
            {"type": "PrometheusRemoteWrite", "endpoint": "http://x.example.com/write"},
            "spec.exporter.endpoint",
            "plain text",
        ),
        (
            {"type": "OTLPHTTP", "endpoint": "https://["},
            "spec.exporter.endpoint",
            "is not a URL",
        ),
        (
            {"type": "OTLPGRPC", "endpoint": "otlp.example.com:99999"},
            "spec.exporter.endpoint",
            "outside 1-65535",
        ),
        (
            {"type": "Kafka", "endpoint": "otlp.example.com:4317"},
            "spec.exporter.type",
            "is not one of OTLPGRPC, OTLPHTTP, PrometheusRemoteWrite",
        ),
        (
            {
                "type": "OTLPGRPC",
                "endpoint": "otlp.example.com:4317",
                "headers": [{"name": "x: y\nz", "secretKeyRef": TOKEN}],
            },
            "spec.exporter.headers[0].name",
            "is not a header name",
        ),
        (
            {
                "type": "OTLPGRPC",
                "endpoint": "otlp.example.com:4317",
                "headers": [
                    {"name": "X-Key", "secretKeyRef": TOKEN},
                    {"name": "x-key", "secretKeyRef": TOKEN},
                ],
            },
            "spec.exporter.headers[1].name",
            "listed twice",
        ),
        (
            {
                "type": "OTLPGRPC",
                "endpoint": "otlp.example.com:4317",
                "headers": [{"name": "Content-Type", "secretKeyRef": TOKEN}],
            },
            "spec.exporter.headers[0].name",
            "set by the exporter itself",
        ),
        (
            {
                "type": "OTLPGRPC",
                "endpoint": "otlp.example.com:4317",
                "headers": [{"name": "X-Key", "secretKeyRef": {"name": "s", "namespace": "n"}}],
            },
            "spec.exporter.headers[0].secretKeyRef.key",
            "is required",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_refuses_an_exporter_naming_the_field_and_rule(exporter, field, rule):
    errors = errors_of(xr(exporter))
    assert any(e.startswith(f"{field}: ") and rule in e for e in errors), errors


def test_plain_http_is_allowed_when_asked_for_explicitly():
    exporter = {
        "type": "PrometheusRemoteWrite",
        "endpoint": "http://127.0.0.1:9090/api/v1/write",
        "tls": {"insecure": True},
    }
    assert parse_destination(xr(exporter)).exporter.tls.insecure


@pytest.mark.parametrize("bad", [0, -0.5, float("inf"), float("nan"), "fast", True])
def test_slo_targets_must_be_positive_seconds(bad):
    errors = errors_of(xr(slo={"timeToFirstToken": bad}))
    assert any(e.startswith("spec.slo.timeToFirstToken: ") for e in errors), errors


def test_reports_every_error_at_once():
    gateway = {"providerConfigRef": {}, "endpoint": "not a host", "tokenSecretRef": {}}
    errors = errors_of(xr({"type": "OTLPGRPC", "endpoint": ""}, gateway=gateway))
    fields = {e.split(": ")[0] for e in errors}
    assert {
        "spec.gateway.providerConfigRef.name",
        "spec.gateway.endpoint",
        "spec.gateway.tokenSecretRef.name",
        "spec.gateway.tokenSecretRef.namespace",
        "spec.gateway.tokenSecretRef.key",
        "spec.exporter.endpoint",
    } <= fields


def test_the_oldest_destination_wins():
    older = DestinationIdentity("zeta", "2026-01-01T00:00:00Z")
    newer = DestinationIdentity("alpha", "2026-06-01T00:00:00Z")
    assert active_destination([newer, older]) == older


def test_a_tie_on_creation_time_goes_to_the_first_name():
    a = DestinationIdentity("a", "2026-01-01T00:00:00Z")
    b = DestinationIdentity("b", "2026-01-01T00:00:00Z")
    assert active_destination([b, a]) == a


def test_a_destination_without_a_timestamp_never_displaces_a_persisted_one():
    persisted = DestinationIdentity("zzz", "2026-01-01T00:00:00Z")
    unsaved = DestinationIdentity("aaa", "")
    assert active_destination([unsaved, persisted]) == persisted


identities = st.builds(
    DestinationIdentity,
    st.text("abc-", min_size=1, max_size=4),
    st.sampled_from(["", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2025-12-31T23:59:59Z"]),
)


@given(st.lists(identities, min_size=1, max_size=6, unique_by=lambda d: d.name), st.randoms())
def test_every_destination_agrees_on_the_winner_whatever_order_it_sees(destinations, rng):
    shuffled = list(destinations)
    rng.shuffle(shuffled)
    assert active_destination(shuffled) == active_destination(destinations)


endpoint_text = st.text(
    alphabet=st.characters(codec="ascii", exclude_categories=("Cc",)) | st.sampled_from("\n\t "),
    max_size=40,
)


@given(
    st.sampled_from(["OTLPGRPC", "OTLPHTTP", "PrometheusRemoteWrite"]),
    st.one_of(endpoint_text, endpoint_text.map(lambda t: "https://" + t)),
    st.text(max_size=20),
)
def test_whatever_a_user_writes_the_config_keeps_its_shape(kind, endpoint, header):
    """A string that gets past parsing cannot change the structure of the gateway config
    or expand an environment variable in it."""
    exporter = {
        "type": kind,
        "endpoint": endpoint,
        "tls": {"insecure": True},
        "headers": [{"name": header, "secretKeyRef": TOKEN}],
    }
    try:
        parsed = parse_destination(xr(exporter))
    except InvalidDestination:
        return
    config = gateway.render_exporter(parsed.exporter)
    assert config["endpoint"] == endpoint
    assert "${" not in endpoint
    assert list(config["headers"]) == [header]
    assert config["headers"][header] == "${env:MODELPLANE_EXPORTER_HEADER_0}"
