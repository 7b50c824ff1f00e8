"""``rlix``: the command line for people running RLix.

Each subcommand lives in its own module and registers itself through
``add_parser``; heavy imports happen inside ``run`` so ``rlix --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rlix import __version__
from rlix.cli import agent, cluster, completion, demo, describe, replay, simulate, suspend, top
from rlix.cli.extras import missing_extra_message

EPILOG = """\
examples:
  rlix cluster up --nodes 4 --gpus 8      start a local cluster with fake GPU nodes
  rlix cluster status                     what runs, where the kubeconfig is
  rlix cluster down                       stop it and remove its state
  rlix top                                live jobs, phases, GPU idle %, suspended pods
  rlix top -A -o json                     the same for every namespace, as JSON
  rlix describe rljob grpo -n research    conditions, pods, phases and events of one job
  source <(rlix completion bash)          tab completion (bash; zsh likewise)
  kubectl rlix top                        the same, as a kubectl plugin
  rlix simulate --mix small-lab           simulate RLix against the baselines
  rlix demo                               everything end to end on a local cluster
  rlix suspend rljob grpo -n research     park a job's rollout pods in place (the conductor)
  rlix resume rljob grpo -n research      bring them back
  rlix agent suspend ns/pod --target host on a GPU node: suspend a pod in place

Docs: README.md in the RLix repository.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlix",
        description="RLix: phase-aware GPU scheduling for RL post-training on Kubernetes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"rlix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    cluster.add_parser(sub)
    top.add_parser(sub)
    describe.add_parser(sub)
    replay.add_parser(sub)
    demo.add_parser(sub)
    simulate.add_parser(sub)
    agent.add_parser(sub)
    completion.add_parser(sub)
    suspend.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        result: int = args.run(args)
    except ModuleNotFoundError as err:
        # A bare `pip install rlix` has the client only: name the extra to install.
        hint = missing_extra_message(args.command, err)
        if hint is None:
            raise
        print(hint, file=sys.stderr)
        return 1
    return result


if __name__ == "__main__":
    sys.exit(main())
