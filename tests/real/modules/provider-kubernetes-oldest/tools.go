//go:build tools

// Package providerkubernetes pins the oldest provider-kubernetes supported (FGR_STACK=oldest).
package providerkubernetes

import _ "github.com/crossplane-contrib/provider-kubernetes/cmd/provider"
