//go:build tools

// Package actionlint pins actionlint, which checks the forge's workflows
// (.github/workflows/) in make workflows.
package actionlint

import _ "github.com/rhysd/actionlint/cmd/actionlint"
