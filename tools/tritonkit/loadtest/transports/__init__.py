"""gRPC load-test transports: how a Locust user's request reaches Triton's gRPC port."""
