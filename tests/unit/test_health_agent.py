"""Start failures counted from what pods show: what counts, what does not, and that a
poll (or an agent restart) never counts the same failure twice."""

from types import SimpleNamespace

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from functions.common.contracts import ANNOTATION_DEFINITION_HASH, LABEL_SERVING
from functions.common.health import (
    HEALTH_RECORD_LABEL,
    KEY_LAST_ERROR,
    HealthRecord,
    health_record_name,
)
from functions.runtime.agent import health as agent_health
from functions.runtime.agent.health import (
    ANNOTATION_COUNTED,
    Counted,
    count_start_failures,
    current_definition,
    group_by_replica,
    record_object,
)
from functions.runtime.shared.policy import rfc3339

NOW = 1_800_000_000.0
DEF = "3f2a9c1d0b"


def pod(
    name="llm-0",
    *,
    uid=None,
    definition=DEF,
    ready=False,
    restarts=0,
    last_terminated=None,
    terminated=None,
    waiting=None,
    phase="Running",
    conditions=(),
    reason=None,
    created="2026-12-02T10:00:00Z",
):
    state = {}
    if terminated:
        state["terminated"] = terminated
    if waiting:
        state["waiting"] = waiting
    status = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}, *conditions],
        "containerStatuses": [
            {
                "name": "engine",
                "restartCount": restarts,
                "state": state or {"running": {}},
                "lastState": {"terminated": last_terminated} if last_terminated else {},
            }
        ],
    }
    if reason:
        status["reason"] = reason
    return {
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}",
            "namespace": "ml-team",
            "labels": {LABEL_SERVING: "llm-us-east-1"},
            "annotations": {ANNOTATION_DEFINITION_HASH: definition},
            "creationTimestamp": created,
        },
        "status": status,
    }


CRASH = {"exitCode": 1, "reason": "Error", "message": "unknown architecture 'kev'"}


def tally(pods, previous=None, counted=None, now=NOW, definition=DEF):
    return count_start_failures(previous, counted or Counted(), pods, definition, now)


def test_each_restart_before_ready_counts_once_across_polls():
    first = tally([pod(restarts=2, last_terminated=CRASH)])
    assert first.record.consecutive_start_failures == 2
    assert first.record.last_error == (
        "container engine exited 1 (Error) before ready: unknown architecture 'kev'"
    )
    again = tally([pod(restarts=2, last_terminated=CRASH)], first.record, first.counted)
    assert again.record.consecutive_start_failures == 2
    more = tally([pod(restarts=3, last_terminated=CRASH)], again.record, again.counted)
    assert more.record.consecutive_start_failures == 3


def test_a_container_killed_for_memory_before_ready_counts():
    oom = {"exitCode": 137, "reason": "OOMKilled"}
    result = tally([pod(restarts=1, last_terminated=oom)])
    assert result.record.consecutive_start_failures == 1
    assert "OOMKilled" in result.record.last_error


def test_a_failed_pod_that_is_not_restarted_counts_its_exit():
    result = tally([pod(phase="Failed", terminated=CRASH)])
    assert result.record.consecutive_start_failures == 1


def test_an_image_pull_failure_counts_once_per_pod():
    waiting = {"reason": "ImagePullBackOff", "message": "manifest unknown"}
    first = tally([pod(waiting=waiting)])
    assert first.record.consecutive_start_failures == 1
    assert first.record.last_error == (
        "image pull failed for container engine: ImagePullBackOff: manifest unknown"
    )
    again = tally([pod(waiting=waiting)], first.record, first.counted)
    assert again.record.consecutive_start_failures == 1


@pytest.mark.parametrize("reason", ["Unschedulable", "SchedulerError"])
@pytest.mark.parametrize(("pending_for", "counts"), [(60, 0), (899, 0), (900, 1), (3600, 1)])
def test_a_pod_that_cannot_be_scheduled_counts_only_after_fifteen_minutes(
    pending_for, counts, reason
):
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        "lastTransitionTime": rfc3339(NOW - pending_for),
    }
    result = tally([pod(conditions=[unschedulable], phase="Pending")])
    assert result.record.consecutive_start_failures == counts


@pytest.mark.parametrize(
    "lost",
    [
        {
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager"}
            ]
        },
        {
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
            ]
        },
        {"reason": "NodeLost", "phase": "Failed"},
        {"reason": "Evicted", "phase": "Failed"},
    ],
    ids=["node-gone", "preempted", "node-lost", "evicted"],
)
def test_pods_lost_to_their_node_or_preempted_are_not_start_failures(lost):
    result = tally([pod(restarts=1, terminated={"exitCode": 143, "reason": "Error"}, **lost)])
    assert result.record.consecutive_start_failures == 0


def test_a_replica_that_becomes_ready_resets_the_count():
    failing = tally([pod(restarts=4, last_terminated=CRASH)])
    assert failing.record.consecutive_start_failures == 4
    started = tally(
        [pod(restarts=4, last_terminated=CRASH), pod("llm-1", ready=True)],
        failing.record,
        failing.counted,
    )
    assert started.record.consecutive_start_failures == 0
    assert started.record.last_error == ""


def test_a_crash_after_the_pod_was_ready_is_not_a_start_failure():
    ready = tally([pod(ready=True)])
    crashed = tally([pod(restarts=1, last_terminated=CRASH)], ready.record, ready.counted)
    assert crashed.record.consecutive_start_failures == 0


def test_a_new_definition_starts_from_zero_and_old_pods_do_not_count():
    old = tally([pod(restarts=5, last_terminated=CRASH)])
    assert old.record.consecutive_start_failures == 5
    new = tally(
        [pod(restarts=7, last_terminated=CRASH), pod("llm-new", definition="aaaa", restarts=1)],
        old.record,
        old.counted,
        definition="aaaa",
    )
    assert new.record.definition_hash == "aaaa"
    assert new.record.consecutive_start_failures == 1


def test_counting_survives_an_agent_restart_through_the_annotation():
    first = tally([pod(restarts=2, last_terminated=CRASH)])
    obj = record_object("ml-team", "llm-us-east-1", first)
    restored = Counted.from_annotation(obj["metadata"]["annotations"][ANNOTATION_COUNTED])
    previous = HealthRecord.from_data(obj["data"])
    again = tally([pod(restarts=2, last_terminated=CRASH)], previous, restored)
    assert again.record.consecutive_start_failures == 2


def test_a_garbled_annotation_reads_as_nothing_counted():
    assert Counted.from_annotation("{not json") == Counted()
    assert Counted.from_annotation(None) == Counted()


def test_the_record_is_the_configmap_common_health_defines():
    obj = record_object("ml-team", "llm-us-east-1", tally([pod(restarts=1, last_terminated=CRASH)]))
    assert obj["kind"] == "ConfigMap"
    assert obj["metadata"]["name"] == health_record_name("llm-us-east-1")
    assert obj["metadata"]["labels"][HEALTH_RECORD_LABEL] == "true"
    assert obj["data"] == {
        "definitionHash": DEF,
        "consecutiveStartFailures": "1",
        "lastError": "container engine exited 1 (Error) before ready: unknown architecture 'kev'",
        "observedAt": rfc3339(NOW),
    }


def test_pods_are_grouped_by_model_replica_and_the_newest_pod_names_the_definition():
    a = pod("a", definition="old", created="2026-12-02T09:00:00Z")
    b = pod("b", definition="new", created="2026-12-02T10:00:00Z")
    assert current_definition([a, b]) == "new"
    assert list(group_by_replica([a, b])) == [("ml-team", "llm-us-east-1")]


# The largest hostile termination message tried: the kubelet's own cap (4 KiB) of
# terminal escapes, repeated across a poll and an agent restart.
HOSTILE_MESSAGE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07"  # OSC 52: write the clipboard
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b]0;pwned\x07"  # window title
    "\r\u202eevil\u2066"  # carriage return, bidi override and isolate
    "\x9b31m"  # C1 CSI
) * 200


def test_a_termination_message_is_stored_escaped_and_bounded():
    crash = {"exitCode": 1, "reason": "Error", "message": HOSTILE_MESSAGE[:4096] + "é" * 2000}
    first = tally([pod(restarts=1, last_terminated=crash)])
    stored = first.record.last_error
    assert stored.startswith("container engine exited 1 (Error) before ready: \\x1b]52;c;")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in stored)
    assert "\u202e" not in stored
    assert "\u2066" not in stored
    assert len(stored.encode()) <= 1024
    assert "…" in stored
    assert stored.endswith("é")  # the message's end is kept
    # Read back (the next poll, a restarted agent) it is stored the same: escaping is
    # idempotent and the bound holds.
    again = tally([pod(restarts=1, last_terminated=crash)], first.record, Counted())
    assert again.record.last_error == stored


def test_a_long_log_tail_keeps_the_engines_last_words():
    # FallbackToLogsOnError: the message is the log's last lines; the reason is at the end.
    log = "INFO loading weights\n" * 200 + "vllm: error: unrecognized arguments: --no-such-flag"
    crash = {"exitCode": 2, "reason": "Error", "message": log}
    stored = tally([pod(restarts=1, last_terminated=crash)]).record.last_error
    assert stored.startswith("container engine exited 2 (Error) before ready: INFO")
    assert stored.endswith("unrecognized arguments: --no-such-flag")
    assert len(stored.encode()) <= 1024


def test_a_short_message_is_kept_whole_with_its_escapes_visible():
    crash = {"exitCode": 1, "reason": "Error", "message": "bad\tweights\x1b[31m"}
    stored = tally([pod(restarts=1, last_terminated=crash)]).record.last_error
    assert stored == "container engine exited 1 (Error) before ready: bad\\tweights\\x1b[31m"


# A termination message that prints a credential (issue 44): the engine echoing its
# environment, an HTTP client logging its request, a key in a config dump.
CREDENTIAL_MESSAGES = {
    "env": ("HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUv rejected by the hub", "hf_AbCdEfGhIjKlMnOpQrStUv"),
    "header": ("GET /v1 401; Authorization: Bearer s3cr3tT0kenValue99", "s3cr3tT0kenValue99"),
    "json": ('config {"api_key": "plain-but-secret-1234"} invalid', "plain-but-secret-1234"),
    "url": ("pull s3://bucket/m?X-Amz-Signature=deadbeefcafe0123 failed", "deadbeefcafe0123"),
    "userinfo": ("connect https://admin:hunter2@db.internal failed", "hunter2"),
    "aws": ("AccessDenied for AKIAABCDEFGHIJKLMNOP", "AKIAABCDEFGHIJKLMNOP"),
}


@pytest.mark.parametrize("case", sorted(CREDENTIAL_MESSAGES))
def test_a_credential_in_a_termination_message_is_redacted_before_it_is_stored(case):
    message, secret = CREDENTIAL_MESSAGES[case]
    crash = {"exitCode": 1, "reason": "Error", "message": message}
    stored = tally([pod(restarts=1, last_terminated=crash)]).record.last_error
    assert secret not in stored
    assert "<redacted>" in stored
    assert stored.startswith("container engine exited 1 (Error) before ready: ")


def test_a_message_without_credentials_is_kept_as_written():
    text = "max_model_len=512 exceeds num_tokens: 256 (tokenizer=llama); monkey: 3"
    crash = {"exitCode": 1, "reason": "Error", "message": text}
    stored = tally([pod(restarts=1, last_terminated=crash)]).record.last_error
    assert stored.endswith(text)


def test_a_record_written_by_someone_else_is_redacted_when_read():
    """A health record lives in the tenant's namespace: one written there by hand (or by
    an older agent) is redacted when the functions and the CLI read it."""
    record = HealthRecord.from_data({KEY_LAST_ERROR: "boom: password=hunter2"})
    assert "hunter2" not in record.last_error
    status = HealthRecord.from_status({KEY_LAST_ERROR: "boom: password=hunter2"}, lambda v, p: 0)
    assert "hunter2" not in status.last_error


def test_a_record_the_agent_may_not_write_yet_does_not_stop_the_others(monkeypatch):
    """The agent may write a health record only by name, in a Role compose-serving-stack
    composes once it sees the replica (issue 44): a new replica's record is refused (403)
    until then, and every other replica's record is still written on the same pass."""

    def replica_pod(namespace, replica):
        body = pod(restarts=1, last_terminated=CRASH, name=f"{replica}-0")
        body["metadata"].update(namespace=namespace, labels={LABEL_SERVING: replica})
        return body

    api = ApiClient()
    pods = [replica_pod("team-new", "new-us-east-1"), replica_pod("team-old", "old-us-east-1")]
    core = SimpleNamespace(
        api_client=api,
        list_pod_for_all_namespaces=lambda **_: SimpleNamespace(items=pods),
        list_namespaced_pod=None,
        list_config_map_for_all_namespaces=lambda **_: SimpleNamespace(items=[]),
        list_namespaced_config_map=None,
    )
    written = []

    def kube_request(_api, method, path, **_):
        if "/team-new/" in path:
            raise ApiException(status=403, reason="Forbidden")
        written.append((method, path))
        return {}

    monkeypatch.setattr(agent_health, "kube_request", kube_request)
    records = agent_health.HealthAgent(core).sync(NOW)
    assert written == [
        ("PATCH", f"/api/v1/namespaces/team-old/configmaps/{health_record_name('old-us-east-1')}")
    ]
    assert records[("team-new", "new-us-east-1")].consecutive_start_failures == 1
