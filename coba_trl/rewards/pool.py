"""A process pool with a hard per-item time limit: a worker that runs over is killed and replaced.

`multiprocessing.Pool` and `concurrent.futures` cannot stop one running task, and math-verify's `signal.alarm`
time-outs only work in a process's main thread (and sympy can ignore them inside C code). Here every worker owns a
pipe, the parent hands out one item at a time, waits on all pipes with a deadline, and kills (SIGKILL) a worker
whose item is past its limit; the item then counts as timed out and a fresh worker takes the worker's place.

Workers start with the `forkserver` method (`spawn` where it is missing): safe with torch and CUDA loaded in the
trainer. The fork server preloads math-verify, so a replacement worker starts in milliseconds. The pool is created
lazily by `get_pool()`, grows only to as many workers as a batch can use, is reused across calls, and is shut
down at interpreter exit.
"""

import atexit
import multiprocessing
import os
import resource
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import wait

WORKER_MEMORY_LIMIT_BYTES = 3 * 1024**3
"""Address-space limit of a worker: a sympy bomb fails fast with MemoryError instead of swapping the machine."""

_PRELOAD = ["__main__", "math_verify", "coba_trl.rewards.equivalence"]
"""Imported once in the fork server. `__main__` first: then workers do not each re-run the main module's imports
(guard a training script with `if __name__ == "__main__":`, as for any multiprocessing code)."""


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


def _worker_main(conn, memory_limit: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        func, args = task
        try:
            reply = ("ok", func(*args))
        except BaseException as error:  # noqa: BLE001 - a worker reports every failure instead of dying
            reply = ("error", f"{type(error).__name__}: {str(error)[:200]}")
        try:
            conn.send(reply)
        except Exception as error:  # noqa: BLE001 - e.g. an unpicklable return value
            conn.send(("error", f"{type(error).__name__}: could not send the result"))


class _Worker:
    def __init__(self, context, memory_limit: int):
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child_conn, memory_limit), daemon=True)
        self.process.start()
        child_conn.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=1.0)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(timeout=0.5)
        self.kill()


class TimeLimitedPool:
    """Runs `func(*args)` for many items in worker processes, each item under a hard wall-clock limit.

    Args:
        max_workers (`int`, *optional*): Upper bound on worker processes; defaults to `default_num_workers()`.
        memory_limit (`int`): Address-space limit of each worker in bytes (0 for none).
    """

    def __init__(self, max_workers: int | None = None, memory_limit: int = WORKER_MEMORY_LIMIT_BYTES):
        if max_workers is not None and max_workers < 1:
            raise ValueError(f"max_workers ({max_workers}) must be at least 1; use None for one per CPU.")
        self.max_workers = max_workers or default_num_workers()
        self.memory_limit = memory_limit
        self.workers_replaced = 0
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        self._context = multiprocessing.get_context(method)
        if method == "forkserver":
            self._context.set_forkserver_preload(_PRELOAD)

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
        idle = deque(range(min(wanted, len(self._workers))))
        busy: dict[int, tuple[int, float]] = {}
        exhausted = False
        while not exhausted or pending or busy:
            if not exhausted:
                args = next(source, None)
                if args is None:
                    exhausted = True
                else:
                    results.append(None)
                    pending.append((len(results) - 1, args))
            while pending and (idle or len(self._workers) < wanted):
                if not idle:
                    self._workers.append(_Worker(self._context, self.memory_limit))
                    idle.append(len(self._workers) - 1)
                slot, (index, args) = idle.popleft(), pending.popleft()
                try:
                    self._workers[slot].conn.send((func, args))
                    busy[slot] = (index, time.monotonic())
                except OSError:
                    results[index] = ItemResult("error", "worker pipe closed")
                    self._replace(slot)
                    idle.append(slot)
            if busy:
                self._collect(busy, idle, results, time_limit, block=exhausted)
        return results

    def _collect(self, busy: dict, idle: deque, results: list, time_limit: float, block: bool) -> None:
        """Take finished results; kill and replace workers past the limit. Waits until the next deadline if `block`."""
        timeout = min(started for _, started in busy.values()) + time_limit - time.monotonic() if block else 0.0
        ready = wait([self._workers[slot].conn for slot in busy], timeout=max(0.0, timeout))
        now = time.monotonic()
        for slot in list(busy):
            index, started = busy[slot]
            if self._workers[slot].conn in ready:
                try:
                    status, value = self._workers[slot].conn.recv()
                except (EOFError, OSError):
                    status, value = "error", "worker died"
                    self._replace(slot)
                results[index] = ItemResult(status, value, now - started)
            elif now - started >= time_limit:
                results[index] = ItemResult("timeout", None, now - started)
                self._replace(slot)
            else:
                continue
            del busy[slot]
            idle.append(slot)

    def _replace(self, slot: int) -> None:
        self._workers[slot].kill()
        self._workers[slot] = _Worker(self._context, self.memory_limit)
        self.workers_replaced += 1

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (for monitoring, e.g. their CPU time)."""
        return [worker.process.pid for worker in self._workers if worker.process.is_alive()]

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
