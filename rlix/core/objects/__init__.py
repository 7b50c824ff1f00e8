"""The one reader of Pod, Node and RLJob facts (plain JSON dicts in, core types out).

The operator, the extender, the CLI and the demo all read labels, annotations
and fields through here, so they agree on every default (see docs/objects.md,
generated from ``facts.FACTS``). Every value is bounded before it is parsed, and
a malformed value on one object becomes one ``ObjectError`` for that object,
never an exception that disturbs the view of any other.
"""

from rlix.core.objects.bounds import BadValueError, ObjectError, check_depth, describe, json_doc
from rlix.core.objects.facts import FACTS, Fact
from rlix.core.objects.nodes import NodeFacts, read_node
from rlix.core.objects.pods import PodFacts, pod_name, read_pod
from rlix.core.objects.rljobs import RLJobFacts, read_rljob

__all__ = [
    "FACTS",
    "BadValueError",
    "Fact",
    "NodeFacts",
    "ObjectError",
    "PodFacts",
    "RLJobFacts",
    "check_depth",
    "describe",
    "json_doc",
    "pod_name",
    "read_node",
    "read_pod",
    "read_rljob",
]
