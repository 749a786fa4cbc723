"""The native task runner: ateam's own model-and-tools loop over a provider's API."""
