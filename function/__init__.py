"""function-gateway-readiness: Envoy AI Gateway inference gateways that tell the truth."""
