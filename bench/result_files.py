"""Where the bench scripts keep their raw results (``bench/results``), and a GPU's name as it
appears in their file names ("NVIDIA H100 80GB HBM3" → "nvidia-h100-80gb-hbm3"), so that a run on
another GPU writes beside, not over, this one's."""
from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def gpu_slug(name: str) -> str:
    """``name`` in lower case with every run of other characters than letters and digits one hyphen."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
