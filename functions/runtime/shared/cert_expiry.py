"""Certificate expiry as a metric, read from disk at every scrape.

Every certificate a runtime process serves or presents — the scaler's serving certificate
and the CA its clients must be signed by, the client certificates and CAs in the peer
kubeconfigs the agent reaches other members with — is exported as
`modelplane_certificate_expiry_timestamp_seconds` (the notAfter time, Unix seconds), one
series per certificate in each file (a bundle's every certificate counts: the first to
expire is the one that breaks). Read at each scrape, never cached, so a certificate that
was renewed in place (a rotated Secret, a cert-manager renewal) is seen at the next
scrape without a restart, and an alert on it clears.

Labels are plain Prometheus label names — `component`, `file`, `subject` — so the alert
reads the same series whether Prometheus scrapes the process or the series arrives at the
destination through the collector (metric attributes pass through unchanged; the resource's
`service.name` becomes `job` and is not relied on).

A file that cannot be read or parsed exports no series for it and logs why: an absent
series is what the "target down" alerts already watch; a made-up expiry would be worse.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml
from cryptography import x509
from opentelemetry.metrics import CallbackOptions, Meter, Observation

CERTIFICATE_EXPIRY: Final = "modelplane_certificate_expiry_timestamp_seconds"
DESCRIPTION: Final = (
    "When a certificate this process serves or presents expires (notAfter, Unix seconds),"
    " read from disk at each scrape"
)

log = logging.getLogger("modelplane.runtime.cert_expiry")


@dataclass(frozen=True)
class Expiry:
    subject: str
    not_after: float  # Unix seconds


def pem_expiries(pem: bytes) -> list[Expiry]:
    """Every certificate in a PEM file or bundle, and when it expires."""
    certificates = x509.load_pem_x509_certificates(pem)
    return [
        Expiry(c.subject.rfc4514_string(), c.not_valid_after_utc.timestamp()) for c in certificates
    ]


@dataclass(frozen=True)
class PemFile:
    """A PEM certificate (or bundle) on disk: a serving certificate, a CA."""

    component: str
    path: Path

    def read(self) -> list[tuple[str, bytes]]:
        return [(str(self.path), self.path.read_bytes())]


@dataclass(frozen=True)
class KubeconfigFile:
    """The certificates a kubeconfig carries: each cluster's CA and each user's client
    certificate, inline (`*-data`) or by path (relative to the kubeconfig, as kubectl
    reads them)."""

    component: str
    path: Path

    def read(self) -> list[tuple[str, bytes]]:
        config = yaml.safe_load(self.path.read_text()) or {}
        found = []
        entries = [
            (c.get("cluster") or {}, "certificate-authority") for c in config.get("clusters") or []
        ] + [(u.get("user") or {}, "client-certificate") for u in config.get("users") or []]
        for entry, key in entries:
            if entry.get(f"{key}-data"):
                found.append((f"{self.path}#{key}-data", base64.b64decode(entry[f"{key}-data"])))
            elif entry.get(key):
                path = self.path.parent / entry[key]
                found.append((str(path), path.read_bytes()))
        return found


CertificateSource = PemFile | KubeconfigFile


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


def read_samples(sources: Iterable[CertificateSource]) -> list[Sample]:
    """One sample per certificate in every source, read now."""
    samples = []
    for source in sources:
        try:
            for file, pem in source.read():
                for expiry in pem_expiries(pem):
                    samples.append(
                        Sample(
                            {
                                "component": source.component,
                                "file": file,
                                "subject": expiry.subject,
                            },
                            expiry.not_after,
                        )
                    )
        except (OSError, ValueError, yaml.YAMLError) as err:
            log.warning("certificate expiry of %s not read: %s", source.path, err)
    return samples


class CertificateExpiryMetrics:
    """The gauge; its callback reads every source at each scrape."""

    def __init__(self, meter: Meter, sources: Sequence[CertificateSource]) -> None:
        self.sources = list(sources)
        meter.create_observable_gauge(CERTIFICATE_EXPIRY, [self._observe], description=DESCRIPTION)

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(s.value, s.labels) for s in read_samples(self.sources)]


def watch(metrics, sources: Sequence[CertificateSource]) -> CertificateExpiryMetrics | None:
    """Export the sources' expiry on a process's runtime metrics (when it serves any)."""
    from functions.runtime.shared.metrics import METER_NAME  # noqa: PLC0415

    if metrics is None or not sources:
        return None
    return CertificateExpiryMetrics(metrics.provider.get_meter(METER_NAME), sources)
