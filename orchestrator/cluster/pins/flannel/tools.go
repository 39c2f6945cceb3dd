//go:build tools

package flannel

import (
	_ "github.com/flannel-io/flannel"
)
