//go:build tools

// Package providerkubernetes pins provider-kubernetes, which applies and observes the Objects the function composes.
package providerkubernetes

import _ "github.com/crossplane-contrib/provider-kubernetes/cmd/provider"
