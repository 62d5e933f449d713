//go:build tools

// The command ../install.sh builds from this module.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
