"""Lessons and their presets: data files in presets/*.toml, one lesson each, loaded through
the knob and workload dataclasses so that an unknown key or a wrong type fails loudly,
naming the file and the key. A preset is a named setting (template, workload, knobs) with
the claim it makes; its step is its place in its lesson, in file order.

File layout::

    [lesson]
    id = "depthwise_blog"
    title = ".."
    name = "Depthwise convolution (TVM blog)"   # short, where its steps are listed with others (the title if none)
    tagline = "one line: what the lesson teaches"   # the Start page lists each lesson with these three
    level = "introductory"                      # one of LEVELS
    gpu = "any NVIDIA GPU"                      # what timing its claims needs (the code views need none)
    source = "Yuwei Hu, “Optimize …”, TVM blog, 2017"   # the tutorial, blog post or paper the lesson follows
    url = "https://tvm.apache.org/2017/08/22/…"         # optional: where to read it

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
    reported = [ { what = "TVM SAME pad", value_us = 90.9, hardware = "GTX 1080", this_schedule = true } ]
    compare = [ { with = "dw-blog-vthread-case3", expect = "faster" } ]     # optional
    static = { bank_conflict_degree = 2, outputs_per_thread = 8 }            # optional

``this_schedule`` marks the source tutorial's time for this very schedule (at most one entry);
the other entries are context (another library, the tutorial's baseline). ``compare``
makes a timing claim checkable: this step against another preset, ``expect`` one of
explorer.claims.RELATIONS (``faster``/``slower``/``same_speed``/``no_slower`` compare
times; ``more_gflops``/``fewer_gflops`` compare FLOP rates, for claims across workloads),
optionally ``at_least`` = the smallest ratio that counts (e.g. 10 for "an order of
magnitude"; not for ``same_speed`` and ``no_slower``, whose bar is the noise band).
``static`` makes a structural claim checkable: facts (explorer.claims.FACTS, computed from
the build) and the values the claim states. A ``[preset.question]`` table, after the preset's
own keys, is the question the step asks before its measurement (explorer.questions).

``presets/curriculum.toml`` lists the lessons' ids in the order they are taught (each once):
:func:`all_lessons` returns them in that order, and a student without a link starts on the
first step of the first.
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .build import Spec
from .claims import FACTS, NOISE_BAND_RELATIONS, RELATIONS
from .errors import ExplorerError, PresetError
from .questions import Question, load_question
from .schedules import get_template, workload_from_mapping

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"

_PRESET_KEYS = {"id", "title", "source", "template", "claim", "explanation", "found_by", "workload", "knobs",
                "reported", "compare", "static", "question"}
_REQUIRED = {"id", "title", "source", "template", "workload", "claim"}
_REPORTED_KEYS = {"what", "value_us", "hardware", "this_schedule"}
_COMPARE_KEYS = {"with", "expect", "at_least"}
_LESSON_KEYS = {"id", "title", "name", "tagline", "level", "gpu", "source", "url", "summary"}
_LESSON_REQUIRED = ("id", "title")
LEVELS = ("introductory", "intermediate", "advanced")
CURRICULUM_FILE = "curriculum.toml"  # the lessons' order, in the presets folder (not a lesson)


@dataclass(frozen=True)
class Reported:
    """A figure the tutorial reports, with the hardware it was measured on."""

    what: str
    value_us: float | None
    hardware: str
    this_schedule: bool = False  # the tutorial's time for the preset's own schedule

    def __str__(self):
        value = f"{self.value_us:g} µs" if self.value_us is not None else "—"
        return f"{self.what}: {value} ({self.hardware})"


@dataclass(frozen=True)
class Comparison:
    """A timing claim: this preset is ``expect`` compared with preset ``other``."""

    other: str
    expect: str  # one of explorer.claims.RELATIONS
    at_least: float | None = None


@dataclass(frozen=True)
class Preset:
    id: str
    title: str
    lesson: str  # the id of the lesson it is a step of
    step: int  # its place in the lesson, from 1
    source: str
    spec: Spec
    claim: str
    explanation: str = ""
    found_by: str = ""
    reported: tuple[Reported, ...] = ()
    compare: tuple[Comparison, ...] = ()
    static: tuple[tuple[str, object], ...] = ()  # (fact, claimed value), lists as tuples
    question: Question | None = None  # asked before the step's measurement is shown

    @property
    def own_reported(self) -> Reported | None:
        """The tutorial's figure for this very schedule, if it reports one."""
        return next((r for r in self.reported if r.this_schedule), None)


@dataclass(frozen=True)
class Step:
    """A preset at its place in a lesson, with the one before it."""

    number: int  # from 1
    preset: Preset
    previous: Preset | None

    @property
    def changed_knobs(self) -> tuple[str, ...]:
        """Knobs whose value differs from the previous step's (all of them when the
        template changes; none for the first step)."""
        return () if self.previous is None else _changed(self.previous.spec.knobs, self.preset.spec.knobs)

    @property
    def changed_shape(self) -> tuple[str, ...]:
        """Workload parameters that differ from the previous step's."""
        return () if self.previous is None else _changed(self.previous.spec.workload, self.preset.spec.workload)


def _changed(before, now) -> tuple[str, ...]:
    """Fields of ``now`` (knobs or a workload) that differ from ``before``; all of them
    when the two are of different kinds."""
    if type(before) is not type(now):
        return tuple(knob.name for knob in now.fields())
    return now.changed_from(before)


@dataclass(frozen=True)
class Lesson:
    """One file of presets/: the source it follows and its presets as ordered steps."""

    id: str
    title: str
    source: str  # the tutorial, blog post or paper the lesson follows
    summary: str
    steps: tuple[Step, ...]
    name: str = ""  # short, beside its steps' titles where steps of several lessons are listed
    tagline: str = ""  # one line: what it teaches
    level: str = ""  # one of LEVELS
    gpu: str = ""  # the GPU its timing claims need
    url: str = ""  # where to read its source

    @property
    def presets(self) -> tuple[Preset, ...]:
        return tuple(step.preset for step in self.steps)

    def step(self, number: int) -> Step:
        """Step ``number`` (from 1); a number out of range gives the nearest step, so a
        stale or hand-edited URL still opens the lesson."""
        return self.steps[min(max(number, 1), len(self.steps)) - 1]


def load_file(path: Path) -> Lesson:
    where = path.name
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise PresetError(f"{where}: not valid TOML ({error}).") from None
    if "tutorial" in data:
        raise PresetError(f"{where}: a lesson file's table is [lesson], not [tutorial].")
    _check_keys(data, {"lesson", "preset"}, where)
    lesson = data.get("lesson", {})
    _check_keys(lesson, _LESSON_KEYS, f"{where} [lesson]")
    missing = [key for key in _LESSON_REQUIRED if not isinstance(lesson.get(key), str) or not lesson[key]]
    if missing:
        raise PresetError(f"{where}: [lesson] needs {' and '.join(repr(key) for key in missing)} (text).")
    wrong = [key for key in _LESSON_KEYS if key in lesson and not isinstance(lesson[key], str)]
    if wrong:
        raise PresetError(f"{where}: [lesson] {', '.join(repr(key) for key in wrong)} must be text.")
    if lesson.get("level", LEVELS[0]) not in LEVELS:
        raise PresetError(f"{where}: [lesson] level '{lesson['level']}' is not one of {', '.join(LEVELS)}.")
    steps, previous = [], None
    for number, raw in enumerate(data.get("preset", []), start=1):
        preset = _load_preset(raw, lesson["id"], number, where, previous.id if previous else None)
        steps.append(Step(number, preset, previous))
        previous = preset
    return Lesson(lesson["id"], lesson["title"], lesson.get("source", ""), lesson.get("summary", ""), tuple(steps),
                  name=lesson.get("name", lesson["title"]), tagline=lesson.get("tagline", ""),
                  level=lesson.get("level", ""), gpu=lesson.get("gpu", ""), url=lesson.get("url", ""))


def _load_preset(raw: dict, lesson: str, step: int, where: str, previous: str | None = None) -> Preset:
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
        if not isinstance(item.get("this_schedule", False), bool):
            raise PresetError(f"{here} reported: 'this_schedule' must be true or false.")
        reported.append(Reported(item.get("what", ""), item.get("value_us"), item.get("hardware", ""),
                                 item.get("this_schedule", False)))
    if sum(r.this_schedule for r in reported) > 1:
        raise PresetError(f"{here}: only one reported figure can be 'this_schedule'.")
    compare = tuple(_load_comparison(item, here) for item in raw.get("compare", []))
    static = _load_static(raw.get("static", {}), here)
    for key in ("id", "title", "source", "claim", "explanation", "found_by"):
        if key in raw and not isinstance(raw[key], str):
            raise PresetError(f"{here}: '{key}' must be text.")
    question = load_question(raw["question"], here, raw["id"], previous) if "question" in raw else None
    return Preset(
        id=raw["id"], title=raw["title"], lesson=lesson, step=step, source=raw["source"], spec=spec,
        claim=raw["claim"], explanation=raw.get("explanation", ""), found_by=raw.get("found_by", ""),
        reported=tuple(reported), compare=compare, static=static, question=question,
    )


def _load_comparison(item: dict, here: str) -> Comparison:
    _check_keys(item, _COMPARE_KEYS, f"{here} compare")
    other, expect, at_least = item.get("with"), item.get("expect"), item.get("at_least")
    if not isinstance(other, str) or expect not in RELATIONS:
        raise PresetError(f"{here} compare: needs 'with' = a preset id and 'expect' = one of {', '.join(RELATIONS)}.")
    if at_least is not None and (isinstance(at_least, bool) or not isinstance(at_least, (int, float)) or at_least < 1):
        raise PresetError(f"{here} compare: 'at_least' must be a ratio of 1 or more.")
    if at_least is not None and expect in NOISE_BAND_RELATIONS:
        raise PresetError(f"{here} compare: '{expect}' is judged against the noise band, so it takes no 'at_least'.")
    return Comparison(other, expect, float(at_least) if at_least is not None else None)


def _load_static(table: dict, here: str) -> tuple[tuple[str, object], ...]:
    if not isinstance(table, dict):
        raise PresetError(f"{here}: 'static' must be a table of facts.")
    _check_keys(table, set(FACTS), f"{here} static")
    return tuple((name, _frozen(table[name])) for name in FACTS if name in table)


def _frozen(value):
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _check_keys(table: dict, allowed: set, where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise PresetError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}.")


def curriculum(directory: Path, ids: list[str]) -> list[str]:
    """The lessons' ids in the order of ``directory``'s curriculum file (``ids``, the lessons its
    files hold, in name order, where it has none); each lesson named there once."""
    path = directory / CURRICULUM_FILE
    if not path.exists():
        return ids
    try:
        order = tomllib.loads(path.read_text()).get("lessons")
    except tomllib.TOMLDecodeError as error:
        raise PresetError(f"{CURRICULUM_FILE}: not valid TOML ({error}).") from None
    if not isinstance(order, list) or not all(isinstance(i, str) for i in order):
        raise PresetError(f"{CURRICULUM_FILE}: needs 'lessons' = a list of lesson ids.")
    twice = sorted({i for i in order if order.count(i) > 1})
    unknown = [i for i in order if i not in ids]
    missing = [i for i in ids if i not in order]
    for problem, names in (("names twice", twice), ("names no lesson file for", unknown), ("leaves out", missing)):
        if names:
            raise PresetError(f"{CURRICULUM_FILE} {problem} {', '.join(names)}: name each lesson once.")
    return order


@functools.lru_cache(maxsize=1)
def all_lessons(directory: Path = PRESET_DIR) -> tuple[Lesson, ...]:
    """Every lesson file of ``directory`` (a file may have no presets yet), in the curriculum's order."""
    by_id = {lesson.id: lesson for lesson in (load_file(path) for path in sorted(directory.glob("*.toml"))
                                              if path.name != CURRICULUM_FILE)}
    loaded = tuple(by_id[i] for i in curriculum(directory, list(by_id)))
    seen: dict[str, str] = {}
    for lesson in loaded:
        for preset in lesson.presets:
            if preset.id in seen:
                raise PresetError(f"Preset id '{preset.id}' is used twice ({seen[preset.id]} and {lesson.id}).")
            seen[preset.id] = lesson.id
    for lesson in loaded:
        for preset in lesson.presets:
            for comparison in preset.compare:
                if comparison.other not in seen or comparison.other == preset.id:
                    raise PresetError(
                        f"Preset '{preset.id}' compares itself with '{comparison.other}', which is not another preset."
                    )
            unknown = [s for s in preset.question.settings if s not in seen] if preset.question else []
            if unknown:
                raise PresetError(f"Preset '{preset.id}' asks a question about '{unknown[0]}', which is not a preset.")
    return loaded


def all_presets() -> dict[str, Preset]:
    return {p.id: p for lesson in all_lessons() for p in lesson.presets}


def get_preset(name: str) -> Preset:
    presets = all_presets()
    if name not in presets:
        close = [p for p in presets if name.lower() in p.lower()][:5]
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise PresetError(f"No preset named '{name}'.{hint}")
    return presets[name]


def default_preset() -> str:
    """The preset a student sees on opening the app without a link: the first step of the
    curriculum's first lesson."""
    return next(iter(all_presets()))


def default_spec() -> Spec:
    return get_preset(default_preset()).spec
