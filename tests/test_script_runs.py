"""app/script_runs.py: a rerun request that comes while the session's runner has stopped but its
finished run has not reached the browser waits for it (a lost move's cause: Streamlit started a new
runner and dropped the finished run's elements as a non-current runner's)."""
import asyncio
from types import SimpleNamespace

from streamlit.runtime.app_session import AppSession
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

from app import script_runs


def session_on(loop, state):
    runner = SimpleNamespace(_requests=SimpleNamespace(_state=state))
    return SimpleNamespace(_scriptrunner=runner, _call_soon_on_event_loop=loop.call_soon_threadsafe)


def test_a_request_waits_for_what_a_stopped_runner_already_queued():
    loop = asyncio.new_event_loop()
    handled = []
    session = session_on(loop, ScriptRequestType.STOP)
    request = script_runs.in_turn(lambda s, state: handled.append(("request", state)))

    def shutdown():  # what Streamlit's SHUTDOWN does to the session: the runner is gone
        handled.append(("shutdown",))
        session._scriptrunner = None

    # The finished run's elements and then its SHUTDOWN are queued on the event loop when a timer's
    # request (a waiting panel's tick) is handled.
    loop.call_soon(handled.append, ("element", "the code view"))
    loop.call_soon(shutdown)
    request(session, "tick")
    assert handled == []  # not now: the new runner would make the old one's elements ignored
    loop.run_until_complete(asyncio.sleep(0.01))
    assert handled == [("element", "the code view"), ("shutdown",), ("request", "tick")]
    loop.close()


def test_a_request_to_a_running_or_absent_runner_is_handled_at_once():
    loop = asyncio.new_event_loop()
    handled = []
    request = script_runs.in_turn(lambda s, state: handled.append(state))
    request(session_on(loop, ScriptRequestType.CONTINUE), "move")  # running: Streamlit queues it itself
    request(SimpleNamespace(_scriptrunner=None), "first")
    assert handled == ["move", "first"]
    loop.close()


def test_a_runner_that_never_announces_its_stop_holds_a_request_a_bounded_time():
    loop = asyncio.new_event_loop()
    handled = []
    request = script_runs.in_turn(lambda s, state: handled.append(state))
    request(session_on(loop, ScriptRequestType.STOP), "tick")
    loop.run_until_complete(asyncio.sleep(0.2))  # MAX_TURNS turns of the loop, then the request anyway
    assert handled == ["tick"]
    loop.close()


def test_the_app_installs_it_once():
    script_runs.keep_finished_runs()
    installed = AppSession.request_rerun
    script_runs.keep_finished_runs()
    assert AppSession.request_rerun is installed and AppSession._keeps_finished_runs
