"""Serving the platform's own trained models through other servers.

``mlserver_runtime``: an MLServer custom runtime that answers the Open Inference
Protocol (KServe v2) for a trained artifact, in the shape ``ml.endpoints.oip_v2``
reads. It imports ``mlserver``, which is not in the platform's environment: it runs
in MLServer's own (``requirements-mlserver.txt``, ``var/mlserver`` under ``make install``),
and nothing in the platform imports it.
"""
