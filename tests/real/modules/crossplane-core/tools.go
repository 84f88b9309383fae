//go:build tools

// Package crossplanecore pins Crossplane core's module so it builds from the
// Go module proxy with this go.sum. From v2.3 the CLI is a module of its own
// (github.com/crossplane/cli/v2); the v2.2 CLI is pinned in ../crossplane.
package crossplanecore

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crossplane"
)
