"""`report.html`: report.md rendered (CommonMark with tables, markdown-it-py) as one self-contained
page, its figures inlined as data URIs, so it opens anywhere: in a browser from the results folder,
and in Snakemake's HTML report (`snakemake --report`), which shows HTML pages and images but offers
Markdown only as a download.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 80em; margin: 1.5em auto; padding: 0 1em; line-height: 1.45;
       color: #1f2933; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; display: block; overflow-x: auto; }
th, td { border: 1px solid #cbd2d9; padding: 0.2em 0.6em; }
th { background: #f0f4f8; }
img { max-width: 100%; }
code { background: #f0f4f8; padding: 0 0.2em; border-radius: 3px; }
"""
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")


def report_html(markdown: str, folder: str | Path) -> str:
    """The page of a Markdown report whose images (`![alt](name.png)`) lie in `folder`; an image
    that is not there keeps its relative link."""
    folder = Path(folder)

    def inline(match: re.Match) -> str:
        path = folder / match.group(2)
        if not path.is_file():
            return match.group(0)
        return f"![{match.group(1)}](data:image/png;base64,{base64.b64encode(path.read_bytes()).decode()})"

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(IMAGE.sub(inline, markdown))
    title = next((line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), "Report")
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        f"<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n"
    )
