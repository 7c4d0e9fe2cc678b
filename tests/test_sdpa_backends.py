"""bench/sdpa_backends.py's table from hand-made timings: the fastest backend in bold, a backend that
refused the shape with its reason."""
import sdpa_backends  # bench/ (pytest's pythonpath)


def test_the_table_marks_the_fastest_backend_and_says_why_one_is_missing():
    rows = [{"id": "attention-4096-d128", "workload": "attention B8 H16 N4096 d128",
             "cells": {"default": {"us": 1729.5, "tflops": 635.7}, "flash_attention": {"us": 3298.9, "tflops": 333.3},
                       "cudnn_attention": {"us": 1883.5, "tflops": 583.8},
                       "efficient_attention": {"error": "No available kernel | aborting"}}}]
    text = sdpa_backends.table(rows, "NVIDIA H100 80GB HBM3", "PyTorch 2.11.0")
    header, rule, row = text.splitlines()[-3:]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert header.count("|") == rule.count("|") == row.count("|") == 8
    assert cells[2] == "**1730 µs, 636 TFLOP/s**" and cells[3] == "3299 µs, 333 TFLOP/s"
    assert cells[4] == "— (No available kernel / aborting)"  # a | in a reason cannot break the table
    assert cells[6] == "— (not run)"  # math: no cell
