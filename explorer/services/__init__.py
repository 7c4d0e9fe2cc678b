"""The processes a server's pages and measurements are computed in, and what they share.

- ``settings.py``: :class:`ServerSettings`, the server's sizes, ages and process counts
  (``EXPLORER_*``).
- ``single_flight.py``: :class:`SingleFlight`, a bounded LRU of results where a key being
  computed is computed once and every other caller for it waits for the same result.
- ``pool.py``: :class:`ProcessPool`, processes of TVM's ``PopenPoolExecutor`` started on first
  use, with one sentence for a process that ran too long or crashed.
- ``builds.py``: :class:`BuildService`, the pages' builds (lowering, verification, CUDA
  *source*) in a pool of processes that never compile binaries (``TVM_COMPILE_FORCE_FALLBACK``).
- ``build_disk.py``: :class:`BuildDisk`, the builds kept on disk for every app process of the
  machine, bounded by count.
- ``compiles.py``: :class:`CompileService`, a measurement's kernel compiled to a loadable
  library (NVRTC to a cubin, the host code) in a second pool, so the measuring worker only
  loads, checks and times.

Nothing here imports streamlit or knows of the scheduler: ``explorer/live.py`` holds one of
each for the server.
"""
