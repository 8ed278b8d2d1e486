"""The evidence: what was measured of each mode, replayed, saved and calibrated.

Pure state and arithmetic the router reads (:mod:`fronde.router.engine`); nothing here
imports the router, the request's life or the backends.
"""
