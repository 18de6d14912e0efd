"""The kubelet's rules the pod runner starts containers by (hack/fleetbox/kubelet_rules.py), held
to Kubernetes v1.35's documented behaviour: the expansion cases are those of
third_party/forked/golang/expansion/expand_test.go; the environment and command cases
follow pkg/kubelet/kubelet_pods.go makeEnvironmentVariables and the API reference ("Variable
references $(VAR_NAME) are expanded using the previously defined environment variables in
the container and any service environment variables").
"""

from __future__ import annotations

import pytest

from fleetbox.kubelet_rules import (
    Addresses,
    ContainerConfigError,
    EnvSources,
    Image,
    command_line,
    container_env,
    expand,
    field_ref_value,
    go_quote,
    resource_field_value,
    service_env,
)

# --- expansion: expand_test.go's table, against its two contexts --------------------------

CONTEXT = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}

EXPANSION_CASES = [
    ("whole_string", "$(VAR_A)", "A"),
    ("repeat", "$(VAR_A)-$(VAR_A)", "A-A"),
    ("beginning", "$(VAR_A)-1", "A-1"),
    ("middle", "___$(VAR_B)___", "___B___"),
    ("end", "___$(VAR_C)", "___C"),
    ("compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("escape_and_expand", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("compound_escape", "$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
    ("mixed_in_escapes", "f000-$$VAR_A", "f000-$VAR_A"),
    ("backslash_escape_ignored", "foo\\$(VAR_C)bar", "foo\\Cbar"),
    ("double_backslash_ignored", "foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
    ("lots_of_backslashes", "foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
    ("nested_references_stay", "$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    ("nested_references_second_type_stay", "$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("a_value_that_is_a_reference_is_not_expanded_again", "$(VAR_REF)", "$(VAR_A)"),
    ("reference_value_twice", "%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
    ("empty_variable", "foo$(VAR_EMPTY)bar", "foobar"),
    ("unterminated_expression", "foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    ("expression_without_operator", "f00__(VAR_A)__", "f00__(VAR_A)__"),
    ("shell_special_vars_pass_through", "$?_boo_$!", "$?_boo_$!"),
    ("bare_operators_are_ignored", "$VAR_A", "$VAR_A"),
    ("undefined_vars_are_passed_through", "$(VAR_DNE)", "$(VAR_DNE)"),
    ("even_operators_var_undefined", "$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("even_operators_var_defined", "$$$$$$(VAR_A)", "$$$(VAR_A)"),
    ("odd_operators_var_undefined", "$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("odd_operators_var_defined", "$$$$$$$(VAR_A)", "$$$A"),
    ("missing_open_expression", "$VAR_A)", "$VAR_A)"),
    ("shell_syntax_ignored", "${VAR_A}", "${VAR_A}"),
    ("trailing_incomplete_expression_not_consumed", "$(VAR_B)_______$(A", "B_______$(A"),
    ("trailing_empty_incomplete_expression_not_consumed", "$(VAR_C)_______$(", "C_______$("),
    ("operator_at_end_is_preserved", "$(VAR_A)foobarzab$", "Afoobarzab$"),
    ("shell_escaped_incomplete_expression", "foo-\\$(VAR_A", "foo-\\$(VAR_A"),
    ("lots_of_openers_in_middle", "--$($($($($--", "--$($($($($--"),
    ("lots_of_openers_at_beginning", "$($($($($--foo$(", "$($($($($--foo$("),
    ("lots_of_openers_at_end", "foo0--$($($($(", "foo0--$($($($("),
    ("escaped_operators_in_names_are_not_unescaped", "$(foo$$var)", "$(foo$$var)"),
    ("newline_not_expanded", "\n", "\n"),
    ("dollar_before_non_ascii", "$£FOO", "$£FOO"),
    ("dollar_before_multibyte_in_middle", "prefix-$€-suffix", "prefix-$€-suffix"),
    ("dollar_before_chinese", "$中文", "$中文"),
    ("empty_input", "", ""),
    ("lone_dollar", "$", "$"),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in EXPANSION_CASES], ids=[c[0] for c in EXPANSION_CASES]
)
def test_expands_as_the_kubelet(text: str, expected: str) -> None:
    assert expand(text, CONTEXT) == expected


def test_a_lookup_function_sees_each_name_once() -> None:
    asked: list[str] = []

    def lookup(name: str) -> str | None:
        asked.append(name)
        return {"A": "1"}.get(name)

    assert expand("$(A)$(B)$$(C)", lookup) == "1$(B)$(C)"
    assert asked == ["A", "B"]


# --- the environment -------------------------------------------------------------------


def pod(env: list[dict], **spec) -> dict:
    return {
        "metadata": {
            "name": "llama-0",
            "namespace": "ml-team",
            "uid": "uid-1",
            "labels": {"leaderworkerset.sigs.k8s.io/group-index": "0", "app": 'say "hi"'},
            "annotations": {"note": "a\nb"},
        },
        "spec": {
            "nodeName": "gpu-node-0",
            "serviceAccountName": "default",
            "containers": [{"name": "engine", "image": "engine:1", "env": env}],
            **spec,
        },
    }


ADDRESSES = Addresses(pod_ips=("127.0.0.101",), host_ips=("10.96.1.2",))

ENV_CASES = [
    (
        "earlier_variables_expand_in_order",
        [
            {"name": "FOO", "value": "bar"},
            {"name": "ZOO", "value": "$(FOO)-1"},
            {"name": "BLU", "value": "$(ZOO)-2"},
        ],
        {"FOO": "bar", "ZOO": "bar-1", "BLU": "bar-1-2"},
    ),
    (
        "a_later_variable_stays_literal",
        [{"name": "ADDR", "value": "$(HOST):8000"}, {"name": "HOST", "value": "leader"}],
        {"ADDR": "$(HOST):8000", "HOST": "leader"},
    ),
    (
        "a_redefined_variable_expands_from_its_earlier_value",
        [
            {"name": "A", "value": "one"},
            {"name": "B", "value": "$(A)"},
            {"name": "A", "value": "two-$(A)"},
        ],
        {"A": "two-one", "B": "one"},
    ),
    (
        "a_self_reference_with_no_earlier_value_stays",
        [{"name": "A", "value": "x$(A)"}],
        {"A": "x$(A)"},
    ),
    (
        "escapes_are_reduced",
        [{"name": "A", "value": "1"}, {"name": "B", "value": "$$(A) $(A) $$"}],
        {"A": "1", "B": "$(A) 1 $"},
    ),
    (
        "downward_api_values",
        [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "POD_IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {
                "name": "NS",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            },
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
            {
                "name": "GROUP",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/group-index']"
                    }
                },
            },
            {
                "name": "MISSING_LABEL",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['absent']"}},
            },
            {"name": "ADDR", "value": "$(POD_IP):8000/$(NAME)"},
        ],
        {
            "POD_IP": "127.0.0.101",
            "POD_IPS": "127.0.0.101",
            "NAME": "llama-0",
            "NS": "ml-team",
            "UID": "uid-1",
            "NODE": "gpu-node-0",
            "SA": "default",
            "HOST_IP": "10.96.1.2",
            "GROUP": "0",
            "MISSING_LABEL": "",
            "ADDR": "127.0.0.101:8000/llama-0",
        },
    ),
    (
        "all_labels_and_annotations_are_sorted_go_quoted_lines",
        [
            {"name": "LABELS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels"}}},
            {"name": "NOTES", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations"}}},
        ],
        {
            "LABELS": 'app="say \\"hi\\""\nleaderworkerset.sigs.k8s.io/group-index="0"',
            "NOTES": 'note="a\\nb"',
        },
    ),
    (
        "value_from_is_never_expanded",
        [
            {"name": "A", "value": "1"},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "ref"}}},
        ],
        {"A": "1", "B": "$(A)"},
    ),
    (
        "an_empty_value_is_empty_and_defined",
        [{"name": "E", "value": ""}, {"name": "F", "value": "[$(E)]"}],
        {"E": "", "F": "[]"},
    ),
    (
        "optional_missing_references_are_left_out",
        [
            {
                "name": "A",
                "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": True}},
            },
            {
                "name": "B",
                "valueFrom": {"secretKeyRef": {"name": "absent", "key": "x", "optional": True}},
            },
            {"name": "C", "value": "$(A)$(B)"},
        ],
        {"C": "$(A)$(B)"},
    ),
    (
        "secret_values",
        [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
        {"TOKEN": "s3cr3t"},
    ),
]

SOURCES = EnvSources(
    config_maps={"cfg": {"ref": "$(A)", "mode": "fast"}},
    secrets={"hf": {"token": "s3cr3t"}},
)


@pytest.mark.parametrize(
    ("env", "expected"), [c[1:] for c in ENV_CASES], ids=[c[0] for c in ENV_CASES]
)
def test_builds_the_environment_as_the_kubelet(env: list[dict], expected: dict) -> None:
    the_pod = pod(env, enableServiceLinks=False)
    container = the_pod["spec"]["containers"][0]
    assert container_env(the_pod, container, ADDRESSES, SOURCES) == expected


def test_env_from_comes_first_with_its_prefix_and_env_overrides_it() -> None:
    the_pod = pod([{"name": "CFG_mode", "value": "slow-$(CFG_ref)"}], enableServiceLinks=False)
    container = {
        **the_pod["spec"]["containers"][0],
        "envFrom": [
            {"configMapRef": {"name": "cfg"}, "prefix": "CFG_"},
            {"secretRef": {"name": "hf"}},
            {"configMapRef": {"name": "absent", "optional": True}},
        ],
    }
    assert container_env(the_pod, container, ADDRESSES, SOURCES) == {
        "CFG_ref": "$(A)",
        "CFG_mode": "slow-$(A)",
        "token": "s3cr3t",
    }


CONFIG_ERROR_CASES = [
    (
        "missing_config_map",
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}},
        'configmap "absent" not found',
    ),
    (
        "missing_key",
        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope"}}},
        "couldn't find key nope in ConfigMap ml-team/cfg",
    ),
    (
        "field_the_kubelet_cannot_resolve",
        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}},
        "unsupported fieldPath: status.phase",
    ),
    (
        "unknown_field",
        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}},
        "field label not supported: spec.containers",
    ),
    (
        "subscript_on_a_field_without_one",
        {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name['x']"}}},
        "field label does not support subscript: metadata.name['x']",
    ),
]


@pytest.mark.parametrize(
    ("variable", "message"),
    [c[1:] for c in CONFIG_ERROR_CASES],
    ids=[c[0] for c in CONFIG_ERROR_CASES],
)
def test_a_container_the_kubelet_cannot_configure_says_why(variable: dict, message: str) -> None:
    the_pod = pod([variable])
    with pytest.raises(ContainerConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        container_env(the_pod, the_pod["spec"]["containers"][0], ADDRESSES, SOURCES)


# --- resources --------------------------------------------------------------------------

RESOURCES = {
    "requests": {"cpu": "250m", "memory": "1Gi"},
    "limits": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "1"},
}
ALLOCATABLE = {"cpu": "192", "memory": "2000Gi", "ephemeral-storage": "4Ti"}

RESOURCE_CASES = [
    ("request_cpu_rounds_up_to_cores", {"resource": "requests.cpu"}, "1"),
    ("request_cpu_in_millicores", {"resource": "requests.cpu", "divisor": "1m"}, "250"),
    ("limit_cpu", {"resource": "limits.cpu"}, "2"),
    ("limit_memory_in_bytes", {"resource": "limits.memory"}, str(2 * 1024**3)),
    ("request_memory_in_mebibytes", {"resource": "requests.memory", "divisor": "1Mi"}, "1024"),
    ("unset_limit_is_node_allocatable", {"resource": "limits.ephemeral-storage"}, str(4 * 1024**4)),
    ("unset_request_is_zero", {"resource": "requests.ephemeral-storage"}, "0"),
    (
        "another_containers_value",
        {"resource": "limits.cpu", "containerName": "sidecar", "divisor": "1m"},
        "192000",
    ),
]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [c[1:] for c in RESOURCE_CASES],
    ids=[c[0] for c in RESOURCE_CASES],
)
def test_resource_field_refs_read_requests_and_limits(selector: dict, expected: str) -> None:
    container = {"name": "engine", "resources": RESOURCES}
    the_pod = {"spec": {"containers": [container, {"name": "sidecar"}]}}
    assert resource_field_value(the_pod, container, selector, ALLOCATABLE) == expected


def test_an_unsupported_resource_is_a_config_error() -> None:
    with pytest.raises(
        ContainerConfigError, match=r"unsupported container resource : limits\.nvidia"
    ):
        resource_field_value(
            {"spec": {}}, {"resources": RESOURCES}, {"resource": "limits.nvidia.com/gpu"}, {}
        )


# --- service variables ------------------------------------------------------------------


def service(namespace: str, name: str, ip: str, ports: list[dict]) -> dict:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"clusterIP": ip, "ports": ports},
    }


SERVICES = (
    service("default", "kubernetes", "10.0.0.1", [{"name": "https", "port": 443}]),
    service("ml-team", "vllm", "10.0.0.7", [{"name": "http", "port": 8000}]),
    service("ml-team", "metrics-db", "10.0.0.8", [{"port": 9090, "protocol": "UDP"}]),
    service("ml-team", "llama-leaders", "None", [{"port": 8000}]),
    service("other", "elsewhere", "10.0.0.9", [{"port": 1}]),
)


def test_service_links_give_kubelets_variables() -> None:
    variables = service_env(SERVICES, "ml-team")
    assert variables["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"
    assert variables["KUBERNETES_SERVICE_PORT"] == "443"
    assert variables["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert variables["KUBERNETES_PORT"] == "tcp://10.0.0.1:443"
    assert variables["KUBERNETES_PORT_443_TCP_ADDR"] == "10.0.0.1"
    # The classic trap: a Service named vllm sets VLLM_PORT, which vLLM reads as its port.
    assert variables["VLLM_PORT"] == "tcp://10.0.0.7:8000"
    assert variables["VLLM_SERVICE_PORT_HTTP"] == "8000"
    assert variables["METRICS_DB_PORT_9090_UDP_PROTO"] == "udp"
    assert not any(k.startswith(("LLAMA_LEADERS", "ELSEWHERE")) for k in variables)


def test_without_service_links_only_the_master_service_remains() -> None:
    variables = service_env(SERVICES, "ml-team", enable_service_links=False)
    assert {k.split("_")[0] for k in variables} == {"KUBERNETES"}


def test_service_variables_expand_env_but_never_override_it() -> None:
    the_pod = pod(
        [
            {"name": "URL", "value": "http://$(VLLM_SERVICE_HOST)"},
            {"name": "VLLM_PORT", "value": "8000"},
        ]
    )
    env = container_env(
        the_pod, the_pod["spec"]["containers"][0], ADDRESSES, EnvSources(services=SERVICES)
    )
    assert env["URL"] == "http://10.0.0.7"
    assert env["VLLM_PORT"] == "8000"
    assert env["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"


# --- the command line ------------------------------------------------------------------

IMAGE = Image(entrypoint=("/opt/vllm/bin/vllm",), cmd=("--help",))

COMMAND_CASES = [
    ("neither_runs_entrypoint_and_cmd", None, None, ["/opt/vllm/bin/vllm", "--help"]),
    (
        "args_replace_only_cmd",
        None,
        ["serve", "$(MODEL)"],
        ["/opt/vllm/bin/vllm", "serve", "/models/tiny"],
    ),
    ("command_replaces_entrypoint_and_cmd", ["python3", "-m", "x"], None, ["python3", "-m", "x"]),
    (
        "command_and_args",
        ["vllm"],
        ["serve", "--host=$(POD_IP)"],
        ["vllm", "serve", "--host=127.0.0.101"],
    ),
    (
        "a_later_variable_expands_in_args",
        None,
        ["--master-addr=$(LEADER)", "--rank=$(RANK)"],
        ["/opt/vllm/bin/vllm", "--master-addr=$(LWS_LEADER_ADDRESS)", "--rank=1"],
    ),
    (
        "escapes_and_unknowns_in_args",
        None,
        ["$$(MODEL)", "$(NOPE)"],
        ["/opt/vllm/bin/vllm", "$(MODEL)", "$(NOPE)"],
    ),
]


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [c[1:] for c in COMMAND_CASES],
    ids=[c[0] for c in COMMAND_CASES],
)
def test_the_command_line_is_the_images_with_the_containers_overrides(
    command: list[str] | None, args: list[str] | None, expected: list[str]
) -> None:
    # LEADER is defined BEFORE the variable it names (as a template that Grove appends
    # its variables after): its value keeps the literal, and args see that literal.
    env_list = [
        {"name": "LEADER", "value": "$(LWS_LEADER_ADDRESS)"},
        {"name": "LWS_LEADER_ADDRESS", "value": "llama-0.llama.ml-team"},
        {"name": "MODEL", "value": "/models/tiny"},
        {"name": "RANK", "value": "1"},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    the_pod = pod(env_list, enableServiceLinks=False)
    container = {"name": "engine", "env": env_list}
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    env = container_env(the_pod, container, ADDRESSES)
    assert command_line(container, IMAGE, env) == expected


def test_variables_the_controller_puts_first_expand_in_args_and_env() -> None:
    # LeaderWorkerSet's webhook puts its variables at the front of env: a template
    # variable built from them expands, and so do args.
    env_list = [
        {"name": "LWS_LEADER_ADDRESS", "value": "llama-0.llama.ml-team"},
        {"name": "LWS_GROUP_SIZE", "value": "2"},
        {"name": "MASTER", "value": "$(LWS_LEADER_ADDRESS):29500"},
    ]
    the_pod = pod(env_list, enableServiceLinks=False)
    container = {
        "name": "engine",
        "env": env_list,
        "args": ["--nnodes=$(LWS_GROUP_SIZE)", "$(MASTER)"],
    }
    env = container_env(the_pod, container, ADDRESSES)
    assert env["MASTER"] == "llama-0.llama.ml-team:29500"
    assert command_line(container, IMAGE, env)[1:] == ["--nnodes=2", "llama-0.llama.ml-team:29500"]


def test_no_command_anywhere_is_a_config_error() -> None:
    with pytest.raises(ContainerConfigError, match="no command specified"):
        command_line({"name": "engine"}, Image(), {})


def test_field_refs_need_api_version_v1() -> None:
    with pytest.raises(ContainerConfigError, match="unsupported pod version: v2"):
        field_ref_value(pod([]), {"apiVersion": "v2", "fieldPath": "metadata.name"}, ADDRESSES)


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("plain", '"plain"'),
        ('a"b', '"a\\"b"'),
        ("tab\there", '"tab\\there"'),
        ("é", '"é"'),
        ("\x00", '"\\x00"'),
    ],
)
def test_label_values_are_quoted_as_go_quotes_them(text: str, quoted: str) -> None:
    assert go_quote(text) == quoted
