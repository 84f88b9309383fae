//go:build tools

// Package envoyaigateway pins Envoy AI Gateway's controller and pod webhook,
// the external processor the webhook injects (run by the integration data
// plane), and its standalone runner aigw for the traffic check (v1.1.0 is
// refused by the module proxy).
package envoyaigateway

import (
	_ "github.com/envoyproxy/ai-gateway/cmd/aigw"
	_ "github.com/envoyproxy/ai-gateway/cmd/controller"
	_ "github.com/envoyproxy/ai-gateway/cmd/extproc"
)
