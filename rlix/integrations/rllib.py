"""RLix for Ray RLlib (new API stack: EnvRunners, Learners, RLModules).

::

    import rlix.integrations.rllib

    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)      # sampling in this process
        .learners(num_learners=0)            # the Learner in this process
        .callbacks(rlix.integrations.rllib.callbacks_class())
    )
    algo = config.build_algo()

Phases, per ``Algorithm.train()`` iteration, as the node agent sees them:

* ``rollout`` while the algorithm samples (``Algorithm.training_step`` starts
  with sampling in every on-policy algorithm of the new stack: PPO, APPO...);
* ``training`` while the LearnerGroup updates (``LearnerGroup.update``);
* ``weight-sync`` while the new weights go to the EnvRunners
  (``EnvRunnerGroup.sync_weights``); it stays reported until the next phase.

``idle`` is reported once the algorithm is built and when it stops. After each
iteration (``on_train_result``) the driver calls ``rlix.safe_point()``: a
suspend requested during an iteration lands there or at a phase switch. The
phase block stays open between ``train()`` calls, so a suspend never lands
while user code saves a checkpoint; it waits for the next safe point.

Offload: the local Learner's RLModule with its optimizers
(``rllib-learner``) and the local EnvRunner's RLModule (``rllib-env-runner``)
are registered with ``rlix.register_torch``.

Scope: the Learner and the sampling EnvRunner in the driver process
(``num_learners=0``, ``num_env_runners=0``), the common single-GPU layout.
Remote Learner and EnvRunner actors are separate processes that RLlib gives
no phase hooks; they are not registered (a warning says so).

``ray`` is imported only when :func:`callbacks_class` is called, so this module
imports (and type-checks) without the ``rllib`` extra.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from typing import Any

import rlix
from rlix.integrations import PhaseSwitcher

__all__ = ["RLixCallbacksMixin", "callbacks_class", "instrument"]

log = logging.getLogger("rlix.integrations.rllib")

_ATTACHED = "_rlix_switcher"


def _wrap(obj: Any, attr: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    original = getattr(obj, attr, None)
    if original is None or not callable(original):
        return False
    setattr(obj, attr, functools.wraps(original)(make(original)))
    return True


def _before(sw: PhaseSwitcher, phase: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            sw.switch(phase)
            return original(*args, **kwargs)

        return run

    return make


def _closing(sw: PhaseSwitcher, *, on_error_only: bool) -> Callable[..., Any]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                result = original(*args, **kwargs)
            except BaseException:
                sw.close()  # never leave a phase block open behind a failure
                raise
            if not on_error_only:
                sw.switch("idle")
                sw.close()
            return result

        return run

    return make


def _torch_modules(module: Any) -> list[Any]:
    """The torch modules of an RLModule (a MultiRLModule is not one itself)."""
    if callable(getattr(module, "named_parameters", None)):
        return [module]
    if callable(getattr(module, "keys", None)):
        # A MultiRLModule maps ids to RLModules but is not iterable.
        return [m for k in module.keys() for m in _torch_modules(module[k])]  # noqa: SIM118
    return []


def _register(algorithm: Any, prefix: str) -> list[str]:
    names: list[str] = []
    group = getattr(algorithm, "learner_group", None)
    if group is not None and getattr(group, "is_local", False):
        learners: list[Any] = []
        group.foreach_learner(learners.append)
        for i, learner in enumerate(learners):
            module = learner.module
            optimizers = [
                opt
                for mid in module.keys()  # noqa: SIM118
                for _, opt in learner.get_optimizers_for_module(module_id=mid)
            ]
            name = f"{prefix}-learner" if i == 0 else f"{prefix}-learner-{i}"
            rlix.register_torch(modules=_torch_modules(module), optimizers=optimizers, name=name)
            names.append(name)
    elif group is not None:
        log.warning("rlix: remote Learner actors are not registered for offload")
    runners = getattr(algorithm, "env_runner_group", None)
    local = getattr(runners, "local_env_runner", None) if runners is not None else None
    modules = _torch_modules(getattr(local, "module", None))
    if modules:
        name = f"{prefix}-env-runner"
        rlix.register_torch(modules=modules, name=name)
        names.append(name)
    if runners is not None and getattr(runners, "num_remote_env_runners", lambda: 0)():
        log.warning("rlix: remote EnvRunner actors are not registered for offload")
    return names


def instrument(algorithm: Any, *, prefix: str = "rllib", register: bool = True) -> PhaseSwitcher:
    """Report phases of ``algorithm`` and register its offload; idempotent.

    Called by the callbacks at ``on_algorithm_init``; call it yourself on an
    algorithm built without them.
    """
    existing = getattr(algorithm, _ATTACHED, None)
    if isinstance(existing, PhaseSwitcher):
        return existing
    sw = PhaseSwitcher()
    if register:
        algorithm._rlix_hooks = _register(algorithm, prefix)
    _wrap(algorithm, "training_step", _before(sw, "rollout"))
    group = getattr(algorithm, "learner_group", None)
    if group is not None:
        _wrap(group, "update", _before(sw, "training"))
    runners = getattr(algorithm, "env_runner_group", None)
    if runners is not None:
        _wrap(runners, "sync_weights", _before(sw, "weight-sync"))
    _wrap(algorithm, "train", _closing(sw, on_error_only=True))
    _wrap(algorithm, "stop", _closing(sw, on_error_only=False))
    setattr(algorithm, _ATTACHED, sw)
    sw.switch("idle")
    return sw


class RLixCallbacksMixin:
    """The RLlib callback methods; :func:`callbacks_class` mixes them into
    ``ray.rllib.callbacks.callbacks.RLlibCallback``."""

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        instrument(algorithm)

    def on_train_result(self, *, algorithm: Any, **kwargs: Any) -> None:
        sw = getattr(algorithm, _ATTACHED, None)
        if isinstance(sw, PhaseSwitcher):
            sw.safe_point()  # between iterations: a pending suspend lands here


@functools.cache
def callbacks_class() -> type:
    """``RLlibCallback`` with RLix's hooks, for ``config.callbacks(...)``.

    Built on first call so that ``ray`` loads only when it is used. To combine
    with your own callbacks, pass a list: ``config.callbacks([Mine,
    rlix.integrations.rllib.callbacks_class()])``.
    """
    base: type = importlib.import_module("ray.rllib.callbacks.callbacks").RLlibCallback
    return type(
        "RLixCallbacks",
        (RLixCallbacksMixin, base),
        {"__module__": __name__, "__qualname__": "RLixCallbacks"},
    )


def __getattr__(name: str) -> Any:
    # ``rlix.integrations.rllib.RLixCallbacks`` resolves (building the class), so
    # the class pickles by reference into Ray worker processes.
    if name == "RLixCallbacks":
        return callbacks_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
