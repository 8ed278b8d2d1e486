"""The OpenAI-compatible HTTP API: app factory, routes, SSE relay."""
