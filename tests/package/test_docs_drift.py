"""What the docs state that the code decides, checked against the code (issue 44): the
Go release the tools need, the alerts the package ships, the names the docs use."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = (REPO / "README.md", *sorted(DOCS.glob("*.md")))


def _go_min() -> str:
    match = re.search(r"^GO_MIN=(\S+)$", (REPO / "hack" / "tools.sh").read_text(), re.MULTILINE)
    assert match, "hack/tools.sh sets no GO_MIN"
    return match.group(1)


def test_the_go_requirement_is_the_one_the_tools_need():
    """Every page that names a Go release names hack/tools.sh's GO_MIN, and GO_MIN is at
    least the `go` directive of every pinned module the tool scripts say they build."""
    want = _go_min()
    for page in PAGES:
        for found in re.findall(r"Go ≥ ([0-9.]+)", page.read_text()):
            assert found == want, (
                f"{page.relative_to(REPO)} asks for Go ≥ {found}, tools need {want}"
            )
    needed = set()
    for script in (REPO / "hack" / "tools").glob("*.sh"):
        needed |= set(re.findall(r"go\.mod says go ([0-9]+\.[0-9]+)", script.read_text()))
    assert needed, "no tool script states its module's go directive"
    as_tuple = lambda v: tuple(int(p) for p in v.split("."))  # noqa: E731
    assert max(needed, key=as_tuple) == want


def _alerts() -> set[str]:
    names = set()
    for path in ("prometheus-rules.yaml", "prometheusrule.yaml"):
        doc = yaml.safe_load((REPO / "package" / path).read_text())
        groups = doc.get("groups") or (doc.get("spec") or {}).get("groups") or []
        names |= {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    return names


def test_every_alert_is_documented_on_the_operating_page_and_in_the_runbook():
    alerts = _alerts()
    assert len(alerts) == 12
    operating = (DOCS / "operating.md").read_text()
    section = operating[operating.index("## Alerts") : operating.index("## The `modelplane` CLI")]
    runbook = (DOCS / "runbook.md").read_text()
    missing = sorted(a for a in alerts if f"`{a}`" not in section)
    assert not missing, f"docs/operating.md's Alerts section does not name {missing}"
    missing = sorted(a for a in alerts if f"### `{a}`" not in runbook)
    assert not missing, f"docs/runbook.md has no section for {missing}"


def test_plumb_and_podmonitor_are_explained_where_the_docs_use_them():
    runtime = (DOCS / "runtime.md").read_text()
    assert "**Plumb** is this runtime's name" in runtime
    for page in PAGES:
        text = page.read_text()
        if "PodMonitor" in text:
            assert "Prometheus Operator" in text, (
                f"{page.relative_to(REPO)} names PodMonitor unexplained"
            )
