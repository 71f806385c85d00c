package main

import (
	"context"
	"testing"
	"time"
)

// TestServeFeedFlags: the feed's settings reach the engine and the
// server, with their defaults, and impossible values are usage errors.
func TestServeFeedFlags(t *testing.T) {
	env, _, _ := testCmdEnv(nil)
	cfg, err := parseServe(env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.engine.FeedRetention != 168*time.Hour || cfg.engine.FeedPollInterval <= 0 || cfg.engine.GroupSessionTimeout != 2*time.Minute ||
		cfg.server.FeedMaxRows != 10000 || cfg.server.FeedMaxBytes != 64<<20 || cfg.server.FeedMaxWait != time.Minute || cfg.server.FeedMaxWaiting != 1024 {
		t.Fatalf("defaults: engine %v %v %v, server %d %d %v %d", cfg.engine.FeedRetention, cfg.engine.FeedPollInterval, cfg.engine.GroupSessionTimeout,
			cfg.server.FeedMaxRows, cfg.server.FeedMaxBytes, cfg.server.FeedMaxWait, cfg.server.FeedMaxWaiting)
	}
	env, _, _ = testCmdEnv(map[string]string{"ROLLSTORE_FEED_RETENTION": "24h", "ROLLSTORE_FEED_MAX_BYTES": "8MiB"})
	cfg, err = parseServe(env, []string{"--feed-retention", "0", "--feed-poll-interval", "100ms", "--group-session-timeout", "30s",
		"--feed-max-rows", "500", "--feed-max-wait", "20s", "--feed-max-waiting", "64"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.engine.FeedRetention != 0 || cfg.engine.FeedPollInterval != 100*time.Millisecond || cfg.engine.GroupSessionTimeout != 30*time.Second ||
		cfg.server.FeedMaxRows != 500 || cfg.server.FeedMaxBytes != 8<<20 || cfg.server.FeedMaxWait != 20*time.Second || cfg.server.FeedMaxWaiting != 64 {
		t.Fatalf("set: %+v %+v", cfg.engine, cfg.server)
	}
	for _, args := range [][]string{
		{"--feed-retention", "-1h"},
		{"--feed-poll-interval", "0"},
		{"--group-session-timeout", "0"},
		{"--feed-max-rows", "0"},
		{"--feed-max-bytes", "0"},
		{"--feed-max-wait", "0"},
		{"--feed-max-waiting", "-1"},
	} {
		env, _, stderr := testCmdEnv(nil)
		if code := run(context.Background(), append([]string{"serve"}, args...), env); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
}
