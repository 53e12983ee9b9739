"""Adapters between Pitcrew and the Kubernetes API: reads, writes, retries.

Everything here is I/O against the apiserver through the synchronous
``kubernetes`` client; callers in async code run it in an executor. Writes
carry the field manager of their writer (``pitcrew-operator``,
``pitcrew-agent``, ``pitcrew-probe``; :mod:`pitcrew.api.vocabulary`), so
``metadata.managedFields`` always shows what Pitcrew touched.
"""
