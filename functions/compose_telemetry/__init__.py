"""compose-telemetry: the fleet's telemetry gateway, and MetricMapping validation."""
