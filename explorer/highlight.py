"""Highlighted code: Pygments HTML with line numbers for the code views (TVMScript, CUDA,
SASS, diffs). Pure functions, cached by text; a server's build processes highlight a
build's views once per setting (:func:`views_html`), so the app's one process does not
lex every setting that a class opens.
"""
from __future__ import annotations

import functools

from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import RegexLexer
from pygments.lexers import CudaLexer, DiffLexer, PythonLexer
from pygments.token import Comment, Generic, Keyword, Name, Number, Punctuation, Text, Whitespace


class SassLexer(RegexLexer):
    """SASS as ``explorer.analysis.sass.sass_text`` writes it: ``// line: CUDA`` comments,
    labels, predicates; opcodes coloured by what they touch (shared, global, local memory,
    arithmetic, control), registers and immediates."""

    name = "SASS"
    tokens = {
        "root": [
            (r"//[^\n]*", Comment.Single),
            (r"\.L\w+:", Name.Label),
            (r"\s+", Whitespace),
            (r"@!?U?P\w+", Name.Decorator),
            (r"(?:FFMA|FADD|FMUL)\b[\w.]*", Name.Function, "operands"),
            (r"(?:LDS|STS|LDSM)\b[\w.]*", Name.Tag, "operands"),
            (r"(?:LDG|STG)\b[\w.]*", Name.Class, "operands"),
            (r"(?:LDL|STL)\b[\w.]*", Generic.Error, "operands"),
            (r"(?:BRA|BRX|JMP|JMX|BAR|EXIT|RET|CALL|BSSY|BSYNC|WARPSYNC)\b[\w.]*", Keyword, "operands"),
            (r"[A-Z][\w.]*", Name.Builtin, "operands"),
        ],
        "operands": [
            (r";", Punctuation, "#pop"),
            (r"\n", Whitespace, "#pop"),
            (r"`\(\.L\w+\)", Name.Label),
            (r"\b(?:U?R(?:\d+|Z)|U?P(?:\d+|T)|SR_\w+)\b", Name.Variable),
            (r"-?0x[0-9a-fA-F]+|\b\d+(?:\.\d+)?\b", Number),
            (r"\w+|[^\w;\n]", Text),
        ],
    }


# TVMScript (scheduled and lowered TIR) is Python syntax; the generated kernels are CUDA C++.
LEXERS = {"python": PythonLexer, "cuda": CudaLexer, "diff": DiffLexer, "sass": SassLexer}
STYLE = "friendly"
CSS_CLASS = "tvmhl"

@functools.lru_cache(maxsize=256)
def highlight(text: str, language: str, hl_lines: tuple[int, ...] = (), first_line: int = 1) -> str:
    """HTML of ``text`` with line numbers from ``first_line``; ``hl_lines`` (1-based
    within ``text``) are marked."""
    # A diff's own line numbers would mislead: its hunk headers say where the lines are.
    formatter = HtmlFormatter(style=STYLE, cssclass=CSS_CLASS, linenos=False if language == "diff" else "inline",
                              linenostart=first_line, hl_lines=list(hl_lines))
    return pygments_highlight(text, LEXERS[language](), formatter)


def keep_highlights(count: int) -> None:
    """Keep at most ``count`` highlighted texts in this process's cache (256 by default: an app
    process shows the same views again). A build process highlights each setting's views once
    for the whole server, so what it keeps is never asked for again: 43 MiB of HTML after 300
    settings of the modern lessons, up to 4 MB for one conv2d_async setting's views."""
    global highlight
    highlight = functools.lru_cache(maxsize=count)(highlight.__wrapped__)


def kernels_only(cuda: str) -> tuple[str, int]:
    """The CUDA source from its first kernel on, and that line's number: TVM's generated
    file opens with ~55 lines of includes and type aliases that are the same for every
    kernel."""
    lines = cuda.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        if line.startswith('extern "C" __global__'):
            return "".join(lines[number - 1:]), number
    return cuda, 1



# The language of each code view of a Build, by attribute.
VIEW_LANGUAGES = {"tensorir": "python", "lowered": "python", "cuda": "cuda", "trace": "python"}


def view_text(build, attribute: str) -> tuple[str, int]:
    """The text a code view shows by default, and its first line's number: the CUDA view
    starts at the first kernel."""
    text = getattr(build, attribute)
    return kernels_only(text) if attribute == "cuda" else (text, 1)


# The view a page opens on and a short one: highlighted with the build; the others (the
# lowered TIR and the CUDA can be 150 KB of unrolled code) right after it.
FIRST_VIEWS = ("tensorir", "trace")


def views_texts(build, attributes) -> dict[str, tuple[str, int, str]]:
    """attribute -> (the text its view shows by default, its first line's number, its language)."""
    return {attribute: (*view_text(build, attribute), VIEW_LANGUAGES[attribute]) for attribute in attributes}


def texts_html(texts: dict[str, tuple[str, int, str]]) -> dict[str, str]:
    """Each of :func:`views_texts`' texts highlighted: attribute -> HTML."""
    return {attribute: highlight(text, language, (), first_line)
            for attribute, (text, first_line, language) in texts.items()}


def views_html(build, attributes=tuple(VIEW_LANGUAGES)) -> dict[str, str]:
    """The code views ``attributes`` of ``build`` as they show by default, highlighted."""
    return texts_html(views_texts(build, attributes))
