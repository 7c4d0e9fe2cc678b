"""bench/ncu_limits.py on hand-made Nsight Compute output: which launch is the GEMM, which
stall reasons cost the most, and one table row."""
import ncu_limits  # bench/ (pytest's pythonpath)

from explorer.analysis.ncu import KernelCounters

STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
CSV = ('==PROF== Connected\n"ID","Kernel Name","device__attribute_display_name","gpu__time_duration.sum",'
       f'"{STALL.format("barrier")}","{STALL.format("long_scoreboard")}"\n')


def launch(kernel: str, ns: float, **stalls: float) -> KernelCounters:
    metrics = {ncu_limits.DURATION: ns, "launch__registers_per_thread": 128.0,
               "launch__waves_per_multiprocessor": 0.48, "lts__t_sector_hit_rate.pct": 91.0}
    metrics |= {STALL.format(name): value for name, value in stalls.items()}
    return KernelCounters(0, kernel, "(256, 1, 1)", "(16, 16, 1)", metrics)


def test_the_stall_columns_are_read_from_the_header_and_text_columns_left_out():
    assert ncu_limits.stall_columns(CSV) == (STALL.format("barrier"), STALL.format("long_scoreboard"))


def test_the_gemm_is_the_longest_launch():
    fill, gemm = launch("fill", 2_000.0), launch("sm80_xmma_gemm", 56_000.0)
    assert ncu_limits.main_kernel([fill, gemm]) is gemm


def test_the_costliest_stalls_come_first_and_selected_is_not_a_stall():
    counters = launch("k", 1.0, barrier=0.4, long_scoreboard=2.5, mio_throttle=1.1, short_scoreboard=0.2,
                      selected=1.0)
    assert ncu_limits.top_stalls(counters) == "long_scoreboard 2.5, mio_throttle 1.1, barrier 0.4"


def test_a_row_gives_µs_and_shares_and_dashes_for_missing_counters():
    row = ncu_limits.row("best-matmul-1024", "TVM", True, launch("default_function_kernel", 69_200.0, barrier=1.5))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:4] == ["best-matmul-1024", "TVM", "cold", "69.2"]
    assert cells[6:8] == ["128", "0.48"] and cells[11] == "91%" and cells[8] == "— / —"
    assert cells[-1] == "barrier 1.5"


def test_a_row_gives_the_tensor_pipe_and_the_shared_bank_conflicts():
    counters = launch("main_kernel", 4_400_000.0)
    counters.metrics["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"] = 38.6
    counters.metrics["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"] = 40499.0
    cells = [cell.strip() for cell in ncu_limits.row("attention-mma-pad", "TVM", True, counters).strip("|").split("|")]
    assert cells[-3:-1] == ["39%", "40,499"]
    assert len(cells) == ncu_limits.HEADER.splitlines()[0].count("|") - 1
