"""The schedule templates, by name: the one registry of the library. Each module defines
one knob dataclass and one schedule function, registered here as a :class:`Template`;
a workload is registered through its templates (the app, the CLI, links and presets
list the workloads that have one)."""
from __future__ import annotations

from ..errors import ExplorerError, InvalidWorkload
from ..workloads import Workload
from . import (
    attention_fused,
    attention_hopper,
    attention_mma,
    attention_unfused,
    conv1d,
    conv2d,
    conv2d_async,
    depthwise_blog,
    depthwise_d2l,
    depthwise_flat,
    matmul,
    matmul_async,
    matmul_hopper,
    matmul_tensorcore,
    reduce_rfactor,
    reduce_tree,
    rowwise,
)
from .common import Template

# In the order the app lists them: a workload's first template is the one it opens with.
TEMPLATES: dict[str, Template] = {t.name: t for t in (depthwise_blog.TEMPLATE, depthwise_d2l.TEMPLATE,
                                                      depthwise_flat.TEMPLATE, conv1d.TEMPLATE, conv2d.TEMPLATE,
                                                      conv2d_async.TEMPLATE,
                                                      matmul.TEMPLATE, matmul_async.TEMPLATE,
                                                      matmul_tensorcore.TEMPLATE, matmul_hopper.TEMPLATE,
                                                      reduce_tree.TEMPLATE, reduce_rfactor.TEMPLATE,
                                                      *rowwise.TEMPLATES, attention_unfused.TEMPLATE,
                                                      attention_fused.TEMPLATE, attention_mma.TEMPLATE,
                                                      attention_hopper.TEMPLATE)}


def get_template(name: str) -> Template:
    if name not in TEMPLATES:
        raise ExplorerError(f"Unknown schedule template '{name}'; choose one of: {', '.join(TEMPLATES)}.")
    return TEMPLATES[name]


def templates_for(workload_kind: str) -> list[Template]:
    return [t for t in TEMPLATES.values() if t.workload.kind == workload_kind]


def workload_classes() -> dict[str, type[Workload]]:
    """The workloads that have a template, by kind, in the order of their first template."""
    return {t.workload.kind: t.workload for t in TEMPLATES.values()}


def workload_class(kind: str) -> type[Workload]:
    classes = workload_classes()
    if kind not in classes:
        raise InvalidWorkload(f"Unknown workload '{kind}'; choose one of: {', '.join(classes)}.")
    return classes[kind]


def workload_from_mapping(kind: str, values) -> Workload:
    """The workload of a registered kind from its field values (a preset's table, a URL, JSON)."""
    return workload_class(kind).from_mapping(values)
