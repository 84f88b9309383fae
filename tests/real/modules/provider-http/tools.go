//go:build tools

// Package providerhttp pins provider-http, whose observe-only Requests probe what a backend's server has loaded.
package providerhttp

import _ "github.com/crossplane-contrib/provider-http/cmd/provider"
