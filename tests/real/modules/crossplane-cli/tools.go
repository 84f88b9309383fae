//go:build tools

// Package crossplanecli pins the Crossplane CLI's module so it builds from the
// Go module proxy with this go.sum. Its render hands rendering to a core
// binary (`crossplane internal render`, --crossplane-binary), the one in
// ../crossplane-core.
package crossplanecli

import (
	_ "github.com/crossplane/cli/v2/cmd/crossplane"
)
