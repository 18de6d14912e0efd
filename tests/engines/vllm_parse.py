"""Parse launch lines with the installed vLLM's own `vllm serve` parser.

    <engine venv>/bin/python tests/engines/vllm_parse.py IN.json OUT.json

Runs inside the engine's virtualenv (hack/tools/vllm.sh), not the project's: IN.json is a
list of {"case", "argv"}, argv starting `vllm serve`; OUT.json gets, per case, what vLLM
said. One process for every case: importing vLLM's CLI costs most of a minute on two busy
cores, parsing a line a few milliseconds.

The parser is built the way `vllm`'s entrypoint builds it (vllm.entrypoints.cli.main:
a FlexibleArgumentParser with the `serve` subcommand's parser, then the subcommand's
`validate`), and the positional model is applied as `vllm serve` applies it. A case
fails on what would stop or mislead the engine before it loads a model: a parse error, a
failed validation, no model at all (vLLM would serve its default model), or a warning
vLLM logs about the line (a deprecated spelling, `--model` instead of the positional
model).
"""

import contextlib
import io
import json
import logging
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")

import vllm.logger
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

# What the parsed line says about the launch, for the report.
SUMMARY = (
    "model",
    "served_model_name",
    "port",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "nnodes",
    "node_rank",
    "master_addr",
    "headless",
)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def build_parser() -> tuple[FlexibleArgumentParser, ServeSubcommand]:
    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    serve = ServeSubcommand()
    serve.subparser_init(subparsers).set_defaults(dispatch_function=serve.cmd)
    return parser, serve


def check(parser: FlexibleArgumentParser, serve: ServeSubcommand, argv: list[str]) -> dict:
    if argv[:2] != ["vllm", "serve"]:
        return {"ok": False, "error": f"not a `vllm serve` launch line: {argv[:3]}"}
    warnings = _Warnings()
    logging.getLogger("vllm").addHandler(warnings)
    # warning_once remembers what it said in this process; every case starts afresh.
    for cached in ("_print_warning_once", "_print_info_once", "_print_debug_once"):
        getattr(getattr(vllm.logger, cached, None), "cache_clear", lambda: None)()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv[1:])
            serve.validate(args)
            # What ServeSubcommand.cmd does first: the positional model wins. (Not
            # EngineArgs.from_cli_args: that already resolves the model on the hub.)
            if getattr(args, "model_tag", None) is not None:
                args.model = args.model_tag
    except SystemExit:
        return {"ok": False, "error": stderr.getvalue().strip().splitlines()[-1]}
    except Exception as err:  # vLLM raises ValueError/TypeError for a rejected line
        return {"ok": False, "error": f"{type(err).__name__}: {err}"}
    finally:
        logging.getLogger("vllm").removeHandler(warnings)
    summary = {k: getattr(args, k, None) for k in SUMMARY}
    problems = [f"vLLM warns: {m}" for m in warnings.messages]
    if getattr(args, "model_tag", None) is None and not getattr(args, "config", None):
        problems.insert(
            0,
            f"names no model: vLLM would load its default model {EngineArgs.model!r}",
        )
    return {"ok": not problems, "error": "; ".join(problems), "parsed": summary}


def main() -> None:
    source, target = sys.argv[1:3]
    with open(source) as f:
        cases = json.load(f)
    parser, serve = build_parser()
    results = {c["case"]: check(parser, serve, c["argv"]) for c in cases}
    with open(target, "w") as f:
        json.dump({"vllm": vllm.__version__, "results": results}, f, indent=1, default=str)


if __name__ == "__main__":
    import vllm

    main()
