"""Kernels of several builds compiled together, for the tests that read only per-kernel facts (registers,
spills, instructions, that it compiles): one compiler start for them all."""
import re


def one_source_per_preamble(builds: dict) -> list[str]:
    """The CUDA of several builds (name: build) as the fewest sources that compile them: TVM writes before the
    kernels of a build a preamble of headers and of the helpers (functions, macros) that its kernels use, the
    same for builds that use the same instructions. A build's kernels go under the longest preamble that holds
    all the lines of its own, in order (what it adds are helpers these kernels do not use), renamed
    ``<name>_<kernel>``, so that a compile starts and preprocesses once for them all (nvcc's preprocessing
    alone is 0.3 s a compile); a kernel's registers, spills and instructions are still its own."""
    parts = {}
    for name, built in builds.items():
        start = built.cuda.index('extern "C" __global__')
        kernels = built.cuda[start:]
        for kernel in built.kernels:
            kernels = re.sub(rf"\b{kernel.name}\b", f"{name}_{kernel.name}", kernels)
        parts.setdefault(built.cuda[:start], []).append(kernels)
    sources = {}
    for preamble in sorted(parts, key=len, reverse=True):
        lines = preamble.splitlines()
        within = next((longer for longer in sources if _in_order(lines, longer.splitlines())), preamble)
        sources.setdefault(within, []).extend(parts[preamble])
    return [preamble + "\n".join(kernels) for preamble, kernels in sources.items()]


def _in_order(lines: list[str], longer: list[str]) -> bool:
    rest = iter(longer)
    return all(line in rest for line in lines)
