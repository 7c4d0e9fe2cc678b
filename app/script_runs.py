"""A page's finished run always reaches the browser, even when the next request comes before
the server has sent it.

Streamlit runs a session's script in a ``ScriptRunner`` thread; every element the run draws, and
at the end its SHUTDOWN, reach the session as callbacks queued on the server's event loop. A
runner whose run has ended with nothing more to do is stopped before those callbacks have run.
When the event loop lags behind the script thread (an app process serving a class), a request
can be handled in that window: Streamlit's ``AppSession.request_rerun`` finds the runner
stopped, starts a new one, and from then on ignores every callback of the old runner as coming
from a runner that is no longer current. The finished run's elements are dropped: a student
moved a knob, the page ran, and no code ever arrived (about one move in a thousand under load;
a waiting panel's timer tick is the request that usually comes in between).

Here such a request waits its turn on the event loop: queued behind the callbacks the stopped
runner has already queued, it is handled once they have been, and the old runner's SHUTDOWN
(queued right after) has made way for the new one.
"""
from __future__ import annotations

from streamlit.runtime.app_session import AppSession
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

# A stopped runner queues its SHUTDOWN a moment after it stops: a request looks again at most this
# many times (each one turn of the event loop) before it starts the new runner anyway.
MAX_TURNS = 1000


def runner_stopped_unannounced(session: AppSession) -> bool:
    """Whether the session's current runner has stopped but its SHUTDOWN (and whatever its run drew
    before it) has not been handled yet."""
    runner = session._scriptrunner
    return runner is not None and runner._requests._state == ScriptRequestType.STOP


def in_turn(request_rerun):
    """``AppSession.request_rerun`` made to wait, one turn of the event loop at a time, while the
    session's runner has stopped unannounced (at most MAX_TURNS turns)."""

    def request_in_turn(session: AppSession, client_state, turns: int = 0) -> None:
        if turns < MAX_TURNS and runner_stopped_unannounced(session):
            session._call_soon_on_event_loop(lambda: request_in_turn(session, client_state, turns + 1))
            return
        request_rerun(session, client_state)

    return request_in_turn


def keep_finished_runs() -> None:
    """Make every session's rerun requests wait for a stopped runner's queued callbacks (once per
    process; the app's own script calls it, so it holds under ``streamlit run`` too)."""
    if getattr(AppSession, "_keeps_finished_runs", False):
        return
    AppSession.request_rerun = in_turn(AppSession.request_rerun)
    AppSession._keeps_finished_runs = True
