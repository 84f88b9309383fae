//go:build tools

// Package crossplane pins Crossplane's module so its commands build from the
// Go module proxy with this go.sum: the CLI (cmd/crank, whose render runs
// in-process) and the core (cmd/crossplane).
package crossplane

import (
	_ "github.com/crossplane/crossplane/v2/cmd/crank"
	_ "github.com/crossplane/crossplane/v2/cmd/crossplane"
)
