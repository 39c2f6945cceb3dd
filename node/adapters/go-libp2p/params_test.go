package main

// adapter.json says which parameters the adapter takes (the planner refuses the others before a run
// starts); it must list exactly the ones params.go maps, and its `fixed` what params.go accepts.

import (
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

func TestAdapterJSONListsTheMappedParameters(t *testing.T) {
	raw, err := os.ReadFile("adapter.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Params []string       `json:"params"`
		Fixed  map[string]any `json:"fixed"`
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(paramTable))
	for i, p := range paramTable {
		names[i] = p.name
	}
	if !reflect.DeepEqual(spec.Params, names) {
		t.Errorf("adapter.json params %v, params.go maps %v", spec.Params, names)
	}
	if !reflect.DeepEqual(spec.Fixed, fixedParams) {
		t.Errorf("adapter.json fixed %v, params.go %v", spec.Fixed, fixedParams)
	}
}

func TestDefaultsLeftOutFitTheDegreesSet(t *testing.T) {
	for _, c := range []struct {
		params       map[string]any
		dout, dscore int
	}{
		{map[string]any{}, 2, 4},                                    // the library's own
		{map[string]any{"D": 4.0, "D_lo": 3.0, "D_hi": 6.0}, 1, 4},  // go refuses D_out 2 with D 4
		{map[string]any{"D": 3.0, "D_lo": 2.0, "D_hi": 3.0}, 0, 3},  // and D_score 4 above D_hi 3
		{map[string]any{"D": 8.0, "D_lo": 6.0, "D_out": 3.0}, 3, 4}, // set: left as it is
	} {
		s := readParams(c.params)
		if s.gs.Dout != c.dout || s.gs.Dscore != c.dscore {
			t.Errorf("%v: D_out %d, D_score %d; want %d, %d", c.params, s.gs.Dout, s.gs.Dscore, c.dout, c.dscore)
		}
	}
}
