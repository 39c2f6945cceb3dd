package main

// Validation as work: `validation: {delay: D, work: cpu}` makes each message's validation take D of a
// core's time computing (SHA-256 over the message, again and again, until this thread has run D), so
// that it costs what a signature or state check costs: the core is busy meanwhile, and on a machine
// short of cores it takes longer than D, as a real check would. `work: sleep` (the default) waits D
// instead, as Shadow's and gossipsub-interop's model of validation does.

import (
	"context"
	"crypto/sha256"
	"runtime"
	"syscall"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
)

const rusageThread = 1 // RUSAGE_THREAD (Linux): the calling thread's own CPU time

func (v validation) validator() func(context.Context, peer.ID, *pubsub.Message) bool {
	return func(_ context.Context, _ peer.ID, m *pubsub.Message) bool {
		if v.cpu {
			compute(v.delay, m.Data)
		} else {
			time.Sleep(v.delay)
		}
		return true
	}
}

// compute hashes data until the thread has had `d` of CPU time.
func compute(d time.Duration, data []byte) {
	runtime.LockOSThread() // the thread's clock is the goroutine's only while it stays on it
	defer runtime.UnlockOSThread()
	start := threadCPU()
	sum := sha256.Sum256(data)
	for threadCPU()-start < d {
		for i := 0; i < 64; i++ {
			sum = sha256.Sum256(sum[:])
		}
	}
}

func threadCPU() time.Duration {
	var usage syscall.Rusage
	if syscall.Getrusage(rusageThread, &usage) != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
