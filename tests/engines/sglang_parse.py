"""Parse launch lines with SGLang's own `launch_server` parser.

    PYTHONPATH=<sglang-parser> <engine venv>/bin/python tests/engines/sglang_parse.py IN OUT

Runs with the vLLM virtualenv's python and SGLang 0.5.23 installed without its
dependencies beside it (hack/tools/vllm.sh): only the parser is needed, and SGLang's
engine would not start on a CPU anyway. IN is a list of {"case", "argv"}, argv starting
`python3 -m sglang.launch_server`; OUT gets what SGLang said per case.

The parser is the one `prepare_server_args` builds (an ArgumentParser with
ServerArgs.add_cli_args); ServerArgs' own checks after parsing need the GPU and are not
run. A line fails when SGLang's parser rejects it, or when it parses only because
argparse expands an unambiguous prefix: `--tp` is no SGLang flag but a prefix of
`--tp-size`, and a prefix stops working the day another flag shares it (`--pp` already
matches three).
"""

import argparse
import contextlib
import io
import json
import sys

from sglang.srt.server_args import ServerArgs
from sglang.version import __version__

LAUNCHERS = (["python3", "-m", "sglang.launch_server"], ["python", "-m", "sglang.launch_server"])


def _parser(allow_abbrev: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sglang serve", allow_abbrev=allow_abbrev)
    ServerArgs.add_cli_args(parser)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[object, str]:
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return parser.parse_args(argv), ""
    except SystemExit:
        return None, stderr.getvalue().strip().splitlines()[-1]


def check(as_launched, exact, argv: list[str]) -> dict:
    launcher = next((lc for lc in LAUNCHERS if argv[: len(lc)] == lc), None)
    if launcher is None:
        return {"ok": False, "error": f"not a `-m sglang.launch_server` launch line: {argv[:3]}"}
    args = argv[len(launcher) :]
    parsed, error = _parse(as_launched, args)
    if parsed is None:
        return {"ok": False, "error": error}
    summary = {
        k: getattr(parsed, k, None)
        for k in ("model_path", "served_model_name", "port", "tp_size", "pp_size", "nnodes")
    }
    summary |= {"node_rank": parsed.node_rank, "dist_init_addr": parsed.dist_init_addr}
    _, exact_error = _parse(exact, args)
    if exact_error:
        return {
            "ok": False,
            "error": f"parses only as an abbreviation of a longer flag ({exact_error})",
            "parsed": summary,
        }
    return {"ok": True, "error": "", "parsed": summary}


def main() -> None:
    source, target = sys.argv[1:3]
    with open(source) as f:
        cases = json.load(f)
    as_launched, exact = _parser(allow_abbrev=True), _parser(allow_abbrev=False)
    results = {c["case"]: check(as_launched, exact, c["argv"]) for c in cases}
    with open(target, "w") as f:
        json.dump({"sglang": __version__, "results": results}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
