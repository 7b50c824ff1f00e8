"""One tiny TRL GRPO (or RLOO) run on CPU, started as a subprocess by test_trl_grpo.py.

Nothing is downloaded: the tokenizer is built from a word list and the model
from a config with random weights, saved to a local directory (GRPOTrainer
builds the reference model from the policy's path).

    python _grpo_run.py WORKDIR [--agent SOCKET] [--pause-after N] [--loading]

Without --agent, rlix.integrations.trl is not attached at all (the baseline).
With it, the trainer waits for one stdin line (the test puts its PID in a pod),
talks to the agent through a Wiretap, and with --pause-after N stops after
step N at a safe point, answering "live" and "suspended" on stdin until
"continue". With --loading (and --agent) it builds the trainer inside
``rlix.loading()``, as docs/integrations.md tells a role that sets
``loadsThroughGate`` to. It prints one JSON line per event; the last is the
result.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

torch.set_num_threads(1)

WORDS = [
    *("the", "a", "cat", "dog", "sat", "ran", "on", "mat", "log"),
    *("big", "small", "red", "blue", "fast", "slow", "and", "or"),
]
STEPS = 3


def out(**kw: Any) -> None:
    print(json.dumps(kw), flush=True)


def build(workdir: Path) -> tuple[str, Any]:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<pad>", "<eos>", "<unk>", *WORDS])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tok.padding_side = "left"
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    path = workdir / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path), tok


def reward_len(completions: list[str], **kwargs: Any) -> list[float]:
    return [float(len(c.split())) - 2.0 * c.count("dog") for c in completions]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--agent")
    ap.add_argument("--pause-after", type=int, default=0)
    ap.add_argument("--trainer", choices=["grpo", "rloo"], default="grpo")
    ap.add_argument("--loading", action="store_true")
    a = ap.parse_args()

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    config_cls, trainer_cls = (
        (GRPOConfig, GRPOTrainer) if a.trainer == "grpo" else (RLOOConfig, RLOOTrainer)
    )

    model_path, tok = build(a.workdir)
    prompts = [" ".join(WORDS[i : i + 3]) for i in range(8)]
    dataset = Dataset.from_dict({"prompt": prompts})
    args = config_cls(
        output_dir=str(a.workdir / "out"),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=6,
        max_steps=STEPS,
        learning_rate=1e-2,
        beta=0.1,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=7,
        data_seed=7,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )

    def construct() -> Any:
        # TRL loads a model given by name (and the reference model) here.
        return trainer_cls(
            model=model_path,
            reward_funcs=reward_len,
            args=args,
            train_dataset=dataset,
            processing_class=tok,
        )

    tap = None
    cb = None
    if a.agent:
        from _wiretap import Wiretap

        import rlix
        import rlix.integrations.trl

        sys.stdin.readline()  # the test has put this PID in a pod
        tap = Wiretap(a.agent, str(a.workdir / "tap.sock"))
        rlix.configure(tap.path)
        if a.loading:
            with rlix.loading():  # the first allocation: the gate's to time
                trainer = construct()
        else:
            trainer = construct()
        # On CPU, transformers maps safetensors weights straight from the file:
        # those storages cannot be resized to 0, so give them ordinary memory
        # (on a GPU the weights are device allocations and need no such step).
        for m in (trainer.model, trainer.ref_model):
            for p in m.parameters():
                p.data = p.data.clone()
        cb = rlix.integrations.trl.attach(trainer)
    else:
        trainer = construct()

    def live_bytes() -> int:
        tensors = [*trainer.model.parameters(), *trainer.ref_model.parameters()]
        tensors += [p.grad for p in trainer.model.parameters() if p.grad is not None]
        for st in trainer.optimizer.state.values():
            tensors += [v for v in st.values() if isinstance(v, torch.Tensor)]
        return sum(t.untyped_storage().nbytes() for t in tensors)

    class Pause(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step != a.pause_after:
                return
            import rlix

            go_on = threading.Event()

            def serve() -> None:
                for line in sys.stdin:
                    cmd = line.strip()
                    if cmd == "live":
                        out(event="live", live=live_bytes())
                    elif cmd == "suspended":
                        out(event="suspended", suspended=rlix.suspended())
                    elif cmd == "continue":
                        go_on.set()
                        return

            threading.Thread(target=serve, daemon=True).start()
            out(
                event="paused",
                step=state.global_step,
                live=live_bytes(),
                hooks=cb.registered if cb else [],
            )
            while not go_on.wait(0.05):
                rlix.safe_point()  # between steps: a pending suspend lands here

    if a.pause_after:
        trainer.add_callback(Pause())
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    digest = hashlib.sha256()
    for _, p in sorted(trainer.model.named_parameters()):
        digest.update(p.detach().clone().numpy().tobytes())
    phases: list[str] = []
    if tap is not None:
        rlix.configure(None)  # close the link, so the tap has read every message sent
        phases = tap.phases()
    out(
        event="result",
        losses=losses,
        rewards=[h.get("reward") for h in trainer.state.log_history if "loss" in h],
        digest=digest.hexdigest(),
        phases=phases,
        loads=tap.loads() if tap is not None else [],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
