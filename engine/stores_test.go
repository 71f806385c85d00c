package engine

// The backends the engine's tests run on: memory and local always, Azurite
// when it is running.

import (
	"os"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
	"github.com/rollstore/rollstore/objstore/local"
	"github.com/rollstore/rollstore/objstore/memory"
)

// storeCase is a backend the engine's tests run on.
type storeCase struct {
	name string
	open func(t *testing.T) objstore.Bucket
}

var (
	memoryStore = storeCase{"memory", func(*testing.T) objstore.Bucket { return memory.New() }}
	localStore  = storeCase{"local", func(t *testing.T) objstore.Bucket {
		b, err := local.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}}
	azureStore = storeCase{"azurite", func(t *testing.T) objstore.Bucket { return azuritetest.Bucket(t) }}
)

// forStores runs fn on memory and local, and on Azurite when it is running
// (make test runs it; ROLLSTORE_REQUIRE_AZURITE=1 makes its absence fail).
func forStores(t *testing.T, fn func(*testing.T, storeCase), withAzure bool) {
	cases := []storeCase{memoryStore, localStore}
	if withAzure && (os.Getenv(azuritetest.EnvConnectionString) != "" || os.Getenv(azuritetest.EnvRequire) != "") {
		cases = append(cases, azureStore)
	}
	for _, sc := range cases {
		t.Run(sc.name, func(t *testing.T) { fn(t, sc) })
	}
}
