"""`modelplane status | explain | retry | suggest` as an operator types them: which model a
command line names, what reaches the terminal, and what an API server that cannot be
reached or does not answer like one looks like (one line, no traceback).

The control plane is a stand-in here (its real reads are tests/runtime/test_operator_cli.py);
the unreachable and garbled servers are real sockets on loopback.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from functions.runtime.operator import cli, fleet_status, suggest
from functions.runtime.operator.cli import model_reference
from functions.runtime.operator.terminal import escape, escaped
from tests.conftest import REPO

ENTRYPOINT = [sys.executable, "-m", "functions.entrypoint"]
# A termination message that would set the clipboard (OSC 52, BEL-terminated), clear the
# screen and return the cursor, were it printed raw.
HOSTILE = "boom\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\rall good"
RAW_CONTROLS = ("\x1b", "\x07", "\r")


def parked(name: str, namespace: str = "ml-team", last_error: str = HOSTILE) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {},
        "status": {
            "desiredReplicas": 1,
            "placedReplicas": 0,
            "readyReplicas": 0,
            "placements": [],
            "parked": {
                "since": "2026-01-01T01:00:00Z",
                "failures": 5,
                "lastError": last_error,
                "definitionHash": "d9",
                "retry": "",
            },
        },
    }


class StandInPlane:
    """The control plane the commands read, holding ModelDeployments by (namespace, name)."""

    def __init__(self, *deployments: dict):
        self.deployments = {
            (d["metadata"]["namespace"], d["metadata"]["name"]): d for d in deployments
        }
        self.asked: list[tuple[str, str]] = []
        self.retried: list[tuple[str, str]] = []
        self.adapters: list[dict] = []

    def deployment(self, namespace: str, name: str) -> dict:
        self.asked.append((namespace, name))
        if (namespace, name) not in self.deployments:
            raise click.ClickException(f"no ModelDeployment {namespace}/{name}")
        return self.deployments[(namespace, name)]

    def replicas_of(self, namespace: str, name: str) -> list:
        return []

    def adapters_of(self, namespace: str, name: str) -> list:
        return [a for a in self.adapters if a["spec"]["deploymentRef"]["name"] == name]

    def clusters(self) -> list:
        return []

    def fleet(self, namespace: str | None) -> fleet_status.FleetStatus:
        return fleet_status.summarize([], list(self.deployments.values()), [])

    def set_retry(self, namespace: str, name: str, value: str) -> None:
        self.retried.append((namespace, name))


@pytest.fixture
def plane(monkeypatch) -> StandInPlane:
    stand_in = StandInPlane(parked("deepseek-v3"), parked("deepseek-v3", namespace="default"))
    monkeypatch.setattr(cli, "_plane", lambda ctx: stand_in)
    monkeypatch.setattr(cli, "_namespace_of", lambda kubeconfig, context: "default")
    return stand_in


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli.main, list(args), prog_name="modelplane")


# --- which model a command line names -------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "namespace", "named"),
    [
        ("deepseek-v3", None, (None, "deepseek-v3")),
        ("deepseek-v3", "ml-team", ("ml-team", "deepseek-v3")),
        ("ml-team/deepseek-v3", None, ("ml-team", "deepseek-v3")),
        ("ml-team/deepseek-v3", "ml-team", ("ml-team", "deepseek-v3")),
    ],
    ids=[
        "a_plain_name_is_in_the_contexts_namespace",
        "a_plain_name_takes_the_namespace_option",
        "namespace_slash_name_as_status_prints_it",
        "the_same_namespace_twice_is_fine",
    ],
)
def test_a_model_is_named_as_status_prints_it_or_by_name_and_namespace(model, namespace, named):
    assert model_reference(model, namespace) == named


def test_a_namespace_option_naming_another_namespace_is_refused():
    with pytest.raises(click.UsageError) as refused:
        model_reference("ml-team/deepseek-v3", "prod")
    assert "in namespace 'ml-team' but -n/--namespace says 'prod'" in str(refused.value)


@pytest.mark.parametrize("model", ["a/b/c", "/deepseek-v3", "ml-team/"])
def test_a_malformed_reference_is_refused_naming_the_forms(model):
    with pytest.raises(click.BadParameter) as refused:
        model_reference(model, None)
    assert "expected NAME or NAMESPACE/NAME" in str(refused.value)


@pytest.mark.parametrize("command", ["explain", "retry", "suggest"])
@pytest.mark.parametrize(
    ("args", "asked"),
    [
        (["ml-team/deepseek-v3"], ("ml-team", "deepseek-v3")),
        (["deepseek-v3", "-n", "ml-team"], ("ml-team", "deepseek-v3")),
        (["deepseek-v3"], ("default", "deepseek-v3")),
    ],
    ids=["namespace_slash_name", "name_and_namespace_option", "name_in_contexts_namespace"],
)
def test_every_model_command_reads_the_model_the_line_names(plane, command, args, asked):
    done = run(command, *args)
    assert done.exit_code == 0, done.output
    assert plane.asked == [asked]


def test_explain_with_a_conflicting_namespace_reads_nothing_and_says_why(plane):
    done = run("explain", "ml-team/deepseek-v3", "-n", "prod")
    assert done.exit_code == 2
    assert "ml-team/deepseek-v3 is in namespace 'ml-team' but -n/--namespace says 'prod'" in (
        done.output
    )
    assert plane.asked == []


def test_retry_unparks_the_model_status_names(plane):
    done = run("retry", "ml-team/deepseek-v3")
    assert done.exit_code == 0, done.output
    assert plane.retried == [("ml-team", "deepseek-v3")]
    assert "`modelplane explain ml-team/deepseek-v3`" in done.output


# --- what reaches the terminal ----------------------------------------------------------------


def test_escape_writes_every_control_character_as_its_escape():
    assert escape(HOSTILE) == "boom\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\rall good"
    assert escape("a\tb\nc\x00\x7f\x9b\u202e") == "a\\tb\\nc\\x00\\x7f\\x9b\\u202e"
    assert escape("ml-team/deepseek-v3 — ready ✓") == "ml-team/deepseek-v3 — ready ✓"
    assert escape(escape(HOSTILE)) == escape(HOSTILE)  # layers may each apply it


def test_escaped_reaches_every_string_in_a_summary():
    model = fleet_status.read_model(parked("x\x1b[2J"), [])
    shown = escaped(model)
    assert shown.name == "x\\x1b[2J"
    assert shown.parked.last_error == escape(HOSTILE)
    assert model.parked.last_error == HOSTILE  # the original is untouched


def _no_raw_controls(text: str) -> None:
    for control in RAW_CONTROLS:
        assert control not in text, repr(text)


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["explain", "ml-team/deepseek-v3"],
        ["retry", "ml-team/deepseek-v3"],
    ],
    ids=["status_table", "explain", "retry"],
)
def test_a_termination_message_reaches_the_terminal_escaped(plane, args):
    done = run(*args)
    assert done.exit_code == 0, done.output
    _no_raw_controls(done.output)
    assert "boom\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J\\rall good" in done.output


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_carry_the_message_exactly(plane, output):
    done = run("status", "-o", output)
    assert done.exit_code == 0, done.output
    document = json.loads(done.output) if output == "json" else yaml.safe_load(done.output)
    assert {p["lastError"] for p in document["parked"]} == {HOSTILE}
    _no_raw_controls(done.output)  # their encoders escape what a terminal would act on


def test_a_suggested_policy_escapes_names_in_its_comments_and_stays_a_valid_patch():
    text = suggest.render(parked("llm\x1b[2J\nspec: {}"), [])
    _no_raw_controls(text)
    assert "ModelDeployment ml-team/llm\\x1b[2J\\nspec: {}" in text
    assert list(yaml.safe_load(text)) == ["spec"]  # the name did not end its comment


# --- an API server that cannot be reached, or does not answer like one -----------------------


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "cp", "cluster": {"server": server}}],
                "users": [{"name": "op", "user": {"token": "t"}}],
                "contexts": [{"name": "cp", "context": {"cluster": "cp", "user": "op"}}],
                "current-context": "cp",
            }
        )
    )
    return path


def _modelplane(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ENTRYPOINT, "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def _one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("args", [["status"], ["explain", "ml-team/deepseek-v3"]])
def test_an_unreachable_api_server_is_one_line_and_a_failure(tmp_path, args):
    server = f"https://127.0.0.1:{_closed_port()}"
    line = _one_error_line(_modelplane(_kubeconfig(tmp_path, server), *args))
    assert f"cannot reach the API server at {server}: " in line
    assert "Connection refused" in line


class _Answer(http.server.BaseHTTPRequestHandler):
    """An HTTP server that is not a Kubernetes API server."""

    content_type = "text/html"
    body = b"<html>hello</html>"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


class _BrokenJson(_Answer):
    content_type = "application/json"
    body = b'{"items": [\x1b[2J'


class _NotAnObject(_Answer):
    content_type = "application/json"
    body = b'"a string, not an object"'


@pytest.fixture
def serving() -> Iterator:
    servers = []

    def serve(handler) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("handler", [_Answer, _BrokenJson, _NotAnObject])
def test_an_http_server_that_is_not_an_api_server_is_one_line(tmp_path, serving, handler):
    server = serving(handler)
    line = _one_error_line(_modelplane(_kubeconfig(tmp_path, server), "status"))
    assert f"listing inferenceclusters: {server} answered with something that is not" in line


class _Busy(_Answer):
    """An API server shedding load: `busy` answers of 429 with Retry-After, then lists."""

    busy = 0

    def do_GET(self):
        if type(self).busy > 0:
            type(self).busy -= 1
            self.send_response(429)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
            return
        body = b'{"apiVersion": "v1", "kind": "List", "items": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_busy_api_servers_retry_after_is_waited_out(tmp_path, serving, monkeypatch):
    monkeypatch.setattr(_Busy, "busy", 2)
    done = _modelplane(_kubeconfig(tmp_path, serving(_Busy)), "status", "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["modelList"] == []


def test_an_api_server_that_stays_busy_is_one_line(tmp_path, serving, monkeypatch):
    monkeypatch.setattr(_Busy, "busy", 100)
    line = _one_error_line(_modelplane(_kubeconfig(tmp_path, serving(_Busy)), "status"))
    assert line == "Error: listing inferenceclusters: 429 Too Many Requests"


@pytest.fixture
def raw_server() -> Iterator:
    """A TCP server that answers every connection with `reply` (b"": says nothing)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    reply: list[bytes] = [b""]
    held: list[socket.socket] = []

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            if reply[0]:
                conn.recv(65536)
                conn.sendall(reply[0])
                conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", reply
    listener.close()
    for conn in held:
        conn.close()


def test_a_server_that_answers_garbage_is_one_line(tmp_path, raw_server):
    server, reply = raw_server
    reply[0] = b"\x1b]0;owned\x07 not http at all\r\n\r\n"
    line = _one_error_line(_modelplane(_kubeconfig(tmp_path, server), "status"))
    assert f"{server} did not answer in HTTP; is this the control plane's API server?" in line
    assert "\x1b" not in line


def test_a_server_that_never_answers_is_one_line_after_the_read_timeout(
    tmp_path, raw_server, monkeypatch
):
    server, _ = raw_server  # accepts, then says nothing
    monkeypatch.setattr(cli, "READ_TIMEOUT_SECONDS", 0.5)
    done = CliRunner().invoke(
        cli.main, ["--kubeconfig", str(_kubeconfig(tmp_path, server)), "status"]
    )
    assert done.exit_code == 1
    assert done.output.splitlines() == [
        f"Error: listing inferenceclusters: the API server at {server} took the connection "
        "but did not answer within 0.5s"
    ]


def test_explain_of_an_on_demand_model_says_how_it_starts_and_escapes_the_attempt(monkeypatch):
    idle = {
        "metadata": {"name": "sometimes", "namespace": "ml-team"},
        "spec": {"onDemand": {"idleAfter": "30m"}},
        "status": {
            "desiredReplicas": 0,
            "onDemand": {
                "state": "Idle",
                "activatedAt": "2026-01-01T00:00:00Z",
                "attempt": {"id": "m/1", "result": "Parked", "reason": HOSTILE, "at": "t"},
            },
        },
    }
    monkeypatch.setattr(cli, "_plane", lambda ctx: StandInPlane(idle))
    done = run("explain", "ml-team/sometimes")
    assert done.exit_code == 0, done.output
    assert "on demand: idle, scaled to zero" in done.output
    assert "the first request through the inference Gateway activates it" in done.output
    assert "last placement attempt m/1 at t: Parked: boom" in done.output
    assert not any(c in done.output for c in RAW_CONTROLS)


def test_explain_lists_the_models_adapters_and_why_one_is_not_staged(plane):
    plane.adapters = [
        {
            "metadata": {"name": "llama-8b-sql", "namespace": "ml-team"},
            "spec": {"deploymentRef": {"name": "deepseek-v3"}, "rank": 8},
            "status": {
                "servedName": "text-to-sql",
                "selectedClusters": 2,
                "stagedClusters": 1,
                "clusters": [
                    {"cluster": "eu-west-1", "phase": "Downloading"},
                    {
                        "cluster": "us-east-1",
                        "phase": "Ready",
                        "loadedReplicas": 1,
                        "replicas": 2,
                        "loadError": "loading text-to-sql: 404 No adapter found",
                    },
                ],
                "conditions": [
                    {
                        "type": "AdapterReady",
                        "status": "False",
                        "reason": "Staging",
                        "message": "eu-west-1: Downloading (a pod is downloading)\x1b[2J",
                    }
                ],
            },
        }
    ]
    done = run("explain", "ml-team/deepseek-v3")
    assert done.exit_code == 0, done.output
    assert "  adapters (1):" in done.output
    assert (
        "    text-to-sql (ModelAdapter llama-8b-sql, rank 8): staged on 1 of 2 clusters — "
        "Staging: eu-west-1: Downloading (a pod is downloading)\\x1b[2J"
    ) in done.output
    assert (
        "      us-east-1: loaded on 1 of 2 replicas — loading text-to-sql: 404 No adapter found"
    ) in done.output
    assert "eu-west-1: loaded" not in done.output
    _no_raw_controls(done.output)
