"""Certificate expiry read from disk at each scrape (functions/runtime/shared/cert_expiry.py),
through the OpenTelemetry SDK the runtime exports with."""

from __future__ import annotations

import base64
import datetime as dt

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from functions.runtime.shared.cert_expiry import (
    CERTIFICATE_EXPIRY,
    CertificateExpiryMetrics,
    KubeconfigFile,
    PemFile,
    read_samples,
)

START = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def certificate(common_name: str, days: int) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(START)
        .not_valid_after(START + dt.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def scrape(reader: InMemoryMetricReader) -> dict[str, float]:
    found = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == CERTIFICATE_EXPIRY:
                    for point in metric.data.data_points:
                        found[point.attributes["subject"]] = point.value
    return found


def test_a_certificate_renewed_on_disk_is_seen_at_the_next_scrape(tmp_path):
    path = tmp_path / "tls.crt"
    path.write_bytes(certificate("scaler", 10))
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    CertificateExpiryMetrics(provider.get_meter("test"), [PemFile("scaler", path)])
    assert scrape(reader) == {"CN=scaler": (START + dt.timedelta(days=10)).timestamp()}
    path.write_bytes(certificate("scaler", 90))  # renewed in place, no restart
    assert scrape(reader) == {"CN=scaler": (START + dt.timedelta(days=90)).timestamp()}


def test_every_certificate_of_a_bundle_is_a_series_labelled_as_the_alert_reads_it(tmp_path):
    path = tmp_path / "ca.crt"
    path.write_bytes(certificate("old-ca", 5) + certificate("new-ca", 365))
    samples = read_samples([PemFile("scaler", path)])
    assert [s.labels for s in samples] == [
        {"component": "scaler", "file": str(path), "subject": "CN=old-ca"},
        {"component": "scaler", "file": str(path), "subject": "CN=new-ca"},
    ]


def test_a_kubeconfig_yields_its_ca_and_client_certificates_inline_or_by_path(tmp_path):
    (tmp_path / "client.crt").write_bytes(certificate("peer-client", 30))
    config = {
        "clusters": [
            {
                "name": "eu-west-1",
                "cluster": {
                    "server": "https://eu-west-1:6443",
                    "certificate-authority-data": base64.b64encode(
                        certificate("member-ca", 3650)
                    ).decode(),
                },
            }
        ],
        "users": [{"name": "peer", "user": {"client-certificate": "client.crt"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    samples = read_samples([KubeconfigFile("agent", path)])
    assert {s.labels["subject"]: s.labels["file"] for s in samples} == {
        "CN=member-ca": f"{path}#certificate-authority-data",
        "CN=peer-client": str(tmp_path / "client.crt"),
    }


def test_an_unreadable_file_exports_no_series_and_the_others_still_do(tmp_path):
    good = tmp_path / "good.crt"
    good.write_bytes(certificate("good", 10))
    broken = tmp_path / "broken.crt"
    broken.write_text("not a certificate")
    samples = read_samples(
        [
            PemFile("scaler", tmp_path / "missing.crt"),
            PemFile("scaler", broken),
            PemFile("scaler", good),
        ]
    )
    assert [s.labels["subject"] for s in samples] == ["CN=good"]
