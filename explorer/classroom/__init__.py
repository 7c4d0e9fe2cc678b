"""Class mode: the teacher puts the class on a lesson step or a setting, students see it and
submit their schedules to a leaderboard that lasts (one SQLite file).

- ``store.py``: the SQLite file (WAL, one transaction per write, schema migrations): the
  class's step, the board's entries, PyTorch's time per workload and device.
- ``leaderboard.py``: display names, :func:`submit` (checked against NumPy, then timed through
  the normal measurement queue), :func:`board` (each student's best per device).
- ``teacher.py``: the teacher's token (``EXPLORER_TEACHER_TOKEN``), compared in constant time.
- ``presence.py``: who is connected and on which step (this process only).
- ``moves.py``: which knobs the students moved next from the class's step (this process only).
- ``rounds.py``: question rounds: a step's question put to the class, the votes before and
  after the discussion, the reveal, the teacher's view after class and the CSV export.
"""
from . import moves, presence, rounds
from .leaderboard import (
                          InvalidName,
                          Place,
                          SubmissionRefused,
                          board,
                          class_remote,
                          measure_for_board,
                          set_class_remote,
                          submit,
                          validate_name,
)
from .store import DB_ENV, ClassStep, Entry, Round, Store, default_path, open_store
from .teacher import TOKEN_ENV, is_teacher, token_configured

__all__ = [
    "ClassStep", "DB_ENV", "Entry", "InvalidName", "Place", "Round", "Store", "SubmissionRefused", "TOKEN_ENV", "board",
    "class_remote", "default_path", "is_teacher", "measure_for_board", "moves", "open_store", "presence",
    "rounds", "set_class_remote", "submit", "token_configured", "validate_name",
]
