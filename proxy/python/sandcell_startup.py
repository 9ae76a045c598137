"""sandcell's start-up profile for Python kernels (placeholder)."""
