"""The contracts in functions/common agree with the XRDs, Compositions and packages
that state them again in YAML (where Python cannot be imported)."""

from dataclasses import fields
from pathlib import Path

import yaml

from functions.common import contracts, vocabulary
from functions.common.telemetrydestination import SloTargets

REPO = Path(__file__).resolve().parents[2]


def _xrd(plural: str) -> dict:
    return yaml.safe_load((REPO / "apis" / plural / "definition.yaml").read_text())


def _rules(schema: dict) -> list[str]:
    """Every CEL rule anywhere under a schema."""
    found = [v["rule"] for v in schema.get("x-kubernetes-validations", [])]
    for key in ("properties", "additionalProperties", "items"):
        child = schema.get(key)
        if isinstance(child, dict):
            children = child.values() if key == "properties" else [child]
            for sub in children:
                found += _rules(sub)
    return found


def test_every_composition_names_a_function_we_ship():
    compositions = sorted((REPO / "apis").glob("*/composition.yaml"))
    # ModelCache and ModelAdapter share compose-model-deployment.
    assert len(compositions) == 7
    for path in compositions:
        step = yaml.safe_load(path.read_text())["spec"]["pipeline"][0]
        assert step["functionRef"]["name"] in contracts.FUNCTIONS, path


def test_the_configuration_depends_on_every_function():
    meta = yaml.safe_load((REPO / "package" / "crossplane.yaml").read_text())
    names = {d["package"].rsplit("/", 1)[-1] for d in meta["spec"]["dependsOn"]}
    assert set(contracts.FUNCTIONS) <= names
    for function in contracts.FUNCTIONS:
        assert (REPO / "package" / "functions" / function.removeprefix("function-")).is_dir()


def test_every_xrd_is_v2_with_an_explicit_scope_in_our_group():
    for path in sorted((REPO / "apis").glob("*/definition.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc["kind"] != "CompositeResourceDefinition":
            continue
        assert doc["apiVersion"] == "apiextensions.crossplane.io/v2", path
        assert doc["spec"]["scope"] in {"Cluster", "Namespaced"}, path
        assert doc["spec"]["group"] == contracts.API_GROUP, path
        assert doc["spec"]["versions"][0]["name"] == contracts.API_VERSION, path


def test_every_schema_field_has_a_description():
    def missing(schema: dict, path: str) -> list[str]:
        out = []
        for name, child in schema.get("properties", {}).items():
            if name in {"apiVersion", "kind", "metadata"} and path == "":
                continue
            if "description" not in child:
                out.append(f"{path}.{name}")
            out += missing(child, f"{path}.{name}")
            if isinstance(child.get("items"), dict):
                out += missing(child["items"], f"{path}.{name}[]")
            if isinstance(child.get("additionalProperties"), dict):
                out += missing(child["additionalProperties"], f"{path}.{name}{{}}")
        return out

    for path in sorted((REPO / "apis").glob("*/definition.yaml")):
        doc = yaml.safe_load(path.read_text())
        schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert missing(schema, "") == [], path


def test_metric_mapping_rules_use_the_vocabulary_patterns():
    rules = _rules(_xrd("metricmappings")["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    assert f"self.matches('{vocabulary.TARGET_NAME_PATTERN}')" in rules
    assert f"self.matches('{vocabulary.SOURCE_NAME_PATTERN}')" in rules
    assert f"self.matches('{vocabulary.LABEL_NAME_PATTERN}')" in rules


def test_reserved_label_prefix_is_the_one_in_contracts():
    rules = _rules(_xrd("modeldeployments")["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    reserved = [r for r in rules if "modelplane[.]ai/" in r]
    assert len(reserved) == 2  # template.metadata.labels and every member's pod template
    assert contracts.LABEL_PREFIX == "modelplane.ai/"


def test_builtin_mappings_target_the_vocabulary():
    for path in sorted((REPO / "functions" / "common" / "builtin_mappings").glob("*.yaml")):
        mapping = yaml.safe_load(path.read_text())
        for metric in mapping["spec"]["metrics"]:
            assert metric["to"] in vocabulary.VOCABULARY_BY_NAME, (path, metric["to"])
            for source in metric["from"]:
                assert vocabulary.SOURCE_NAME_RE.match(source), (path, source)


def test_every_vocabulary_slo_is_a_destination_field_over_a_histogram():
    known = {f.name for f in fields(SloTargets)}
    for metric in vocabulary.VOCABULARY:
        if metric.slo_target is not None:
            assert metric.slo_target in known, metric.name
            assert metric.type is vocabulary.MetricType.HISTOGRAM, metric.name
    assert set(vocabulary.SLO_HISTOGRAMS) == known
