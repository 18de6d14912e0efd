"""The box's certificates: a CA and the pairs it signs, made with openssl.

Core dials our functions only with mTLS, KEDA dials our scaler with a client
certificate, and an aggregated API server is trusted through a CA bundle: each part
that needs a pair gets one from a CA of the box, written as the consumer mounts it.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass
class Certificates:
    """A CA under `root`, and the pairs it signs (core's client pair, one server pair
    per function address, ...)."""

    root: Path

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.ca_key = self.root / "ca.key"
        self.ca_crt = self.root / "ca.crt"
        _openssl("genrsa", "-out", str(self.ca_key), "2048")
        _openssl(
            "req", "-x509", "-new", "-key", str(self.ca_key), "-days", "2",
            "-subj", "/CN=modelplane-fleet-box-ca", "-out", str(self.ca_crt),
        )  # fmt: skip

    def pair(self, name: str, ip: str | None, usage: str) -> Path:
        """A folder holding tls.crt, tls.key and ca.crt, as core and the SDK read them."""
        folder = self.root / name
        folder.mkdir()
        key, csr, crt = folder / "tls.key", folder / "tls.csr", folder / "tls.crt"
        _openssl("genrsa", "-out", str(key), "2048")
        _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", str(csr))
        extensions = folder / "ext.cnf"
        lines = [f"extendedKeyUsage={usage}"]
        if ip:
            lines.append(f"subjectAltName=IP:{ip},DNS:{name}")
        extensions.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca_crt), "-CAkey",
            str(self.ca_key), "-CAcreateserial", "-days", "2", "-extfile", str(extensions),
            "-out", str(crt),
        )  # fmt: skip
        shutil.copy(self.ca_crt, folder / "ca.crt")
        return folder


__all__ = ["Certificates"]
