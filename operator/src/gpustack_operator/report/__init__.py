"""Fleet reports: many hosts' preflight documents aggregated on the controller."""
