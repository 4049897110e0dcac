"""Write each key's help into params.yaml from the one place it is written: its field's description in
`populora/core/sections.py`, `populora/core/measure_sections.py` or `populora/config.py` (a
section's, from its class docstring). `--check` fails when params.yaml's help has drifted.

    python -m workflow.render_params            # rewrite the help comments of params.yaml
    python -m workflow.render_params --check    # exit 1 when they differ from what would be written

The help of a key is the comment block right above it, at its indentation: dropped and written
again. Everything else is kept as it is: the values as written, the file's opening comment (up to
its first blank line), and the
notes after a value (a comment on the value's line, with the comment lines below it that are
indented deeper than the next key), which say why this file holds this value rather than what the
key means. A key of a mapping value (`evolve.operators`, `bench.limits`) has no help of its own.
The error messages of `populora.config` use the same descriptions ("Fix: Expected ...") and each
field's `json_schema_extra` fix, so a key's help is written once (tests/test_config.py checks
params.yaml against this rendering).
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from pathlib import Path

from pydantic import BaseModel

from populora.config import Params

WIDTH = 120
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w-]*):(?:\s|$)")


def _section_help(model: type[BaseModel]) -> str:
    """A section's help: the first paragraph of its class docstring, on one line."""
    doc = inspect.getdoc(model) if model.__doc__ else ""
    return " ".join((doc or "").split("\n\n")[0].split())


def help_of(path: tuple[str, ...]) -> str | None:
    """The help of the key at `path` (None for a key that is no field: a mapping value's entry)."""
    model: type[BaseModel] | None = Params
    info = None
    for part in path:
        fields = getattr(model, "model_fields", None) if isinstance(model, type) else None
        if not fields or part not in fields:
            return None
        info = fields[part]
        annotation = info.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    if info is None:
        return None
    if info.description:
        return " ".join(info.description.split())
    return _section_help(model) if model is not None else None


def _comment(text: str, indent: int) -> list[str]:
    prefix = " " * indent + "# "
    return textwrap.wrap(
        text, WIDTH, initial_indent=prefix, subsequent_indent=prefix, break_long_words=False, break_on_hyphens=False
    )


def render(text: str) -> str:
    """`text` (a params.yaml) with the help of every key written above it."""
    lines = text.splitlines()
    first_key = next((i for i, line in enumerate(lines) if KEY.match(line)), len(lines))
    blanks = [i for i in range(first_key) if not lines[i].strip()]
    head = blanks[-1] + 1 if blanks else 0  # the opening comment ends with a blank line; after it, the first help
    out = lines[:head]
    stack: list[tuple[int, str]] = []  # (indent, key) of the keys enclosing the current line
    pending: list[str] = []  # comment-only lines whose place is decided by the next key line
    for line in lines[head:]:
        match = KEY.match(line)
        if match is None:
            if line.lstrip().startswith("#"):
                pending.append(line)
            else:  # a value's continuation, or a blank line
                out += pending + [line]
                pending = []
            continue
        indent = len(match["indent"])
        # help comments (at this key's indentation) are written again; deeper ones are the note above's
        out += [c for c in pending if len(c) - len(c.lstrip()) != indent]
        pending = []
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        help_text = help_of(tuple(key for _, key in stack))
        if help_text:
            out += _comment(help_text, indent)
        out.append(line)
    out += pending
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write each key's help into params.yaml from its field.")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file's help is not what would be written")
    args = parser.parse_args(argv)
    path = Path(args.params)
    text = path.read_text()
    rendered = render(text)
    if args.check:
        if rendered != text:
            print(
                f"{path}: the help comments differ from the fields' descriptions. Fix: python -m "
                "workflow.render_params (then review the diff)",
                file=sys.stderr,
            )
            return 1
        return 0
    path.write_text(rendered)
    print(f"wrote the help of every key into {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
