"""Baseline NAS methods behind the same ask/tell ``Searcher`` interface as EPNAS, one per file.

Import them from :mod:`mlsysopt.nas` (``from mlsysopt.nas import PNAS, PNASConfig``) or by name through
:func:`mlsysopt.nas.get_method`; this package imports nothing itself, so loading one method does not load the others.
"""
