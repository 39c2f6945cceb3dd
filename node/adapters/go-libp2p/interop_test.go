package main

// The gossipsub-interop mode's parameters: go-libp2p-pubsub's own field names, times in nanoseconds.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestInteropParamsSetTheLibrarysFieldsByName(t *testing.T) {
	var given map[string]json.RawMessage
	if err := json.Unmarshal([]byte(`{"D": 6, "Dlo": 5, "Dhi": 12, "HeartbeatInterval": 700000000,
		"GossipFactor": 0.5, "OpportunisticGraftTicks": 30, "FanoutTTL": null}`), &given); err != nil {
		t.Fatal(err)
	}
	p, err := interopParams(given)
	if err != nil {
		t.Fatal(err)
	}
	if p.D != 6 || p.Dlo != 5 || p.Dhi != 12 || p.HeartbeatInterval != 700*time.Millisecond ||
		p.GossipFactor != 0.5 || p.OpportunisticGraftTicks != 30 || p.FanoutTTL != 60*time.Second {
		t.Errorf("got %+v", p)
	}
	if p.Dout != 2 || p.Dscore != 4 { // left out: the library's defaults, which fit D 6
		t.Errorf("Dout %d, Dscore %d", p.Dout, p.Dscore)
	}
}

func TestInteropParamsRefuseWhatTheLibraryHasNot(t *testing.T) {
	for text, want := range map[string]string{
		`{"Degree": 6}`:                   "has no field Degree",
		`{"D": 6.5}`:                      "D must be a whole number",
		`{"HeartbeatInterval": "1s"}`:     "HeartbeatInterval must be a number",
		`{"OpportunisticGraftTicks": -1}`: "must be a whole number >= 0",
	} {
		var given map[string]json.RawMessage
		if err := json.Unmarshal([]byte(text), &given); err != nil {
			t.Fatal(err)
		}
		if _, err := interopParams(given); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}
