//go:build tools

package kind

import (
	_ "sigs.k8s.io/kind"
)
