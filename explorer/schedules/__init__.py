"""The schedule templates, by name. Each module defines one knob dataclass and one
schedule function, registered here as a :class:`Template`."""
from __future__ import annotations

from ..errors import ExplorerError
from . import (
    conv1d,
    conv2d,
    conv2d_async,
    depthwise_blog,
    depthwise_d2l,
    depthwise_flat,
    matmul,
    matmul_async,
    matmul_tensorcore,
)
from .common import Template

TEMPLATES: dict[str, Template] = {t.name: t for t in (depthwise_blog.TEMPLATE, conv2d.TEMPLATE, matmul.TEMPLATE,
                                                      depthwise_d2l.TEMPLATE, conv1d.TEMPLATE, depthwise_flat.TEMPLATE,
                                                      matmul_async.TEMPLATE, matmul_tensorcore.TEMPLATE,
                                                      conv2d_async.TEMPLATE,)}


def get_template(name: str) -> Template:
    if name not in TEMPLATES:
        raise ExplorerError(f"Unknown schedule template '{name}'; choose one of: {', '.join(TEMPLATES)}.")
    return TEMPLATES[name]


def templates_for(workload_kind: str) -> list[Template]:
    return [t for t in TEMPLATES.values() if t.workload.kind == workload_kind]
