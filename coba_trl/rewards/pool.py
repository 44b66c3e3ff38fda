"""A process pool with a hard per-item time limit: a worker that runs over is killed and replaced.

`multiprocessing.Pool` and `concurrent.futures` cannot stop one running task, and math-verify's `signal.alarm`
time-outs only work in a process's main thread (and sympy can ignore them inside C code). Here every worker owns a
pipe and answers its items one by one; the parent waits on all pipes with a deadline per running item, and kills
(SIGKILL) a worker whose item is past its limit; the item then counts as timed out, the items queued behind it go to
other workers, and a fresh worker takes the killed one's place.

Workers are fresh interpreters (`python -c "...serve()"`) talking over a socket pair, never forks of the trainer:
safe with torch and CUDA loaded, and, unlike `multiprocessing`'s spawn / forkserver, they never re-import the
user's main module, so a training script without an `if __name__ == "__main__":` guard, a notebook or a script fed
through stdin all work. A worker imports math-verify once at start (about a second; start-up never counts against
an item). The pool is created lazily by `get_pool()`, grows only to as many workers as a batch can use, is reused
across calls, and is shut down at interpreter exit. `func` must be importable by name (a module-level function).
"""

import atexit
import importlib
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

logger = logging.getLogger(__name__)

WORKER_MEMORY_HEADROOM_BYTES = 3 * 1024**3
"""Address space a worker may add to what it maps at start (a fork of a server that may hold torch): a sympy bomb
then fails fast with MemoryError instead of swapping the machine."""

WORKER_START_LIMIT = 120.0
"""Seconds a new worker may take to start (import math-verify and sympy) before it counts as failed."""

_MAX_FAILED_STARTS = 3
_MAX_CHUNK = 32
"""Items handed to a worker at once (answered one by one, each under its own limit): fewer wake-ups per item."""
_PRELOAD = ["math_verify", "coba_trl.rewards.equivalence"]
"""Imported by every worker before it says it is ready."""
_SERVE = "from coba_trl.rewards.pool import serve; serve()"


@dataclass(frozen=True)
class ItemResult:
    """Outcome of one item: `status` is "ok" (then `value` is the function's return), "timeout" or "error"."""

    status: str
    value: object = None
    seconds: float = 0.0


def default_num_workers() -> int:
    """CPUs this process may use (affinity-aware), shared between the ranks of this node (`LOCAL_WORLD_SIZE`)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    local_world_size = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, cpus // local_world_size)


def _limit_memory(headroom: int) -> None:
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = mapped + headroom if hard == resource.RLIM_INFINITY else min(hard, mapped + headroom)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        pass  # no /proc (macOS) or a limit we may not set: the time limit still holds


def serve() -> None:
    """Entry point of a worker process: `sys.argv` holds the socket's file descriptor and the memory headroom."""
    fd, memory_headroom = (int(arg) for arg in sys.argv[1:3])
    _worker_main(Connection(fd), memory_headroom)


def _worker_main(conn, memory_headroom: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for module in _PRELOAD:
        importlib.import_module(module)
    if memory_headroom > 0:
        _limit_memory(memory_headroom)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        func, chunk = task
        for args in chunk:
            try:
                reply = ("ok", func(*args))
            except BaseException as error:  # noqa: BLE001 - a worker reports every failure instead of dying
                reply = ("error", f"{type(error).__name__}: {str(error)[:200]}")
            try:
                conn.send(reply)
            except Exception as error:  # noqa: BLE001 - e.g. an unpicklable return value
                conn.send(("error", f"{type(error).__name__}: could not send the result"))


class _Worker:
    """One worker process and its pipe.

    A worker is `ready` once it has said so. `queue` holds the items sent to it and not yet answered, in order; the
    first one has been running since `since` (the previous answer, or the hand-out).
    """

    def __init__(self, memory_headroom: int):
        parent, child = socket.socketpair()
        # The worker sees the trainer's import path, so any module-level `func` it is sent can be unpickled.
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVE, str(child.fileno()), str(memory_headroom)],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            env=env,
        )
        child.close()
        self.conn = Connection(parent.detach())
        self.started = time.monotonic()
        self.ready = False
        self.queue: deque[tuple[int, tuple]] = deque()
        self.since = 0.0

    def deadline(self, time_limit: float) -> float:
        return self.since + time_limit if self.queue else self.started + WORKER_START_LIMIT

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        try:
            self.process.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.process.wait(timeout=0.5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class TimeLimitedPool:
    """Runs `func(*args)` for many items in worker processes, each item under a hard wall-clock limit.

    An item's time starts when a worker that has finished starting begins it (up to `_MAX_CHUNK` items are handed
    out at once and answered one by one), so a slow worker start (a fork server importing the training script's
    torch, a loaded machine) never counts against an item. Items queued behind one that times out go back to the
    queue.

    Args:
        max_workers (`int`, *optional*): Upper bound on worker processes; defaults to `default_num_workers()`.
        memory_headroom (`int`): Address space in bytes a worker may add to its size at start (0 for no limit).
    """

    def __init__(
        self,
        max_workers: int | None = None,
        memory_headroom: int = WORKER_MEMORY_HEADROOM_BYTES,
    ):
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers ({max_workers}) must be at least 1; use None for one per CPU.")
        self.max_workers = max_workers or default_num_workers()
        self.memory_headroom = memory_headroom
        self.workers_replaced = 0
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def map(
        self,
        func: Callable,
        items: Iterable[tuple],
        time_limit: float,
        expected: int | None = None,
        min_items_per_worker: int = 2,
    ) -> list[ItemResult]:
        """Results of `func(*item)`, in the order the items come.

        `items` may be a lazy iterable: the calling process keeps pulling items (doing whatever cheap work produces
        them) while the workers compute. At most `ceil(expected / min_items_per_worker)` workers are used, started
        only when an item needs one; `expected` defaults to `len(items)`.
        """
        if expected is None:
            items = list(items)
            expected = len(items)
        wanted = max(1, min(self.max_workers, -(-expected // max(1, min_items_per_worker))))
        with self._lock:
            return self._run(func, iter(items), time_limit, wanted)

    def _run(self, func, source: Iterator[tuple], time_limit: float, wanted: int) -> list[ItemResult]:
        results: list[ItemResult | None] = []
        pending: deque[tuple[int, tuple]] = deque()
        exhausted, failed_starts, gave_up = False, 0, False
        while not exhausted or pending or any(w.queue for w in self._workers[:wanted]):
            if not exhausted:
                args = next(source, None)
                exhausted = args is None
                if not exhausted:
                    results.append(None)
                    pending.append((len(results) - 1, args))
            if failed_starts >= _MAX_FAILED_STARTS:
                if not gave_up:
                    logger.error(
                        "No worker process could start (%d tries); remaining items fail. Check that `%s -c 'import "
                        "math_verify'` works.",
                        failed_starts,
                        sys.executable,
                    )
                results.extend(ItemResult("error", "no worker could start") for _ in source)
                for index, _ in pending:
                    results[index] = ItemResult("error", "no worker could start")
                pending.clear()
                exhausted = gave_up = True
            if pending and len(self._workers) < wanted:
                self._workers.append(_Worker(self.memory_headroom))
            for worker in self._workers[:wanted]:
                if pending and worker.ready and not worker.queue:
                    size = min(_MAX_CHUNK, max(1, len(pending) // wanted))
                    self._dispatch(worker, func, [pending.popleft() for _ in range(size)], results)
            failed_starts += self._collect(wanted, pending, results, time_limit, block=exhausted)
        return results

    def _dispatch(self, worker: _Worker, func, chunk: list[tuple[int, tuple]], results: list) -> None:
        try:
            worker.conn.send((func, [args for _, args in chunk]))
            worker.queue.extend(chunk)
            worker.since = time.monotonic()
        except OSError:
            for index, _ in chunk:
                results[index] = ItemResult("error", "worker pipe closed")
            self._replace(worker)

    def _collect(self, wanted: int, pending: deque, results: list, time_limit: float, block: bool) -> int:
        """Take answers and start-up messages; replace workers past their deadline (their unanswered items go back
        to `pending`). Waits until the next deadline if `block`. Returns the number of failed starts."""
        watched = [w for w in self._workers[:wanted] if w.queue or not w.ready]
        if not watched:
            return 0
        timeout = min(w.deadline(time_limit) for w in watched) - time.monotonic() if block else 0.0
        ready = wait([w.conn for w in watched], timeout=max(0.0, timeout))
        failed_starts = 0
        for worker in watched:
            lost = None
            try:
                while worker.conn in ready and worker.conn.poll():
                    status, value = worker.conn.recv()
                    now = time.monotonic()
                    if not worker.queue:
                        worker.ready = True
                        break
                    index, _ = worker.queue.popleft()
                    results[index] = ItemResult(status, value, now - worker.since)
                    worker.since = now
            except (EOFError, OSError):
                lost = ItemResult("error", "worker died", time.monotonic() - worker.since)
            if lost is None and worker.queue and time.monotonic() >= worker.deadline(time_limit):
                lost = ItemResult("timeout", None, time.monotonic() - worker.since)
            elif lost is None and not worker.ready and time.monotonic() >= worker.deadline(time_limit):
                lost = ItemResult("error", "worker start timed out")
            if lost is None:
                continue
            if worker.queue:
                results[worker.queue.popleft()[0]] = lost
                pending.extendleft(reversed(worker.queue))
            else:
                failed_starts += 1
            self._replace(worker)
        return failed_starts

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._workers[self._workers.index(worker)] = _Worker(self.memory_headroom)
        self.workers_replaced += 1

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for monitoring, e.g. their CPU time)."""
        return [worker.process.pid for worker in self._workers if worker.alive()]

    def shutdown(self) -> None:
        """Stop every worker (idempotent); the pool starts new ones if used again."""
        with self._lock:
            if os.getpid() == self._pid:
                for worker in self._workers:
                    worker.stop()
            self._workers = []


_POOL: TimeLimitedPool | None = None
_POOL_LOCK = threading.Lock()


def get_pool() -> TimeLimitedPool:
    """The process-wide pool, created on first use (and re-created in a forked child, which must not share it)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._pid != os.getpid():
            _POOL = TimeLimitedPool()
        return _POOL


def shutdown_pool() -> None:
    """Stop the process-wide pool's workers (registered with `atexit`)."""
    if _POOL is not None:
        _POOL.shutdown()


atexit.register(shutdown_pool)
