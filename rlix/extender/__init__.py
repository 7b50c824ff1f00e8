"""The kube-scheduler extender (FastAPI) for the rlix-scheduler profile.

Deliberately empty: ``rlix.extender.replay`` must
import without FastAPI (the CLI's ``rlix replay`` runs where only ``rlix[cli]``
is installed). The service is ``rlix.extender.app.create_app``; the entry point
is ``rlix.extender.main:main`` (``rlix-extender``). See docs/extender.md.
"""
