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
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from rlix.agent.connections import Connection, ConnectionClosedError
from rlix.agent.driver_checkpoint import Checkpointer, CheckpointUnsupportedError
from rlix.agent.gpus import GpuBackend
from rlix.agent.park_space import ExportError, ExportRoom, ParkSpace, export_room
from rlix.agent.parking_state import (
    PARKED_BY_GATE,
    Manifest,
    ManifestError,
    StateStore,
    SuspendedPod,
    manifest_from_doc,
)
from rlix.agent.publication import BackgroundPublisher
from rlix.agent.relocation import DeviceRelocator, RelocationUnsupportedError
from rlix.core import agent_protocol as proto
from rlix.core.agent_protocol import Location, Place
from rlix.core.names import ANNOTATION_SUSPENDED

log = logging.getLogger(__name__)


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class _Asked(NamedTuple):
    """Who asked for a suspend, and what the pod held per GPU then: what its
    record keeps (``SuspendedPod.by``, ``held_mib``), whenever the reply lands."""

    by: str
    held_mib: dict[int, int]


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
        # Notified whenever a process (re)connects: a resume after an agent
        # restart waits on it for the recorded processes to come back.
        self._attached = threading.Condition(self._lock)
        self._sessions: dict[str, dict[int, Connection]] = {}
        # (pod uid, pid) whose park file is being written or checked right now:
        # it has no "relocated" record yet, and must not be reconciled away.
        self._relocating: set[tuple[str, int]] = set()
        self._suspending: set[str] = set()  # pod uids with a suspend in flight
        # (pod uid, pid) of processes that reconnected parked without a record and
        # are being resumed (see on_hello): a suspend of the pod waits for them.
        self._waking: set[tuple[str, int]] = set()
        # Called when memory left or came back to the GPUs (the server publishes
        # the node's GPU state then). The conductor reads a GPU's measured use
        # as a floor for what it owes; published only every --publish-interval,
        # a parked pod's memory would look taken for up to that long after it
        # left, and the conductor would park a second victim for a job the
        # first one already made room for.
        self.on_memory_moved: Callable[[], None] = lambda: None
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
            self._attached.notify_all()

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
        """A (re)connecting client says whether it is parked; our record decides.

        Only the agent's own record makes a process suspended (and publishes it
        so): a pod's word is no proof. A claim without a record is a suspend
        whose answer this agent never saw (it was restarted while the process
        waited for its phase boundary) or a process that lies; either way the
        process is resumed, from its own memory or from a park file this agent
        holds for it, so it never stays parked with nobody to resume it.
        """
        pod = conn.caller.pod
        assert pod is not None
        with self._lock:
            conn.greeted = True
            self._attached.notify_all()
            rec = self.suspended.get(pod.uid)
            recorded = rec is not None and conn.pid in rec.processes
        if parked is None:
            if not recorded:
                self._free_stray_park(pod.uid, conn.pid, "it is running, not parked")
            return {"suspended": recorded}
        try:
            manifest = manifest_from_doc(parked)
        except ManifestError as exc:
            raise proto.ProtocolError(proto.E_BAD_FIELD, f"parked: {exc}") from None
        if recorded:
            return {"suspended": True}
        if manifest.relocated:
            size = self._parks.size(pod.uid, conn.pid)
            if size is None or size != manifest.size:
                held = "no park file" if size is None else f"{size} bytes"
                log.error(
                    "pid %d of %s says the agent holds its memory (%s), but this agent has "
                    "no record and holds %s for it: nothing to resume it from",
                    conn.pid,
                    pod.key,
                    manifest.where,
                    held,
                )
                raise proto.ProtocolError(
                    proto.E_CONFLICT,
                    f"parked: says relocated to {manifest.where}, but the agent has no record "
                    f"of it and holds {held} for pid {conn.pid}",
                )
        log.warning(
            "pid %d of %s says it is parked (%s) but this agent has no record of suspending "
            "it: resuming it",
            conn.pid,
            pod.key,
            manifest.where,
        )
        with self._lock:
            self._waking.add((pod.uid, conn.pid))
        threading.Thread(
            target=self._resume_unrecorded, args=(conn, manifest, parked), daemon=True
        ).start()
        return {"suspended": False}

    def _resume_unrecorded(self, conn: Connection, manifest: Manifest, doc: Any) -> None:
        """Bring back a process that is parked without a record (see :meth:`on_hello`)."""
        pod = conn.caller.pod
        assert pod is not None
        try:
            self._wake(conn, manifest, doc)
        finally:
            with self._lock:
                self._waking.discard((pod.uid, conn.pid))
                self._attached.notify_all()

    def _wake(self, conn: Connection, manifest: Manifest, doc: Any) -> None:
        pod = conn.caller.pod
        assert pod is not None
        if manifest.relocated:
            problem = self._fill(pod.uid, conn, manifest)
            if problem:
                log.error("pid %d of %s stays parked: %s", conn.pid, pod.key, problem)
                return
        # The process's own manifest: it checks its restored bytes against it.
        reply = conn.request(proto.OP_RESUME, manifest=doc)
        try:
            answer = reply.result(timeout=self._timeout_s)
        except Exception as exc:
            log.error("pid %d of %s: resume of an unrecorded park: %s", conn.pid, pod.key, exc)
            return
        if not answer.ok:
            log.error("pid %d of %s refused to resume: %s", conn.pid, pod.key, answer.error_message)
            return
        log.info("pid %d of %s resumed (it was parked without a record)", conn.pid, pod.key)
        self._free_stray_park(pod.uid, conn.pid, "it resumed")
        with self._lock:
            still = pod.uid in self.suspended
        if pod.namespace and not still:
            # A previous agent may have published it suspended before it lost the record.
            self._publisher.pod(pod.namespace, pod.name, {ANNOTATION_SUSPENDED: None})

    def _free_stray_park(self, uid: str, pid: int, why: str) -> None:
        """Delete a park file of a process that no record says the agent holds."""
        with self._lock:
            if (uid, pid) in self._relocating or self._holds(uid, pid):
                return
        if self._parks.size(uid, pid) is not None:
            self._parks.delete(uid, pid)
            log.warning("freed the park file of pid %d of pod %s: %s", pid, uid, why)

    def _holds(self, uid: str, pid: int) -> bool:
        """Whether a record says the agent holds this process's memory (under the lock)."""
        rec = self.suspended.get(uid)
        manifest = rec.processes.get(pid) if rec is not None else None
        return manifest is not None and manifest.relocated

    def reconcile_parks(self) -> list[str]:
        """Free every park file (and half-written ``*.tmp``) that no record owns.

        An agent killed mid-copy leaves a ``*.tmp``; one killed after the copy
        but before the process released its memory leaves a whole park file
        while the process still holds its own copy (its record says
        ``exported``). Host memory on a tmpfs is never returned by anyone else,
        so the agent frees at start and periodically whatever has no live owner:
        a record that says the agent holds it, a relocation in flight, or a live
        process this agent has no record of (its hello decides, see
        :meth:`on_hello`).
        """
        freed: list[str] = []
        for uid, pid, path in self._parks.files():
            with self._lock:
                if (uid, pid) in self._relocating:
                    continue  # a copy in progress
                held = self._holds(uid, pid)
                known = any(pid in r.processes for r in self.suspended.values())
            # A *.tmp outside a copy is always a leftover; a park file is kept
            # when a record holds it, or for a live process no record mentions.
            if path.suffix == ".park" and (held or (not known and self._alive(pid))):
                continue
            nbytes = self._parks.remove(path)
            log.warning(
                "freed %s (%d bytes): no record holds it and no copy is in flight", path, nbytes
            )
            freed.append(str(path))
        return freed

    def parked_bytes(self, uid: str) -> int | None:
        """Bytes the agent's record says this pod parked; None when it is not suspended."""
        with self._lock:
            rec = self.suspended.get(uid)
            return sum(m.nbytes for m in rec.processes.values()) if rec is not None else None

    def suspending(self) -> list[str]:
        """Pods whose suspend is in flight now (status: a suspend waits for park replies)."""
        with self._lock:
            return sorted(self._suspending)

    def connected(self, uid: str) -> bool:
        """Whether a process of this pod is connected and said hello (someone to suspend)."""
        with self._lock:
            return any(c.greeted for c in self._sessions.get(uid, {}).values())

    def parkable_at_gate(self) -> set[str]:
        """Pods the phase gate may park: each of their connected processes said
        hello with offload hooks and asks the gate while parked (a pod that
        would not ask would never be brought back)."""
        with self._lock:
            return {
                uid
                for uid, conns in self._sessions.items()
                if conns
                and all(c.greeted and c.hooks and c.asks_while_parked for c in conns.values())
            }

    def parked_by_gate(self) -> dict[str, dict[int, int]]:
        """Pods the phase gate parked for a turn (their records say so): uid ->
        what each held per GPU."""
        with self._lock:
            return {
                uid: dict(rec.held_mib)
                for uid, rec in self.suspended.items()
                if rec.by == PARKED_BY_GATE
            }

    def keep_suspended(self, uid: str) -> None:
        """A suspension is wanted of a pod that is parked already: where the phase
        gate parked it for a turn, it is a suspension from now on, published as
        one, and the gate no longer brings it back."""
        with self._lock:
            rec = self.suspended.get(uid)
            if rec is None or not rec.by:
                return
            rec.by = ""  # what it held stays recorded: a resume may be handed back
            self._store.save(rec)
        self.on_memory_moved()  # the gate reads the record again and lets it go
        if rec.namespace:
            self._publisher.pod(rec.namespace, rec.name, {ANNOTATION_SUSPENDED: "true"})

    def hand_to_gate(self, uid: str) -> bool:
        """A resume is wanted of a suspended pod: make it a park of the phase
        gate's instead, so that the gate brings its memory back where it fits
        beside the pods working on its GPUs (``--park-at-gate``), not into
        memory they hold now or may grow into. From here on it is a turn, not a
        suspension: no longer published as ``rlix.io/suspended``. Done only
        where the gate can bring it back: its record says what it held per GPU,
        and every process in it is connected and asks the gate while parked
        (:meth:`parkable_at_gate`). False where it was not handed over (resume
        it as before)."""
        with self._lock:
            rec = self.suspended.get(uid)
            if rec is None or rec.by or not rec.held_mib or uid not in self.parkable_at_gate():
                return False
            if not rec.processes.keys() <= self._sessions.get(uid, {}).keys():
                return False  # a process still on its way back: its restore would fail
            rec.by = PARKED_BY_GATE
            self._store.save(rec)
        self.on_memory_moved()  # the gate reads the record and takes it into its line
        if rec.namespace:
            self._publisher.pod(rec.namespace, rec.name, {ANNOTATION_SUSPENDED: None})
        log.info(
            "resume of pod %s/%s handed to the phase gate: its memory comes back at its turn",
            rec.namespace,
            rec.name,
        )
        return True

    def _ready_to_suspend(self, uid: str) -> bool:
        """No process of the pod is being resumed from before this agent started
        (see :meth:`on_hello`) or has yet to say hello (its hooks unknown)."""
        conns = self._sessions.get(uid, {}).values()
        waking = any(u == uid for u, _ in self._waking)
        return not waking and all(c.greeted for c in conns)

    # -- suspend -----------------------------------------------------------------
    def suspend_pod(
        self,
        uid: str,
        target: Location = proto.SELF,
        *,
        by: str = "",
        held_mib: Mapping[int, int] | None = None,
    ) -> dict[str, Any]:
        """Park the pod's memory; ``by`` and ``held_mib``: who parks it and what
        it held per GPU, kept in its record (``SuspendedPod``), also where a
        reply comes after this call gave up on it."""
        with self._lock:
            self._suspending.add(uid)
        try:
            return self._suspend_pod(uid, target, _Asked(by, dict(held_mib or {})))
        finally:
            with self._lock:
                self._suspending.discard(uid)

    def _suspend_pod(self, uid: str, target: Location, asked: _Asked) -> dict[str, Any]:
        if target.gpu is not None:
            count = len(self._backend.gpus())
            if target.gpu >= count:
                raise proto.ProtocolError(
                    proto.E_BAD_FIELD, f"target '{target}': this node has {count} GPUs"
                )
        with self._lock:
            # A suspend sent to a process still parked from before this agent
            # started would be answered "parked" and recorded, and the resume in
            # flight would then bring it back under a record that says parked;
            # one sent before a process's hello would take it for hook-less.
            if not self._attached.wait_for(lambda: self._ready_to_suspend(uid), self._timeout_s):
                raise proto.ProtocolError(
                    proto.E_CONFLICT,
                    f"pod {uid}: a process is still reconnecting (no hello, or being resumed "
                    f"from a park this agent has no record of) after {self._timeout_s}s",
                )
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
        if not asked.held_mib:
            asked = asked._replace(held_mib=self._held_mib({c.pid for c in conns}))
        futures: dict[Future[proto.Reply], Connection] = {}
        recorded: dict[Future[proto.Reply], threading.Event] = {}
        errors: list[str] = []
        for conn in conns:
            if conn.hooks:
                fut = conn.request(proto.OP_SUSPEND, target=str(target))
                recorded[fut] = threading.Event()
                fut.add_done_callback(
                    functools.partial(self._on_parked, conn, target, asked, recorded[fut])
                )
                futures[fut] = conn
            else:
                errors.extend(self._driver_suspend(conn, asked))
        done, not_done = wait_futures(futures, timeout=self._timeout_s)
        # A reply wakes this wait before its done-callback has saved the record
        # (concurrent.futures notifies waiters first): let every record land
        # before reading what was parked, and before answering whoever asked
        # (the phase gate reads the record to tell its own parks from others').
        for fut in done:
            recorded[fut].wait(timeout=self._timeout_s)
        for fut in not_done:
            # A late reply is still recorded (as exported: the process keeps its
            # memory until a release that never comes); its descriptors are closed.
            fut.add_done_callback(_close_reply_fds)
            errors.append(
                f"pid {futures[fut].pid}: no park reply within {self._timeout_s}s "
                "(it parks at its next phase boundary; the record is saved when it does)"
            )
        errors.extend(self._take_replies([(f, futures[f]) for f in done], target, asked))
        with self._lock:
            rec = self.suspended.get(uid)
            parked = {str(pid): str(m.where) for pid, m in rec.processes.items()} if rec else {}
        if errors:
            raise proto.ProtocolError(proto.E_FAILED, "; ".join(errors))
        return {"pod_uid": uid, "parked": parked}

    def _take_replies(
        self,
        replies: list[tuple[Future[proto.Reply], Connection]],
        target: Location,
        asked: _Asked,
    ) -> list[str]:
        """Relocate what each process exported (its record has landed); the errors."""
        errors: list[str] = []
        room: ExportRoom | None = None  # shared by the pod's processes' exports
        for fut, conn in replies:
            reply = _result(fut)
            if isinstance(reply, str):
                errors.append(f"pid {conn.pid}: {reply}")
                continue
            try:
                if reply.body.get("export") is not None and not target.agent_holds:
                    raise proto.ProtocolError(
                        proto.E_BAD_FIELD, f"exported its memory for a suspend to '{target}'"
                    )
                if reply.body.get("export") is not None:
                    if room is None:
                        room = export_room(asked.held_mib, self._gpu_memory_mib())
                    # The "exported" record has landed: the relocated one replaces it.
                    with self._relocating_now(conn):
                        self._relocate_copy(conn, reply, target, asked, room)
            except proto.ProtocolError as exc:
                errors.append(f"pid {conn.pid}: {exc.message}")
            finally:
                _close_reply_fds(fut)
        return errors

    def _gpu_memory_mib(self) -> list[int]:
        """Each GPU's memory (MiB); empty where the GPUs cannot be read."""
        try:
            return [g.memory_mib for g in self._backend.gpus()]
        except Exception as exc:  # every export is then refused: nothing bounds it
            log.warning("could not read this node's GPUs: %s", exc)
            return []

    def _held_mib(self, pids: set[int]) -> dict[int, int]:
        """What these processes hold per GPU now (GPU -> MiB), for the record: the
        room a restore needs, should the phase gate be the one to make it
        (:meth:`hand_to_gate`). Empty where the GPUs cannot be read."""
        held: dict[int, int] = {}
        try:
            for proc in self._backend.processes():
                if proc.pid in pids:
                    held[proc.gpu_index] = held.get(proc.gpu_index, 0) + proc.used_mib
        except Exception as exc:  # the suspend goes on; a resume is then not handed over
            log.warning("could not read what pod processes %s hold: %s", sorted(pids), exc)
            return {}
        return held

    @contextlib.contextmanager
    def _relocating_now(self, conn: Connection) -> Iterator[None]:
        """Mark the process's copy as in flight (``_relocating``) while it runs."""
        pod = conn.caller.pod
        assert pod is not None
        with self._lock:
            self._relocating.add((pod.uid, conn.pid))
        try:
            yield
        finally:
            with self._lock:
                self._relocating.discard((pod.uid, conn.pid))

    def _relocate_copy(
        self,
        conn: Connection,
        reply: proto.Reply,
        target: Location,
        asked: _Asked,
        room: ExportRoom,
    ) -> None:
        """Copy a process's export to the target, check it, then let it free its memory.

        Until ``release`` is answered the process still holds its memory, so a
        failure here resumes it in place and loses nothing. The announced size
        is taken from ``room`` before anything is allocated for it.
        """
        pod = conn.caller.pod
        assert pod is not None
        raw_manifest = reply.body.get("manifest")
        export = reply.body["export"]
        owner = f"{pod.uid}/{conn.pid}"
        manifest: Manifest | None = None
        try:
            manifest = manifest_from_doc(raw_manifest)
            if manifest.where.place is not Place.EXPORTED:
                raise ExportError(
                    f"an export needs a manifest at 'exported', not '{manifest.where}'"
                )
            if not isinstance(export, dict) or not isinstance(export.get("cuda", []), list):
                raise ExportError("'export' must be an object with a 'cuda' list")
            size = manifest.size or 0
            room.take(size)
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
            if target.gpu is not None:
                self._relocator.hold(owner, target.gpu, self._parks.path(pod.uid, conn.pid), size)
        except (ExportError, RelocationUnsupportedError, OSError, ValueError, KeyError) as exc:
            self._parks.delete(pod.uid, conn.pid)
            self._relocator.drop(owner)
            self._undo_export(conn, raw_manifest)
            raise proto.ProtocolError(
                proto.E_FAILED, f"relocation to {target} failed, resumed in place: {exc}"
            ) from None
        self._record(conn, manifest.moved_to(target), asked)
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

    def _driver_suspend(self, conn: Connection, asked: _Asked) -> list[str]:
        try:
            self._checkpointer.suspend(conn.pid)
        except CheckpointUnsupportedError as exc:
            return [
                f"pid {conn.pid} registered no offload hooks and transparent suspend is "
                f"unsupported: {exc}"
            ]
        except Exception as exc:
            return [f"pid {conn.pid}: driver checkpoint failed: {exc}"]
        self._record(conn, Manifest(where=Location(Place.DRIVER), entries=()), asked)
        return []

    def _on_parked(
        self,
        conn: Connection,
        target: Location,
        asked: _Asked,
        recorded: threading.Event,
        fut: Future[proto.Reply],
    ) -> None:
        """Record a park reply, if it is one the request allows.

        The process says where its memory is, but only two answers fit a
        suspend: its own pool (``self``), or ``exported`` when the agent asked
        to take the memory. Any other claim (``host``, a GPU, the driver) would
        have the agent record, and publish, a parking it never did; the process
        is told to resume instead.
        """
        try:
            reply = _result(fut)
            if isinstance(reply, str):
                return
            raw = reply.body.get("manifest")
            try:
                manifest = manifest_from_doc(raw)
                allowed = {Place.SELF, Place.EXPORTED} if target.agent_holds else {Place.SELF}
                if manifest.where.place not in allowed:
                    raise ManifestError(
                        f"'where' is '{manifest.where}' in answer to a suspend to '{target}'"
                    )
            except ManifestError as exc:
                log.error("pid %d sent a bad park manifest (%s): resuming it", conn.pid, exc)
                conn.request(proto.OP_RESUME, manifest=raw).add_done_callback(_close_reply_fds)
                return
            self._record(conn, manifest, asked)
        finally:
            recorded.set()

    def _record(self, conn: Connection, manifest: Manifest, asked: _Asked) -> None:
        pod = conn.caller.pod
        assert pod is not None
        with self._lock:
            rec = self.suspended.get(pod.uid)
            if rec is None:
                since = rfc3339(self._now())
                rec = SuspendedPod(
                    pod.uid,
                    pod.namespace,
                    pod.name,
                    since,
                    by=asked.by,
                    held_mib=dict(asked.held_mib),
                )
                self.suspended[pod.uid] = rec
            rec.processes[conn.pid] = manifest
            self._store.save(rec)
        self._backend.set_parked(frozenset({conn.pid}), True)
        self.on_memory_moved()  # first: the pod reads as parked only after its GPUs do
        # A turn at the gate is not a suspension: the pod's claim still owes its
        # memory, and a conductor that saw it suspended would resume it into the
        # memory its working partner holds.
        if pod.namespace and not rec.by:
            self._publisher.pod(pod.namespace, pod.name, {ANNOTATION_SUSPENDED: "true"})

    # -- resume ----------------------------------------------------------------
    def _await_sessions(self, rec: SuspendedPod) -> dict[int, Connection]:
        """The record's processes' connections, waiting for live ones to reconnect.

        Right after an agent restart the record is back at once, but each
        process reconnects only after its client's backoff (up to a second). A
        resume refused in that moment would leave the pod suspended for a
        controller that does not retry; so it waits, up to the suspend timeout,
        for every process that is alive and not driver-checkpointed. Dead ones
        are the reaper's.
        """
        deadline = time.monotonic() + self._timeout_s
        with self._lock:
            while True:
                conns = dict(self._sessions.get(rec.uid, {}))
                missing = [
                    pid
                    for pid, m in rec.processes.items()
                    if pid not in conns and m.where.place is not Place.DRIVER and self._alive(pid)
                ]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return conns
                log.info(
                    "resume of %s/%s waits for pid(s) %s to reconnect",
                    rec.namespace,
                    rec.name,
                    ", ".join(map(str, missing)),
                )
                self._attached.wait(timeout=left)

    def resume_pod(self, uid: str) -> dict[str, Any]:
        with self._lock:
            rec = self.suspended.get(uid)
            if rec is None:
                raise proto.ProtocolError(proto.E_NOT_FOUND, f"pod {uid} is not suspended")
        conns = self._await_sessions(rec)
        with self._lock:
            if self.suspended.get(uid) is not rec:
                raise proto.ProtocolError(proto.E_NOT_FOUND, f"pod {uid} is not suspended")
            work = dict(rec.processes)
        errors: list[str] = []
        resumed: list[int] = []
        futures: dict[Future[proto.Reply], int] = {}
        for pid, manifest in work.items():
            conn = conns.get(pid)
            if manifest.where.place is Place.DRIVER:
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
            elif manifest.relocated and (problem := self._fill(uid, conn, manifest)):
                errors.append(f"pid {pid}: {problem}")
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
        self.on_memory_moved()
        if not rec.processes and rec.namespace and not rec.by:
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
