"""Suspend and resume a pod in place: ask its processes to park their device
memory (cooperative hooks), or checkpoint them through the driver (no hooks),
record what was parked where, and bring it back with a checksum check.

The record is saved as each process's park reply arrives (not when the
controller's wait ends), so a late reply after a timeout is still recorded and
the pod stays resumable. Records are reloaded on agent restart.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlix.agent.connections import Connection, ConnectionClosedError
from rlix.agent.driver_checkpoint import Checkpointer, CheckpointUnsupportedError
from rlix.agent.gpus import GpuBackend
from rlix.agent.park_space import ExportError, ParkSpace
from rlix.agent.parking_state import (
    WHERE_DRIVER,
    WHERE_RELOCATED,
    Manifest,
    ManifestError,
    StateStore,
    SuspendedPod,
    manifest_from_doc,
)
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.relocation import DeviceRelocator, RelocationUnsupportedError
from rlix.core import agent_protocol as proto
from rlix.core.names import ANNOTATION_SUSPENDED

log = logging.getLogger(__name__)


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class Preemption:
    def __init__(
        self,
        *,
        store: StateStore,
        backend: GpuBackend,
        checkpointer: Checkpointer,
        publisher: BackgroundPublisher,
        now: Callable[[], datetime],
        timeout_s: float,
        parks: ParkSpace,
        relocator: DeviceRelocator,
        alive: Callable[[int], bool] | None = None,
    ) -> None:
        self._alive = alive or process_alive
        self._parks = parks
        self._relocator = relocator
        self._store = store
        self._backend = backend
        self._checkpointer = checkpointer
        self._publisher = publisher
        self._now = now
        self._timeout_s = timeout_s
        self._lock = threading.RLock()
        self._sessions: dict[str, dict[int, Connection]] = {}
        self.suspended, self.load_problems = store.load_all()
        for pod in self.suspended.values():
            backend.set_parked(frozenset(pod.processes), True)
            log.info(
                "reloaded suspended pod %s/%s (%d processes)",
                pod.namespace,
                pod.name,
                len(pod.processes),
            )

    # -- sessions --------------------------------------------------------------
    def attach(self, conn: Connection) -> None:
        assert conn.caller.pod is not None
        with self._lock:
            self._sessions.setdefault(conn.caller.pod.uid, {})[conn.pid] = conn

    def detach(self, conn: Connection) -> None:
        assert conn.caller.pod is not None
        with self._lock:
            conns = self._sessions.get(conn.caller.pod.uid, {})
            if conns.get(conn.pid) is not conn:
                return  # a newer connection of the same process took over
            del conns[conn.pid]
            rec = self.suspended.get(conn.caller.pod.uid)
            parked = rec is not None and conn.pid in rec.processes
        if not parked:
            self._backend.process_gone(conn.pid)

    def reap(self) -> list[str]:
        """Forget parked processes that no longer exist, and free what they parked.

        A process that dies while suspended takes its in-process copy with it;
        a relocated one would leave its park file (host memory) behind forever.
        Called periodically rather than on disconnect: a dying process closes
        its socket before it is gone from the process table.
        """
        out: list[str] = []
        with self._lock:
            dead = [
                (rec, [pid for pid in rec.processes if not self._alive(pid)])
                for rec in list(self.suspended.values())
            ]
            gone = [(rec, self._forget(rec, pids)) for rec, pids in dead if pids]
        for rec, processes in gone:
            self._free_copies(rec.uid, processes)
            pids = frozenset(pid for pid, _ in processes)
            self._backend.set_parked(pids, False)
            for pid, manifest in processes:
                self._backend.process_gone(pid)
                line = (
                    f"pid {pid} of {rec.namespace}/{rec.name} exited while suspended "
                    f"({manifest.where})"
                )
                log.warning("%s: its parked memory is released", line)
                out.append(line)
            if not rec.processes and rec.namespace:
                self._publisher.pod(rec.namespace, rec.name, {ANNOTATION_SUSPENDED: None})
        return out

    def pods_doc(self) -> dict[str, str]:
        """namespace/name of every pod with a connected or suspended process."""
        with self._lock:
            out = {
                uid: next(iter(conns.values())).caller.pod.key  # type: ignore[union-attr]
                for uid, conns in self._sessions.items()
                if conns
            }
            out.update({uid: f"{r.namespace}/{r.name}" for uid, r in self.suspended.items()})
        return out

    def sessions_doc(self) -> dict[str, dict[str, list[str]]]:
        """Connected processes per pod UID, with the hooks each announced."""
        with self._lock:
            return {
                uid: {str(pid): list(c.hooks) for pid, c in conns.items()}
                for uid, conns in self._sessions.items()
                if conns
            }

    def on_hello(self, conn: Connection, parked: Any) -> dict[str, Any]:
        """A (re)connecting client; if it says it is parked, make sure we know."""
        pod = conn.caller.pod
        assert pod is not None
        if parked is None:
            return {"suspended": False}
        try:
            manifest = manifest_from_doc(parked)
        except ManifestError as exc:
            raise proto.ProtocolError(proto.E_BAD_FIELD, f"parked: {exc}") from None
        with self._lock:
            rec = self.suspended.get(pod.uid)
            if rec is None or conn.pid not in rec.processes:
                # Our record is gone (state dir wiped?): adopt the client's own
                # manifest rather than strand a parked process.
                log.warning("adopting parked state reported by pid %d of %s", conn.pid, pod.key)
                self._record(conn, self._adoptable(pod.uid, conn.pid, manifest))
        return {"suspended": True}

    def _adoptable(self, uid: str, pid: int, manifest: Manifest) -> Manifest:
        """A client's own account of what it parked, checked against what we hold."""
        if manifest.where == "relocated" or manifest.relocated:
            size = self._parks.size(uid, pid)
            if size is None or size != manifest.size:
                raise proto.ProtocolError(
                    proto.E_CONFLICT,
                    f"parked: says relocated, but the agent holds "
                    f"{'no park file' if size is None else f'{size} bytes'} for pid {pid}",
                )
            return manifest.moved_to(f"{WHERE_RELOCATED}{proto.TARGET_HOST}")
        return manifest

    # -- suspend -----------------------------------------------------------------
    def suspend_pod(self, uid: str, target: str = proto.TARGET_SELF) -> dict[str, Any]:
        relocate = target != proto.TARGET_SELF
        if target.startswith(proto.TARGET_GPU_PREFIX):
            gpu = int(target.removeprefix(proto.TARGET_GPU_PREFIX))
            count = len(self._backend.gpus())
            if gpu >= count:
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD, f"target {target!r}: this node has {count} GPUs"
                )
        with self._lock:
            if uid in self.suspended:
                since = self.suspended[uid].since
                raise proto.ProtocolError(
                    proto.E_CONFLICT, f"pod {uid} already suspended since {since}"
                )
            conns = list(self._sessions.get(uid, {}).values())
        if not conns:
            raise proto.ProtocolError(
                proto.E_NOT_FOUND, f"no process of pod {uid} is connected to this agent"
            )
        futures: dict[Future[proto.Reply], Connection] = {}
        recorded: dict[Future[proto.Reply], threading.Event] = {}
        errors: list[str] = []
        for conn in conns:
            if conn.hooks:
                fut = conn.request(proto.OP_SUSPEND, relocate=relocate)
                recorded[fut] = threading.Event()
                fut.add_done_callback(functools.partial(self._on_parked, conn, recorded[fut]))
                futures[fut] = conn
            else:
                errors.extend(self._driver_suspend(conn))
        done, not_done = wait_futures(futures, timeout=self._timeout_s)
        for fut in not_done:
            # A late reply is still recorded (as exported: the process keeps its
            # memory until a release that never comes); its descriptors are closed.
            fut.add_done_callback(_close_reply_fds)
            errors.append(
                f"pid {futures[fut].pid}: no park reply within {self._timeout_s}s "
                "(it parks at its next phase boundary; the record is saved when it does)"
            )
        for fut in done:
            reply = _result(fut)
            if isinstance(reply, str):
                errors.append(f"pid {futures[fut].pid}: {reply}")
                continue
            try:
                if reply.body.get("export") is not None:
                    # Waiters wake before done-callbacks run: let the "exported"
                    # record land first, so the relocated one replaces it.
                    recorded[fut].wait(timeout=10)
                    self._relocate(futures[fut], reply, target)
            except proto.ProtocolError as exc:
                errors.append(f"pid {futures[fut].pid}: {exc.message}")
            finally:
                _close_reply_fds(fut)
        with self._lock:
            rec = self.suspended.get(uid)
            parked = {pid: m.where for pid, m in rec.processes.items()} if rec else {}
        if errors:
            raise proto.ProtocolError(proto.E_FAILED, "; ".join(errors))
        return {"pod_uid": uid, "parked": {str(p): w for p, w in parked.items()}}

    def _relocate(self, conn: Connection, reply: proto.Reply, target: str) -> None:
        """Copy a process's export to the target, check it, then let it free its memory.

        Until ``release`` is answered the process still holds its memory, so a
        failure here resumes it in place and loses nothing.
        """
        pod = conn.caller.pod
        assert pod is not None
        raw_manifest = reply.body.get("manifest")
        export = reply.body["export"]
        owner = f"{pod.uid}/{conn.pid}"
        manifest: Manifest | None = None
        try:
            manifest = manifest_from_doc(raw_manifest)
            if not isinstance(export, dict) or not isinstance(export.get("cuda", []), list):
                raise ExportError("'export' must be an object with a 'cuda' list")
            size = manifest.size or 0
            memfd, cuda = export.get("memfd"), export.get("cuda", [])
            if memfd is not None:
                if len(reply.fds) != 1:
                    raise ExportError(f"a memfd export needs 1 descriptor, {len(reply.fds)} came")
                self._parks.park_from_fd(pod.uid, conn.pid, reply.fds[0], size)
            else:
                self._parks.allocate(pod.uid, conn.pid, size)  # device pieces only
            self._relocator.park(cuda, self._parks.path(pod.uid, conn.pid))
            bad, _ = self._parks.mismatches(
                pod.uid,
                conn.pid,
                [
                    (e.name, e.offset or 0, e.nbytes, e.checksum)
                    for e in manifest.entries
                    if e.offset is not None
                ],
            )
            if bad:
                raise ExportError(f"the parked copy does not match the checksums of {bad}")
            if target.startswith(proto.TARGET_GPU_PREFIX):
                gpu = int(target.removeprefix(proto.TARGET_GPU_PREFIX))
                self._relocator.hold(owner, gpu, self._parks.path(pod.uid, conn.pid), size)
        except (ExportError, RelocationUnsupportedError, OSError, ValueError, KeyError) as exc:
            self._parks.delete(pod.uid, conn.pid)
            self._relocator.drop(owner)
            self._undo_export(conn, raw_manifest)
            raise proto.ProtocolError(
                proto.E_FAILED, f"relocation to {target} failed, resumed in place: {exc}"
            ) from None
        self._record(conn, manifest.moved_to(f"{WHERE_RELOCATED}{target}"))
        release = conn.request(proto.OP_RELEASE)
        try:
            answer = release.result(timeout=self._timeout_s)
        except Exception as exc:  # the copy is safe; the process keeps its memory for now
            log.warning("pid %d did not confirm release: %s", conn.pid, exc)
            return
        if not answer.ok:
            log.warning("pid %d refused release: %s", conn.pid, answer.error_message)

    def _undo_export(self, conn: Connection, manifest: Any) -> None:
        """Relocation failed before release: the process resumes with its own memory."""
        with self._lock:
            rec = self.suspended.get(conn.caller.pod.uid) if conn.caller.pod else None
            if rec is not None:
                self._forget(rec, [conn.pid])
        self._backend.set_parked(frozenset({conn.pid}), False)
        # The process's own (unvalidated) manifest: it is only echoed back to it.
        fut = conn.request(proto.OP_RESUME, manifest=manifest)
        try:
            fut.result(timeout=self._timeout_s)
        except Exception as exc:
            log.error("pid %d: resume after a failed relocation: %s", conn.pid, exc)

    def _driver_suspend(self, conn: Connection) -> list[str]:
        try:
            self._checkpointer.suspend(conn.pid)
        except CheckpointUnsupportedError as exc:
            return [
                f"pid {conn.pid} registered no offload hooks and transparent suspend is "
                f"unsupported: {exc}"
            ]
        except Exception as exc:
            return [f"pid {conn.pid}: driver checkpoint failed: {exc}"]
        self._record(conn, Manifest(where=WHERE_DRIVER, entries=()))
        return []

    def _on_parked(
        self, conn: Connection, recorded: threading.Event, fut: Future[proto.Reply]
    ) -> None:
        try:
            reply = _result(fut)
            if isinstance(reply, str):
                return
            try:
                manifest = manifest_from_doc(reply.body.get("manifest"))
            except ManifestError as exc:
                log.error("pid %d sent a bad park manifest: %s", conn.pid, exc)
                return
            self._record(conn, manifest)
        finally:
            recorded.set()

    def _record(self, conn: Connection, manifest: Manifest) -> None:
        pod = conn.caller.pod
        assert pod is not None
        with self._lock:
            rec = self.suspended.get(pod.uid)
            if rec is None:
                since = rfc3339(self._now())
                rec = SuspendedPod(uid=pod.uid, namespace=pod.namespace, name=pod.name, since=since)
                self.suspended[pod.uid] = rec
            rec.processes[conn.pid] = manifest
            self._store.save(rec)
        self._backend.set_parked(frozenset({conn.pid}), True)
        if pod.namespace:
            self._publisher.pod(pod.namespace, pod.name, {ANNOTATION_SUSPENDED: "true"})

    # -- resume ----------------------------------------------------------------
    def resume_pod(self, uid: str) -> dict[str, Any]:
        with self._lock:
            rec = self.suspended.get(uid)
            if rec is None:
                raise proto.ProtocolError(proto.E_NOT_FOUND, f"pod {uid} is not suspended")
            conns = dict(self._sessions.get(uid, {}))
            work = dict(rec.processes)
        errors: list[str] = []
        resumed: list[int] = []
        futures: dict[Future[proto.Reply], int] = {}
        for pid, manifest in work.items():
            conn = conns.get(pid)
            if manifest.where == WHERE_DRIVER:
                try:
                    self._checkpointer.resume(pid)
                    resumed.append(pid)
                except Exception as exc:
                    errors.append(f"pid {pid}: driver restore failed: {exc}")
            elif conn is None:
                held = (
                    "the agent holds its parked copy"
                    if manifest.relocated
                    else ("its parked copy lives in that process")
                )
                errors.append(f"pid {pid} is not connected (yet); {held}, retry once it reconnects")
            elif manifest.relocated:
                problem = self._fill(uid, conn, manifest)
                if problem:
                    errors.append(f"pid {pid}: {problem}")
                    continue
                futures[conn.request(proto.OP_RESUME, manifest=manifest.to_doc())] = pid
            else:
                futures[conn.request(proto.OP_RESUME, manifest=manifest.to_doc())] = pid
        done, not_done = wait_futures(futures, timeout=self._timeout_s)
        errors += [f"pid {futures[f]}: no resume reply within {self._timeout_s}s" for f in not_done]
        for fut in done:
            pid = futures[fut]
            reply = _result(fut)
            if isinstance(reply, str):
                errors.append(f"pid {pid}: {reply}")
                continue
            problem = _verify(work[pid], reply.body.get("checksums"))
            if problem:
                errors.append(f"pid {pid}: integrity check failed: {problem}")
            else:
                resumed.append(pid)
        self._finish_resume(rec, resumed)
        if errors:
            raise proto.ProtocolError(proto.E_FAILED, "; ".join(errors))
        return {"pod_uid": uid, "resumed": sorted(resumed)}

    def _fill(self, uid: str, conn: Connection, manifest: Manifest) -> str | None:
        """Have a relocated process reallocate, and copy its memory back in."""
        fut = conn.request(proto.OP_REGROW, manifest=manifest.to_doc())
        try:
            reply = fut.result(timeout=self._timeout_s)
        except Exception as exc:
            _close_reply_fds(fut)
            return f"no regrow reply: {exc}"
        try:
            if not reply.ok:
                return f"regrow refused: {reply.error_code}: {reply.error_message}"
            export = reply.body.get("export")
            if export is None:
                return None  # it never freed its memory (release did not arrive)
            size = manifest.size or 0
            if export.get("size") != size:
                return f"regrow exported {export.get('size')} bytes, {size} were parked"
            if export.get("memfd") is not None:
                if len(reply.fds) != 1:
                    return f"a memfd export needs 1 descriptor, {len(reply.fds)} came"
                self._parks.unpark_into_fd(uid, conn.pid, reply.fds[0], size)
            self._relocator.unpark(
                f"{uid}/{conn.pid}", export.get("cuda", []), self._parks.path(uid, conn.pid)
            )
        except (ExportError, RelocationUnsupportedError, OSError, ValueError, KeyError) as exc:
            return f"copying the parked memory back failed (still parked): {exc}"
        finally:
            _close_reply_fds(fut)
        return None

    def _forget(self, rec: SuspendedPod, pids: Iterable[int]) -> list[tuple[int, Manifest]]:
        """Drop these processes from the pod's record, which is saved with what is
        still parked or deleted when nothing is; returns what they had parked."""
        with self._lock:
            gone = [(pid, m) for pid in pids if (m := rec.processes.pop(pid, None)) is not None]
            if rec.processes:
                self._store.save(rec)
            else:
                self._store.delete(rec.uid)
                self.suspended.pop(rec.uid, None)
        return gone

    def _free_copies(self, uid: str, parked: Iterable[tuple[int, Manifest]]) -> None:
        """Release what the agent holds for relocated processes (park file, HBM)."""
        for pid, manifest in parked:
            if manifest.relocated:
                self._parks.delete(uid, pid)
                self._relocator.drop(f"{uid}/{pid}")

    def _finish_resume(self, rec: SuspendedPod, resumed: list[int]) -> None:
        # Parked copies go only after the record no longer points at them.
        self._free_copies(rec.uid, self._forget(rec, resumed))
        self._backend.set_parked(frozenset(resumed), False)
        if not rec.processes and rec.namespace:
            self._publisher.pod(rec.namespace, rec.name, {ANNOTATION_SUSPENDED: None})


def process_alive(pid: int) -> bool:
    """Whether a host PID is a live process (a zombie is not: it has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return True  # unreadable is not proof of death: keep its memory
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _close_reply_fds(fut: Future[proto.Reply]) -> None:
    """Descriptors that came with a reply are ours to close once used."""
    if fut.done() and not fut.cancelled() and fut.exception() is None:
        for fd in fut.result().fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _result(fut: Future[proto.Reply]) -> proto.Reply | str:
    """The reply, or a one-line reason why there is none / it is an error."""
    try:
        reply = fut.result(timeout=0)
    except (ConnectionClosedError, FutureTimeout) as exc:
        return f"no reply: {exc}"
    if not reply.ok:
        return f"{reply.error_code}: {reply.error_message}"
    return reply


def _verify(manifest: Manifest, checksums: Any) -> str | None:
    """Compare the checksums a client computed after restoring with the record."""
    if not isinstance(checksums, dict):
        return "resume reply has no 'checksums' object"
    bad = [e.name for e in manifest.entries if checksums.get(e.name) != e.checksum]
    extra = set(checksums) - {e.name for e in manifest.entries}
    if bad or extra:
        return f"mismatched {sorted(bad)}, unexpected {sorted(extra)}"
    return None
