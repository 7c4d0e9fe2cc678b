"""What every page shares in how it looks and reads: the stylesheet (code views, and a layout
that still works on an 800 px projector), the page's script (the theme a user picks is kept on
every page; the sidebar folds away on a narrow screen), figures with their one-sentence text
alternative, labels of lessons and their steps, and text from a link shown as text.

Colours follow Streamlit's light and dark themes on the browser's side (CSS ``light-dark()`` and
Streamlit's own Plotly theme), not through ``st.context.theme``: Streamlit documents that value
as wrong on a session's first run and after a change in its settings menu until the next rerun
(streamlit/streamlit#11920), where the browser's colours are right at once.
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlencode

import plotly.graph_objects as go
import streamlit as st

from explorer import lessons as L
from explorer import urlstate
from explorer.figures import alt
from explorer.presets import get_preset

from . import code_view

NARROW_PX = 1000  # below this window width the sidebar starts folded: a projector's 800 px keeps the page

_LAYOUT_CSS = f"""
/* Tabs wrap onto a second row rather than scrolling out of sight. */
[role="tablist"] {{ flex-wrap: wrap; row-gap: 0.25rem; }}
/* The labels of buttons, page links and metrics, and metrics' values, wrap rather than end in an ellipsis. */
button .stMarkdownEllipsis, button .stMarkdownEllipsis p, [data-testid="stPageLink"] p,
[data-testid="stMetricLabel"] *, [data-testid="stMetricValue"], [data-testid="stMetricValue"] * {{
  white-space: normal; overflow: visible; text-overflow: clip; }}
/* A narrow window: figures side by side are drawn one under the other, each the page's width. */
@media (max-width: {NARROW_PX - 0.02}px) {{
  [data-testid="stHorizontalBlock"]:has([data-testid="stPlotlyChart"]) {{ flex-wrap: wrap; }}
  [data-testid="stHorizontalBlock"]:has([data-testid="stPlotlyChart"]) > [data-testid="stColumn"] {{
    min-width: 100%; flex: 1 1 100%; }}
}}
/* The element that carries the page's script takes no room. */
[data-testid="stElementContainer"]:has(> .stHtml > .tvm-page-script) {{ display: none; }}
"""

# Streamlit keeps the theme picked in its settings menu in the browser's localStorage under a key
# made from the path the page was first loaded at (stActiveTheme-/lessons-v2), and reads it only
# there: a Dark picked after moving from / to /lessons was back to light on a reload of /lessons.
# The script writes each choice under the key of every page. Streamlit folds the sidebar by itself
# only below 768 px, and remembers a fold as the user's own choice: the script folds it below
# NARROW_PX where the user never chose, and forgets that it did.
_SCRIPT = """
(() => {
  if (window.tvmExplorerPage) return;
  window.tvmExplorerPage = true;
  const pages = PAGES, narrowPx = NARROW;
  const themeKey = /^stActiveTheme-(.*)-v(\\d+)$/;
  const setItem = Storage.prototype.setItem;
  Storage.prototype.setItem = function (key, value) {
    setItem.call(this, key, value);
    const found = this === window.localStorage && themeKey.exec(key);
    if (!found) return;
    const base = found[1].slice(0, found[1].lastIndexOf("/") + 1);
    for (const page of pages) setItem.call(this, `stActiveTheme-${base}${page}-v${found[2]}`, value);
  };
  const chosen = () => Object.keys(window.localStorage).filter(k => k.startsWith("stSidebarCollapsed-"));
  const fold = () => {
    if (window.innerWidth >= narrowPx || chosen().length) return;
    const sidebar = document.querySelector('[data-testid="stSidebar"]');
    const button = document.querySelector('[data-testid="stSidebarCollapseButton"] button');
    if (!sidebar || !button || sidebar.getAttribute("data-collapsed") !== "false") return;
    button.click();
    for (const key of chosen()) window.localStorage.removeItem(key);
  };
  fold();
  let wide = window.innerWidth >= narrowPx;
  window.addEventListener("resize", () => {
    if (wide && window.innerWidth < narrowPx) fold();
    wide = window.innerWidth >= narrowPx;
  });
})();
"""


def setup_page(url_paths: list[str]) -> None:
    """The stylesheet and the page's script, for a page of the app whose pages are at ``url_paths``."""
    st.html(f"<style>{code_view.css()}{_LAYOUT_CSS}</style>")
    script = _SCRIPT.replace("PAGES", json.dumps(url_paths)).replace("NARROW", str(NARROW_PX))
    st.html(f'<div class="tvm-page-script"></div><script>{script}</script>', unsafe_allow_javascript=True)


def chart(figure: go.Figure, key: str | None = None, container=st) -> None:
    """A figure in Streamlit's Plotly theme (its light or dark colours), and under it its
    one-sentence text alternative (explorer.figures gives every figure one): what a reader who
    cannot see the colours, or the figure, is told."""
    container.plotly_chart(figure, key=key, width="stretch", theme="streamlit")
    if alt(figure):
        container.caption(alt(figure))


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$^=&\"'])")


def plain(text: str, limit: int = 120) -> str:
    """``text`` from a link or another user, to show in Markdown as itself: each character that
    Markdown or Streamlit's directives (``:red[…]``, ``:material/…:``) would read is escaped, and
    a long value is cut."""
    text = text if len(text) <= limit else text[:limit] + "…"
    return _MARKDOWN.sub(r"\\\1", text.replace("\n", " "))


def explorer_link(spec, preset_id: str | None = None) -> str:
    """The Explorer page on ``spec`` (under ``preset_id``'s name where it is a preset's), as a relative link."""
    return "./explorer?" + urlencode(urlstate.to_query(spec, preset_id))


def lesson_label(lesson_id: str) -> str:
    return L.get_lesson(lesson_id).title


def preset_label(preset_id: str) -> str:
    """A step by its lesson's short name, its number and its title: "Matrix multiply · 1. Naive…"."""
    preset = get_preset(preset_id)
    return f"{L.get_lesson(preset.lesson).name} · {preset.step}. {preset.title}"
