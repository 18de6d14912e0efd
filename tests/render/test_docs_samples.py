"""Samples in the README and the docs are what the commands print (issue 44).

- The README's `make demo` summary: produced here by hack/demo.py's own `summarize` over
  the examples rendered as one fleet by the real functions under `crossplane render`
  (the `fleet` fixture, as `make demo` renders them). Every line the README shows (a `…`
  line stands for lines left out, a line ending in `…` for the rest of that line) is a
  line the demo prints, in the same order.
- `make fleet`'s members: the Kubeconfigs and "On each member" lists in docs/testing.md
  name exactly the members the fleet box starts (hack/fleetbox/members.py), the control
  plane first among the kubeconfigs.
- The `modelplane status` sample in docs/operating.md (the block after its marker):
  exactly what the CLI's summary and table print for the examples as rendered (the
  control plane's view of them before any member reports). Regenerate it with
  UPDATE_DOCS=1 and read the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import demo  # hack/, on sys.path through tests/conftest.py
from fleetbox.members import EXAMPLE_MEMBERS
from functions.runtime.operator import fleet_status

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TESTING = REPO / "docs" / "testing.md"
OPERATING = REPO / "docs" / "operating.md"
ELIDED = {"…", "..."}
UPDATE = os.environ.get("UPDATE_DOCS") == "1"


def _blocks(page: Path, lang: str = "text") -> list[list[str]]:
    blocks, current = [], None
    for line in page.read_text().splitlines():
        if current is None and line.strip() == f"```{lang}":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append(current)
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def _demo_block() -> list[str]:
    (block,) = [b for b in _blocks(README) if b and b[0].startswith("modelplane demo:")]
    return block


def test_the_readme_demo_sample_is_what_make_demo_prints(fleet):
    printed = demo.summarize(fleet).splitlines()
    at = 0
    for line in _demo_block():
        if line.strip() in ELIDED:
            continue
        # A line cut short with "…" shows the start of the printed line.
        prefix = line[:-1].rstrip() if line.endswith("…") else None
        try:
            if prefix is None:
                at = printed.index(line, at) + 1
            else:
                at = next(i for i in range(at, len(printed)) if printed[i].startswith(prefix)) + 1
        except (ValueError, StopIteration):
            raise AssertionError(
                f"README.md's `make demo` sample has a line the demo does not print "
                f"(after line {at} of its output):\n  {line}\nthe demo prints:\n"
                + "\n".join(printed)
            ) from None


def _fleet_sample() -> list[str]:
    (block,) = [b for b in _blocks(TESTING) if any(line.startswith("Kubeconfigs") for line in b)]
    return block


def _listed(block: list[str], title: str) -> list[str]:
    start = next(i for i, line in enumerate(block) if line.startswith(title))
    names = []
    for line in block[start + 1 :]:
        if line.startswith("    "):
            continue  # a member's pods
        match = re.match(r"^  ([a-z0-9-]+): ", line)
        if not match:
            break
        names.append(match.group(1))
    return names


def test_the_make_fleet_sample_names_the_members_the_box_starts():
    block = _fleet_sample()
    assert _listed(block, "On each member") == list(EXAMPLE_MEMBERS)
    assert _listed(block, "Kubeconfigs") == ["control-plane", *EXAMPLE_MEMBERS]


# --- `modelplane status` ------------------------------------------------------------------

STATUS_MARK = (
    "<!-- modelplane status over the rendered examples: tests/render/test_docs_samples.py -->"
)
STATUS_COMMAND = "$ modelplane status"


def _with_status(render) -> dict:
    """The XR as the control plane holds it: what was applied, with the status render
    printed."""
    return {**render.xr, "status": render.composite.get("status") or {}}


def status_sample(fleet) -> str:
    """What `modelplane status` prints for the examples as rendered: the CLI's own
    summary and table (functions/runtime/operator), over the kinds it lists."""
    summary = fleet_status.summarize(
        [_with_status(r) for r in fleet.of_kind("InferenceCluster")],
        [_with_status(r) for r in fleet.of_kind("ModelDeployment")],
        [_with_status(r) for r in fleet.of_kind("ModelReplica")],
    )
    return f"{STATUS_COMMAND}\n{fleet_status.render_table(summary)}"


def _status_block() -> str:
    lines = OPERATING.read_text().splitlines()
    at = lines.index(STATUS_MARK)
    assert lines[at + 1] == "```text", "the status sample's block follows its marker"
    end = lines.index("```", at + 2)
    return "\n".join(lines[at + 2 : end]) + "\n"


def test_the_status_sample_is_what_modelplane_status_prints(fleet):
    printed = status_sample(fleet)
    if UPDATE:
        text = OPERATING.read_text()
        text = text.replace(_status_block(), printed)
        OPERATING.write_text(text)
    assert _status_block() == printed, (
        "docs/operating.md's `modelplane status` sample is not what the CLI prints for the "
        "rendered examples; regenerate it with UPDATE_DOCS=1 .venv/bin/pytest "
        "tests/render/test_docs_samples.py and read the diff"
    )
