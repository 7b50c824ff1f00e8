"""RLix for TRL's online trainers (GRPOTrainer, RLOOTrainer): one line.

::

    import rlix.integrations.trl

    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)
    rlix.integrations.trl.attach(trainer)       # the whole integration
    trainer.train()

What it does, per optimizer step (phases as the node agent sees them):

* ``rollout`` while the trainer generates completions (``_generate``: the
  transformers or vLLM path, tool loops, ``rollout_func``);
* ``weight-sync`` while the policy weights are pushed to vLLM
  (``vllm_generation.sync_weights``, or ``_move_model_to_vllm`` in older TRL);
* ``scoring`` from the end of generation until the batch is scored (old and
  reference log-probabilities, reward functions and models, advantages);
* ``training`` from then on: loss, backward, optimizer step, logging, saving.

``idle`` is reported when ``train()`` starts and ends. Between steps
(``on_step_end``) the trainer calls ``rlix.safe_point()``: a suspend requested
during a step lands there, or at a phase switch, never while the trainer is in
the middle of using its tensors. The phase block stays open for the whole
``train()`` call, so a suspend never lands while the trainer logs or saves.

Offload: at ``on_train_begin`` (when the optimizer exists) the policy (with its
gradients), the reference model, reward and value models, and the optimizer
state are registered with ``rlix.register_torch`` as separate hooks named
``<prefix>-policy``, ``<prefix>-reference``, ``<prefix>-reward-<i>``,
``<prefix>-value`` and ``<prefix>-optimizer``. Optimizer state created later
(Adam's moments appear on the first step) is parked too: hooks enumerate their
storages at suspend time.

Without an agent (``RLIX_AGENT_SOCKET`` unset) every call is a no-op, so the
same script runs outside RLix. This module imports neither TRL nor transformers:
the callback is duck-typed against ``transformers.TrainerCallback`` (every
``on_*`` event it does not use is a no-op), so it type-checks and imports
without the ``trl`` extra.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import rlix
from rlix.integrations import PhaseSwitcher

__all__ = ["RLixCallback", "attach"]

_ATTACHED = "_rlix_callback"


def _is_module(obj: Any) -> bool:
    # torch.nn.Module without importing torch here (it is loaded by the trainer anyway).
    return callable(getattr(obj, "named_parameters", None)) and callable(
        getattr(obj, "named_buffers", None)
    )


def _unwrap_optimizer(opt: Any) -> Any:
    # accelerate's AcceleratedOptimizer keeps the torch optimizer in `.optimizer`.
    inner = getattr(opt, "optimizer", None)
    return inner if inner is not None and hasattr(inner, "param_groups") else opt


def _noop_event(*args: Any, **kwargs: Any) -> None:
    return None


class RLixCallback:
    """A ``transformers.TrainerCallback`` that reports phases and registers offload.

    Prefer :func:`attach`, which also wraps the trainer's generation methods.
    Added on its own (``trainer.add_callback(RLixCallback(trainer))``) it reports
    ``training`` for whole steps and still registers the models and optimizer.
    """

    def __init__(
        self,
        trainer: Any,
        *,
        prefix: str = "trl",
        register: bool = True,
        switcher: PhaseSwitcher | None = None,
    ) -> None:
        self.trainer = trainer
        self.prefix = prefix
        self.register = register
        self.switcher = switcher or PhaseSwitcher()
        self.registered: list[str] = []
        # True once attach() has wrapped the generation methods: phases then
        # follow them, and a step no longer starts as "training".
        self.wrapped = False
        self._hooks: dict[str, Any] = {}

    # transformers calls every on_* event on every callback; ignore the rest.
    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("on_"):
            return _noop_event
        raise AttributeError(name)

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.register:
            self._register()
        self.switcher.switch("idle")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # With the generation wrappers this is overridden at once by rollout;
        # without them (callback alone) the whole step is training.
        if not self.wrapped and self.switcher.current in (None, "idle"):
            self.switcher.switch("training")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.switcher.safe_point()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.switcher.switch("idle")
        self.switcher.close()

    # -- offload -----------------------------------------------------------------
    def _register(self) -> None:
        t = self.trainer
        pieces: list[tuple[str, list[Any], list[Any]]] = []
        model = getattr(t, "model", None)
        if _is_module(model):
            pieces.append(("policy", [model], []))
        ref = getattr(t, "ref_model", None)
        if _is_module(ref) and ref is not model:
            pieces.append(("reference", [ref], []))
        funcs = getattr(t, "reward_funcs", None) or []
        for i, f in enumerate(funcs if isinstance(funcs, list | tuple) else [funcs]):
            if _is_module(f) and f is not model:
                pieces.append((f"reward-{i}", [f], []))
        for attr in ("reward_model", "value_model"):
            m = getattr(t, attr, None)
            if _is_module(m) and m is not model:
                pieces.append((attr.removesuffix("_model"), [m], []))
        opt = getattr(t, "optimizer", None)
        if opt is not None:
            pieces.append(("optimizer", [], [_unwrap_optimizer(opt)]))
        for suffix, modules, optimizers in pieces:
            name = f"{self.prefix}-{suffix}"
            if name in self._hooks:  # train() called again: the hook already covers it
                continue
            self._hooks[name] = rlix.register_torch(
                modules=modules, optimizers=optimizers, name=name
            )
            self.registered.append(name)


def _wrap(obj: Any, attr: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace ``obj.attr`` (a bound method) by ``make(original)`` on the instance."""
    original = getattr(obj, attr, None)
    if original is None or not callable(original):
        return False
    wrapped = functools.wraps(original)(make(original))
    setattr(obj, attr, wrapped)
    return True


def attach(trainer: Any, *, prefix: str = "trl", register: bool = True) -> RLixCallback:
    """Add RLix to a TRL online trainer; returns the callback. Idempotent."""
    existing = getattr(trainer, _ATTACHED, None)
    if isinstance(existing, RLixCallback):
        return existing
    callback = RLixCallback(trainer, prefix=prefix, register=register)
    sw = callback.switcher

    def generate(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            sw.switch("rollout")
            result = original(*args, **kwargs)
            sw.switch("scoring")  # what follows generation is scoring the batch
            return result

        return run

    def generate_and_score(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            model = getattr(trainer, "model", None)
            sw.switch("training" if getattr(model, "training", True) else "scoring")
            return result

        return run

    def weight_sync(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            before = sw.current
            sw.switch("weight-sync")
            try:
                return original(*args, **kwargs)
            finally:
                if before is not None:
                    sw.switch(before)

        return run

    def training(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            if getattr(getattr(trainer, "model", None), "training", True):
                sw.switch("training")
            return original(*args, **kwargs)

        return run

    def train(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            finally:  # also when training raised: never leave a phase block open
                sw.close()

        return run

    generation_wrapped = _wrap(trainer, "_generate", generate)
    _wrap(trainer, "_generate_and_score_completions", generate_and_score)
    _wrap(trainer, "compute_loss", training)
    _wrap(trainer, "_move_model_to_vllm", weight_sync)
    vllm = getattr(trainer, "vllm_generation", None)
    if vllm is not None:
        _wrap(vllm, "sync_weights", weight_sync)
    _wrap(trainer, "train", train)
    # Without a generation method to wrap (another trainer, a renamed method),
    # whole steps are reported as training, as the callback alone does.
    callback.wrapped = generation_wrapped
    trainer.add_callback(callback)
    setattr(trainer, _ATTACHED, callback)
    return callback
