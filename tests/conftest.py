"""Shared test configuration. Tests marked ``gpu`` run a kernel on a local CUDA GPU and
are skipped on machines without one (CI has none)."""
import os
import tempfile

import pytest
import tvm

# The class's SQLite file: one per test process (pytest-xdist runs several, which must not share
# one class), never the checkout's data/ folder.
os.environ["EXPLORER_CLASS_DB"] = os.path.join(tempfile.mkdtemp(prefix="explorer-tests-"), "class.sqlite3")


def pytest_collection_modifyitems(config, items):
    if tvm.cuda(0).exist:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def run_on_gpu():
    """Run a build's kernel on the local GPU; return (output in float32, NumPy reference)."""

    def run(built, seed: int = 0):
        workload = built.spec.workload
        device = tvm.cuda(0)
        inputs = workload.random_inputs(seed)
        output = tvm.runtime.empty(workload.output_shape(), workload.output_dtype(), device)
        kernel = tvm.runtime.Executable(built.runtime_module).jit()
        kernel["main"](*(tvm.runtime.tensor(x, device) for x in inputs), output)
        return output.numpy().astype("float32"), workload.reference(*inputs)

    return run
