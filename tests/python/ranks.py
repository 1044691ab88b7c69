"""Runs a function on N ranks as forked processes joined by a FileStore, backend "shoal".

Forking a parent that already imported torch starts a rank in milliseconds (spawning one costs
a torch import, ~2 s), which keeps the whole suite fast. The parent never creates a process
group itself, so the children inherit no communicator or progress thread.
"""

import datetime
import faulthandler
import multiprocessing as mp
import os
import tempfile
import time
import traceback

import torch  # noqa: F401  (imported before the fork on purpose)
import torch.distributed as dist

import shoal.torch  # noqa: F401  registers the backend


# The FileStore's path of the job run_ranks is running (set in each rank before fn): ranks in
# run_ranks(late=...) open the job's store with it.
store_path = None


def _entry(fn, rank, world, store_path_, queue, args, timeout_s, backend, init=True):
    global store_path
    try:
        faulthandler.dump_traceback_later(timeout_s + 5, exit=False)  # a hang leaves its stack
        torch.set_num_threads(1)
        store_path = store_path_
        if init:
            dist.init_process_group(backend, init_method="file://" + store_path_, rank=rank, world_size=world,
                                    timeout=datetime.timedelta(seconds=timeout_s))
        result = fn(rank, world, *args)
        if dist.is_initialized():  # fn may have destroyed it itself
            dist.destroy_process_group()
        queue.put((rank, "ok", result))
    except BaseException:  # noqa: BLE001  report everything to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, world, *args, timeout_s=30, join_s=None, backend="shoal", expect_exit=(), late=0):
    """Runs fn(rank, world, *args) on `world` ranks; returns {rank: result}.

    Raises AssertionError with the failing ranks' tracebacks; ranks in `expect_exit` may die
    without reporting (a killed-peer test). With `late`, that many more processes (ranks
    world .. world+late-1) run fn(rank, world, *args) without init_process_group: processes
    that join the job later (ranks.store_path names the job's FileStore)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="shoal-pytest-") as tmp:
        store_path = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_entry,
                             args=(fn, r, world, store_path, queue, args, timeout_s, backend, r < world))
                 for r in range(world + late)]
        for p in procs:
            p.start()
        results, errors = {}, {}
        started = time.monotonic()
        deadline = started + (join_s if join_s is not None else timeout_s + 15)
        expected = world + late - len(expect_exit)
        while len(results) + len(errors) < expected and time.monotonic() < deadline:
            try:
                rank, status, value = queue.get(timeout=0.2)
            except Exception:  # noqa: BLE001  queue.Empty
                if all(not p.is_alive() for p in procs) and queue.empty():
                    break
                continue
            (results if status == "ok" else errors)[rank] = value
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    missing = [r for r in range(world + late) if r not in results and r not in errors and r not in expect_exit]
    msg = []
    if hung:
        msg.append(f"ranks {hung} hung (killed after {deadline - started:.0f} s)")
    if missing:
        msg.append(f"ranks {missing} reported nothing")
    for r, tb in sorted(errors.items()):
        msg.append(f"--- rank {r} failed:\n{tb}")
    assert not msg, "\n".join(msg)
    return results


def finished(proc, cmd):
    """Asserts that an example run (subprocess.run's result) succeeded. A gloo job whose rank
    aborts after its results were printed, in gloo's teardown ("terminate called without an
    active exception": torch's gloo worker threads at exit, pytorch/pytorch#190489), counts as
    done: the tests compare results, and that abort is gloo's, not a backend under test's."""
    gloo_teardown = ("--backend" in cmd and cmd[cmd.index("--backend") + 1] == "gloo"
                     and "terminate called without an active exception" in proc.stderr
                     and "JSON " in proc.stdout)
    assert proc.returncode == 0 or gloo_teardown, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"

