"""Write the generated parts of the reference pages (docs/reference/*.md) from the code.

A page holds hand-written prose and regions between ``<!-- generated: NAME -->`` and
``<!-- end generated: NAME -->``; only the regions are rewritten: the CLI from the typer
app, the failure tables from ``engine.policy``, the events from ``engine.events`` and the
Python API from its signatures and docstrings. ``python scripts/gen_reference.py --check``
rewrites nothing and exits 1 naming every stale page (tests/test_docs_reference.py checks).
"""

from __future__ import annotations

import ast
import enum
import inspect
import io
import re
import sys
import tokenize
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / "docs" / "reference"
_REGION = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n).*?(<!-- end generated: (?P=name) -->)", re.S
)


def _cell(text: str) -> str:
    """Text fit for one markdown table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _md(doc: str) -> str:
    """A docstring as markdown: ``literal`` to `literal`, paragraphs kept."""
    paragraphs = inspect.cleandoc(doc).replace("``", "`").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    head = list(head)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- fields with their comments, read from the source ------------------------------------


def fields(cls: type) -> Iterator[tuple[str, str, str, str]]:
    """Each annotated field of a class body: name, annotation, default (source text, or
    ""), and the comments on and just above its line."""
    source = inspect.cleandoc("\n" + inspect.getsource(cls))  # dedented, line 1 = class
    lines = source.splitlines()
    comments = {
        t.start[0]: t.string.lstrip("# ").strip()
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type == tokenize.COMMENT
    }
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        end = (node.end_lineno or node.lineno) + 1
        note = [comments[n] for n in range(node.lineno, end) if n in comments]
        above = node.lineno - 1
        while above in comments and lines[above - 1].lstrip().startswith("#"):
            note.insert(0, comments[above])
            above -= 1
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        default = ast.unparse(node.value) if node.value is not None else ""
        text = " ".join(n for n in note if n).replace("``", "`")
        yield (
            node.target.id,
            ast.unparse(node.annotation),
            default,
            re.sub(r"(?<![`\w])(__\w+__)", r"`\1`", text),
        )


def field_table(cls: type) -> str:
    """A class's fields as a table; a TypedDict's keys are all optional."""
    missing = "optional" if hasattr(cls, "__optional_keys__") else "required"
    rows = [(f"`{n}`", f"`{a}`", f"`{d}`" if d else missing, note) for n, a, d, note in fields(cls)]
    return _table(("field", "type", "default", "meaning"), rows)


# --- the command line ----------------------------------------------------------------------


def _usage(path: str, command: Any) -> str:
    pieces = [f"agentlog {path}"]
    for p in command.params:
        if p.param_type_name == "argument":
            pieces.append(p.metavar or p.name.upper())
            continue
        flag = "/".join(o for o in p.opts if o.startswith("--")) or p.opts[0]
        value = "" if getattr(p, "is_flag", False) else " " + (p.metavar or p.name.upper())
        dots = "..." if p.multiple else ""
        pieces.append(f"{flag}{value}{dots}" if p.required else f"[{flag}{value}]{dots}")
    return " ".join(pieces)


def _option_rows(command: Any) -> list[tuple[str, str, str]]:
    rows = []
    for p in command.params:
        if p.param_type_name == "argument":
            if p.help:
                rows.append((f"`{p.metavar or p.name.upper()}`", "", p.help))
            continue
        shown = "" if p.default in (None, False) or p.required else f"`{p.default}`"
        rows.append((", ".join(f"`{o}`" for o in p.opts), shown, p.help or ""))
    return rows


def _commands(group: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if hasattr(command, "commands"):
            yield from _commands(command, path + " ")
        else:
            yield path, command


def cli_commands() -> list[tuple[str, Any]]:
    """Every ``agentlog`` command, sub-commands as ``group sub``, in the app's order."""
    import typer

    from replay.cli.entry import app

    return list(_commands(typer.main.get_command(app)))


def cli_summary() -> str:
    rows = []
    for path, command in cli_commands():
        text = _md(command.help or "")
        first = m.group(1) if (m := re.match(r"(.+?\.)(?:\s|$)", text)) else text
        rows.append((f"[`agentlog {path}`](#agentlog-{path.replace(' ', '-')})", first))
    return _table(("command", "what it does"), rows)


def cli_reference() -> str:
    out = []
    for path, command in cli_commands():
        out += [
            f"### agentlog {path}",
            "",
            f"`{_usage(path, command)}`",
            "",
            _md(command.help or ""),
        ]
        rows = _option_rows(command)
        if rows:
            out += ["", _table(("option", "default", "meaning"), rows)]
        out.append("")
    return "\n".join(out).rstrip()


# --- failure classification ---------------------------------------------------------------


def _kinds(row: Any) -> tuple[str, str]:
    from engine.policy import failure as policy

    side, read = row.side_effect, row.read_only
    if row.by == policy.OWN:
        return "its own kind", "its own kind"
    if row.by in (policy.HTTP_STATUS, policy.SMTP_REPLY):
        by = "HTTP status" if row.by == policy.HTTP_STATUS else "SMTP reply"
        return f"by {by}, else {side}", f"by {by}, else {read}"
    if row.by == policy.WRAPPED:
        return f"{side}; transient if the wrapped error is", read
    return side, read


def failure_table() -> str:
    from engine.policy.failure import DEFAULT_TABLE

    rows = [(f"`{r.match}`", *_kinds(r), r.why) for r in DEFAULT_TABLE]
    return _table(
        ("exception (first match along the MRO)", "side-effecting tool", "read-only tool", "why"),
        rows,
    )


def _codes(codes: range | frozenset[int], taken: set[int]) -> str:
    if isinstance(codes, frozenset):
        return ", ".join(str(c) for c in sorted(codes))
    other = "any other " if taken & set(codes) else ""
    return f"{other}{codes.start // 100}xx"


def _code_table(table: Iterable[tuple[range | frozenset[int], str, str]], what: str) -> str:
    rows: list[tuple[str, str, str]] = []
    taken: set[int] = set()
    for codes, side, read in table:
        rows.append((_codes(codes, taken), side, read))
        taken |= set(codes)
    return _table((what, "side-effecting tool", "read-only tool"), rows)


def code_tables(name: str) -> str:
    """``HTTP_STATUS_TABLE`` or ``SMTP_REPLY_TABLE`` of engine.policy, as a table."""
    from engine.policy import failure as policy

    head, tail = name.split("_")
    return _code_table(getattr(policy, f"{name}_TABLE"), f"{head} {tail.lower()}")


# --- events -----------------------------------------------------------------------------


def _sections(module: Any) -> dict[str, str]:
    """Class name -> the ``# --- section ---`` comment above it in its module."""
    found, section = {}, ""
    for line in inspect.getsource(module).splitlines():
        if m := re.match(r"# --- (.+?) -+$", line):
            section = m.group(1)
        elif m := re.match(r"class (\w+)\(", line):
            found[m.group(1)] = section
    return found


def events_reference() -> str:
    import engine.events as ev
    from engine.events import agents, recovery, traces

    sections = {k: v for m in (ev, agents, traces, recovery) for k, v in _sections(m).items()}
    out, current = [], None
    for tag, cls in ev.EVENT_TYPES.items():
        if sections.get(cls.__name__) != current:
            current = sections.get(cls.__name__)
            out += [f"## {(current or 'other').capitalize()}", ""]
        out += [f"### `{tag}`", ""]
        schema = f", schema {cls.SCHEMA}" if cls.SCHEMA != 1 else ""
        upcasts = sorted(v for t, v in ev.UPCASTERS if t == tag)
        lifted = f"; upcast from {', '.join(f'v{v}' for v in upcasts)}" if upcasts else ""
        out += [f"`{cls.__module__}.{cls.__name__}`{schema}{lifted}", ""]
        if cls.__doc__:
            out += [_md(cls.__doc__), ""]
        out += [field_table(cls) if list(fields(cls)) else "No fields but `at`.", ""]
    return "\n".join(out).rstrip()


# --- the Python API -----------------------------------------------------------------------

# Engine attributes that are plumbing between its own modules, not API.
_ENGINE_INTERNAL = frozenset({"executor", "kept_open", "signals", "start", "wake", "store"})
# What agent code calls on its ``run`` (the rest of the class is the runtime's own).
_RUN_API = (
    "run_id", "decide", "stream", "usage", "plan", "step", "checkpoint", "ask",
    "spawn", "call", "gather", "lock", "send", "recv", "sleep",
)  # fmt: skip


def _param(p: inspect.Parameter) -> str:
    star = "*" if p.kind == p.VAR_POSITIONAL else "**" if p.kind == p.VAR_KEYWORD else ""
    text = star + p.name + (f": {p.annotation}" if p.annotation is not p.empty else "")
    if p.default is not p.empty:
        value = p.default.value if isinstance(p.default, enum.Enum) else p.default
        text += f" = {value!r}" if p.annotation is not p.empty else f"={value!r}"
    return text


def _signature(fn: Callable[..., Any]) -> str:
    """``(params) -> result`` as the source writes it, without ``self``/``cls``."""
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    out: list[str] = []
    for i, p in enumerate(params):
        if p.kind == p.KEYWORD_ONLY and not any(
            q.kind in (q.KEYWORD_ONLY, q.VAR_POSITIONAL) for q in params[:i]
        ):
            out.append("*")
        out.append(_param(p))
        following = params[i + 1].kind if i + 1 < len(params) else None
        if p.kind == p.POSITIONAL_ONLY and following != p.POSITIONAL_ONLY:
            out.append("/")
    returns = "" if sig.return_annotation is sig.empty else f" -> {sig.return_annotation}"
    return f"({', '.join(out)}){returns}"


def _members(cls: type, names: Iterable[str], owner: str) -> list[str]:
    out = []
    for name in names:
        member = inspect.getattr_static(cls, name)
        doc = _md(inspect.getdoc(getattr(cls, name)) or "")
        if isinstance(member, property):
            out += [f"#### `{owner}.{name}`", "", doc, ""]
            continue
        fn = member.__func__ if isinstance(member, classmethod | staticmethod) else member
        if isinstance(member, classmethod):
            out += [f"#### `{cls.__name__}.{name}{_signature(fn)}`", "", doc, ""]
            continue
        if inspect.ismodule(fn):
            out += [f"#### `{owner}.{name}`", "", doc.split("\n\n")[0], ""]
            continue
        out += [f"#### `{owner}.{name}{_signature(fn)}`", "", doc, ""]
    return out


def api_reference() -> str:
    import engine
    from engine import Engine
    from engine.runtime.lifecycle.agentrun import AgentRun

    public = sorted(n for n in dir(Engine) if not n.startswith("_") and n not in _ENGINE_INTERNAL)
    out = ["### `engine.Engine`", "", _md(Engine.__doc__ or ""), ""]
    out += _members(Engine, public, "engine")
    out += ["### `run`", "", _md(AgentRun.__doc__ or ""), ""]
    out += _members(AgentRun, _RUN_API, "run")
    out += ["### Names `engine` exports", ""]
    rows = []
    for name in engine.__all__:
        doc = inspect.getdoc(getattr(engine, name)) or ""
        rows.append((f"`{name}`", _md(doc).split("\n\n")[0]))
    out.append(_table(("name", "what it is"), rows))
    return "\n".join(out).rstrip()


def options_reference() -> str:
    from engine import Budget, CircuitBreaker, EngineConfig, RetryPolicy, Supervisor
    from engine.runtime.declare.wrappers import ToolOptions
    from engine.runtime.model.decisions import Policies

    out = []
    for title, cls in (
        ("`@engine.tool(...)` options", ToolOptions),
        ("`run.decide(...)`, `run.stream(...)` and `@engine.model(...)` policies", Policies),
        ("`EngineConfig(...)`", EngineConfig),
        ("`RetryPolicy(...)`", RetryPolicy),
        ("`CircuitBreaker(...)`", CircuitBreaker),
        ("`Budget(...)`", Budget),
        ("`Supervisor(...)`", Supervisor),
    ):
        out += [
            f"### {title}",
            "",
            _md(cls.__doc__ or "").split("\n\n")[0],
            "",
            field_table(cls),
            "",
        ]
    return "\n".join(out).rstrip()


REGIONS: dict[str, Callable[[], str]] = {
    "cli-summary": cli_summary,
    "cli": cli_reference,
    "failures": failure_table,
    "http-status": lambda: code_tables("HTTP_STATUS"),
    "smtp-reply": lambda: code_tables("SMTP_REPLY"),
    "events": events_reference,
    "api": api_reference,
    "options": options_reference,
}


def render(text: str) -> str:
    """``text`` with every generated region written afresh from the code."""

    def fill(m: re.Match[str]) -> str:
        return f"{m.group(1)}\n{REGIONS[m.group('name')]()}\n\n{m.group(3)}"

    return _REGION.sub(fill, text)


def regions(text: str) -> list[str]:
    return [m.group("name") for m in _REGION.finditer(text)]


def pages() -> list[Path]:
    return sorted(p for p in PAGES.glob("*.md") if regions(p.read_text()))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for page in pages():
        text = page.read_text()
        fresh = render(text)
        if fresh != text:
            stale.append(page.relative_to(ROOT).as_posix())
            if not check:
                page.write_text(fresh)
    if check and stale:
        print(f"stale (run scripts/gen_reference.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    for name in stale:
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
