//go:build tools

// Package kwok pins kwok, which fakes nodes and pod status for the real control-plane run.
package kwok

import _ "sigs.k8s.io/kwok/cmd/kwok"
