"""Analyses of a build, as plain data for the CLI, the app and the figures.

- :mod:`.banks` — shared-memory bank conflicts of every shared load/store, from the
  lowered device TIR, in Nsight Compute's units.
- :mod:`.races` — shared-memory races: a location one thread writes and another touches with
  no barrier between them (no __syncwarp() for two lanes of one warp), with their CUDA lines.
- :mod:`.tiling` — which block/vthread/thread/iteration computes each output, and the
  input footprint (with halo) of a block and a thread.
- :mod:`.tree` — the written sum's shared-memory tree per step: active and idle threads, idle
  and divergent warps, bank ways, barrier (template ``reduce_tree`` only).
- :mod:`.resources` — threads, shared memory, registers per block and occupancy.
- :mod:`.sass` — the SASS under each CUDA line, the instruction mix, registers and spills,
  from the cubin NVRTC compiles (no toolkit needed).
- :mod:`.ncu` — Nsight Compute's counters for the same kernel, beside the bank model.
- :mod:`.roofline` — arithmetic intensity, the device's ceilings (measured or published),
  attainable performance and where a setting sits.
- :mod:`.coalescing` — 32-byte sectors per global load and store against the ideal.
- :mod:`.diagnosis` — the few findings that most limit a setting, ranked by estimated cost,
  each with its evidence and the neighbouring setting that addresses it (a package: facts,
  one module per rule, the neighbour search, the text and JSON).
"""
