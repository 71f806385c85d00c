package main

import "testing"

// TestServeUIFlag: the status page is on by default; --ui=false or
// ROLLSTORE_UI=false turns it off.
func TestServeUIFlag(t *testing.T) {
	for _, c := range []struct {
		vars map[string]string
		args []string
		off  bool
	}{
		{nil, nil, false},
		{nil, []string{"--ui=false"}, true},
		{map[string]string{"ROLLSTORE_UI": "false"}, nil, true},
		{map[string]string{"ROLLSTORE_UI": "false"}, []string{"--ui"}, false},
	} {
		env, _, stderr := testCmdEnv(c.vars)
		cfg, err := parseServe(env, append([]string{"--store", "memory"}, c.args...))
		if err != nil || cfg == nil {
			t.Fatalf("%v %v: %v %s", c.vars, c.args, err, stderr)
		}
		if cfg.server.DisableUI != c.off {
			t.Errorf("%v %v: DisableUI %v, want %v", c.vars, c.args, cfg.server.DisableUI, c.off)
		}
	}
}
