"""`crossplane beta validate`, offline, the one way every test tier runs it.

Offline means the Crossplane schema cache is the one hack/tools.sh laid out from the
Crossplane module; no registry is asked for anything. A kind without a schema fails
(`--error-on-missing-schemas`), so nothing passes by not being checked.
"""

import subprocess
from collections.abc import Sequence
from pathlib import Path

import render


def crossplane_validate(
    crossplane: Path, extensions: Sequence[Path], resources: Sequence[Path]
) -> subprocess.CompletedProcess:
    tools = render.tools_bin().parent
    image = (tools / "crossplane-image").read_text().strip()
    return subprocess.run(
        [
            str(crossplane),
            "beta",
            "validate",
            ",".join(str(e) for e in extensions),
            ",".join(str(r) for r in resources),
            f"--crossplane-image={image}",
            f"--cache-dir={tools / 'crossplane-validate-cache'}",
            "--error-on-missing-schemas",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
