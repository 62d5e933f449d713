//go:build tools

// The command ../install.sh builds from this module.
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
