"""Display constants shared by the figures and the app: colours per memory scope and per
meaning, and palettes, readable on the app's light and dark themes alike; and the contrast
of two colours (WCAG 2). The one place to change how the explorer looks."""
from __future__ import annotations

from collections.abc import Iterable

from plotly.colors import qualitative

AA_CONTRAST = 4.5  # WCAG 2's level AA for text: the smallest contrast against its background


def luminance(colour: str) -> float:
    """WCAG 2's relative luminance of ``#rrggbb`` (or ``#rgb``)."""
    hex_digits = colour.lstrip("#")
    if len(hex_digits) == 3:
        hex_digits = "".join(c * 2 for c in hex_digits)
    channels = [int(hex_digits[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2's contrast ratio of two colours: 1 (the same) to 21 (black on white)."""
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def readable(colour: str, backgrounds: Iterable[str], ratio: float = AA_CONTRAST) -> str:
    """``colour``, or the least darker (on light backgrounds) or lighter (on dark ones) shade
    of it that reaches ``ratio`` against every one of ``backgrounds``."""
    backgrounds = tuple(backgrounds)
    towards = 0 if sum(luminance(b) for b in backgrounds) / len(backgrounds) > 0.18 else 255
    channels = [int(colour.lstrip("#")[i:i + 2], 16) for i in (0, 2, 4)]
    for step in range(21):
        mixed = "#" + "".join(f"{round(c + (towards - c) * step / 20):02x}" for c in channels)
        if all(contrast(mixed, b) >= ratio for b in backgrounds):
            return mixed
    return "#000000" if towards == 0 else "#ffffff"

# Colours of meaning: Okabe & Ito's (Color Universal Design, 2008), told apart under the common colour
# vision deficiencies, their orange darkened and a wine red added so that each has at least 3:1 (WCAG's
# contrast for graphics) against both of Streamlit's backgrounds, THEME_BACKGROUNDS
# (tests/test_analysis_figures.py). A figure never says a thing by colour alone: marker shapes,
# patterns and text labels say it too.
THEME_BACKGROUNDS = ("#ffffff", "#171614")  # Streamlit 1.67's light and dark themes, as its page draws them
BLUE, ORANGE, GREEN, VERMILLION, PURPLE, WINE = "#0072B2", "#BF8300", "#009E73", "#D55E00", "#CC79A7", "#B8405E"
MEANING_COLOURS = (BLUE, ORANGE, GREEN, VERMILLION, PURPLE, WINE)

# Memory scopes (the same colour for a buffer in code, diagrams and charts).
SCOPE_COLOURS = {
    "global": BLUE,  # DRAM / L2
    "shared": ORANGE,  # shared memory
    "local": GREEN,  # registers (TVM "local")
}
INACTIVE_COLOUR = "#8C8C8C"  # a lane switched off by a guard, an element nobody reads: grey on either theme
OK_COLOUR = BLUE  # what is as it should be: a conflict-free access, a thread whose work is used

# Bank conflicts by their degree (the most distinct words one bank serves in a request): conflict-free
# blue, then darker and redder as the degree grows; never red for a conflict-free access.
CONFLICT_COLOUR = VERMILLION  # an extra wavefront
DEGREE_COLOURS = ((1, OK_COLOUR), (2, ORANGE), (4, VERMILLION), (32, WINE))  # (up to this degree, colour)
OP_PATTERNS = {"load": "", "store": "/"}  # stores hatched: loads and stores told apart without colour


def degree_colour(degree: float) -> str:
    """The colour of a bank-conflict degree (1 = conflict-free)."""
    return next(colour for most, colour in DEGREE_COLOURS if degree <= most + 1e-9) if degree <= 32 else \
        DEGREE_COLOURS[-1][1]


# Footprint figure: outside, read by the block (into shared memory), read by the chosen thread.
FOOTPRINT_COLOURS = (INACTIVE_COLOUR, SCOPE_COLOURS["shared"], BLUE)

# Occupancy limits: the one that limits in its colour, the others grey.
LIMITER_COLOURS = {
    "threads": PURPLE,
    "blocks": WINE,
    "shared memory": SCOPE_COLOURS["shared"],
    "registers": SCOPE_COLOURS["local"],
}

# Reduction tree steps: threads that add (those whose sum is used, and the rest of the last warp),
# idle threads, and the warps that diverge (some lanes add, some wait).
TREE_COLOURS = {"needed": OK_COLOUR, "extra": ORANGE, "idle": INACTIVE_COLOUR, "divergent": VERMILLION}

# Categorical palette for ids (blocks, threads, vthreads): neighbours must differ. CARTO's "Safe"
# palette, made to be told apart with a colour vision deficiency; the figures write each id too.
CATEGORICAL = tuple(qualitative.Safe)

# Sweep heatmaps: a sequential scale, uniform in lightness for every colour vision (the figure reverses
# it when lower is better).
SWEEP_COLORSCALE = "Cividis"

FIGURE_HEIGHT = 420
TRIES_FIGURE_HEIGHT = 280  # the latency panel's small chart of a session's tries

# Roofline: the roofs (compute, and the bandwidth each memory delivers) and the points.
ROOF_COLOURS = {"compute": GREEN, "HBM": SCOPE_COLOURS["global"], "L2-resident": PURPLE}
POINT_COLOURS = {"measured": VERMILLION, "static estimate": INACTIVE_COLOUR, "tries": ORANGE}

# Lessons: a verdict's badge (Streamlit colour name, icon) and the highlight of the knobs
# a step changed (a Streamlit markdown background colour).
VERDICT_BADGES = {
    "reproduced": ("green", ":material/check_circle:"),
    "not reproduced": ("red", ":material/cancel:"),
    "needs a GPU": ("gray", ":material/hourglass_empty:"),
}
CHANGED_KNOB_HIGHLIGHT = "orange"
