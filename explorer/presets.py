"""Presets: data files in presets/*.toml, one per tutorial, loaded through the knob and
workload dataclasses so that an unknown key or a wrong type fails loudly, naming the
file and the key.

File layout::

    [tutorial]
    id = "depthwise_blog"            # also the lesson id
    title = "..."
    source = "003_477c4d8cf32c97d4.txt"

    [[preset]]
    id = "dw-blog-final-96"
    title = "..."
    source = "section 'Vthread and Strided Patterns', case 4"
    template = "depthwise_blog"
    claim = "one sentence"
    explanation = "what this step does and why it should help"   # optional
    found_by = "python -m explorer sweep ..."                     # optional
    workload = { kind = "depthwise_conv2d", height = 96, width = 96 }
    knobs = { num_thread_y = 8 }     # over the template's defaults
    reported = [ { what = "TVM SAME pad", value_us = 90.9, hardware = "GTX 1080" } ]
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .build import Spec
from .errors import ExplorerError, PresetError
from .schedules import get_template
from .workloads import workload_from_mapping

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"

_PRESET_KEYS = {"id", "title", "source", "template", "claim", "explanation", "found_by", "workload", "knobs", "reported"}
_REQUIRED = {"id", "title", "source", "template", "workload", "claim"}
_REPORTED_KEYS = {"what", "value_us", "hardware"}
_TUTORIAL_KEYS = {"id", "title", "source", "summary"}


@dataclass(frozen=True)
class Reported:
    """A figure the tutorial reports, with the hardware it was measured on."""

    what: str
    value_us: float | None
    hardware: str

    def __str__(self):
        value = f"{self.value_us:g} µs" if self.value_us is not None else "—"
        return f"{self.what}: {value} ({self.hardware})"


@dataclass(frozen=True)
class Preset:
    id: str
    title: str
    tutorial: str
    step: int  # position within its tutorial, from 1
    source: str
    spec: Spec
    claim: str
    explanation: str = ""
    found_by: str = ""
    reported: tuple[Reported, ...] = ()


@dataclass(frozen=True)
class Tutorial:
    id: str
    title: str
    source: str
    summary: str
    presets: tuple[Preset, ...]


def load_file(path: Path) -> Tutorial:
    where = path.name
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise PresetError(f"{where}: not valid TOML ({error}).") from None
    _check_keys(data, {"tutorial", "preset"}, where)
    tutorial = data.get("tutorial", {})
    _check_keys(tutorial, _TUTORIAL_KEYS, f"{where} [tutorial]")
    if "id" not in tutorial or "title" not in tutorial:
        raise PresetError(f"{where}: [tutorial] needs 'id' and 'title'.")
    presets = []
    for step, raw in enumerate(data.get("preset", []), start=1):
        presets.append(_load_preset(raw, tutorial["id"], step, where))
    return Tutorial(tutorial["id"], tutorial["title"], tutorial.get("source", ""), tutorial.get("summary", ""), tuple(presets))


def _load_preset(raw: dict, tutorial: str, step: int, where: str) -> Preset:
    name = raw.get("id", f"#{step}")
    here = f"{where} preset '{name}'"
    _check_keys(raw, _PRESET_KEYS, here)
    missing = _REQUIRED - raw.keys()
    if missing:
        raise PresetError(f"{here}: missing {', '.join(sorted(missing))}.")
    try:
        template = get_template(raw["template"])
        workload_values = dict(raw["workload"])
        kind = workload_values.pop("kind", template.workload.kind)
        workload = workload_from_mapping(kind, workload_values)
        knobs = template.knobs.from_mapping(raw.get("knobs", {}))
        spec = Spec(template.name, workload, knobs)
    except ExplorerError as error:
        raise PresetError(f"{here}: {error}") from None
    reported = []
    for item in raw.get("reported", []):
        _check_keys(item, _REPORTED_KEYS, f"{here} reported")
        reported.append(Reported(item.get("what", ""), item.get("value_us"), item.get("hardware", "")))
    for key in ("id", "title", "source", "claim", "explanation", "found_by"):
        if key in raw and not isinstance(raw[key], str):
            raise PresetError(f"{here}: '{key}' must be text.")
    return Preset(
        id=raw["id"], title=raw["title"], tutorial=tutorial, step=step, source=raw["source"], spec=spec,
        claim=raw["claim"], explanation=raw.get("explanation", ""), found_by=raw.get("found_by", ""),
        reported=tuple(reported),
    )


def _check_keys(table: dict, allowed: set, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise PresetError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}.")


@functools.lru_cache(maxsize=1)
def tutorials(directory: Path = PRESET_DIR) -> tuple[Tutorial, ...]:
    loaded = tuple(load_file(path) for path in sorted(directory.glob("*.toml")))
    seen: dict[str, str] = {}
    for tutorial in loaded:
        for preset in tutorial.presets:
            if preset.id in seen:
                raise PresetError(f"Preset id '{preset.id}' is used twice ({seen[preset.id]} and {tutorial.id}).")
            seen[preset.id] = tutorial.id
    return loaded


def all_presets() -> dict[str, Preset]:
    return {p.id: p for t in tutorials() for p in t.presets}


def get_preset(name: str) -> Preset:
    presets = all_presets()
    if name not in presets:
        close = [p for p in presets if name.lower() in p.lower()][:5]
        hint = f" Did you mean: {', '.join(close)}?" if close else " List them with: python -m explorer presets"
        raise PresetError(f"No preset named '{name}'.{hint}")
    return presets[name]
