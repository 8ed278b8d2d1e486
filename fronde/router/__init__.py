"""Routing: which mode serves a request."""
