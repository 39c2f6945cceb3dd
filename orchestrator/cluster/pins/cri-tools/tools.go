//go:build tools

// Package critools pins crictl, with which `peerlab cluster down` stops and removes the pods' sandboxes
// (their network namespaces and interfaces) through the container runtime (orchestrator/cluster).
package critools

import _ "sigs.k8s.io/cri-tools/cmd/crictl"
