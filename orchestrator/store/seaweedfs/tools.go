//go:build tools

// Package seaweedfs pins the SeaweedFS release that `make setup` builds (its `weed` command, the
// bundled S3 server of orchestrator/store/s3server.py): go.mod requires the published module and
// repeats its one replace directive (a replace in a dependency's go.mod is ignored, and `go install
// module@version` refuses modules that have one); go.sum pins every module it is built from.
package seaweedfs

import _ "github.com/seaweedfs/seaweedfs/weed"
