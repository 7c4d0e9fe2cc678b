"""Launch arithmetic of a kernel (blocks, threads and warps per block) and the one-line
summary of an error, each computed in one place."""
import pytest

from explorer.analysis.accesses import kernel_accesses
from explorer.analysis.banks import analyze_banks
from explorer.build import Kernel, build, warps_for
from explorer.errors import InvalidKnobs, summary_line
from explorer.presets import get_preset


@pytest.mark.parametrize("grid, block, blocks, threads, warps", [
    ((1, 1, 1), (1, 1, 1), 1, 1, 1),  # one thread still takes a whole warp
    ((16415, 1, 1), (8, 1, 1), 16415, 8, 1),
    ((4, 3, 2), (16, 8, 1), 24, 128, 4),  # 4·3·2 blocks; 16·8 = 128 threads = 4 × 32
    ((2, 256, 1), (33, 1, 1), 512, 33, 2),  # 33 threads: one full warp and one of a single lane
    ((1, 1, 1), (32, 32, 1), 1, 1024, 32),
])
def test_kernel_launch_arithmetic(grid, block, blocks, threads, warps):
    kernel = Kernel("default_function_kernel", grid, block, 0)
    assert (kernel.blocks, kernel.threads_per_block, kernel.warps_per_block) == (blocks, threads, warps)


def test_a_kernel_without_a_cluster_has_clusters_of_one_block():
    assert Kernel("k", (8, 1, 1), (128, 1, 1), 0).blocks_per_cluster == 1
    pair = Kernel("k", (8, 1, 1), (128, 1, 1), 0, cluster=(2, 1, 1))
    assert (pair.blocks, pair.blocks_per_cluster) == (8, 2)  # the grid still counts blocks, not clusters


@pytest.mark.parametrize("threads, warps", [(0, 0), (1, 1), (31, 1), (32, 1), (64, 2), (65, 3)])
def test_warps_round_a_partial_warp_up(threads, warps):
    assert warps_for(threads) == warps


def test_the_analyses_share_the_kernels_launch_arithmetic():
    """The bank model's launch and report give the same numbers as the build's kernel:
    matmul-tiled-1024 launches 16 × 16 blocks of 16 × 16 threads (8 warps)."""
    built = build(get_preset("matmul-tiled-1024").spec, "h100")
    (kernel,) = built.kernels
    (accesses,) = kernel_accesses(built.device_mod)
    (banks,) = analyze_banks(built).kernels
    for launch in (kernel, accesses.launch, banks):
        assert (launch.blocks, launch.threads_per_block, launch.warps_per_block) == (256, 256, 8)


def test_summary_line_is_the_last_nonempty_line():
    """TVM prints its traceback first and the message last."""
    error = RuntimeError("Traceback (most recent call last):\n  0: tvm::tirx::Lower\n\n"
                         "  InternalError: Check failed: extent > 0  \n\n")
    assert summary_line(error) == "InternalError: Check failed: extent > 0"


def test_summary_line_of_a_tools_output():
    stderr = "ptxas info    : 0 bytes gmem\nkernel.cu(3): error: identifier \"x\" is undefined\n"
    assert summary_line(stderr) == 'kernel.cu(3): error: identifier "x" is undefined'
    assert summary_line(" \n\n") == "no message"


def test_summary_line_of_an_error_without_text_names_its_type():
    assert summary_line(ValueError()) == "ValueError"
    assert summary_line(InvalidKnobs("One sentence for the student.")) == "One sentence for the student."
