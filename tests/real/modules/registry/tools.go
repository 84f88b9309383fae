//go:build tools

// Package registry pins go-containerregistry's registry, the OCI registry on
// loopback that make release-check pushes the packages to and Crossplane's
// package manager pulls them from.
package registry

import _ "github.com/google/go-containerregistry/cmd/registry"
