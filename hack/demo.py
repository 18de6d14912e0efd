#!/usr/bin/env python3
"""`make demo`: the examples rendered as one fleet, summarized for a person.

Renders every example through the real functions with hack/render.py's `render_fleet`
(each XR reading the others as its required resources, the ModelReplicas that placement
composes rendered in turn), prints what happened — per InferenceCluster, ModelDeployment,
TelemetryDestination and MetricMapping — and writes the whole YAML stream (what
`make render` prints) to a file it names.

The summary reads only the rendered output and the XRs given to render: what it says is what
the functions decided, not a second opinion.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import render  # hack/render.py, beside this file
from functions.common import contracts
from functions.common.adapters import KIND_MODEL_ADAPTER
from render import Fleet, FleetRender

DEFAULT_OUTPUT = render.REPO / "_output" / "demo.yaml"
RESOURCE_NAME = "crossplane.io/composition-resource-name"


def _key(document: dict) -> str:
    return (document.get("metadata") or {}).get("annotations", {}).get(RESOURCE_NAME, "")


def _conditions(composite: dict, skip: tuple[str, ...] = ("Ready",)) -> str:
    return " · ".join(
        f"{c['type']} {c['status']} ({c.get('reason', '')})"
        for c in (composite.get("status") or {}).get("conditions", [])
        if c["type"] not in skip
    )


def _condition(composite: dict, kind: str) -> dict:
    for c in (composite.get("status") or {}).get("conditions", []):
        if c["type"] == kind:
            return c
    return {}


def _failed(r: FleetRender) -> list[str]:
    return [
        f"  {r.source}: RENDER FAILED",
        *("    " + line for line in r.result.stderr.splitlines()),
    ]


def _pools(cluster: dict) -> str:
    pools = []
    for pool in cluster["spec"].get("nodePools", []):
        devices = pool.get("devices", {})
        product = (devices.get("attributes", {}).get("productName") or {}).get("string", "GPU")
        grow = f" (max {pool['maxNodes']})" if pool.get("maxNodes") else ""
        if not devices:  # a CPU-only pool
            pools.append(
                f"{pool['name']}: {pool.get('nodes', 0)}{grow} nodes x "
                f"{pool.get('cpu')} CPU, {pool.get('memory')} memory"
            )
            continue
        pools.append(
            f"{pool['name']}: {pool.get('nodes', 0)}{grow} nodes x "
            f"{devices.get('perNode', 0)} {product}"
        )
    return "; ".join(pools)


def _clusters(fleet: Fleet, engines_on: dict[str, set[str]]) -> list[str]:
    lines = ["InferenceClusters — compose-serving-stack"]
    for r in fleet.of_kind(contracts.KIND_INFERENCE_CLUSTER):
        if r.result.returncode != 0:
            lines += _failed(r)
            continue
        xr = r.composite
        name = xr["metadata"]["name"]
        spec = r.xr["spec"]
        groups: dict[str, list[str]] = defaultdict(list)
        for document in r.composed:
            key = _key(document)
            if "collector" in key:
                groups["collector"].append(key)
            elif key.startswith(("runtime-", "peer-")):
                groups["runtime"].append(key)
            elif document["kind"] == "Release":
                groups["charts"].append(key)
            else:
                groups["stack"].append(key)
        peers = sorted(
            k.removeprefix("peer-clusterprofile-")
            for k in groups["runtime"]
            if k.startswith("peer-clusterprofile-")
        )
        telemetry = (xr.get("status") or {}).get("telemetry", {})
        engines = ", ".join(sorted(engines_on.get(name, ()))) or "none yet"
        lines += [
            f"  {name}: stack {spec.get('stack', 'Standard')}, region {spec.get('region', '-')}, "
            f"{len(r.composed)} resources",
            f"    pools      {_pools(r.xr)}",
            f"    stack      Helm {', '.join(sorted(groups['charts']))} "
            f"+ {len(groups['stack'])} objects",
            f"    runtime    agent + scaler ({len(groups['runtime'])} objects), "
            f"peers: {', '.join(peers) or 'none'}",
        ]
        if groups["collector"]:
            mappings = _condition(xr, "MappingsAccepted").get("message", "")
            unmapped = telemetry.get("unmappedEngineTypes") or []
            lines.append(
                f"    collector  {telemetry.get('mode', '?')}: {telemetry.get('reason', '')}; "
                f"{mappings}; engines here: {engines}"
                + (f"; collected under their own names: {', '.join(unmapped)}" if unmapped else "")
            )
            in_use = ", ".join(
                f"{m['engineType']} by {m['mapping']} ({m['source']})"
                for m in telemetry.get("mappings") or []
            )
            lines.append(f"    mappings   {in_use or 'none'}")
        else:
            lines.append(f"    collector  none: {telemetry.get('reason', '')}")
        lines.append(f"    conditions {_conditions(xr)}")
    return lines


def _needs(deployment: dict) -> str:
    members = []
    for engine in deployment["spec"]["template"]["spec"].get("engines", []):
        for member in engine.get("members", []):
            selector = member.get("nodeSelector", {})
            devices = selector.get("devices", [])
            want = ", ".join(
                f"{d.get('count', 1)} {d['name']}"
                + "".join(f" [{s['cel']}]" for s in d.get("selectors", []))
                for d in devices
            )
            if "cpu" in selector:  # a CPU member: no devices
                want = f"{selector['cpu']} CPU, {selector.get('memory')} memory"
            nodes = (member.get("worker") or {}).get("nodes")
            members.append(
                f"{engine['type']} {member['role']}{f' x{nodes} nodes' if nodes else ''}: {want}"
            )
    return "; ".join(members)


def _deployments(
    fleet: Fleet, replicas: dict[str, FleetRender], products: dict[tuple[str, str], str]
) -> list[str]:
    lines = [
        "ModelDeployments — compose-model-deployment (placement), compose-model-replica (workloads)"
    ]
    for r in fleet.of_kind(contracts.KIND_MODEL_DEPLOYMENT):
        if r.result.returncode != 0:
            lines += _failed(r)
            continue
        xr = r.composite
        meta = xr["metadata"]
        deployment = r.xr
        spec = deployment["spec"]
        status = xr.get("status") or {}
        selector = spec["template"]["spec"].get("clusterSelector", {}).get("matchLabels")
        scope = ", ".join(f"{k}={v}" for k, v in (selector or {}).items())
        scope = f"on clusters labelled {scope}" if scope else "on any cluster"
        mode = spec["template"]["spec"].get("serving", {}).get("mode", "Unified")
        lines += [
            f"  {meta['namespace']}/{meta['name']}: {status.get('placedReplicas', 0)} of "
            f"{status.get('desiredReplicas', spec.get('replicas'))} replicas placed "
            f"({mode}, {scope})",
            f"    needs      per replica: {_needs(deployment)}",
        ]
        for p in status.get("placements", []):
            replica = replicas.get(f"{meta['name']}/{p['cluster']}")
            composed = "not rendered"
            if replica is not None:
                kinds = sorted(
                    {
                        d["spec"]["forProvider"]["manifest"]["kind"]
                        for d in replica.composed
                        if d["kind"] == "Object"
                    }
                )
                composed = ", ".join(kinds)
            device = products.get((p["cluster"], p["nodePool"]), "?")
            lines.append(
                f"    placed     {p['cluster']}/{p['nodePool']} ({device}): "
                f"{p['replicas']} → {composed}"
            )
        why = _condition(xr, "ReplicasScheduled").get("message", "")
        lines += [f"    why        {why}"]
        if status.get("modelCache"):
            lines.append(f"    weights    {status['modelCache']['message']}")
        lines += [f"    conditions {_conditions(xr)}"]
        for result in r.results:
            lines.append(
                f"    {result.get('severity', '').removeprefix('SEVERITY_').lower():<10} "
                f"{result.get('message', '')}"
            )
    return lines


def _caches(fleet: Fleet) -> list[str]:
    lines = ["ModelCaches — compose-model-deployment (a volume and a download Job per cluster)"]
    for r in fleet.of_kind(contracts.KIND_MODEL_CACHE):
        if r.result.returncode != 0:
            lines += _failed(r)
            continue
        meta, spec = r.composite["metadata"], r.xr["spec"]
        status = r.composite.get("status") or {}
        (kind, source), *_ = spec["source"].items()
        where = source.get("repo") or source.get("uri") or source.get("reference")
        lines.append(
            f"  {meta['namespace']}/{meta['name']}: {kind} {where}, {spec['size']} on "
            f"{status.get('selectedClusters', 0)} clusters "
            f"({status.get('readyClusters', 0)} ready)"
        )
        for c in status.get("clusters", []):
            lines.append(f"    {c['cluster']:<10} {c['phase']}: {c['message']}")
    return lines


def _adapters(fleet: Fleet) -> list[str]:
    lines = ["ModelAdapters — compose-model-deployment (staged and routed where the base runs)"]
    for r in fleet.of_kind(KIND_MODEL_ADAPTER):
        if r.result.returncode != 0:
            lines += _failed(r)
            continue
        meta, spec = r.composite["metadata"], r.xr["spec"]
        status = r.composite.get("status") or {}
        lines.append(
            f"  {meta['namespace']}/{meta['name']}: served as {status.get('servedName', '?')} "
            f"on {spec['deploymentRef']['name']} (rank {spec['rank']}), staged on "
            f"{status.get('stagedClusters', 0)} of {status.get('selectedClusters', 0)} clusters"
        )
        for c in status.get("clusters", []):
            lines.append(f"    {c['cluster']:<10} {c['phase']}: {c['message']}")
    return lines


def _telemetry(fleet: Fleet, clusters: int) -> list[str]:
    lines = ["TelemetryDestinations and MetricMappings — compose-telemetry"]
    for r in fleet.of_kind(contracts.KIND_TELEMETRY_DESTINATION):
        if r.result.returncode != 0:
            lines += _failed(r)
            continue
        xr = r.composite
        spec = r.xr["spec"]
        exporter = spec.get("exporter", {})
        slo = ", ".join(f"{k} {v}" for k, v in (spec.get("slo") or {}).items())
        lines += [
            f"  {xr['metadata']['name']}: gateway at {spec['gateway']['endpoint']} receives "
            f"OTLP from {clusters} clusters' collectors, rolls the fleet up and exports "
            f"{exporter.get('type')} to {exporter.get('endpoint')}",
            f"    composes   {len(r.composed)} objects: "
            f"{', '.join(sorted(_key(d) for d in r.composed))}",
            f"    SLOs       {slo or 'none'}",
            f"    conditions {_conditions(xr)}",
        ]
    for r in fleet.of_kind(contracts.KIND_METRIC_MAPPING):
        if r.result.returncode != 0:
            lines += _failed(r)
            continue
        name = r.composite["metadata"]["name"]
        spec = r.xr["spec"]
        valid = _condition(r.composite, "MappingValid")
        lines.append(
            f"  {name}: {len(spec.get('metrics', []))} metrics into the vocabulary; "
            f"{valid.get('status')} ({valid.get('reason')}): {valid.get('message', '')}"
        )
    return lines


def summarize(fleet: Fleet) -> str:
    """What the fleet render decided, a few lines per XR."""
    products = {
        (r.xr["metadata"]["name"], pool["name"]): (
            (pool.get("devices", {}).get("attributes", {}).get("productName") or {}).get(
                "string", "GPU"
            )
            if pool.get("devices")
            else "CPU"
        )
        for r in fleet.of_kind(contracts.KIND_INFERENCE_CLUSTER)
        for pool in r.xr["spec"].get("nodePools", [])
    }
    replicas: dict[str, FleetRender] = {}
    engines_on: dict[str, set[str]] = defaultdict(set)
    for r in fleet.of_kind(contracts.KIND_MODEL_REPLICA):
        spec = r.xr["spec"]
        replicas[f"{spec.get('deployment')}/{spec.get('cluster', {}).get('name')}"] = r
        for engine in spec.get("engines", []):
            engines_on[spec["cluster"]["name"]].add(engine.get("type", "?"))
    counts = {
        kind: len(fleet.of_kind(kind))
        for kind in (
            contracts.KIND_INFERENCE_CLUSTER,
            contracts.KIND_MODEL_CACHE,
            KIND_MODEL_ADAPTER,
            contracts.KIND_MODEL_DEPLOYMENT,
            contracts.KIND_MODEL_REPLICA,
            contracts.KIND_TELEMETRY_DESTINATION,
            contracts.KIND_METRIC_MAPPING,
        )
    }
    clusters = counts[contracts.KIND_INFERENCE_CLUSTER]
    header = (
        "modelplane demo: the examples rendered as one fleet by the real functions under "
        "`crossplane render`\n  "
        + ", ".join(f"{n} {kind}{'' if n == 1 else 's'}" for kind, n in counts.items())
        + (f"; {len(fleet.failed)} renders FAILED" if fleet.failed else "")
    )
    sections = [
        [header],
        _clusters(fleet, engines_on),
        _caches(fleet),
        _adapters(fleet),
        _deployments(fleet, replicas, products),
        _telemetry(fleet, clusters),
    ]
    return "\n\n".join("\n".join(s) for s in sections) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--output", type=Path, default=DEFAULT_OUTPUT, help="where the YAML stream goes"
    )
    args = parser.parse_args()
    try:
        fleet = render.fleet_render()
    except render.HarnessError as err:
        print(f"render harness: {err}", file=sys.stderr)
        return 2
    print(summarize(fleet))
    stream = fleet.stream()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(stream)
    shown = args.output.resolve()
    shown = shown.relative_to(render.REPO) if shown.is_relative_to(render.REPO) else shown
    print(
        f"The full YAML stream ({stream.count(chr(10))} lines, {len(fleet.renders)} renders) is in "
        f"{shown}; `make render` prints it."
    )
    for failed in fleet.failed:
        print(f"{failed.source}: render failed:\n{failed.result.stderr}", file=sys.stderr)
    return 1 if fleet.failed else 0


if __name__ == "__main__":
    sys.exit(main())
