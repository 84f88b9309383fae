//go:build tools

// Package envoygateway pins Envoy Gateway, which turns Gateways into Envoy Deployments.
package envoygateway

import _ "github.com/envoyproxy/gateway/cmd/envoy-gateway"
