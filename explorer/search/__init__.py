"""Searching a template's knobs for the fastest setting, and MetaSchedule's own search.

- :mod:`.grid` — :class:`~.grid.Grid`: the knobs a sweep varies and their values.
- :mod:`.sweep` — :func:`~.sweep.run` compiles every point in parallel worker processes and
  ranks them, measured on the GPU (``explorer.measure.gpu_measurer``) or, without one, by
  the static rank key (``explorer.analysis.ranking``); :func:`~.sweep.refine` polishes a
  winner one knob at a time.
- :mod:`.results` — each point's outcome and the ranked result: table, heatmap, JSON.
- :mod:`.tune` — TVM's MetaSchedule on the same workload, its best trace and export.
- :mod:`.figures` — the heatmap and tuning-progress figures (Plotly, no streamlit).
"""
