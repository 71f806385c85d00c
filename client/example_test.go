package client_test

import (
	"context"
	"errors"
	"io"
	"log"
	"os"
	"time"

	"github.com/rollstore/rollstore/client"
)

// The Go client section of docs/api.md, compiled (it needs a server to run).
func Example() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("ROLLSTORE_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Open("traj.bin")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := c.Put(ctx, "demo", "run-1/step-0", client.Fields{RolloutID: "run-1", ContentType: "text/plain"}, f); err != nil {
		log.Fatal(err)
	}
	p, err := c.Payload(ctx, "demo", "run-1/step-0", client.Range(0, 4096))
	var ae *client.APIError
	switch {
	case errors.Is(err, client.ErrNotFound):
		log.Print("no such rollout")
	case errors.Is(err, client.ErrOverloaded) && errors.As(err, &ae):
		time.Sleep(ae.RetryAfter)
	case err != nil:
		log.Fatal(err)
	default:
		defer p.Close()
		_, _ = io.Copy(os.Stdout, p)
	}
	for rec, err := range c.All(ctx, "demo", client.ListOptions{RolloutID: "run-1"}) {
		if err != nil {
			log.Fatal(err)
		}
		log.Print(rec.ID, rec.PayloadSize)
	}
}
