"""The schedule templates, by name. Each module defines one knob dataclass and one
schedule function, registered here as a :class:`Template`."""
from __future__ import annotations

from ..errors import ExplorerError
from .common import Template
from . import depthwise_blog
from . import conv2d
from . import matmul
from . import depthwise_d2l
from . import conv1d
from . import depthwise_flat
from . import matmul_async
from . import matmul_tensorcore

TEMPLATES: dict[str, Template] = {t.name: t for t in (depthwise_blog.TEMPLATE, conv2d.TEMPLATE, matmul.TEMPLATE, depthwise_d2l.TEMPLATE, conv1d.TEMPLATE, depthwise_flat.TEMPLATE, matmul_async.TEMPLATE, matmul_tensorcore.TEMPLATE,)}


def get_template(name: str) -> Template:
    if name not in TEMPLATES:
        raise ExplorerError(f"Unknown schedule template '{name}'; choose one of: {', '.join(TEMPLATES)}.")
    return TEMPLATES[name]


def templates_for(workload_kind: str) -> list[Template]:
    return [t for t in TEMPLATES.values() if t.workload.kind == workload_kind]
