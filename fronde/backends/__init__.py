"""llama-server backends: one process per mode, the pool that supervises them, the client."""
