"""An EXTERNAL worker pool that several TaskManagers on one machine can share.

Beam's ``apache_beam.runners.worker.worker_pool_main`` is meant as one
TaskManager's sidecar. It keeps its SDK workers by the id the runner gives
each, and Beam's FlinkRunner numbers them per TaskManager ("1-1", "2-1", ...),
so two TaskManagers that share a pool hand it the same ids. When one of
them releases its environment, the pool stops the worker it started last
under that id, which may be the other TaskManager's, in the middle of its
work: the task fails with "CANCELLED: client cancelled". In production each
TaskManager has its own pool at ``localhost:50000``, and this never happens.

This pool is Beam's, except that it stops a worker by id only when that id is
its own alone. A worker whose id is shared is left to end by itself, which
an SDK worker does once its runner closes the control channel, and whatever
is left is stopped with the pool.

    python templates/flink/worker_pool.py --service_port 50000
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from concurrent import futures
from typing import Any

import grpc
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
from apache_beam.runners.worker.worker_pool_main import (
    BeamFnExternalWorkerPoolServicer,
    kill_process_gracefully,
)

_LOGGER = logging.getLogger(__name__)


class SharedWorkerPool(BeamFnExternalWorkerPoolServicer):
    """Beam's worker pool in process mode, stopping a worker by id only when the id is unique."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._by_id: defaultdict[str, list[subprocess.Popen[bytes]]] = defaultdict(list)

    def StartWorker(self, start_worker_request: Any, unused_context: Any) -> Any:
        reply = super().StartWorker(start_worker_request, unused_context)
        worker_id = start_worker_request.worker_id
        with self._lock:
            started = self._worker_processes.get(worker_id)
            if started is not None:
                self._by_id[worker_id] = [p for p in self._by_id[worker_id] if p.poll() is None]
                if started not in self._by_id[worker_id]:
                    self._by_id[worker_id].append(started)
        return reply

    def StopWorker(self, stop_worker_request: Any, unused_context: Any) -> Any:
        worker_id = stop_worker_request.worker_id
        with self._lock:
            live = [p for p in self._by_id.get(worker_id, []) if p.poll() is None]
            self._by_id[worker_id] = live
            victim = live[0] if len(live) == 1 else None
            if victim is not None:
                self._by_id.pop(worker_id)
                self._worker_processes.pop(worker_id, None)
        if victim is not None:
            kill_process_gracefully(victim)
        elif live:
            _LOGGER.info("worker id %s is shared by %d workers: each ends with its runner",
                         worker_id, len(live))
        return beam_fn_api_pb2.StopWorkerResponse()

    def stop_all(self) -> None:
        """Stop every worker still running (at the pool's exit)."""
        with self._lock:
            workers = [p for group in self._by_id.values() for p in group]
            self._by_id.clear()
        for worker in workers:
            if worker.poll() is None:
                kill_process_gracefully(worker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--service_port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    # As Beam's `start`, which keeps the servicer to itself: this one is stopped last.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    port = server.add_insecure_port(f"[::]:{args.service_port}")
    pool = SharedWorkerPool(use_process=True, data_buffer_time_limit_ms=-1)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    server.start()
    _LOGGER.info("worker pool at localhost:%d", port)
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    done.wait()
    server.stop(0)
    pool.stop_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
