"""Display constants shared by the figures and the app: colours per memory scope and per
meaning, and palettes. The one place to change how the explorer looks."""
from __future__ import annotations

from plotly.colors import qualitative

# Memory scopes (the same colour for a buffer in code, diagrams and charts).
SCOPE_COLOURS = {
    "global": "#4C78A8",  # DRAM / L2: blue
    "shared": "#F58518",  # shared memory: orange
    "local": "#54A24B",  # registers (TVM "local"): green
}
INACTIVE_COLOUR = "#D0D0D0"  # a lane switched off by a guard, an element nobody reads
CONFLICT_COLOUR = "#B2182B"  # extra wavefronts: bank conflicts
OK_COLOUR = SCOPE_COLOURS["local"]

# Footprint figure: outside, read by the block, read by the chosen thread.
FOOTPRINT_COLOURS = (INACTIVE_COLOUR, "#FDD0A2", SCOPE_COLOURS["shared"])

# Occupancy limits.
LIMITER_COLOURS = {
    "threads": "#9D755D",
    "blocks": "#BAB0AC",
    "shared memory": SCOPE_COLOURS["shared"],
    "registers": SCOPE_COLOURS["local"],
}

# Loads vs stores in bank-conflict charts.
OP_COLOURS = {"load": SCOPE_COLOURS["shared"], "store": "#E45756"}

# Reduction tree steps: threads that add (those whose sum is used, and the rest of the last warp),
# idle threads, and the warps that diverge (some lanes add, some wait).
TREE_COLOURS = {"needed": OK_COLOUR, "extra": "#A1D99B", "idle": INACTIVE_COLOUR, "divergent": "#7F3C8D"}

# Categorical palette for ids (blocks, threads, vthreads): neighbours must differ.
CATEGORICAL = tuple(qualitative.Light24)

# Sweep heatmaps: a sequential scale (the figure reverses it when lower is better).
SWEEP_COLORSCALE = "Viridis"

FIGURE_HEIGHT = 420
TRIES_FIGURE_HEIGHT = 280  # the latency panel's small chart of a session's tries

# Roofline: the roofs (compute, and the bandwidth each memory delivers) and the points.
ROOF_COLOURS = {"compute": "#72B7B2", "HBM": SCOPE_COLOURS["global"], "L2-resident": "#B279A2"}
POINT_COLOURS = {"measured": "#E45756", "static estimate": INACTIVE_COLOUR, "tries": "#9D755D"}

# Lessons: a verdict's badge (Streamlit colour name, icon) and the highlight of the knobs
# a step changed (a Streamlit markdown background colour).
VERDICT_BADGES = {
    "reproduced": ("green", ":material/check_circle:"),
    "not reproduced": ("red", ":material/cancel:"),
    "needs a GPU": ("gray", ":material/hourglass_empty:"),
}
CHANGED_KNOB_HIGHLIGHT = "orange"
