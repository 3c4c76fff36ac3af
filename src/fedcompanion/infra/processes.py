"""Process trees that die with the process that started them: :func:`descendants`, :func:`stop_tree` and a
watchdog (:func:`watch`) that stops them once their launcher is gone, even by kill -9, which runs no handler.

A launcher (``make reproduce``, the loopback Flower deployment) starts children that start their own: pool workers,
notebook kernels (each in a session of its own, as jupyter_client starts them), the kernels' sweep workers,
Flower's SuperLink and SuperNodes. When the launcher dies they are re-parented and would run on (a kernel would finish
its notebook and write its summary after the reproduction died). The watchdog is a small stdlib-only process: while
its launcher lives, it keeps a snapshot of the launcher's process tree (read from /proc every quarter second) and,
when the launcher's pid is gone, SIGKILLs every process of the last snapshot, their process groups, and the groups a
launcher recorded in a file.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import signal
import subprocess
import sys
from pathlib import Path


def descendants(roots) -> set:
    """``roots`` and every live process below them (children, their children, ...), read from /proc."""
    import os

    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo += children.get(pid, [])
    return out


def stop_tree(roots) -> None:
    """SIGKILL ``roots``, the process groups they lead and every process below them (kernels and Flower's processes
    start process groups of their own)."""
    import os
    import signal

    for pid in descendants(roots):
        for kill, target in ((os.killpg, pid), (os.kill, pid)):
            try:
                kill(target, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


# stdlib only, so that it is up at once. argv: the launcher's pid, and a file of recorded process ids ("" for none).
WATCHDOG = inspect.getsource(descendants) + inspect.getsource(stop_tree) + """
import os, sys, time
parent, recorded = int(sys.argv[1]), sys.argv[2]
me, snapshot = os.getpid(), set()
while os.getppid() == parent:
    snapshot = descendants([parent]) - {me, parent}
    time.sleep(0.25)
if recorded and os.path.exists(recorded):
    with open(recorded) as f:
        snapshot |= {int(line) for line in f if line.strip()}
stop_tree(snapshot - {me})
"""


def watch(recorded: str | Path = "") -> subprocess.Popen:
    """Start the watchdog of this process (stop it with ``.kill()`` when the launcher ends by itself)."""
    return subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), str(recorded)],
                            start_new_session=True, stdin=subprocess.DEVNULL)


def stop_children() -> None:
    """SIGKILL every process below this one (a launcher's SIGTERM handler: its children must not outlive it)."""
    stop_tree(descendants([os.getpid()]) - {os.getpid()})


KERNEL_SOCKETS = "fedcompanion-kernel-"  # notebook kernels' IPC socket files: <this><launcher's pid>-<12 hex>-<port>


def kernel_sockets(folder: str | Path) -> str:
    """The prefix of a new kernel's IPC socket files in ``folder``: it names the process that starts the kernel, so
    that :func:`remove_stale_kernel_sockets` can tell its leftovers from a running kernel's sockets."""
    import uuid

    return os.path.join(folder, f"{KERNEL_SOCKETS}{os.getpid()}-{uuid.uuid4().hex[:12]}")


def remove_stale_kernel_sockets(folder: str | Path) -> int:
    """Remove the kernel socket files in ``folder`` whose launcher no longer runs (a reproduction killed with -9: the
    watchdog kills its kernels, which then cannot remove their sockets). A live launcher's are kept, and so are files
    of the older name without a pid: a running older checkout's kernel may own them. Returns how many it removed."""
    removed = 0
    for path in Path(folder).glob(f"{KERNEL_SOCKETS}*"):
        pid = path.name[len(KERNEL_SOCKETS):].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


@contextlib.contextmanager
def terminate_as_exit():
    """Inside, SIGTERM raises ``SystemExit`` (status 143), so a command's ``finally`` blocks and ``with`` exits run
    (a temporary folder, a git worktree are removed) where the default action would end the process at once."""
    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

