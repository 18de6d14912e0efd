"""The runtime's composed roles against the Kubernetes calls its code makes.

The calls are read from functions/runtime's source: every typed-client call
(`read_namespaced_lease`, `list_cluster_custom_object(GROUP, VERSION, PLURAL)`, a list
method handed to `watch.stream`) and every raw request (`kube_request(api, METHOD,
PATH)` and the module wrappers around it), with the path's f-string resolved through the
module's constants and small path helpers. Each call becomes (API group, resource, verb)
the way the API server authorizes it (GET on a collection is list, on an object get; POST
create; PUT update; PATCH patch, server-side apply included).

The roles are read from what compose-serving-stack composes (the render golden, which
tests/render compares with the real `crossplane render`). Both directions hold: every
call is granted to the component that makes it, and every rule a role grants is a call
some code of that component makes. A call the scan cannot resolve fails the test naming
the file and line, so a new call cannot slip past it.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import yaml

from functions.compose_serving_stack import runtime_hosting as rh

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "functions" / "runtime"
GOLDEN = REPO / "tests" / "render" / "testdata" / "serving_stack" / "with-destination.yaml"
DYNAMIC = "{*}"

# Which code runs under which identity on a member. The agent runs the election, the
# hub and its own wing with its ServiceAccount on its member; on a peer it reaches the
# member as the peer identity (modelplane-peer) for the election's compare-and-swap, the
# hub's reading of every copy and its acting. The scaler and the activator run their own
# wings; the activator's control-plane calls (ModelDeployments) use the control plane's
# identity, not a member role (runtime/activator/server.py CONTROL_PLANE_RULES).
COMPONENTS = {
    rh.AGENT: ["agent", "hub", "election"],
    rh.PEER: ["election", "hub/acting.py", "agent/fleet_reading.py"],
    rh.SCALER: ["scaler"],
    rh.ACTIVATOR: ["activator"],
}
ROLE_NAMES = {
    rh.AGENT: {rh.AGENT, rh.HEALTH_ROLE},
    rh.PEER: {rh.PEER},
    rh.SCALER: {rh.SCALER},
    rh.ACTIVATOR: {rh.ACTIVATOR_MEMBER_ROLE},
}
CONTROL_PLANE_GROUPS = {"modelplane.ai"}
# The workload a policy's ScaledObject names is read by its kind (collect._object_path):
# the kinds compose-model-replica composes.
SCALE_TARGETS = set(rh.SCALE_TARGETS)
# Granted by the platform, not composed: the experimental planner's API key Secret, read
# in the policy's namespace (docs/trust-model.md: the agent is granted no Secret reads).
PLATFORM_GRANTED = {rh.AGENT: {("", "secrets", "get")}}

TYPED_GROUPS = {"CoreV1Api": "", "CoordinationV1Api": "coordination.k8s.io"}
TYPED_PLURALS = {"pod": "pods", "config_map": "configmaps", "secret": "secrets", "lease": "leases"}
TYPED_VERBS = {
    "read": "get",
    "list": "list",
    "create": "create",
    "replace": "update",
    "patch": "patch",
    "delete": "delete",
}
HTTP_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# Raw-request wrappers: name -> (method argument index or a fixed method, path index).
WRAPPERS = {"kube_request": (1, 2), "_list": ("GET", 1), "_get": ("GET", 1), "_call": (2, 1)}


@dataclass(frozen=True)
class Use:
    group: str
    resource: str
    verb: str
    where: str


class Unresolved(Exception):
    pass


def _module(path: Path):
    dotted = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return importlib.import_module(dotted)


class _Scan(ast.NodeVisitor):
    def __init__(self, path: Path):
        self.path = path
        self.source = path.read_text()
        self.tree = ast.parse(self.source)
        self.globals = vars(_module(path))
        self.functions = {n.name: n for n in ast.walk(self.tree) if isinstance(n, ast.FunctionDef)}
        self.uses: list[Use] = []
        self.unresolved: list[str] = []
        self.scope: list[ast.FunctionDef] = []

    def where(self, node: ast.AST) -> str:
        return f"{self.path.relative_to(REPO)}:{node.lineno}"

    # --- strings ----------------------------------------------------------------------

    def text(self, node: ast.AST, params: frozenset[str] = frozenset()) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(self.text(v, params) for v in node.values)
        if isinstance(node, ast.FormattedValue):
            try:
                return self.text(node.value, params)
            except Unresolved:
                return DYNAMIC
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.text(node.left, params) + self.text(node.right, params)
        if isinstance(node, ast.Name):
            if node.id in params:
                return DYNAMIC
            value = self.globals.get(node.id)
            if isinstance(value, str):
                return value
            local = self._local(node.id)
            if local is not None:
                return self.text(local, params)
            raise Unresolved(node.id)
        if isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id in self.globals:
                value = getattr(self.globals[base.id], node.attr, None)
                if isinstance(value, str):
                    return value
            if isinstance(base, ast.Name) and base.id in {"self", *params}:
                return DYNAMIC  # an object's field: a name or a namespace
            raise Unresolved(ast.unparse(node))
        if isinstance(node, ast.Subscript | ast.Call) and not self._helper(node):
            return DYNAMIC if isinstance(node, ast.Subscript) else self._call_text(node)
        if isinstance(node, ast.Call):
            return self._call_text(node)
        raise Unresolved(ast.unparse(node))

    def _helper(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name)

    def _call_text(self, node: ast.Call) -> str:
        """A path helper (`policy_path(policy)`, here or imported): its return expression."""
        if not isinstance(node.func, ast.Name):
            raise Unresolved(ast.unparse(node))
        if node.func.id not in self.functions:
            imported = self.globals.get(node.func.id)
            if not inspect.isfunction(imported):
                raise Unresolved(ast.unparse(node))
            return _scan(Path(inspect.getsourcefile(imported)))._call_text(node)
        helper = self.functions[node.func.id]
        params = frozenset(a.arg for a in helper.args.args)
        returns = [n for n in ast.walk(helper) if isinstance(n, ast.Return) and n.value]
        if len(returns) != 1:
            raise Unresolved(ast.unparse(node))
        return self.text(returns[0].value, params)

    def _local(self, name: str) -> ast.AST | None:
        for function in reversed(self.scope):
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets
                ):
                    return node.value
        return None

    # --- calls ------------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scope.append(node)
        self.generic_visit(node)
        self.scope.pop()

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        try:
            if self._is_wrapper(name) and not self._inside_wrapper():
                self._raw(node, *WRAPPERS[name])
            elif name == "stream" and node.args:
                self._typed(node.args[0], node.args[1:], watch=True)
            elif isinstance(func, ast.Attribute):
                self._typed(func, node.args, watch=False)
            for arg in node.args if name != "stream" else ():
                # a list method handed to a helper (health.py's `_list`)
                if isinstance(arg, ast.Attribute) and arg.attr.startswith("list_"):
                    self._typed(arg, [], watch=False)
        except Unresolved as err:
            self.unresolved.append(f"{self.where(node)}: cannot resolve {err}")

    def _is_wrapper(self, name: str) -> bool:
        """kube_request, or a function of this module around it (not a same-named method
        that takes typed-client methods, as health.py's `_list`)."""
        if name == "kube_request":
            return True
        function = self.functions.get(name)
        return name in WRAPPERS and function is not None and "kube_request" in ast.unparse(function)

    def _inside_wrapper(self) -> bool:
        return bool(self.scope) and self.scope[-1].name in WRAPPERS

    def _raw(self, node: ast.Call, method_at, path_at: int) -> None:
        if isinstance(method_at, str):
            method = method_at
        else:
            arg = node.args[method_at]
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                raise Unresolved(f"method {ast.unparse(arg)}")
            method = arg.value
        path = self.text(node.args[path_at])
        for group, resource, name in _parse_path(path, self.where(node)):
            verb = HTTP_VERBS.get(method) or ("get" if name else "list")
            self.uses.append(Use(group, resource, verb, self.where(node)))

    def _typed(self, func: ast.AST, args: list[ast.AST], *, watch: bool) -> None:
        if not isinstance(func, ast.Attribute):
            return
        method = func.attr
        verb_word, _, rest = method.partition("_")
        if verb_word not in TYPED_VERBS or not rest:
            return
        verbs = ["watch"] if watch else [TYPED_VERBS[verb_word]]
        if rest.endswith("custom_object"):
            if not args:
                raise Unresolved(f"{method} without its group and plural")
            namespaced = rest.startswith("namespaced_")
            group = self.text(args[0])
            plural = self.text(args[3 if namespaced else 2])
            for verb in verbs:
                self.uses.append(Use(group, plural, verb, self.where(func)))
            return
        kind = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
        if kind not in TYPED_PLURALS:
            return  # not a Kubernetes call (e.g. a metric's create_counter)
        group = "coordination.k8s.io" if kind == "lease" else ""
        for verb in verbs:
            self.uses.append(Use(group, TYPED_PLURALS[kind], verb, self.where(func)))


def _parse_path(path: str, where: str) -> list[tuple[str, str, str]]:
    """(group, resource[/subresource], name or '') for a REST path."""
    parts = path.strip("/").split("/")
    if DYNAMIC in parts[0]:
        group, rest = DYNAMIC, parts[1:]  # /api/ or /apis/ and the version by the object
    elif parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise Unresolved(f"path {path}")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else "", rest[2:3]
    if DYNAMIC in (group, resource):
        # An object by the kind a policy names: a ScaledObject (read for its target), or
        # a scale target, every kind the suite composes (with its scale subresource).
        if sub:
            return [(g, f"{r}/{sub[0]}", name) for g, r in SCALE_TARGETS]
        return [(g, r, name) for g, r in SCALE_TARGETS | {("keda.sh", "scaledobjects")}]
    return [(group, resource + (f"/{sub[0]}" if sub else ""), name)]


@functools.cache
def _scan(path: Path) -> _Scan:
    scan = _Scan(path)
    scan.visit(scan.tree)
    return scan


def code_uses(component: str) -> tuple[set[tuple[str, str, str]], list[str], list[Use]]:
    files: list[Path] = []
    for part in COMPONENTS[component]:
        target = RUNTIME / part
        files += sorted(target.rglob("*.py")) if target.is_dir() else [target]
    uses, unresolved = [], []
    for path in files:
        if "proto" in path.parts:
            continue
        scan = _scan(path)
        uses += scan.uses
        unresolved += scan.unresolved
    uses = [u for u in uses if u.group not in CONTROL_PLANE_GROUPS]
    return {(u.group, u.resource, u.verb) for u in uses}, unresolved, uses


def composed_rules(component: str) -> set[tuple[str, str, str]]:
    granted = set()
    for doc in yaml.safe_load_all(GOLDEN.read_text()):
        if not doc or doc.get("kind") != "Object":
            continue
        manifest = doc["spec"]["forProvider"]["manifest"]
        if manifest["kind"] not in ("Role", "ClusterRole"):
            continue
        if manifest["metadata"]["name"] not in ROLE_NAMES[component]:
            continue
        for rule in manifest["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.add((group, resource, verb))
    return granted


def _check(component: str) -> list[str]:
    used, unresolved, uses = code_uses(component)
    granted = composed_rules(component)
    assert granted, f"no role composed for {component}"
    problems = list(unresolved)
    for use in sorted(used - granted - PLATFORM_GRANTED.get(component, set())):
        at = sorted({u.where for u in uses if (u.group, u.resource, u.verb) == use})
        problems.append(f"code calls {use} ({', '.join(at)}) but {component}'s roles lack it")
    for rule in sorted(granted - used):
        problems.append(f"{component}'s roles grant {rule}, which no code of it calls")
    return problems


def test_the_scan_finds_the_calls_it_must():
    """Non-vacuous: known calls of each wing are among what the scan reads."""
    agent, _, _ = code_uses(rh.AGENT)
    assert ("", "configmaps", "patch") in agent  # health records and the inventory record
    assert ("coordination.k8s.io", "leases", "update") in agent  # the election's CAS
    assert ("autoscaling.modelplane.ai", "adaptivepolicies/status", "patch") in agent
    scaler, _, _ = code_uses(rh.SCALER)
    assert ("coordination.k8s.io", "leases", "watch") in scaler
    activator, _, _ = code_uses(rh.ACTIVATOR)
    assert activator == {("gateway.networking.k8s.io", "httproutes", "list")}


def test_the_agent_roles_are_what_its_code_calls():
    problems = _check(rh.AGENT)
    assert not problems, "\n".join(problems)


def test_the_peer_roles_are_what_a_peer_agent_calls():
    problems = _check(rh.PEER)
    assert not problems, "\n".join(problems)


def test_the_scaler_roles_are_what_its_code_calls():
    problems = _check(rh.SCALER)
    assert not problems, "\n".join(problems)


def test_the_activator_member_role_is_what_its_code_calls():
    problems = _check(rh.ACTIVATOR)
    assert not problems, "\n".join(problems)
