"""compose-model-replica under the real `crossplane render`.

Until issue #3 lands the function composes nothing and must say so, so a render
never passes off the harness as the feature.
"""

import render
from functions.common import conditions


def test_says_it_composes_nothing_yet(function_servers):
    xr = render.REPO / "tests" / "render" / "testdata" / "modelreplica.yaml"
    result = render.render(function_servers, xr)
    assert result.returncode == 0, result.stderr
    composite = result.documents[0]
    composed = next(c for c in composite["status"]["conditions"] if c["type"] == "Composed")
    assert composed["status"] == "False"
    assert composed["reason"] == conditions.REASON_NOT_IMPLEMENTED
    assert composite["metadata"]["name"] in composed["message"]
    assert [d for d in result.documents if d["kind"] != "Result"] == [composite]
