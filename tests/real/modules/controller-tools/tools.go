//go:build tools

// Package controllertools pins controller-gen, which writes the CRDs of a
// component built from a source archive without its manifests (Envoy AI
// Gateway v1.1.0 from shared/upstream/), at the version upstream generated
// them with.
package controllertools

import (
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
