"""Scripts the integration tests run in their own processes, and how to launch them."""
