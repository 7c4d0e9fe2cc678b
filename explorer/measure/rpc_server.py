"""``python -m explorer.measure.rpc_server --tracker HOST:PORT --key KEY``: the RPC server of a GPU, for
remote measurements (run it on the machine with the GPU).

It is TVM's RPC server (``tvm.rpc.Server``'s listen loop, in this process; sessions in spawned
processes) with two additions:

- the environment that lets it compile CUDA source at load time from the pip NVRTC on a
  machine with an NVIDIA driver but no CUDA toolkit (explorer/cuda_env.py). The dynamic loader
  reads ``LD_LIBRARY_PATH`` when a process starts, so it is set before the sessions' processes
  start; this process loads no kernel;
- it keeps serving after a session's process crashes. TVM runs each session in a child
  process, but when that child dies (a student's kernel segfaults) its listen loop raises
  and the server stops taking sessions; ``server_init_callback``, TVM's hook for setting up
  the server process, wraps the session handler so that a crash ends only that session.
"""
from __future__ import annotations

import argparse
import os
import signal

from ..cuda_env import kernel_environment

# "fork": sessions forked from the server process instead of spawned, for a server that runs only
# CPU kernels (target llvm: the tests' servers, docs/architecture.md). A spawned session imports TVM
# again before it runs anything (a second of CPU per session); a GPU server must spawn (main()).
SESSIONS = "EXPLORER_RPC_SESSIONS"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def keep_serving_after_crashes() -> None:
    """Runs in TVM's server process: a session whose process died is logged and closed."""
    from tvm.rpc import server

    serve_session = server._serving

    def serve_one(sock, addr, opts, load_library):
        cwd = os.getcwd()
        try:
            serve_session(sock, addr, opts, load_library)
        except RuntimeError as error:  # "Child process ... exited unsuccessfully"
            server.logger.warning("session from %s ended: %s", addr, error)
            os.chdir(cwd)
            sock.close()

    server._serving = serve_one


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m explorer.measure.rpc_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tracker", required=True, metavar="HOST:PORT", help="the RPC tracker to register with")
    parser.add_argument("--key", required=True, help="the device key clients ask the tracker for, e.g. h100")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=9090, help="first port to try")
    parser.add_argument("--port-end", type=int, default=9199, help="last port to try")
    parser.add_argument("--custom-addr", default=None, help="address to report to the tracker (behind NAT)")
    parser.add_argument("--silent", action="store_true")
    return parser


def main() -> None:
    args = make_parser().parse_args()
    # Inherited by the sessions' processes, which load the kernels and import explorer. Set here, not by
    # starting this module again with it: that imported TVM twice (the explorer.measure package imports it).
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    os.environ.update({**kernel_environment(), "PYTHONPATH": path})
    # TVM's server state, made in this process: tvm.rpc.Server makes it in a process of its own that imports
    # TVM again (0.6 CPU-s and its memory) while this one only waits for it.
    from tvm.rpc import server

    host, port = args.tracker.rsplit(":", 1)
    # Sessions are spawned, not forked: a forked session cannot use a GPU whose driver the
    # server process already initialized ("cudaErrorInitializationError"). Importing TVM
    # initializes it, so a fork server that has imported TVM does not help either (tried on an H200).
    spawned = os.environ.get(SESSIONS, "spawn") != "fork"
    server._popen_start_rpc_server(args.host, args.port, args.port_end, tracker_addr=(host, int(port)), key=args.key,
                                   custom_addr=args.custom_addr, silent=args.silent, no_fork=spawned,
                                   server_init_callback=keep_serving_after_crashes)
    # The listen loop is TVM's thread, which never ends by itself: a stop ends the process (the sessions
    # it started end with their connections, as under tvm.rpc.Server's stop).
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server.PopenRPCServerState.current.thread.join()


if __name__ == "__main__":
    main()
