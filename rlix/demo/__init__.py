"""``rlix demo``: the whole system on a local cluster, with simulated trainers.

The orchestrator plays the parts a laptop lacks: kwok stands in for kubelets,
and this package stands in for the containers (a small process per role pod
that runs the real client library against a real node agent) and for the
device plugin (it hands each pod GPU indices). Everything RLix itself does --
admission, placement, phase reporting, suspend/resume -- is the shipped code.

``rlix demo --compare`` also runs the same jobs without RLix (``exclusive``),
records both runs from what the cluster showed (``record``), computes the
side-by-side numbers (``metrics``, ``compare``) and draws them (``timeline``).
"""
