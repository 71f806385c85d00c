package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
)

// rollstoreBin is the binary under test, built by TestMain; empty when
// there is no Azurite to run it against (the tests then skip or fail).
var rollstoreBin string

// slowdown stretches the deadlines of waits that depend on how fast the
// processes work: a binary built with the race detector is several times
// slower, and on a small machine so is everything it waits for.
var slowdown time.Duration = 1

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if cfg := os.Getenv(consumerEnv); cfg != "" {
		return consumerMain(cfg)
	}
	if os.Getenv(azuritetest.EnvConnectionString) != "" {
		dir, err := os.MkdirTemp("", "rollstore-e2e-bin-")
		if err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "rollstore")
		args := []string{"build", "-o", bin}
		if os.Getenv("ROLLSTORE_E2E_RACE") == "1" {
			args = append(args, "-race")
			slowdown = 3
		}
		args = append(args, "github.com/rollstore/rollstore/cmd/rollstore")
		// go test puts its own toolchain first on PATH.
		cmd := exec.Command("go", args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: building rollstore: %v\n", err)
			return 1
		}
		rollstoreBin = bin
	}
	return m.Run()
}
