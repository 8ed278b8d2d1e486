"""Install the pinned llama-server, and fetch and check the models of a profile."""
