"""What a sweep returns: each point's outcome (:class:`Point`), the ranking and its
table, heatmap and JSON (:class:`SweepResult`)."""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..analysis.ranking import StaticScore
from ..build import Kernel, Spec
from ..errors import ExplorerError, InvalidKnobs
from ..knobs import KnobSet
from .grid import Grid

VALID, INVALID, FAILED = "valid", "invalid", "failed"


@dataclass(frozen=True)
class Point:
    """One grid point's outcome: small and picklable (it comes back from a worker)."""

    knobs: KnobSet
    status: str  # VALID, INVALID (rejected, with reason) or FAILED (crashed, timed out, wrong result)
    reason: str = ""
    fault: tuple[str, ...] = ()  # knobs named by the rejection
    kernels: tuple[Kernel, ...] = ()
    static: StaticScore | None = None
    latency_us: float | None = None
    compile_s: float = 0.0

    def to_json(self) -> dict:
        static = self.static
        return {
            "knobs": self.knobs.to_strings(),
            "status": self.status,
            "reason": self.reason,
            "fault": list(self.fault),
            "latency_us": self.latency_us,
            "compile_s": self.compile_s,
            "kernels": [dataclasses.asdict(k) for k in self.kernels],
            "static": None if static is None else {"cost": static.cost, "metrics": dict(static.metrics),
                                                   "explanation": static.explanation},
        }

    @classmethod
    def from_json(cls, knobs_type: type[KnobSet], data: Mapping) -> Point:
        """The inverse of :meth:`to_json` (a resumed search reads its earlier points);
        knob values go through the knob dataclass like any other input."""
        if data.get("status") not in (VALID, INVALID, FAILED):
            raise ExplorerError(f"A saved sweep point has an unknown status {data.get('status')!r}.")
        static = data.get("static")
        return cls(
            knobs=knobs_type.from_strings(data["knobs"]),
            status=data["status"],
            reason=str(data.get("reason", "")),
            fault=tuple(data.get("fault", ())),
            kernels=tuple(Kernel(k["name"], tuple(k["grid"]), tuple(k["block"]), int(k["shared_bytes"]),
                                 tuple(k.get("cluster", (1, 1, 1)))) for k in data.get("kernels", ())),
            static=None if static is None else StaticScore(float(static["cost"]), tuple(static["metrics"].items()),
                                                           str(static["explanation"])),
            latency_us=None if data.get("latency_us") is None else float(data["latency_us"]),
            compile_s=float(data.get("compile_s", 0.0)),
        )


def best_point(points: Iterable[Point], measured: bool, current: Point | None = None) -> Point | None:
    """The best valid point of ``points`` and ``current``: the fastest if ``measured``, else the lowest static cost."""
    for point in points:
        if point.status == VALID and (current is None or rank_key(point, measured) < rank_key(current, measured)):
            current = point
    return current


def rank_key(point: Point, measured: bool) -> float:
    return point.latency_us if measured else point.static.cost


@dataclass(frozen=True)
class Heatmap:
    """The best value for each pair of values of two knobs (the minimum over the others).
    ``z[i][j]`` is for ``y_values[i]``, ``x_values[j]``; None where no point was valid."""

    x: str
    y: str
    x_values: tuple[str, ...]
    y_values: tuple[str, ...]
    z: tuple[tuple[float | None, ...], ...]
    best: tuple[tuple[KnobSet | None, ...], ...]  # the point behind each cell
    valid: tuple[tuple[int, ...], ...]  # valid points per cell
    total: tuple[tuple[int, ...], ...]  # points per cell
    value: str  # what z is, with its unit


@dataclass(frozen=True)
class SweepResult:
    grid: Grid
    target: str
    points: tuple[Point, ...]  # in grid order
    measured: bool  # True: ranked by measured latency; False: by the static score
    elapsed_s: float

    @property
    def ranking(self) -> str:
        """What the ranking is based on, to show next to it."""
        if self.measured:
            return f"Ranked by measured latency on the GPU ({self.target})."
        scored = next((p.static for p in self.points if p.static is not None), None)
        how = f" {scored.explanation}" if scored is not None else ""
        return f"No GPU: ranked by the static analyses, not by measurement.{how}"

    @property
    def value_label(self) -> str:
        return "latency (µs)" if self.measured else "static cost (lower is better)"

    def value(self, point: Point) -> float | None:
        if point.status != VALID:
            return None
        return point.latency_us if self.measured else point.static.cost

    def ranked(self) -> list[Point]:
        return sorted((p for p in self.points if p.status == VALID), key=lambda p: rank_key(p, self.measured))

    @property
    def best(self) -> Point | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def best_spec(self) -> Spec | None:
        best = self.best
        return dataclasses.replace(self.grid.base, knobs=best.knobs) if best is not None else None

    def skipped(self) -> list[Point]:
        return [p for p in self.points if p.status != VALID]

    def skipped_reasons(self) -> list[tuple[str, int, str]]:
        """(status, how many, one example reason) per kind of rejection, most frequent first;
        reasons that differ only in their numbers are one kind."""
        groups: dict[tuple[str, str], list[Point]] = {}
        for point in self.skipped():
            groups.setdefault((point.status, re.sub(r"\d+(?:[.,]\d+)*", "#", point.reason)), []).append(point)
        rows = [(status, len(members), members[0].reason) for (status, _), members in groups.items()]
        return sorted(rows, key=lambda row: -row[1])

    @property
    def per_minute(self) -> float:
        return 60 * len(self.points) / self.elapsed_s if self.elapsed_s else 0.0

    def table(self) -> list[dict]:
        """One row per point, best first, then the skipped ones with their reasons."""
        rank = {p.knobs: i for i, p in enumerate(self.ranked(), start=1)}
        rows = []
        for point in sorted(self.points, key=lambda p: rank.get(p.knobs, len(rank) + 1)):
            row: dict = {"rank": rank.get(point.knobs)}
            for name in self.grid.knob_names:
                row[name] = point.knobs.field(name).format(getattr(point.knobs, name))
            row["status"] = point.status
            row["latency_us" if self.measured else "static_cost"] = self.value(point)
            if point.static is not None:
                row.update(dict(point.static.metrics))
            if point.kernels:
                row["threads"] = max(k.threads_per_block for k in point.kernels)
                row["shared_bytes"] = max(k.shared_bytes for k in point.kernels)
            row["reason"] = point.reason
            rows.append(row)
        return rows

    def heatmap(self, x: str, y: str) -> Heatmap:
        for name in (x, y):
            if name not in self.grid.knob_names:
                raise InvalidKnobs(
                    f"'{name}' is not one of the swept knobs ({', '.join(self.grid.knob_names)}).", (name,)
                )
        if x == y:
            raise InvalidKnobs("A heatmap needs two different knobs.", (x,))
        axes = dict(self.grid.axes)
        xs, ys = axes[x], axes[y]
        z = [[None] * len(xs) for _ in ys]
        best = [[None] * len(xs) for _ in ys]
        valid = [[0] * len(xs) for _ in ys]
        total = [[0] * len(xs) for _ in ys]
        for point in self.points:
            i, j = ys.index(getattr(point.knobs, y)), xs.index(getattr(point.knobs, x))
            total[i][j] += 1
            value = self.value(point)
            if value is None:
                continue
            valid[i][j] += 1
            if z[i][j] is None or value < z[i][j]:
                z[i][j], best[i][j] = value, point.knobs
        knob_x, knob_y = self.grid.base.knobs.field(x), self.grid.base.knobs.field(y)
        return Heatmap(
            x=x,
            y=y,
            x_values=tuple(knob_x.format(v) for v in xs),
            y_values=tuple(knob_y.format(v) for v in ys),
            z=tuple(map(tuple, z)),
            best=tuple(map(tuple, best)),
            valid=tuple(map(tuple, valid)),
            total=tuple(map(tuple, total)),
            value=self.value_label,
        )

    def to_json(self) -> dict:
        best = self.best
        return {
            "template": self.grid.base.template,
            "workload": self.grid.base.workload.label(),
            "target": self.target,
            "grid": self.grid.to_strings(),
            "ranking": self.ranking,
            "points": len(self.points),
            "valid": len(self.ranked()),
            "elapsed_s": round(self.elapsed_s, 2),
            "best": best.knobs.to_strings() if best is not None else None,
            "skipped": [{"status": s, "count": n, "example": r} for s, n, r in self.skipped_reasons()],
            "table": self.table(),
        }
