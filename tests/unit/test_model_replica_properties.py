"""Properties of compose-model-replica over generated ModelReplicas.

Whatever combination of stack, serving mode, roles, ports, containers and autoscaling
arrives, the function either rejects it with a field and a rule, or composes pods that
all carry the four labels with exactly one `http` port on each serving engine; it never
crashes on input.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from functions.common.contracts import LABEL_ROLE, POD_LABELS, PORT_NAME_HTTP
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import InvalidReplica, parse

ROLES = ["Standalone", "Leader", "Worker", "Prefill", "Decode", "Other"]
PORT_NAMES = ["http", "metrics", "grpc"]

containers = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["engine", "proxy", "log"]),
            "image": st.just("img"),
            "ports": st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(PORT_NAMES),
                        "containerPort": st.integers(1, 65535),
                    }
                ),
                max_size=2,
            ),
        }
    ),
    min_size=1,
    max_size=3,
)


def member(role: str):
    return st.fixed_dictionaries(
        {
            "role": st.just(role),
            "workerNodes": st.integers(0, 3) if role == "Leader" else st.just(0),
            "devices": st.lists(
                st.fixed_dictionaries({"name": st.just("gpu"), "count": st.integers(1, 8)}),
                max_size=1,
            ),
            "template": st.fixed_dictionaries(
                {"spec": st.fixed_dictionaries({"containers": containers})}
            ),
        }
    )


def engine(*roles: str, name: str = "a"):
    return st.fixed_dictionaries(
        {
            "name": st.just(name),
            "type": st.sampled_from(["vllm", "sglang", "custom"]),
            "members": st.tuples(*(member(r) for r in roles)).map(list),
        },
        optional={"port": st.sampled_from([8000, 8001, 9000])},
    )


# Mostly well-formed shapes (so the composing path is exercised), some role sets that
# are not a shape at all.
shapes = st.one_of(
    st.tuples(st.just("Unified"), st.tuples(engine("Standalone"))),
    st.tuples(st.just("Unified"), st.tuples(engine("Leader", "Worker"))),
    st.tuples(st.just("PrefillDecode"), st.tuples(engine("Prefill"), engine("Decode", name="b"))),
    st.tuples(st.just("PrefillDecode"), st.tuples(engine("Prefill", "Decode"))),
    st.tuples(
        st.sampled_from(["Unified", "PrefillDecode"]),
        st.tuples(engine(*ROLES[:2]), engine(ROLES[3], name="a")),
    ),
)


@st.composite
def model_replicas(draw):
    spec = {
        "deployment": "m",
        "cluster": {
            "name": "c1",
            "stack": draw(st.sampled_from(["Standard", "Dynamo"])),
            "providerConfigRef": {"name": "c1"},
        },
        "nodePool": {"name": "p", "nodeSelector": {"pool": "p"}},
        "replicas": draw(st.integers(0, 5)),
        "definitionHash": "h",
        "source": {"uri": "hf://x/y"},
    }
    spec["servingMode"], chosen = draw(shapes)
    spec["engines"] = list(chosen)
    if draw(st.booleans()):
        spec["autoscaling"] = {
            "clusters": [{"name": draw(st.sampled_from(["c1", "c2"])), "maxReplicas": 4}]
        }
    if draw(st.booleans()):
        spec["unavailable"] = {"reason": "Parked", "message": draw(st.text(max_size=40))}
    return {"metadata": {"name": "m-c1", "namespace": "ns"}, "spec": spec}


def _pods(manifest):
    kind, spec = manifest["kind"], manifest["spec"]
    if kind == "Deployment":
        yield spec["template"]["metadata"]["labels"], spec["template"]["spec"]
    elif kind == "LeaderWorkerSet":
        for t in ("leaderTemplate", "workerTemplate"):
            template = spec["leaderWorkerTemplate"][t]
            yield template["metadata"]["labels"], template["spec"]
    elif kind == "PodCliqueSet":
        for clique in spec["template"]["cliques"]:
            yield clique["labels"], clique["spec"]["podSpec"]


@settings(max_examples=300, deadline=None)
@given(model_replicas())
def test_rejects_with_a_field_or_composes_pods_that_keep_the_contracts(xr):
    try:
        replica, rejection = parse(xr), None
    except InvalidReplica as err:
        replica, rejection = None, err
    if rejection is not None:
        assert rejection.path.startswith(("spec", "metadata"))
        assert rejection.rule
        return
    assert replica is not None
    plan = compose(replica)
    keys = [c.key for c in plan.composed]
    assert keys == sorted(set(keys))
    pods = [pod for w in plan.workloads for pod in _pods(w.manifest)]
    assert pods
    for labels, pod_spec in pods:
        assert set(POD_LABELS) <= set(labels)
        http_ports = [
            p
            for c in pod_spec["containers"]
            for p in c.get("ports", [])
            if p["name"] == PORT_NAME_HTTP
        ]
        assert len(http_ports) == (0 if labels[LABEL_ROLE] == "Worker" else 1)
