"""make chaos: a few hundred RLJobs while RLix's own processes are killed at random.

    .venv/bin/python bench/chaos.py [--jobs 300] [--kill-window 180] [--seed 1]

The demo's machinery (a real local control plane, kwok GPU nodes, the real
extender, operator and node agents, one simulated trainer process per bound
pod that reports phases and obeys suspend/resume through the client library)
runs a generated mix of small jobs. While the kill window lasts, a chaos loop:

* SIGKILLs the operator, the extender or one node agent at random moments and
  restarts it a moment later (as a kubelet restarts a crashed container);
* suspends a random running trainer pod in place through the agent (`rlix
  agent suspend`) and resumes it a few seconds later, so some
  suspensions are in flight when an agent dies.

Then it lets the cluster drain and checks the invariants:

* every job Succeeded (none Failed, none left behind);
* no pod created twice (one UID per pod name over the whole run);
* no byte lost: no trainer reported a restore that was not bit for bit, and no
  resume the agent refused for a mismatch;
* no park file left in any agent's park dir, and no suspension record left in
  any agent's state dir (a pod nobody resumed);
* no GPU's claims above its published memory: at every sample, the peak-phase
  memory of the live pods plus the admission ledger's placements of pods not
  created yet fits each GPU's published memory (what each pod's DRA claim
  asks). Reported beside it: GPUs whose running pods exceed physical memory
  in their current phases until the conductor parks one, and whole GPUs held
  (RLix shares GPUs, so those may exceed the GPUs).

Writes bench/results/chaos.md (and .json) with the counts and this command;
exits 1 when an invariant is broken. Not part of `make test`: it takes minutes.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from rlix.core import names
from rlix.core.dra import claim_memory_mib
from rlix.core.policy.placement.loads import node_load
from rlix.core.snapshot import Workload
from rlix.core.validation import parse
from rlix.demo.components import Components
from rlix.demo.pods import PodRuntime
from rlix.demo.runner import FINISHED, Demo, DemoOptions
from rlix.demo.workload import COLOCATED, ROLL, TRAIN, DemoJob, DemoRole
from rlix.devcluster.processes import Component
from rlix.operator.pods import planned_workloads
from rlix.operator.snapshots import build_snapshot
from rlix.views.kube import Kube

RESULTS = Path(__file__).resolve().parent / "results"
# Suspend refusals after which nothing can have parked.
DEFINITE_REFUSALS = frozenset({"no such pod", "already suspended", "nothing registered"})
# A suspend of unknown outcome answered "not suspended" this many times (a
# second apart) has not parked: a late park lands at the next phase boundary.
UNKNOWN_SUSPEND_CHECKS = 5
SHORT = {"rollout": 1.2, "scoring": 0.3, "training": 0.8, "weight-sync": 0.2}


def chaos_jobs(count: int, rng: random.Random) -> list[DemoJob]:
    """Small jobs of the demo's three shapes, with mixed priorities and sizes."""
    jobs = []
    for i in range(count):
        shape = rng.choice(("split", "split", "colocated"))
        priority = rng.choice((0, 0, 10, 50, 100))
        iterations = rng.randint(1, 2)
        if shape == "colocated":
            roles: tuple[DemoRole, ...] = (
                DemoRole("actor", "trainer", 1, rng.choice((1, 2, 4)), COLOCATED),
            )
        else:
            roles = (
                DemoRole("policy", "trainer", 1, rng.choice((1, 2)), TRAIN),
                DemoRole("rollout", "rollout", rng.randint(1, 2), rng.choice((1, 2)), ROLL),
            )
        jobs.append(DemoJob(f"chaos-{i:03d}", priority, iterations, roles, dict(SHORT)))
    return jobs


def ledger_planned(
    rljobs: list[dict[str, Any]], pods: list[dict[str, Any]], ledger: dict[str, Any]
) -> list[Workload]:
    """The admission ledger's placements of admitted pods not created yet.

    Only jobs the view shows Admitted or Running: the ledger is read after the
    view, and a job admitted since may hold GPUs that the view's finished pods
    still show as held.
    """
    live = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods}
    planned = []
    for job in rljobs:
        meta = job["metadata"]
        if (job.get("status") or {}).get("state") not in ("Admitted", "Running"):
            continue
        entry = ledger.get(f"{meta['namespace']}/{meta['name']}")
        if entry is None:
            continue
        typed, _ = parse({k: v for k, v in job.items() if k != "status"})
        if typed is None:
            continue
        for w in planned_workloads(typed):
            place = entry["pods"].get(w.name)
            if place is not None and w.name not in live:
                planned.append(replace(w, node=place[0], gpu_indices=tuple(place[1])))
    return planned


class Overflow(NamedTuple):
    gpu: str  # node/index
    detail: str
    pods: frozenset[str]  # who put it over, namespace/name


def memory_over(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], planned: list[Workload]
) -> tuple[list[Overflow], list[Overflow]]:
    """GPUs promised more memory than they publish; GPUs running more than they have.

    The first is the promise RLix makes and kube-scheduler's DRA allocator
    enforces: each pod's claim asks its peak-phase memory on each of its GPUs,
    and a GPU's claims fit its published memory (physical x the overcommit),
    planned pods (the admission ledger's, not created yet) counted too.

    The second is what the conductor keeps by acting (docs/conductor.md, rule
    3): the running pods' memory in their current phases within the GPU's
    physical memory. A co-resident entering a larger phase puts a GPU over
    until the conductor parks someone (PhaseOverflow), so it is reported, not
    judged. Pods with no phase yet hold nothing yet and are left out of it.
    """
    snapshot = build_snapshot(nodes, pods, planned)
    claims: list[Overflow] = []
    running: list[Overflow] = []
    for name, node in snapshot.nodes.items():
        for g in node_load(node, snapshot.on_node(name)).gpus:
            if not g.capacity_mib:
                continue
            gpu = f"{name}/{g.index}"
            published = g.capacity_mib + g.headroom_mib
            peaks = [(w, claim_memory_mib(w.peak_memory_mib, published)) for w in g.residents]
            if sum(m for _, m in peaks) > published:
                who = ", ".join(f"{w.name}:{m}" for w, m in peaks)
                detail = f"claims {sum(m for _, m in peaks)} of {published} MiB ({who})"
                claims.append(Overflow(gpu, detail, frozenset(w.name for w, _ in peaks)))
            now = [
                (w, w.memory_in(w.phase))
                for w in g.residents
                if not w.suspended and w.phase is not None
            ]
            if sum(m for _, m in now) > g.capacity_mib:
                who = ", ".join(f"{w.name}:{w.phase}:{m}" for w, m in now)
                detail = f"running {sum(m for _, m in now)} of {g.capacity_mib} MiB ({who})"
                running.append(Overflow(gpu, detail, frozenset(w.name for w, _ in now)))
    return claims, running


def gpu_residents(view: Any, ledger: dict[str, Any]) -> dict[str, list[str]]:
    """Who holds each GPU: bound pods by their GPU indices, admitted pods by the ledger.

    Shows whether an over-promise by GPU count is RLix sharing GPUs by
    memory (several residents per GPU) or more GPUs given than exist.
    """
    out: dict[str, list[str]] = defaultdict(list)
    for pod in view.pods:
        meta = pod["metadata"]
        notes = meta.get("annotations") or {}
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            continue
        node = pod["spec"].get("nodeName") or notes.get(names.ANNOTATION_ADMITTED_NODE, "-")
        label = (
            f"{meta['name']}[{notes.get(names.ANNOTATION_PHASE, '-')}"
            f"{',suspended' if notes.get(names.ANNOTATION_SUSPENDED) == 'true' else ''}]"
        )
        for index in (notes.get(names.ANNOTATION_GPU_INDICES) or "?").split(","):
            out[f"{node}/{index}"].append(label)
    live = {p["metadata"]["name"] for p in view.pods}
    for entry in ledger.values():
        for pod, (node, gpus) in entry["pods"].items():
            if pod.split("/", 1)[1] not in live:
                for index in gpus:
                    out[f"{node}/{index}"].append(f"{pod.split('/', 1)[1]}[planned]")
    return dict(sorted(out.items()))


def first_over(overflows: list[Overflow], view: Any, ledger: dict[str, Any]) -> dict[str, Any]:
    """What the report keeps of the first sample that went over: where, and who held each GPU."""
    return {
        "over": [f"{o.gpu}: {o.detail}" for o in overflows],
        "gpu_residents": gpu_residents(view, ledger),
    }


@dataclass
class Tallies:
    kills: Counter[str] = field(default_factory=Counter)
    suspends_ok: int = 0
    suspends_refused: Counter[str] = field(default_factory=Counter)
    # Refused suspends that may still have parked (agent down, timeout, failed):
    # resumed anyway.
    suspends_unknown: int = 0
    resumes_ok: int = 0
    resumes_refused: Counter[str] = field(default_factory=Counter)
    in_flight_at_kill: int = 0
    uids_by_pod: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    samples: int = 0
    # Samples whose job list and pod list disagree: a job's state changed
    # between the two job lists taken around the pod list. Not judged.
    torn_samples: int = 0
    gone_while_suspended: int = 0
    # Whole GPUs held or promised, for the report: above the GPUs whenever
    # jobs share (RLix shares a GPU when the memory fits).
    max_promised: int = 0
    over_gpu_count_samples: int = 0
    first_over_gpu_count: dict[str, Any] = field(default_factory=dict)
    # The invariant: untorn samples in which some GPU's claims exceed its
    # published memory; and samples not judged because the ledger was unreadable.
    memory_over_promised: int = 0
    first_memory_over_promise: dict[str, Any] = field(default_factory=dict)
    memory_unjudged: int = 0
    # Reported: untorn samples in which some GPU's running pods are over its
    # physical memory in their current phases, until the conductor parks one;
    # the longest any GPU stayed so (consecutive judged samples).
    running_over: int = 0
    first_running_over: dict[str, Any] = field(default_factory=dict)
    running_streaks: Counter[str] = field(default_factory=Counter)
    longest_running_over: int = 0
    # Pods this harness suspended through `rlix agent suspend`, which bypasses
    # the conductor: while one is parked the conductor may give its memory to
    # another pod, and the harness's resume (no policy behind it either) then
    # puts both on the GPU. Samples with such an overflow only are counted apart.
    bypassed: set[str] = field(default_factory=set)
    running_over_bypass_only: int = 0
    last_refusals: list[str] = field(default_factory=list)


class Chaos(Demo):
    def __init__(self, options: DemoOptions, args: argparse.Namespace) -> None:
        super().__init__(options)
        self.args = args
        self.rng = random.Random(args.seed)
        self.jobs = {j.name: j for j in chaos_jobs(args.jobs, self.rng)}
        self.t = Tallies()
        self.in_flight: dict[str, str] = {}  # pod uid -> node, while a suspend/resume runs
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.capacity = 0
        self.workdir: Path | None = None

    # -- the loop -----------------------------------------------------------------
    def _watch(
        self, kube: Kube, runtime: PodRuntime, components: Components, *, baseline: bool = False
    ) -> None:
        # The demo's loop (Demo._watch) with kills, suspensions and invariant
        # checks between its steps; mypy (make lint) holds the two to one signature.
        assert not baseline, "a chaos run is an RLix run"
        self.workdir = runtime.workdir
        self.capacity = sum(runtime.gpus_per_node.values())
        by_name = {c.name: c for c in components.started}
        dead: dict[str, float] = {}  # component -> when to restart it
        started = time.monotonic()
        next_kill = started + self.rng.uniform(5, 15)
        next_suspend = started + self.rng.uniform(*self.args.suspend_every)
        deadline = started + self.o.timeout_s
        last_print = 0.0
        while time.monotonic() < deadline:
            now = time.monotonic()
            chaos_on = now - started < self.args.kill_window
            for name, at in list(dead.items()):
                if now >= at:
                    self._restart(by_name[name])
                    del dead[name]
            for c in components.started:
                if c.name not in dead and not c.alive():
                    raise RuntimeError(f"{c.name} died on its own:\n{c.tail()}")
            if chaos_on and now >= next_kill:
                victim = self.rng.choice([c for c in components.started if c.name not in dead])
                self._kill(victim)
                dead[victim.name] = now + self.rng.uniform(0.5, 3.0)
                next_kill = now + self.rng.uniform(*self.args.kill_every)
            if chaos_on and now >= next_suspend:
                self._suspend_one(runtime)
                next_suspend = now + self.rng.uniform(*self.args.suspend_every)
            states = self._step(kube, runtime)
            if states is None:
                time.sleep(1)
                continue
            if now - last_print >= 5.0:
                last_print = now
                counts = Counter(states.values())
                self.log(
                    f"  [{now - started:5.0f}s] {dict(sorted(counts.items()))} | kills "
                    f"{dict(self.t.kills)} | suspends {self.t.suspends_ok} resumes "
                    f"{self.t.resumes_ok} | chaos {'on' if chaos_on else 'off'}"
                )
            if (
                not chaos_on
                and not dead
                and len(states) == len(self.jobs)
                and all(s in FINISHED for s in states.values())
                and not self.in_flight
            ):
                self.record.close(time.time())
                return
            time.sleep(0.5)
        raise RuntimeError(f"chaos run did not drain within {self.o.timeout_s:.0f}s")

    def _step(self, kube: Kube, runtime: PodRuntime) -> dict[str, str] | None:
        """One step of the demo's loop, invariants checked; each job's state.

        None when a listing failed (the API server is not killed, but may be slow).
        """
        self._submit_due()
        try:
            view = kube.view(self.namespace)
            claims = kube.resource_claims(self.namespace)
        except Exception as exc:
            self.log(f"  (listing failed: {exc})")
            return None
        self.record.observe(view.pods, claims, time.time())
        self._step_pods(kube, runtime, view.pods, baseline=False)
        self._sample(view)
        if not self._check_sample(kube, view):
            return None
        states = {
            j["metadata"]["name"]: (j.get("status") or {}).get("state") or "Pending"
            for j in view.rljobs
        }
        elapsed = time.monotonic() - self.tally.started
        for name, state in states.items():
            if state in FINISHED and name not in self.tally.finished_at:
                self.tally.finished_at[name] = elapsed
                self.record.finished(name, state, time.time())
        return states

    def _kill(self, c: Component) -> None:
        with self.lock:
            if c.name.startswith("agent/"):
                node = c.name.split("/", 1)[1]
                self.t.in_flight_at_kill += sum(1 for n in self.in_flight.values() if n == node)
        c.kill()
        self.t.kills[c.name.split("/", 1)[0]] += 1

    def _restart(self, c: Component) -> None:
        c.start()

    def _suspend_one(self, runtime: PodRuntime) -> None:
        with self.lock:
            candidates = [p for p in runtime.running.values() if p.uid not in self.in_flight]
            if not candidates:
                return
            pod = self.rng.choice(candidates)
            self.in_flight[pod.uid] = pod.node
            self.t.bypassed.add(f"{pod.namespace}/{pod.name}")
        hold = self.rng.uniform(1, 5)
        thread = threading.Thread(
            target=self._suspend_resume, args=(runtime, pod, hold), daemon=True
        )
        thread.start()
        self.threads.append(thread)

    def _agent(self, runtime: PodRuntime, node: str, *args: str) -> tuple[bool, str]:
        """`rlix agent ...` as a host process the agent lets use its control ops.

        The demo's agents identify callers through a private proc root (where the
        simulated pods' cgroup files live), so the CLI's PID gets an entry there
        whose cgroup names no pod, the way a process on the node's host would.
        """
        cli = [sys.executable, "-m", "rlix.cli.main", "agent", "--socket"]
        cli += [str(runtime.sockets[node]), "--timeout", "30", *args]
        as_host = (
            'mkdir -p "$1/$$" && echo 0::/rlix-chaos.scope > "$1/$$/cgroup" && shift && exec "$@"'
        )
        proc = subprocess.Popen(
            ["sh", "-c", as_host, "sh", str(runtime.proc_root), *cli],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return False, "timeout"
        finally:
            shutil.rmtree(runtime.proc_root / str(proc.pid), ignore_errors=True)
        return proc.returncode == 0, out.strip()

    def _suspend_resume(self, runtime: PodRuntime, pod: Any, hold: float) -> None:
        """Suspend, hold, resume; a suspend whose outcome is unknown is resumed too.

        A suspend answered "agent down", "timeout" or "failed" may still have
        parked the pod: the agent died after recording the park but before
        answering, or the process parks at its next phase boundary after the
        agent's wait ended (the record is saved when it does). So only a
        definite refusal (nothing connected, already suspended, nothing to
        park) skips the resume; otherwise it is asked until the agent answers,
        and "not suspended" is asked again a few times in case the park lands
        late (chaos-072 stayed suspended because nobody asked).
        """
        ref = f"{pod.namespace}/{pod.name}"
        try:
            ok, out = self._agent(runtime, pod.node, "suspend", ref, "--target", self.args.target)
            if ok:
                self.t.suspends_ok += 1
            else:
                reason = _reason(out)
                self.t.suspends_refused[reason] += 1
                if reason in DEFINITE_REFUSALS:
                    return
                self.t.suspends_unknown += 1
            time.sleep(hold)
            self._resume(runtime, pod, ref, known=ok)
        finally:
            with self.lock:
                self.in_flight.pop(pod.uid, None)

    def _resume(self, runtime: PodRuntime, pod: Any, ref: str, *, known: bool) -> None:
        not_suspended = 0
        for _ in range(30):  # the agent may be down for a moment: retry until it answers
            ok, out = self._agent(runtime, pod.node, "resume", ref)
            if ok:
                self.t.resumes_ok += 1
                return
            reason = _reason(out)
            self.t.last_refusals.append(f"resume {ref}: {out[-300:]}")
            if pod.uid not in runtime.running:
                # Its job finished and the operator deleted it while it was
                # parked (rollout pods run until their trainer is done): the
                # agent releases what it parked for a process that exits.
                self.t.gone_while_suspended += 1
                return
            if not known and reason == "not suspended":
                not_suspended += 1
                if not_suspended >= UNKNOWN_SUSPEND_CHECKS:
                    return  # it never parked, or the agent resumed it itself
                time.sleep(1)
                continue
            if reason in ("agent down", "timeout", "no such pod"):
                time.sleep(1)
                continue
            self.t.resumes_refused[reason] += 1
            return
        self.t.resumes_refused["agent down for 30 tries"] += 1

    # -- invariants -------------------------------------------------------------------
    def _check_sample(self, kube: Kube, view: Any) -> bool:
        """Check the invariants on one view; False when the second job list failed."""
        try:
            after = kube.rljobs(self.namespace)
        except Exception as exc:  # the API server itself is not killed; be patient
            self.log(f"  (listing failed: {exc})")
            return False
        if not self._check(view, after):
            return True  # torn: no single moment had this view
        ledger = self._ledger(kube)
        if ledger is None:
            self.t.memory_unjudged += 1
            return True
        planned = ledger_planned(view.rljobs, view.pods, ledger)
        claims, running = memory_over(view.nodes, view.pods, planned)
        if claims:
            self.t.memory_over_promised += 1
            if not self.t.first_memory_over_promise:
                self.t.first_memory_over_promise = first_over(claims, view, ledger)
        with self.lock:
            bypassed = set(self.t.bypassed)
        streaks = self.t.running_streaks
        self.t.running_streaks = Counter(
            {o.gpu: streaks[o.gpu] + 1 for o in running if not o.pods & bypassed}
        )
        self.t.longest_running_over = max(
            [self.t.longest_running_over, *self.t.running_streaks.values()]
        )
        if running and all(o.pods & bypassed for o in running):
            self.t.running_over_bypass_only += 1
        elif running:
            self.t.running_over += 1
            if not self.t.first_running_over:
                self.t.first_running_over = first_over(running, view, ledger)
        if self.t.first_over_gpu_count and "gpu_residents" not in self.t.first_over_gpu_count:
            self.t.first_over_gpu_count["gpu_residents"] = gpu_residents(view, ledger)
        return True

    def _ledger(self, kube: Kube) -> dict[str, Any] | None:
        """The admission ledger (read after the view); None when it could not be read."""
        try:
            cm = kube._raw(
                kube._core.read_namespaced_config_map, "rlix-admission-ledger", "default"
            )
            ledger: dict[str, Any] = json.loads((cm.get("data") or {}).get("admitted.json") or "{}")
        except Exception as exc:  # the API server is not killed, but may be slow
            self.log(f"  (ledger unreadable: {exc})")
            return None
        return ledger

    def _check(self, view: Any, after: list[dict[str, Any]]) -> bool:
        """Tally one sample (jobs listed, then pods, then jobs again); False when torn.

        The two job lists are not one snapshot with the pods: a job admitted
        (and its pods started) between them would show as ``Queued`` with
        running pods, and a finished job's freed GPUs as still held. A sample
        in which any job's state differs between the two job lists is torn (no
        single moment had it): it is counted apart and not judged.

        Whole GPUs held or promised (the gangs of admitted jobs, the GPU limits
        of live pods) are counted for the report only: RLix shares GPUs by
        memory, so their sum exceeds the GPUs whenever jobs share. What is
        judged is memory, per GPU (``_memory_over``).
        """
        for pod in view.pods:
            meta = pod["metadata"]
            self.t.uids_by_pod[meta["name"]].add(meta["uid"])
        promised = 0
        state = {j["metadata"]["name"]: (j.get("status") or {}).get("state") for j in view.rljobs}
        for job in view.rljobs:
            if state[job["metadata"]["name"]] == "Admitted":
                promised += sum(
                    int(r.get("replicas", 1)) * int(r.get("gpusPerReplica", 0))
                    for r in job["spec"]["roles"]
                )
        for pod in view.pods:
            meta = pod["metadata"]
            job_name = (meta.get("labels") or {}).get(names.LABEL_JOB, "")
            if (
                state.get(job_name) == "Admitted"
                or meta.get("deletionTimestamp")
                or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            ):
                continue
            promised += sum(
                int(((c.get("resources") or {}).get("limits") or {}).get(names.GPU_RESOURCE, 0))
                for c in pod["spec"].get("containers", [])
            )
        self.t.samples += 1
        later = {j["metadata"]["name"]: (j.get("status") or {}).get("state") for j in after}
        if any(state.get(n) != later.get(n) for n in state.keys() | later.keys()):
            self.t.torn_samples += 1
            return False
        self.t.max_promised = max(self.t.max_promised, promised)
        if promised > self.capacity:
            self.t.over_gpu_count_samples += 1
            if not self.t.first_over_gpu_count:
                self.t.first_over_gpu_count = {
                    "promised": promised,
                    "admitted": sorted(n for n, st in state.items() if st == "Admitted"),
                }
        return True

    def _records_left(self, *, deadline: float) -> list[str]:
        assert self.workdir is not None
        while True:
            records = sorted(
                str(p.relative_to(self.workdir))
                for p in (self.workdir / "state").glob("*/suspended/*.json")
            )
            if not records or time.monotonic() >= deadline:
                return records
            time.sleep(0.5)

    def verdict(self, kube: Kube) -> dict[str, Any]:
        jobs = kube.rljobs(self.namespace)
        states = Counter((j.get("status") or {}).get("state") or "Pending" for j in jobs)
        twice = sorted(n for n, uids in self.t.uids_by_pod.items() if len(uids) > 1)
        assert self.workdir is not None
        leftovers = sorted(
            str(p.relative_to(self.workdir))
            for p in (self.workdir / "parked").rglob("*")
            if p.is_file()
        )
        # A record left is a pod the agent holds suspended though every job
        # finished: one nobody resumed. The agents reap the records of exited
        # processes every publish interval (1 s), so allow them a few.
        records = self._records_left(deadline=time.monotonic() + 10)
        # What the agent (resume refused: "mismatched [...]") and the client
        # ("integrity check failed") say when a restore is not bit for bit.
        mismatches = sum(
            text.count("mismatched [") + text.count("integrity check failed")
            for text in (
                log.read_text(errors="replace") for log in (self.workdir / "logs").rglob("*.log")
            )
        )
        checks = {
            "every job Succeeded": states.get("Succeeded", 0) == len(self.jobs),
            "no pod created twice": not twice,
            "no byte lost (no restore mismatch)": mismatches == 0
            and not any("mismatch" in r for r in self.t.resumes_refused),
            "no park file left": not leftovers,
            "no suspension record left": not records,
            "no GPU's claims above its published memory": self.t.memory_over_promised == 0,
        }
        return {
            "jobs": len(self.jobs),
            "job_states": dict(states),
            "kills": dict(self.t.kills),
            "suspensions": self.t.suspends_ok,
            "suspensions_refused": dict(self.t.suspends_refused),
            "suspensions_of_unknown_outcome_resumed": self.t.suspends_unknown,
            "resumes": self.t.resumes_ok,
            "resumes_refused": dict(self.t.resumes_refused),
            "pods_deleted_while_suspended": self.t.gone_while_suspended,
            "suspensions_in_flight_at_agent_kill": self.t.in_flight_at_kill,
            "pods_created_twice": twice,
            "park_files_left": leftovers,
            "suspension_records_left": records,
            "restore_mismatches_in_logs": mismatches,
            "gpus": self.capacity,
            "max_gpus_promised": self.t.max_promised,
            "samples_over_gpu_count": self.t.over_gpu_count_samples,
            "samples": self.t.samples,
            "samples_torn": self.t.torn_samples,
            "samples_over_promised_by_memory": self.t.memory_over_promised,
            "samples_unjudged_ledger_unreadable": self.t.memory_unjudged,
            "first_memory_over_promise": self.t.first_memory_over_promise,
            "samples_running_over_physical": self.t.running_over,
            "longest_running_over_samples": self.t.longest_running_over,
            "first_running_over": self.t.first_running_over,
            "pods_suspended_bypassing_the_conductor": len(self.t.bypassed),
            "samples_running_over_only_with_a_bypassed_pod": self.t.running_over_bypass_only,
            "first_over_gpu_count": self.t.first_over_gpu_count,
            "last_refusals": self.t.last_refusals[-20:],
            "checks": checks,
        }

    def _summary(self, kube: Kube) -> dict[str, Any]:
        for thread in self.threads:
            thread.join(timeout=90)
        return {"demo": super()._summary(kube), "chaos": self.verdict(kube)}


def _reason(output: str) -> str:
    """A short, stable class for a refusal, so the report can count them."""
    low = output.lower()
    for needle, reason in (
        ("no agent socket", "agent down"),
        ("cannot talk to the agent", "agent down"),
        ("closed the connection", "agent down"),
        ("did not answer", "timeout"),
        ("timeout", "timeout"),
        ("no process connected", "no such pod"),
        ("not suspended", "not suspended"),
        ("already suspended", "already suspended"),
        ("forbidden", "forbidden"),
        ("mismatch", "mismatch"),
        ("bit for bit", "mismatch"),
        ("not registered", "nothing registered"),
        ("nothing to park", "nothing registered"),
    ):
        if needle in low:
            return reason
    return output.splitlines()[-1][:120] if output else "no output"


def report(result: dict[str, Any], argv: list[str]) -> str:
    c = result["chaos"]
    lines = [
        "# Chaos run (make chaos)",
        "",
        f"Command: `{' '.join(['.venv/bin/python', 'bench/chaos.py', *argv])}`",
        "",
        "| measure | value |",
        "|---|---|",
        f"| jobs | {c['jobs']} ({c['job_states']}) |",
        f"| kills (SIGKILL, then restart) | {c['kills']} |",
        f"| suspensions in place / refused | {c['suspensions']} / {c['suspensions_refused']} |",
        f"| of the refused, outcome unknown (agent down, timeout, failed): resumed anyway | "
        f"{c['suspensions_of_unknown_outcome_resumed']} |",
        f"| resumes / refused | {c['resumes']} / {c['resumes_refused']} |",
        f"| suspended pods deleted with their finished job (memory released) | "
        f"{c['pods_deleted_while_suspended']} |",
        f"| suspensions in flight when their agent was killed | "
        f"{c['suspensions_in_flight_at_agent_kill']} |",
        f"| GPUs / most ever held or promised, counted as whole GPUs (above the GPUs when "
        f"jobs share) | {c['gpus']} / {c['max_gpus_promised']} |",
        f"| samples: all / torn (a job's state changed between the job lists around the pod "
        f"list; not judged) / ledger unreadable (not judged) | {c['samples']} / "
        f"{c['samples_torn']} / {c['samples_unjudged_ledger_unreadable']} |",
        f"| judged samples with whole GPUs held or promised above the GPUs (sharing) | "
        f"{c['samples_over_gpu_count']} |",
        f"| judged samples with a GPU's claims (each pod's peak-phase memory, planned pods "
        f"too) above its published memory | {c['samples_over_promised_by_memory']} |",
        f"| judged samples with a GPU's running pods above its physical memory in their "
        f"current phases, until the conductor parks one (reported, not judged) / the "
        f"longest a GPU stayed so, in consecutive judged samples | "
        f"{c['samples_running_over_physical']} / {c['longest_running_over_samples']} |",
        f"| pods this run suspended through `rlix agent` (bypassing the conductor) / judged "
        f"samples running over only on GPUs holding one of them (not counted above) | "
        f"{c['pods_suspended_bypassing_the_conductor']} / "
        f"{c['samples_running_over_only_with_a_bypassed_pod']} |",
        f"| wall time | {result['demo']['wall_s']} s |",
        "",
        "| invariant | held |",
        "|---|---|",
    ]
    lines += [f"| {k} | {'yes' if v else 'NO'} |" for k, v in c["checks"].items()]
    if c["pods_created_twice"]:
        lines += ["", f"Pods created twice: {', '.join(c['pods_created_twice'][:20])}"]
    if c["park_files_left"]:
        lines += ["", f"Park files left: {', '.join(c['park_files_left'][:20])}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=300, help="RLJobs to submit (default: %(default)s)")
    ap.add_argument("--nodes", type=int, default=4, help="kwok GPU nodes (default: %(default)s)")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node (default: %(default)s)")
    ap.add_argument(
        "--kill-window", type=float, default=180, help="seconds of chaos (default: %(default)s)"
    )
    ap.add_argument(
        "--kill-every",
        type=float,
        nargs=2,
        default=(4.0, 10.0),
        metavar=("MIN", "MAX"),
        help="seconds between kills, drawn uniformly (default: 4 10)",
    )
    ap.add_argument(
        "--suspend-every",
        type=float,
        nargs=2,
        default=(1.0, 3.0),
        metavar=("MIN", "MAX"),
        help="seconds between suspensions, drawn uniformly (default: 1 3)",
    )
    ap.add_argument(
        "--target",
        default="self",
        help="where suspended memory goes: self (the pod's pinned pool; the demo trainers "
        "register plain buffers, which only `self` parks), host or gpu:<i>",
    )
    ap.add_argument(
        "--seed",
        type=int,
        default=1,
        help="the job mix and the kill/suspend times (default: %(default)s)",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=1800,
        help="seconds to wait for every job to finish before judging (default: %(default)s)",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "chaos.md",
        help="the Markdown report; a .json beside it (default: bench/results/chaos.md)",
    )
    ap.add_argument(
        "--cluster-name",
        default="rlix-chaos",
        help="the local cluster's name (two runs side by side need two names)",
    )
    ap.add_argument("--workdir", type=Path, help="keep logs and state here (default: a temp dir)")
    args = ap.parse_args(argv)
    options = DemoOptions(
        nodes=args.nodes,
        gpus=args.gpus,
        timeout_s=args.timeout,
        cluster_name=args.cluster_name,
        workdir=args.workdir,
        # The rules without a matrix, as bench/results/chaos.md was run: jobs
        # share wherever memory fits, the most sharing and parking the
        # invariants can be put through (the demo's own default, the chart's
        # time-slicing bound, shares only complementary pairs).
        interference=None,
    )
    chaos = Chaos(options, args)
    result = chaos.run()
    text = report(result, argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2, default=list) + "\n")
    print(text)
    return 0 if all(result["chaos"]["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
