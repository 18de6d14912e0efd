"""The documentation (README.md and the MkDocs site in docs/) against the code.

The site builds with `mkdocs build --strict`, so a broken link, a missing anchor or a page
left out of the nav fails here with MkDocs' own message. Beyond what MkDocs can see, what
the pages name must exist: every `make <target>` in the Makefile, every `modelplane`
command and option in the CLI's command tables, every repository path and Python module
path, every field in the APIs page's field lists and in a YAML example in its XRD's
schema, and every column of the operator's view among the XRD's printer columns — and
every top-level `spec` field of every XRD is named in the APIs page. Each failure names
the page, the line and the missing thing.

The scans read code only (inline code spans, shell blocks, `$ ` lines of text blocks), so
prose may say "make sure" and a demo transcript may print "modelplane demo:".
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from functions.common.contracts import FUNCTIONS
from functions.runtime import cli as runtime_cli
from functions.runtime.operator import cli as operator_cli

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
PAGES = (README, *sorted(DOCS.glob("*.md")))
APIS_PAGE = DOCS / "apis.md"
OPERATING_PAGE = DOCS / "operating.md"

SHELL_LANGUAGES = frozenset({"", "sh", "bash", "shell", "console"})
API_GROUPS = frozenset({"modelplane.ai/v1alpha1", "autoscaling.modelplane.ai/v1alpha1"})
# Repository roots a path in the docs may start with. docs/ is left out: MkDocs checks the
# links between pages, and the telemetry page quotes other projects' docs/ paths.
REPO_ROOTS = ("functions/", "tests/", "hack/", "apis/", "package/", "examples/", "schemas/")
# Placeholders and elisions: `apis/<plural>/definition.yaml` names no one file.
PLACEHOLDER = re.compile(r"[<>*…{}$]")


@dataclass(frozen=True)
class Code:
    """A piece of code a page shows: an inline span, or one line of a code block."""

    page: Path
    line: int
    text: str
    shell: bool  # a command line a reader runs (shell block, `$ ` line, or inline span)

    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    text: str


FENCE = re.compile(r"^\s*(```|~~~)\s*([\w-]*)")
INLINE = re.compile(r"`([^`]+)`")


def blocks(page: Path) -> Iterator[Block]:
    """The fenced code blocks of a page, with the line each starts on."""
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, language = opened.groups()
        start = i + 1
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            i += 1
        yield Block(page, start + 1, language, "\n".join(lines[start:i]))
        i += 1


def code(page: Path) -> Iterator[Code]:
    """Every inline span outside code blocks, every line of a shell block, and every
    `$ ` line of another block."""
    lines = page.read_text().splitlines()
    prose: list[tuple[int, str]] = []
    fence = None
    language = ""
    for number, line in enumerate(lines, start=1):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence, language = opened.groups()
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            elif language in SHELL_LANGUAGES:
                yield Code(page, number, line, shell=True)
            elif line.lstrip().startswith("$ "):
                yield Code(page, number, line.lstrip()[2:], shell=True)
            continue
        prose.append((number, line))
    # Inline spans may wrap a line: read the prose as one text, then map offsets to lines.
    text = "\n".join(line for _, line in prose)
    starts = [0]
    for _, line in prose:
        starts.append(starts[-1] + len(line) + 1)
    for match in INLINE.finditer(text):
        index = next(i for i, start in enumerate(starts) if start > match.start()) - 1
        yield Code(page, prose[index][0], match.group(1), shell=True)


def all_code() -> list[Code]:
    return [c for page in PAGES for c in code(page)]


# --- the site -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    said = "\n".join(
        line for line in (done.stderr + done.stdout).splitlines() if not line.startswith("INFO")
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{said}"
    return out


def test_the_site_builds_in_strict_mode(site):
    assert (site / "index.html").exists()


def test_every_page_in_docs_is_in_the_nav():
    # MkDocs warns of an omitted page (a strict failure); this names the nav's own gaps
    # too: an entry whose page is missing.
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    listed = {next(iter(entry.values())) for entry in config["nav"]}
    present = {p.name for p in DOCS.glob("*.md")}
    assert present - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - present == set(), "mkdocs.yml's nav lists pages that do not exist"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_every_link_in_the_readme_lands(site):
    problems = []
    for number, line in enumerate(README.read_text().splitlines(), start=1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            if path and not (REPO / path).exists():
                problems.append(f"README.md:{number}: {target}: no such file")
            elif anchor and path.startswith("docs/") and path.endswith(".md"):
                page = site / path.removeprefix("docs/").removesuffix(".md")
                html = (page / "index.html") if page.name != "index" else site / "index.html"
                if f'id="{anchor}"' not in html.read_text():
                    problems.append(f"README.md:{number}: {target}: no such anchor")
    assert problems == []


# --- names the pages use ----------------------------------------------------------------


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", text, re.M))


MAKE = re.compile(r"(?<![\w./-])make\s+([a-z][a-z0-9-]*)")


def test_every_make_target_named_exists():
    targets = makefile_targets()
    named = [(c, t) for c in all_code() for t in MAKE.findall(c.text)]
    # The scan sees the three commands the README is built around.
    assert {"demo", "test", "fleet", "fleet-down"} <= {t for _, t in named}
    missing = [
        f"{c.where()}: `make {t}` is not a Makefile target" for c, t in named if t not in targets
    ]
    assert missing == [], f"Makefile targets: {', '.join(sorted(targets))}"


INVOCATION = re.compile(r"(?<![\w./-])(kubectl\s+modelplane|modelplane-runtime|modelplane)\s+(.*)")
STOP = frozenset({"#", "|", "&&", ";", "\\", ">", "2>&1"})


def _options(command: click.Command, group: click.Group) -> set[str]:
    found = {"--help"}
    for param in [*command.params, *group.params]:
        if isinstance(param, click.Option):
            found |= set(param.opts) | set(param.secondary_opts)
    return found


def _words(rest: str) -> list[str]:
    words = []
    for word in rest.split():
        if word in STOP or word.startswith("#"):
            break
        words.append(word.strip("[]`,"))
    return [w for w in words if w]


def _skip_group_options(words: list[str], group: click.Group) -> list[str]:
    takes_value = {
        opt for p in group.params if isinstance(p, click.Option) and not p.is_flag for opt in p.opts
    }
    while words and words[0].startswith("-"):
        name = words[0].split("=", 1)[0]
        words = words[1:] if "=" in words[0] or name not in takes_value else words[2:]
    return words


def check_invocation(tool: str, rest: str) -> str | None:
    """Why `tool rest` is not a command the CLI has, or None when it is (or is a
    placeholder the docs fill in, like `modelplane runtime <command>`)."""
    runtime, operator = runtime_cli.main, operator_cli.main
    if tool == "modelplane-runtime":
        group, words = runtime, _skip_group_options(_words(rest), runtime)
    else:
        words = _skip_group_options(_words(rest), operator)
        if not words or PLACEHOLDER.search(words[0]):
            return None
        first = words[0]
        if first in operator_cli.COMMANDS:
            group = operator
        elif tool.startswith("kubectl"):
            return f"{first!r} is not one of kubectl modelplane's {sorted(operator.commands)}"
        elif first == "runtime":
            group, words = runtime, _skip_group_options(words[1:], runtime)
        elif first in FUNCTIONS:
            return None  # a function's own server flags (the SDK's)
        else:
            return (
                f"{first!r} is neither an operator command {sorted(operator_cli.COMMANDS)} "
                f"nor a component {[*FUNCTIONS, 'runtime']}"
            )
    if not words or PLACEHOLDER.search(words[0]):
        return None
    name = words[0]
    if name not in group.commands:
        return f"{name!r} is not a command (the CLI has {sorted(group.commands)})"
    command = group.commands[name]
    known = _options(command, group)
    for word in words[1:]:
        option = word.split("=", 1)[0]
        if option.startswith("-") and option not in known:
            return f"{name} has no option {option} (it has {', '.join(sorted(known))})"
    return None


def test_every_modelplane_command_named_exists():
    # The entrypoint dispatches the same operator commands the operator CLI defines.
    from functions.entrypoint import OPERATOR_COMMANDS  # noqa: PLC0415

    assert tuple(OPERATOR_COMMANDS) == tuple(operator_cli.COMMANDS)
    seen, problems = [], []
    for piece in all_code():
        for match in INVOCATION.finditer(piece.text):
            tool, rest = match.group(1), match.group(2)
            seen.append(f"{tool} {rest}")
            why = check_invocation(re.sub(r"\s+", " ", tool), rest)
            if why:
                problems.append(f"{piece.where()}: `{tool} {rest.strip()}`: {why}")
    assert any(s.startswith("modelplane status") for s in seen)
    assert any(s.startswith("modelplane runtime agent") for s in seen)
    assert problems == []


def test_the_command_check_refuses_what_the_cli_lacks():
    assert check_invocation("modelplane", "status -o json") is None
    assert check_invocation("modelplane", "--kubeconfig cp.yaml status") is None
    assert (
        check_invocation("modelplane", "runtime scaler --cluster NAME [--tls-cert-dir DIR]") is None
    )
    assert check_invocation("modelplane-runtime", "model-health --kubeconfig in-cluster") is None
    assert check_invocation("modelplane", "runtime <command>") is None
    assert "neither an operator command" in (check_invocation("modelplane", "statuz") or "")
    assert "no option --sigals-url" in (
        check_invocation("modelplane", "runtime agent --sigals-url=x") or ""
    )
    assert "not a command" in (check_invocation("modelplane-runtime", "hub") or "")


PATH_TOKEN = re.compile(r"[\w./-]+")


def test_every_repository_path_named_exists():
    problems = []
    for piece in all_code():
        for word in piece.text.split():
            if PLACEHOLDER.search(word):
                continue
            token = word.strip("`'\",;:()[]")
            if not token.startswith(REPO_ROOTS) or not PATH_TOKEN.fullmatch(token):
                continue
            if not (REPO / token).exists():
                problems.append(f"{piece.where()}: {token} does not exist")
    assert problems == []


MODULE_PATH = re.compile(r"^(functions|tests)(\.[A-Za-z_]\w*)+(\(\))?$")


def resolve_dotted(dotted: str) -> str | None:
    """Why a dotted module path (`functions.common.sdk.make_cli`) does not resolve."""
    parts = dotted.removesuffix("()").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for i, attribute in enumerate(parts[cut:], start=cut):
            if not hasattr(target, attribute):
                return f"{'.'.join(parts[:i])} has no {attribute!r}"
            target = getattr(target, attribute)
        return None
    return f"no module {parts[0]!r}"


def test_every_python_path_named_resolves():
    named = [(c, c.text.strip()) for c in all_code() if MODULE_PATH.match(c.text.strip())]
    assert any(text.startswith("functions.") for _, text in named)
    problems = [
        f"{c.where()}: `{text}`: {why}" for c, text in named if (why := resolve_dotted(text))
    ]
    assert problems == []


# --- the APIs page against the XRDs -------------------------------------------------------


def definitions() -> dict[str, tuple[Path, dict]]:
    """Kind -> (definition file, the served version's openAPIV3Schema)."""
    found = {}
    for path in sorted((REPO / "apis").glob("*/definition.yaml")):
        definition = yaml.safe_load(path.read_text())
        version = definition["spec"]["versions"][0]
        found[definition["spec"]["names"]["kind"]] = (path, version)
    return found


def resolve_field(schema: dict, path: str) -> str | None:
    """Why `spec.a[].b` is not a field of the schema, or None when it is."""
    node, walked = schema, []
    for part in path.split("."):
        name, arrays = part.removesuffix("[]" * part.count("[]")), part.count("[]")
        if node.get("x-kubernetes-preserve-unknown-fields") and not node.get("properties"):
            return None  # a PodSpec and the like: kept as written, not described here
        properties = node.get("properties") or {}
        if node.get("type") == "array":
            return f"{'.'.join(walked)} is a list: write {'.'.join(walked)}[].{name}"
        if name not in properties:
            if isinstance(node.get("additionalProperties"), dict) and not properties:
                return None  # a map: any key
            where = ".".join(walked) or "the root"
            return f"no field {name!r} under {where} (it has: {', '.join(properties) or 'none'})"
        node = properties[name]
        walked.append(part)
        for _ in range(arrays):
            if node.get("type") != "array":
                return f"{'.'.join(walked)} is not a list"
            node = node.get("items") or {}
    return None


@dataclass(frozen=True)
class FieldRow:
    kind: str
    line: int
    fields: tuple[str, ...]


def field_rows(page: Path) -> Iterator[FieldRow]:
    """Rows of `| field | … |` tables, each under the `## Kind` heading it documents."""
    kind, in_table = "", False
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if line.startswith("## "):
            kind, in_table = line[3:].strip(), False
        elif line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0].lower() == "field":
                in_table = True
            elif in_table and not set(cells[0]) <= set("-: "):
                names = tuple(s for s in INLINE.findall(cells[0]) if s.startswith("spec."))
                yield FieldRow(kind, number, names)
        else:
            in_table = False


def test_every_field_in_the_apis_field_lists_is_in_its_schema():
    known = definitions()
    rows = list(field_rows(APIS_PAGE))
    assert {r.kind for r in rows} == set(known), (
        "a kind without a field list, or a list under no kind"
    )
    problems = []
    for row in rows:
        path, version = known[row.kind]
        schema = version["schema"]["openAPIV3Schema"]
        if not row.fields:
            problems.append(f"docs/apis.md:{row.line}: a field-list row names no spec.* field")
        for field in row.fields:
            if why := resolve_field(schema, field):
                problems.append(
                    f"docs/apis.md:{row.line}: `{field}` ({row.kind}) is not in "
                    f"{path.relative_to(REPO)}: {why}"
                )
    assert problems == []


def test_every_top_level_spec_field_is_in_the_apis_field_lists():
    listed: dict[str, set[str]] = {}
    for row in field_rows(APIS_PAGE):
        for field in row.fields:
            top = re.split(r"[.\[]", field.removeprefix("spec."))[0]
            listed.setdefault(row.kind, set()).add(top)
    problems = []
    for kind, (path, version) in definitions().items():
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        for field in spec:
            if field not in listed.get(kind, set()):
                problems.append(
                    f"{path.relative_to(REPO)}: spec.{field} is not in docs/apis.md's "
                    f"{kind} field list (## {kind}, ### Fields)"
                )
    assert problems == []


def _unknown_keys(schema: dict, value: object, path: str) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            field = f"{path}.{key}" if path else key
            if why := resolve_field(schema, field):
                yield f"{field}: {why}"
                continue
            yield from _unknown_keys(schema, item, field)
    elif isinstance(value, list):
        for item in value:
            yield from _unknown_keys(schema, item, f"{path}[]")


def test_every_field_in_a_yaml_example_is_in_its_schema():
    known = definitions()
    checked, problems = 0, []
    for page in PAGES:
        for block in blocks(page):
            if block.language != "yaml":
                continue
            for document in yaml.safe_load_all(block.text):  # a block may hold several
                if not isinstance(document, dict) or document.get("apiVersion") not in API_GROUPS:
                    continue
                kind = document.get("kind")
                where = f"{page.relative_to(REPO)}:{block.line}"
                if kind not in known:
                    problems.append(f"{where}: no XRD or CRD for kind {kind!r}")
                    continue
                checked += 1
                schema = known[kind][1]["schema"]["openAPIV3Schema"]
                for why in _unknown_keys(schema, document.get("spec") or {}, "spec"):
                    problems.append(f"{where}: {kind} example: {why}")
    # The README shows one of each kind a user applies.
    assert checked >= 5
    assert problems == []


def test_the_operator_view_columns_are_the_printer_columns():
    known = definitions()
    problems, rows = [], 0
    for number, line in enumerate(OPERATING_PAGE.read_text().splitlines(), start=1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not line.startswith("|"):
            continue
        kind = cells[0].split(" ")[0]
        if kind not in known:
            continue
        rows += 1
        documented = {c.strip() for c in cells[2].split(",")}
        printer = {c["name"] for c in known[kind][1].get("additionalPrinterColumns") or []}
        printer.discard("AGE")  # kubectl shows it anyway
        if documented != printer:
            problems.append(
                f"docs/operating.md:{number}: {kind} columns {sorted(documented)} are not "
                f"{known[kind][0].relative_to(REPO)}'s printer columns {sorted(printer)}"
            )
    assert rows == len(known), "the operator's view has a row per kind"
    assert problems == []
