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
from pygments.styles import get_style_by_name
from pygments.token import STANDARD_TYPES, Comment, Generic, Keyword, Name, Number, Punctuation, Text, Token, Whitespace

from .style import readable


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
CSS_CLASS = "tvmhl"
# A Pygments style for each of the app's themes, both with every colour at WCAG AA against their
# background (stylesheet() makes sure of it): Pygments' default and GitHub's dark one.
STYLES = {"light": "default", "dark": "github-dark"}
# The text that no token colours, and a marked line's background (Pygments' own: a yellow the
# dark theme's text cannot be read on, and a grey too light for its dark one).
PLAIN_TEXT = {"light": "#1f2328", "dark": "#e6edf3"}
MARKED_LINE = {"light": "#fff8c5", "dark": "#3b3514"}
LINE_NUMBERS = {"light": "#6e7781", "dark": "#8b949e"}


@functools.lru_cache(maxsize=256)
def highlight(text: str, language: str, hl_lines: tuple[int, ...] = (), first_line: int = 1) -> str:
    """HTML of ``text`` with line numbers from ``first_line``; ``hl_lines`` (1-based
    within ``text``) are marked."""
    # A diff's own line numbers would mislead: its hunk headers say where the lines are.
    # Token classes only: their colours are stylesheet()'s, for both themes.
    formatter = HtmlFormatter(style=STYLES["light"], cssclass=CSS_CLASS,
                              linenos=False if language == "diff" else "inline", linenostart=first_line,
                              hl_lines=list(hl_lines))
    return pygments_highlight(text, LEXERS[language](), formatter)


def _colour(value: str | None) -> str | None:
    return None if not value else "#" + value.lstrip("#").lower()


def theme_colours(theme: str) -> dict:
    """The colours of ``theme``'s style (``light`` or ``dark``): the block's background, a marked
    line's, and for every token type its text (made readable on both) and its own background."""
    style = get_style_by_name(STYLES[theme])
    background, marked = _colour(style.background_color), MARKED_LINE[theme]
    tokens = {}
    for token in STANDARD_TYPES:
        own = style.style_for_token(token)
        colour, token_background = _colour(own["color"]) or PLAIN_TEXT[theme], _colour(own["bgcolor"])
        behind = (token_background,) if token_background else (background, marked)
        tokens[token] = {"color": readable(colour, behind), "background": token_background, "bold": own["bold"],
                         "italic": own["italic"]}
    return {"background": background, "marked": marked, "tokens": tokens,
            "line_numbers": readable(LINE_NUMBERS[theme], (background,))}


@functools.lru_cache(maxsize=1)
def stylesheet() -> str:
    """CSS for the highlighted views under the app's light and dark themes at once: each colour is
    CSS's ``light-dark(light, dark)``, which follows the ``color-scheme`` Streamlit sets on its
    page, so a view changes with the theme at once, without a rerun of the page."""
    light, dark = theme_colours("light"), theme_colours("dark")

    def both(key, token=None) -> str:
        pair = [(colours["tokens"][token] if token is not None else colours)[key] or "transparent"
                for colours in (light, dark)]
        return f"light-dark({pair[0]}, {pair[1]})"

    root = f".{CSS_CLASS}"
    rules = [f"{root} {{ background: {both('background')}; color: {both('color', Token)}; }}",
             f"{root} .hll {{ background-color: {both('marked')}; }}",
             f"{root} .linenos {{ color: {both('line_numbers')}; background-color: transparent; }}"]
    for token, short in STANDARD_TYPES.items():
        if not short:
            continue
        values = light["tokens"][token]
        declarations = [f"color: {both('color', token)}"]
        if values["background"] or dark["tokens"][token]["background"]:
            declarations.append(f"background-color: {both('background', token)}")
        if values["bold"]:
            declarations.append("font-weight: bold")
        if values["italic"]:
            declarations.append("font-style: italic")
        rules.append(f"{root} .{short} {{ {'; '.join(declarations)} }}")
    return "\n".join(rules)


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
