"""The class server: what one process of a server that many sessions use at once shares.

The app asks it through ``api.py`` only (``Server``, ``open_server``). Its parts:

- the pages' half: ``builds.py`` (the build pool; ``build_disk.py`` its builds on disk, ``pool.py`` the
  processes), ``diagnosing.py`` (one diagnosis per setting, in a process of its own), ``page_runs.py``;
- measuring (``measuring.py``: the ``Measuring`` interface), in this process (``in_process.py``: the
  queue in ``scheduler.py``, the compile pool in ``compiles.py``, the machine's GPUs in ``local_gpus.py``,
  the warm-up in ``warm_up.py``) or over the socket (``over_socket.py``) to the measuring service
  (``service.py``, ``python -m explorer.server.service``);
- the measurements kept on disk (``measure_store.py``) and a class prepared ahead (``prepare.py``,
  ``python -m explorer prepare``);
- the launcher (``launcher.py``, ``python -m explorer serve``), and the sizes and ages (``settings.py``,
  ``single_flight.py``).

Nothing here imports streamlit. This ``__init__`` imports nothing, so that the launcher starts and
watches the server's processes without loading TVM.
"""
