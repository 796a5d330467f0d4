"""FastAPI service: REST API, background study scheduler, dashboard. Thin over autotuner/."""
