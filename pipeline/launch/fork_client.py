"""One DirectRunner worker process, as Beam starts it, made by imgrec's zygote.

Run by Beam as the worker command (`forked_workers.command()`: `python -I -S fork_client.py
SOCKET`, a bare interpreter). It sends the zygote (pipeline/launch/forked_workers.py)
its environment (Beam's control and logging addresses, the pipeline options, the worker id) and
its standard streams, waits while the forked worker runs, and exits with the worker's status.
Killing it kills the worker. Standard library only: it runs without site-packages.
"""

import json
import os
import signal
import socket
import struct
import sys

# forked_workers.STARTED: the worker is forked (this script imports nothing of imgrec's).
STARTED = b"S"


def main(socket_path: str) -> int:
    # Ctrl-C reaches the worker too: this process waits for the worker's status and exits with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(socket_path)
        message = json.dumps({**os.environ, "\0cwd": os.getcwd()}).encode()
        socket.send_fds(conn, [message], [0, 1, 2])
        started = conn.recv(1) == STARTED
    except OSError:
        started = False
    if not started:  # no zygote (it has gone), or no fork: Beam's own worker, as Beam starts it
        module = "apache_beam.runners.worker.sdk_worker_main"
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # exec keeps an ignored signal ignored
        os.execv(sys.executable, [sys.executable, "-m", module])
    reply = conn.recv(4)
    if len(reply) != 4:
        print("imgrec: the worker zygote ended before its worker did", file=sys.stderr)
        return 1
    status = struct.unpack("!i", reply)[0]
    if status < 0:  # killed by a signal: so is this process, as Beam's own worker would be
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
