"""Code views: highlighted source (explorer.highlight) with line numbers and a copy button,
and a line diff against another version of the same view.

A server's build processes highlight each build's views once (``Build.views_html``); other
text is highlighted here, cached by text. ``data-view`` on each block names the view, for
the browser test and for linking.
"""
from __future__ import annotations

import difflib
import html

import streamlit as st

from explorer.highlight import VIEW_LANGUAGES, highlight, stylesheet

# The code views of a Build: tab label -> (Build attribute, lexer).
VIEWS = {label: (attribute, VIEW_LANGUAGES[attribute]) for label, attribute in (
    ("Scheduled TensorIR", "tensorir"), ("Lowered TIR", "lowered"), ("CUDA", "cuda"), ("Schedule trace", "trace"))}
# The frame of a block (its bar, the copy button) in the theme's colours: light-dark() follows the
# color-scheme Streamlit sets for its light and dark themes (explorer.highlight.stylesheet).
_FRAME_CSS = """
.tvm-code { border: 1px solid light-dark(#d0d7de, #30363d); border-radius: 0.5rem; margin-bottom: 0.5rem; }
.tvm-code-bar { display: flex; justify-content: space-between; align-items: center; gap: 0.5rem;
  padding: 0.25rem 0.6rem; font-size: 0.8rem; color: light-dark(#424a53, #c9d1d9);
  background: light-dark(#f0f2f6, #161b22);
  border-bottom: 1px solid light-dark(#d0d7de, #30363d); border-radius: 0.5rem 0.5rem 0 0; }
.tvm-code-bar button { font-size: 0.8rem; padding: 0.1rem 0.6rem; border-radius: 0.3rem; cursor: pointer;
  color: light-dark(#1f2328, #e6edf3); background: light-dark(#ffffff, #21262d);
  border: 1px solid light-dark(#8c959f, #6e7681); }
.tvm-code-bar button:hover { background: light-dark(#eaeef2, #30363d); }
.tvm-code-body { max-height: 36rem; overflow: auto; }
.tvm-code-body pre { margin: 0; padding: 0.5rem 0.75rem; font-size: 0.82rem; line-height: 1.35;
  background: transparent; }
.tvm-code-body .linenos { padding-right: 0.8rem; user-select: none; }
.tvm-code.stale { opacity: 0.55; }
.tvm-code.stale .tvm-code-bar { background: light-dark(#fff4e5, #3d2b12); }
"""


def css() -> str:
    """The code views' stylesheet: their frames and the highlighting, for both themes."""
    return _FRAME_CSS + stylesheet()


def diff(old: str, new: str, old_name: str, new_name: str, context: int = 3) -> str:
    """Unified line diff, "" when the texts are equal."""
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, n=context, lineterm="")
    return "\n".join(lines)


def diff_counts(diff_text: str) -> tuple[int, int]:
    """(lines added, lines removed) of a unified diff."""
    added = sum(1 for line in diff_text.splitlines() if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff_text.splitlines() if line.startswith("-") and not line.startswith("---"))
    return added, removed


def block_html(text: str, language: str, view: str, caption: str = "", stale: bool = False,
               hl_lines: tuple[int, ...] = (), first_line: int = 1, highlighted: str | None = None) -> str:
    """One code block: a bar (caption, copy button) over the highlighted text
    (``highlighted``, where the build processes already made it)."""
    classes = "tvm-code stale" if stale else "tvm-code"
    copy = ("navigator.clipboard.writeText(this.closest('.tvm-code').querySelector('textarea').value)"
            ".then(() => { this.textContent = 'Copied'; setTimeout(() => { this.textContent = 'Copy'; }, 1500); })")
    return (
        f'<div class="{classes}" data-view="{html.escape(view)}">'
        f'<div class="tvm-code-bar"><span>{html.escape(caption)}</span>'
        f'<button type="button" title="Copy to the clipboard" onclick="{html.escape(copy)}">Copy</button></div>'
        f'<div class="tvm-code-body">{highlighted or highlight(text, language, hl_lines, first_line)}</div>'
        f'<textarea hidden readonly>{html.escape(text)}</textarea></div>'
    )


def show_code(text: str, language: str, view: str, caption: str = "", stale: bool = False,
              hl_lines: tuple[int, ...] = (), first_line: int = 1, highlighted: str | None = None) -> None:
    st.html(block_html(text, language, view, caption, stale, hl_lines, first_line, highlighted),
            unsafe_allow_javascript=True)


def show_diff(old: str, new: str, view: str, old_name: str, new_name: str) -> None:
    text = diff(old, new, old_name, new_name)
    if not text:
        st.caption(f"No change in this view between {old_name} and {new_name}.")
        return
    added, removed = diff_counts(text)
    show_code(text, "diff", f"{view}-diff", f"{old_name} → {new_name}: +{added} −{removed} lines")
