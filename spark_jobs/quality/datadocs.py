"""Make GX Data Docs readable without network.

GX's Data Docs pages load Bootstrap, bootstrap-table, jQuery, Font Awesome and Vega from public
CDNs, and the index page builds its tables in JavaScript (``$('#id').bootstrapTable({columns,
data})``). Offline they render unstyled and the index is empty. :func:`make_offline` rewrites every
page of a built site:

* remote ``<link>`` stylesheets and ``<script src>`` tags are removed, and so are the inline
  scripts (all of them need jQuery); a small local stylesheet is inlined instead;
* each ``bootstrapTable`` call is rendered in Python into a static HTML table, each row linking to
  its page;
* remote images (the GX logo) point at the copy in the site's ``static/images``, and every
  relative ``static/`` reference is re-rooted (GX gets the favicon's depth wrong on validation
  pages);
* icon classes (Font Awesome) get text glyphs, so pass/fail marks stay visible;
* large unreferenced files in ``static/`` are deleted.
"""

from __future__ import annotations

import ast
import html
import os
import re
from pathlib import Path
from typing import Any

OFFLINE_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: #222;
  margin: 0; padding: 0 1.5rem 2rem; line-height: 1.4; background: #fff; }
a { color: #0b5cad; }
nav, .navbar { background: #f4f6f8; padding: .5rem 1rem; margin: 0 -1.5rem 1rem; }
.container, .container-fluid { max-width: 1400px; }
.row { display: flex; flex-wrap: wrap; gap: 1rem; }
.col-12, .col-md-9, .col-md-3, .col-lg-10, .col-lg-2 { flex: 1 1 auto; min-width: 0; }
.col-md-3, .col-lg-2 { flex: 0 0 16rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; width: 100%; font-size: .9rem; }
th, td { border: 1px solid #d0d7de; padding: .3rem .5rem; text-align: left; vertical-align: top; }
thead th { background: #f4f6f8; }
tr.offline-row:hover { background: #f0f7ff; }
.card { border: 1px solid #d0d7de; border-radius: 4px; margin-bottom: 1rem; padding: .5rem 1rem; }
.card-header { font-weight: bold; border-bottom: 1px solid #d0d7de; margin: 0 -1rem .5rem;
  padding: .3rem 1rem; background: #f8f9fa; }
.text-success { color: #1a7f37; } .text-danger { color: #cf222e; } .text-warning { color: #9a6700; }
.badge { display: inline-block; padding: 0 .4rem; border-radius: 3px; background: #eee; }
.nav-tabs { list-style: none; padding: 0; display: flex; gap: 1rem; }
.tab-pane { margin-bottom: 1.5rem; }
.d-none, .invisible, .ge-cta-footer, #ge-cta-footer { display: none !important; }
.cooltip .top { display: none; }
code, pre { background: #f6f8fa; padding: .1rem .3rem; white-space: pre-wrap; }
.fas::before, .far::before, .fa::before { font-style: normal; font-weight: bold; }
.fa-check-circle::before { content: "\\2714\\00a0"; }
.fa-times::before, .fa-times-circle::before { content: "\\2718\\00a0"; }
.fa-exclamation-triangle::before { content: "\\26a0\\00a0"; }
.fa-question-circle::before { content: "?\\00a0"; }
.offline-note { font-size: .8rem; color: #666; }
button[onclick], [id$="-toolbar"] { display: none; }
"""

_REMOTE = r"""["'](?:https?:)?//[^"']*["']"""
_REMOTE_LINK = re.compile(r"<link\b[^>]*\bhref=" + _REMOTE + r"[^>]*>", re.I)
_REMOTE_SCRIPT = re.compile(r"<script\b[^>]*\bsrc=" + _REMOTE + r"[^>]*>\s*</script>", re.I | re.S)
_SCRIPT = re.compile(r"<script\b[^>]*>.*?</script>", re.I | re.S)
_REMOTE_IMG = re.compile(r"""(<img\b[^>]*\bsrc=)["'](?:https?:)?//[^"']*["']""", re.I)
_TABLE_CALL = re.compile(
    r"\$\('#(?P<id>[^']+)'\)\.bootstrapTable\(\s*Object\.assign\(\s*\{\s*columns:\s*(?P<columns>\[.*?\]),"
    r"\s*data:\s*(?P<data>\[.*?\]),\s*toolbar:",
    re.S,
)
_LOCAL_STATIC = re.compile(r"""\b((?:src|href)=["'])(?:\./|(?:\.\./)+)?(static/[^"']+)""", re.I)
_KEEP_STATIC = {"favicon.ico", "logo-long.png"}


def make_offline(site: str | os.PathLike[str]) -> list[Path]:
    """Rewrite every HTML page under ``site`` in place; returns the pages rewritten."""
    site = Path(site)
    pages = sorted(site.rglob("*.html"))
    for page in pages:
        depth = len(page.relative_to(site).parts) - 1
        root = "../" * depth or "./"
        page.write_text(offline_html(page.read_text(encoding="utf-8"), root), encoding="utf-8")
    _prune_static(site)
    return pages


def offline_html(text: str, root: str = "./") -> str:
    tables = {match["id"]: match for match in _TABLE_CALL.finditer(text)}
    for table_id, match in tables.items():
        rendered = _render_table(table_id, match["columns"], match["data"], root)
        if rendered is None:
            continue
        text = re.sub(
            r"<table\b[^>]*\bid=\"" + re.escape(table_id) + r"\"[^>]*>\s*</table>",
            lambda _m, r=rendered: r, text, count=1, flags=re.S,
        )
    text = _REMOTE_LINK.sub("", text)
    text = _REMOTE_SCRIPT.sub("", text)
    text = _SCRIPT.sub("", text)
    text = _REMOTE_IMG.sub(lambda m: f'{m.group(1)}"{root}static/images/logo-long.png"', text)
    # GX gets the depth of some static paths wrong (the favicon of validation pages).
    text = _LOCAL_STATIC.sub(lambda m: f"{m.group(1)}{root}{m.group(2)}", text)
    style = f'<style id="offline-styles">{OFFLINE_CSS}</style>'
    if "</head>" in text:
        text = text.replace("</head>", style + "\n</head>", 1)
    else:
        text = style + text
    return text


def _render_table(table_id: str, columns_src: str, data_src: str, root: str) -> str | None:
    try:
        columns = ast.literal_eval(columns_src)
        data = ast.literal_eval(data_src)
    except (ValueError, SyntaxError):
        return None
    head = "".join(f"<th>{html.escape(str(c.get('title', c.get('field', ''))))}</th>" for c in columns)
    body = []
    for row in data:
        cells = []
        link = row.get("_table_row_link_path")
        for number, column in enumerate(columns):
            value = str(row.get(column.get("field"), ""))
            if link and number == 1:
                target = link if link.startswith(".") else root + link
                value = f'<a href="{html.escape(target)}">{value}</a>'
            cells.append(f"<td>{value}</td>")
        body.append(f'<tr class="offline-row">{"".join(cells)}</tr>')
    if not data:
        body.append(f'<tr><td colspan="{len(columns)}">(none)</td></tr>')
    return (
        f'<table id="{html.escape(table_id)}" class="table offline-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _prune_static(site: Path) -> None:
    """Delete unreferenced images (a few MB of GIFs and PNGs per site)."""
    images = site / "static" / "images"
    if not images.is_dir():
        return
    referenced: set[str] = set()
    for page in site.rglob("*.html"):
        referenced.update(re.findall(r"static/images/([\w.-]+)", page.read_text(encoding="utf-8")))
    for image in images.iterdir():
        if image.is_file() and image.name not in referenced | _KEEP_STATIC:
            image.unlink()


def remote_references(text: str) -> list[str]:
    """The remote CSS, JS and image references left in a page (for checks and tests)."""
    from html.parser import HTMLParser

    found: list[str] = []

    class _Parser(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, Any]]) -> None:
            values = dict(attrs)
            url = None
            if tag == "link":
                url = values.get("href")
            elif tag in ("script", "img", "iframe"):
                url = values.get("src")
            if url and re.match(r"^(https?:)?//", url):
                found.append(f"<{tag}> {url}")

    _Parser().feed(text)
    return found
