// Package azuritetest gives tests of any package an azure.Bucket on a fresh
// container of the Azurite emulator that test/azurite/azurite.sh starts.
//
// Tests skip when ROLLSTORE_AZURITE_CONNECTION_STRING is unset, unless
// ROLLSTORE_REQUIRE_AZURITE=1, when they fail instead: CI sets it so that a
// missing emulator can never pass as a green, silently skipped run.
package azuritetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/rollstore/rollstore/objstore/azure"
)

// Environment variables read by this package.
const (
	EnvConnectionString = "ROLLSTORE_AZURITE_CONNECTION_STRING"
	EnvRequire          = "ROLLSTORE_REQUIRE_AZURITE"
)

// ConnectionString returns the Azurite connection string, or skips t (fails
// it when EnvRequire is "1") if there is none.
func ConnectionString(t testing.TB) string {
	t.Helper()
	cs := os.Getenv(EnvConnectionString)
	if cs != "" {
		return cs
	}
	if os.Getenv(EnvRequire) == "1" {
		t.Fatalf("%s is unset but %s=1: run the tests under test/azurite/azurite.sh run -- ...", EnvConnectionString, EnvRequire)
	}
	t.Skipf("%s is unset; run under test/azurite/azurite.sh run -- ... to test against Azurite", EnvConnectionString)
	return ""
}

// Config returns a configuration for a new, randomly named container on
// Azurite, with CreateContainer set and short retry delays.
func Config(t testing.TB) azure.Config {
	t.Helper()
	return azure.Config{
		Container:        ContainerName(),
		Auth:             azure.AuthConnectionString,
		ConnectionString: ConnectionString(t),
		CreateContainer:  true,
		Retry: azure.RetryConfig{
			RetryDelay:    10 * time.Millisecond,
			MaxRetryDelay: 200 * time.Millisecond,
		},
	}
}

// ContainerName returns a fresh container name.
func ContainerName() string {
	var b [8]byte
	rand.Read(b[:])
	return "rs-test-" + hex.EncodeToString(b[:])
}

// Open returns a Bucket for cfg and deletes its container when t ends
// (cfg.Auth must be connection-string, as Config's is).
func Open(t testing.TB, cfg azure.Config) *azure.Bucket {
	t.Helper()
	b, err := azure.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("azuritetest: %v", err)
	}
	t.Cleanup(func() {
		b.Close()
		DeleteContainer(t, cfg.ConnectionString, cfg.Container)
	})
	return b
}

// Bucket returns a Bucket on a fresh Azurite container that is deleted when
// t ends.
func Bucket(t testing.TB) *azure.Bucket {
	t.Helper()
	return Open(t, Config(t))
}

// DeleteContainer deletes a container, reporting failures other than its
// absence. Tests use it to remove containers and to simulate their loss.
func DeleteContainer(t testing.TB, connectionString, name string) {
	t.Helper()
	c, err := container.NewClientFromConnectionString(connectionString, name, nil)
	if err != nil {
		t.Errorf("azuritetest: %v", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Delete(ctx, nil); err != nil && !isNotFound(err) {
		t.Errorf("azuritetest: deleting container %s: %v", name, err)
	}
}

func isNotFound(err error) bool {
	return bloberror.HasCode(err, bloberror.ContainerNotFound)
}
