"""`slurmguard serve`: the ingest endpoint, the batch writer and the fleet-policy loop."""
