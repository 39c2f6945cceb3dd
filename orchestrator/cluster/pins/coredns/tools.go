//go:build tools

// Package coredns pins the CoreDNS release the local cluster's DNS runs (orchestrator/cluster).
package coredns

import _ "github.com/coredns/coredns"
