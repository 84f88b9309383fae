//go:build tools

// Package envoyaigateway pins Envoy AI Gateway's controller and pod webhook,
// and its standalone runner aigw for the traffic check (v1.1.0 is refused by
// the module proxy).
package envoyaigateway

import (
	_ "github.com/envoyproxy/ai-gateway/cmd/aigw"
	_ "github.com/envoyproxy/ai-gateway/cmd/controller"
)
