"""docs/runbook.md has a section for every alert the package ships and for every reason
a condition or Event of ours can carry when something needs a look — so it cannot fall
behind the code.

Reasons are found in the source (every `REASON_*` / `EVENT_*` string constant under
functions/), so a new one fails this test until it is either given a runbook section or
named here as a healthy / in-progress reason that needs none.
"""

import re

import yaml

from tests.conftest import REPO

RUNBOOK = REPO / "docs" / "runbook.md"
RULES = REPO / "package" / "prometheusrule.yaml"

# Reasons that say things are fine or progressing as they should: no action, no section.
HEALTHY = frozenset(
    {
        "Adopted",
        "Available",
        "Complete",
        "Composed",
        "Creating",
        "FirstRevision",
        "InWave",
        "KeptLastGood",
        "NewRevision",
        "NoneDesired",
        "NotInWaveYet",
        "NotParked",
        "NothingServing",
        "Observed",
        "OldestDestination",
        "Progressing",
        "Ready",
        "RolledOut",
        "Running",
        "Scheduled",
        "Serving",
        "Valid",
        "WaitingForDestinations",
        "WavePassed",
        "WaveStarted",
        # LoRA adapters: staged where the base runs, downloads in progress, loaded.
        "Staged",
        "Staging",
        "AdaptersLoaded",
    }
)

# The activator's answers added by issue #34 (functions/runtime/activator/core.py), whose
# runbook sections are written with the docs rewrite (docs/ is being rewritten; the
# meaning and the action for each are in that change's notes). Kept apart from HEALTHY:
# these need a section, and this set must empty, not grow.
PENDING_SECTIONS: frozenset[str] = frozenset()

CONSTANT = re.compile(r'^(?:REASON|EVENT)_[A-Z_]+\s*(?::\s*[\w\[\]]+)?\s*=\s*"([A-Za-z]+)"', re.M)
HEADING = re.compile(r"^#{2,6} `([A-Za-z]+)`\s*$", re.M)


def reasons_in_source() -> set[str]:
    found = set()
    for path in (REPO / "functions").rglob("*.py"):
        found |= set(CONSTANT.findall(path.read_text()))
    return found


def shipped_alerts() -> set[str]:
    rule = yaml.safe_load(RULES.read_text())
    return {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}


def sections() -> set[str]:
    return set(HEADING.findall(RUNBOOK.read_text()))


def test_every_shipped_alert_has_a_runbook_section():
    alerts = shipped_alerts()
    assert len(alerts) >= 10
    assert alerts - sections() == set()


def test_every_warning_reason_has_a_runbook_section():
    reasons = reasons_in_source()
    # The scan sees the reasons we know are there (it is not silently finding nothing).
    assert {"Unplaceable", "RepeatedStartFailures", "ReleaseHeld", "ObservationFailed"} <= reasons
    assert reasons - HEALTHY - PENDING_SECTIONS - sections() == set()


def test_pending_sections_are_only_those_still_missing():
    # Once a section is written, its reason leaves PENDING_SECTIONS.
    assert PENDING_SECTIONS & sections() == set()
    assert reasons_in_source() >= PENDING_SECTIONS


def test_healthy_reasons_are_still_in_the_code():
    # A reason removed from the code is removed here too, so the list stays honest.
    assert reasons_in_source() >= HEALTHY


def test_every_cross_reference_in_the_runbook_lands_on_a_section():
    text = RUNBOOK.read_text()
    anchors = {name.lower() for name in sections()}
    links = set(re.findall(r"\]\(#([a-z0-9-]+)\)", text))
    assert links - anchors == set()
